"""vLLM-Ascend's fine-grained tensor parallelism (``additional_config.finegrained_tp_config``).

Why: a P/D decode node runs DP32 TP1 and would hold the whole vocabulary projection on every rank;
``finegrained_tp_config.lmhead_tensor_parallel_size: 16`` shards it over 16 DP ranks instead (the
weekly GLM-5.1 TPOT50 P/D config's decode nodes). What the engine does, at 182b75ea:

* ``FinegrainedTPConfig`` (``ascend_config.py:643-713``) reads ``oproj_``, ``lmhead_``, ``embedding_``,
  ``mlp_`` and ``olora_tensor_parallel_size`` (0: off) and refuses a size that does not divide
  ``data_parallel_size`` and any size on a dense model (``:700-710``);
* ``init_ascend_model_parallel`` builds each group from the ranks of one TP index across ``size``
  consecutive DP ranks (``distributed/parallel_state.py:95-134``: ``rank_grid[pp][chunk*size:(chunk+1)*size,
  tp_idx]``), groups ``lmheadtp``, ``emtp``, ``mlptp``, ``otp``;
* ``AscendVocabParallelEmbedding`` shards ``lm_head`` over the lmhead group and ``embed_tokens`` over
  the embedding group instead of the TP group (``ops/vocab_parallel_embedding.py:64-73``; the same at
  releases/v0.18.0 ``:62-70`` and v0.23.0 ``:64-72``): ``[V_p / size, H]`` per rank.

audit models ``lmhead`` and ``embedding`` (the vocabulary tables: the large term on a TP1 rank). The
dense-MLP and o_proj groups (``mlp_``, ``oproj_``, ``olora_``) are read and named as not modelled.
"""
from __future__ import annotations

from typing import Any

from .errors import AuditInputError

#: finegrained_tp_config key -> audit's module name, for the keys audit models
MODELLED = {"lmhead_tensor_parallel_size": "lmhead", "embedding_tensor_parallel_size": "embedding"}
#: keys the engine reads that audit does not model (their layouts stay TP's)
UNMODELLED = ("mlp_tensor_parallel_size", "oproj_tensor_parallel_size", "olora_tensor_parallel_size")


def module_tp(plan: Any, module: str) -> int:
    """The group size a module is sharded over: its fine-grained size, else the plan's TP."""
    for name, size in getattr(plan, "finegrained_tp", ()) or ():
        if name == module and size > 0:
            return int(size)
    return int(plan.tp)


def parse(text: str, where: str = "--finegrained-tp") -> tuple[tuple[str, int], ...]:
    """``lmhead=16,embedding=4`` -> (("embedding", 4), ("lmhead", 16)) (sorted, sizes > 0)."""
    out: dict[str, int] = {}
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        name, eq, value = part.partition("=")
        name = name.strip()
        if not eq or name not in MODELLED.values():
            raise AuditInputError(where, f"{part!r}: give MODULE=SIZE with MODULE one of "
                                         f"{', '.join(sorted(MODELLED.values()))}")
        try:
            size = int(value)
        except ValueError:
            raise AuditInputError(where, f"{part!r}: the size is not an integer") from None
        if not 1 <= size <= 65536:
            raise AuditInputError(where, f"{part!r}: the size must be 1..65536")
        out[name] = size
    return tuple(sorted(out.items()))


def check(sizes: tuple[tuple[str, int], ...], dp: int, moe: bool, where: str = "--finegrained-tp") -> None:
    """The engine's own refusals (``ascend_config.py:700-710``@182b75ea), in one line."""
    for name, size in sizes:
        if not moe:
            raise AuditInputError(where, f"{name}={size}: the finegrained TP sizes can be enabled only for MoE "
                                         "models (the engine asserts so)")
        if dp % size:
            raise AuditInputError(where, f"{name}={size}: finegrained TP sizes must divide data_parallel_size "
                                         f"({dp}; the engine asserts so)")


def render(sizes: tuple[tuple[str, int], ...]) -> str:
    return ",".join(f"{n}={s}" for n, s in sizes)


__all__ = ["MODELLED", "UNMODELLED", "module_tp", "parse", "check", "render"]
