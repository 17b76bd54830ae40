"""Library entry points other parts of audit use: the resident weight bytes per (layer, module) of one
rank, for the performance model, so perf and memory can never disagree about what an op reads.

For a recipe (no checkpoint) the stored view is synthesized from the layout generator with ONE routed
expert per layer and scaled to E: every expert of a layer is identical, so the result equals the
full 177,000-tensor inventory at a few percent of the cost.
"""
from __future__ import annotations

import functools
from dataclasses import replace
from pathlib import Path

import numpy as np

from ..engines.stored import StoredIndex
from ..inventory.quantdesc import QuantDescription
from ..inventory.table import TensorTable
from ..model.classify import classify
from ..model.blueprint import SPLIT_FOR_PERF
from ..model.expected import expected_description, expected_tensors
from ..model.spec import ModelSpec
from ..parallel import ParallelPlan
from .ledger import rank_multipliers
from ..context import DeploymentContext
from .materialized import _materialize, reference_of

_DEFAULT_BATCHED = ParallelPlan.max_num_batched_tokens

# fused engine module -> perf module keys, with the share of the bytes each key gets: the
# blueprint's member output widths (the same declaration the materializer emitted the module from)
_SPLITS = {m.name: m.split for m in SPLIT_FOR_PERF}
_RENAME = {
    "mlp.shared_experts.gate_up_proj": "mlp.shared_experts", "mlp.shared_experts.down_proj": "mlp.shared_experts",
    "mlp.gate_up_proj": "mlp", "mlp.down_proj": "mlp", "model.embed_tokens": "embed_tokens",
}
# not weights an op streams: norms, MLAPO's fused copies (read instead of, not besides, the originals),
# the shared gather pool and process buffers (perf counts the gather itself)
_SKIP_PREFIXES = ("input_layernorm", "post_attention_layernorm", "self_attn.q_a_layernorm", "self_attn.kv_a_layernorm",
                  "self_attn.indexer.k_norm", "self_attn.mlapo", "enorm", "hnorm", "shared_head", "model.norm",
                  "buffers", "o_proj_full_pool", "embed_tokens", "rot")


@functools.lru_cache(maxsize=8)
def synthesized_stored(spec: ModelSpec, recipe: str) -> tuple[StoredIndex, QuantDescription | None]:
    """StoredIndex of a recipe's checkpoint, built from one expert per layer and scaled to E."""
    small = replace(spec, E=1) if spec.moe else spec
    table = TensorTable.from_rows(expected_tensors(small, recipe))
    doc = expected_description(small, recipe)
    desc = QuantDescription.from_dict(doc, Path("<synthesized>")) if doc is not None else None
    stored = StoredIndex(classify(table, spec.Lyr, desc))
    if spec.moe:
        for (_, module), sm in stored.modules.items():
            if module.startswith("mlp.experts.") or module == "mlp.gate":   # both linear in E
                sm.bytes_by_suffix = {k: v * spec.E for k, v in sm.bytes_by_suffix.items()}
                sm.count_by_suffix = {k: v * spec.E for k, v in sm.count_by_suffix.items()}
                if module.startswith("mlp.experts."):
                    sm.n_experts = spec.E
    return stored, desc


@functools.lru_cache(maxsize=128)
def _module_table(ref: DeploymentContext
                  ) -> tuple[list[tuple[int, str]], np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """How the rows of one pass fold into perf's (layer, module) keys: (keys, row index, key index,
    share numerator, share denominator) per contribution (a fused module contributes to several keys).
    Decided once per distinct engine module name, then gathered for every row."""
    spec = ref.spec
    mat, _ = _materialize(ref)
    names, name_of_row = np.unique(np.array([r.module for r in mat.rows], dtype=object), return_inverse=True)
    layer = np.array([r.layer for r in mat.rows], dtype=np.int64)
    parts_of = []                                   # per distinct name: [(perf module, share, parts)]
    for module in names:
        if module.startswith(_SKIP_PREFIXES) and module != "model.embed_tokens":
            parts_of.append([])
            continue
        module = _RENAME.get(module, module)
        if module in _SPLITS:
            parts = _SPLITS[module](spec)
            total = sum(w for _, w in parts)
            parts_of.append([(name, w, total) for name, w in parts])
        else:
            parts_of.append([(module, 1, 1)])
    perf_names = sorted({name for p in parts_of for name, _, _ in p})
    pidx = {n: i for i, n in enumerate(perf_names)}
    row_i, name_i, num, den = [], [], [], []
    for j in range(max((len(p) for p in parts_of), default=0)):        # part j of every row
        part = [p[j] if len(p) > j else None for p in parts_of]
        rows = np.flatnonzero(np.array([q is not None for q in part])[name_of_row])
        sel = name_of_row[rows]
        row_i.append(rows)
        name_i.append(np.array([pidx[q[0]] if q else -1 for q in part], dtype=np.int64)[sel])
        num.append(np.array([q[1] if q else 0 for q in part], dtype=np.float64)[sel])
        den.append(np.array([q[2] if q else 1 for q in part], dtype=np.float64)[sel])
    row_a, name_a = np.concatenate(row_i), np.concatenate(name_i)
    order = np.argsort(row_a, kind="stable")            # each key's contributions summed in row order
    row_a, name_a = row_a[order], name_a[order]
    n = len(perf_names)
    codes, key_a = np.unique((layer[row_a] + 1) * n + name_a, return_inverse=True)     # layers from -1
    keys = [(int(c // n) - 1, perf_names[c % n]) for c in codes]
    return keys, row_a, key_a, np.concatenate(num)[order], np.concatenate(den)[order]


def module_bytes(dep: DeploymentContext, rank: int = 0) -> dict[tuple[int, str], int]:
    """Resident bytes per (layer, module) on ``rank`` for a recipe; layer -1 holds embed_tokens and
    lm_head, "self_attn.kv_b_proj" holds W_UK_T + W_UV, "mlp.experts" all local experts of the layer.
    The MTP layer is included whenever the config has one (perf runs it with --mtp K).

    One ledger column of the rank over a shared pass (``materialized``); a key is present when
    some row of it has copies on the rank."""
    return _module_bytes(dep.bare, rank)


@functools.lru_cache(maxsize=256)
def _module_bytes(dep: DeploymentContext, rank: int) -> dict[tuple[int, str], int]:
    spec, plan, engine = dep.spec, dep.plan, dep.engine
    if spec.mtp_layers and not plan.mtp:
        plan = replace(plan, mtp=True)
    plan.validate()
    # max_num_batched_tokens sizes only process buffers (skipped here), so every value shares a pass, unless
    # the engine's materializer reads it (vLLM-Ascend: MLAPO's release on a decode node within its token limit)
    from .materialized import placement_key
    norm = replace(plan, max_num_batched_tokens=_DEFAULT_BATCHED)
    if placement_key(spec, norm, engine) == placement_key(spec, plan, engine):
        plan = norm
    ref = reference_of(dep.with_plan(plan))
    # the column depends on the plan only through what rank_multipliers reads: plans of one pass that differ
    # elsewhere (role, max_num_batched_tokens, ...: a 128-die plan asks 109 times for 52 columns) share it
    key = (ref, plan.ranks_per_stage, plan.pp, plan.redundant_experts, plan.ep, rank)
    hit = _COLUMNS.get(key)
    if hit is None:
        hit = _COLUMNS[key] = _module_column(ref, spec, plan, rank)
        if len(_COLUMNS) > 256:
            _COLUMNS.pop(next(iter(_COLUMNS)), None)
    return hit


#: module_bytes' columns by (reference pass, the plan fields rank_multipliers reads, rank)
_COLUMNS: dict[tuple, dict[tuple[int, str], int]] = {}
_lru_clear = _module_bytes.cache_clear


def _clear_module_bytes() -> None:
    """Both caches of module_bytes (a cold start: a caller that counts the passes built)."""
    _lru_clear()
    _COLUMNS.clear()


_module_bytes.cache_clear = _clear_module_bytes         # type: ignore[attr-defined]


def _module_column(ref: DeploymentContext, spec: ModelSpec, plan: ParallelPlan, rank: int) -> dict[tuple[int, str], int]:
    _, arrays = _materialize(ref)
    keys, row_i, key_i, num, den = _module_table(ref)
    col = rank_multipliers(arrays, spec, plan, np.array([rank]))[0][:, 0]
    c = col[row_i]
    # (bytes x copies) x share / parts, summed in row order: the same float operations as a loop
    sums = np.bincount(key_i, weights=arrays.nbytes[row_i] * c * num / den, minlength=len(keys))
    held = np.bincount(key_i, weights=(c != 0).astype(np.float64), minlength=len(keys))
    sums, held = sums.tolist(), held.tolist()     # Python floats: the same values, read 4x faster than numpy scalars
    return {k: int(round(sums[j])) for j, k in enumerate(keys) if held[j]}
