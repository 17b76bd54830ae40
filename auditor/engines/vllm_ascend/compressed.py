"""What vLLM-Ascend holds for a model with compressed-attention layers (DeepSeek-V4 family) beyond its
declared modules: model buffers, the DSA-CP o_proj full-weight switch, and the KV pool.

Facts: model-deepseek-v4.md §3.2-§3.4 and §4 (main ``182b75ea``, ``releases/v0.26.0rc`` ``cf0baa38``,
``releases/v0.25.1rc`` ``a675940f``). The version row's ``compressed_attention`` says which code a
version has: ``release`` (v0.25.1rc / v0.26.0rc) or ``main``; empty: not modelled on that version.
Nothing here names a model: the inputs are the spec's per-layer kinds and dimensions.
"""
from __future__ import annotations

import math
from typing import Any

from ...dtypes import DTYPE_BYTES
from ...errors import AuditInputError
from ...model.spec import ModelSpec
from ...parallel import ParallelPlan, stage_layers
from ..bridge import C_BUFFERS, C_OPROJ
from ..kv_interface import PooledKVSpec
from ..materialize import Resident
from ..registry import parse_version
from .kv_compressed import BLOCK_GEOMETRY, INDEXER_ROW, LATENT_ROW, compressed_cache_config

#: the block size the platform keeps when none is given (vllm-ascend sets 128 by default; UNCONFIRMED for
#: DeepSeek-V4, model-deepseek-v4.md §6.1 "what block size it then gets"); outside {32, 64, 128} the engine
#: logs that it sets 32 (``vllm_ascend/utils.py:1179-1187``@182b75ea)
DEFAULT_BLOCK_SIZE = 128
FALLBACK_BLOCK_SIZE = 32
#: ``compress_rope_theta`` when a config lacks it (the real configs give 160000)
COMPRESS_ROPE_THETA = 160000


#: what the KV figures of a compressed-attention pool rest on (model-deepseek-v4.md §4.3-§4.4)
BUDGET_ASSUMPTIONS = (
    "KV: six cache groups share one block-id pool; num_blocks = A_kv // (P_t x NT) "
    "(patch_kv_cache_utils.py:185-245@182b75ea); a request needs the sum of its groups' blocks",
    "KV capacity (fit check, Maximum concurrency, GPU KV cache size) takes max_num_batched_tokens in flight for "
    "the sliding groups (upstream get_max_concurrency_for_kv_cache_config form; which form v0.27.1 uses is "
    "UNCONFIRMED); a decoding request holds fewer blocks",
)


def has_compressed_layers(spec: ModelSpec) -> bool:
    return any(k.attention in ("compressed", "window") for k in spec.layer_kinds)


def check_supported(spec: ModelSpec, prof: Any) -> None:
    """A version whose compressed-attention code audit has not read is refused, not guessed."""
    if has_compressed_layers(spec) and not prof.compressed_attention:
        raise AuditInputError("--engine", f"{spec.name}'s compressed attention (DeepSeek-V4 family) is not modelled on "
                                          f"{prof.label}: audit read it on v0.25.1rc, v0.26.0rc and main "
                                          "(--engine vllm-ascend@0.26 or main)")
    # the DSpark drafter was read on main (models/deepseek_v4/dspark.py) and releases/v0.25.1rc
    # (deepseek_v4_dspark.py, which v0.26.0rc keeps); an older row borrows v0.25's code for the main model only
    if getattr(spec, "drafter", "mtp") == "dspark" and prof.version and parse_version(prof.version)[:2] < (0, 25):
        raise AuditInputError("--engine", f"{spec.name}'s DSpark drafter is not modelled on {prof.label}: audit read "
                                          "it on v0.25.1rc, v0.26.0rc and main (--engine vllm-ascend@0.26 or main)")


def block_size(plan: ParallelPlan) -> tuple[int, str | None]:
    """The block size the engine lays the pool out with, and its log line when it changes the user's."""
    bs = plan.block_size or DEFAULT_BLOCK_SIZE
    if bs in BLOCK_GEOMETRY:
        return bs, None
    return FALLBACK_BLOCK_SIZE, ("For deepseek_v4 model, block size should be 32, 64 or 128. Setting block size "
                                 "to 32 for better performance.")


# ---------------------------------------------------------------- buffers (§3.2 global table, §3.4)

def buffer_rows(spec: ModelSpec, plan: ParallelPlan, prof: Any) -> list[Resident]:
    """Model-wide tensors the engine creates before the weights are measured."""
    s = spec
    T = plan.max_num_batched_tokens
    k = plan.num_speculative_tokens or (1 if plan.mtp else 0)
    layers = s.layer_kinds[:s.Lyr] + (s.layer_kinds[s.Lyr:] if plan.mtp else ())
    rows: list[tuple[str, tuple[int, ...], str, str]] = []
    # RoPE: one fp32 cos/sin table pair of original_max x factor rows per distinct base, whatever
    # --max-model-len is (ops/rope_dsv4.py:184-210; model.py:521-539, 663): window-only layers use
    # rope_theta, compressed layers compress_rope_theta
    n_rows = int(s.rope_original_max * s.rope_scaling_factor) or s.max_position
    bases = []
    if any(kd.attention == "window" for kd in layers):
        bases.append("rope_theta")
    if any(kd.attention == "compressed" for kd in layers):
        bases.append("compress_rope_theta")
    for b in bases:
        for t in ("cos", "sin"):
            rows.append((f"rope[{b}].{t}_full", (n_rows, 1, 1, s.Dr), "F32",
                         "fp32 RoPE table, original_max x factor rows (ops/rope_dsv4.py:184-210)"))
    # runtime cos/sin buffers [T, 1, 1, Dr] per (base, group): default + one per ratio at the compressed
    # base, default at the window base; x (1 + k) with a drafter (ops/rope_dsv4.py:212-240)
    ratios = sorted({kd.compress_ratio for kd in layers if kd.compress_ratio})
    groups = (1 if "rope_theta" in bases else 0) + ((1 + len(ratios)) if "compress_rope_theta" in bases else 0)
    # a DSpark drafter (method dspark) is assumed to take the same 1 + k copies (whether use_eagle() counts
    # it is UNCONFIRMED); its hidden buffer below is the spec's ("only with MTP/DSpark/EAGLE", §3.2)
    copies = 1 + k if plan.mtp else 1
    if groups:
        rows.append(("rope.runtime_cos_sin", (2 * groups * copies, T, 1, 1, s.Dr), "F32",
                     f"{groups} (base, group) buffers x cos/sin x {copies} (ops/rope_dsv4.py:212-240)"))
    if s.dsa:
        rows.append(("topk_indices_buffer", (T, s.topk_tokens), "I32",
                     "one per model, the drafter shares it (model.py:752-766)"))
    # the drafter's hidden-state buffer: main only with a drafter (PR #14250), the release branches always
    if plan.mtp or prof.compressed_attention == "release":
        rows.append(("_mtp_hidden_buffer", (T, s.residual_mult * s.H), s.pd,
                     "[T, hc x H] (model.py:819-832; always allocated on v0.25/v0.26)"))
    return [Resident(-1, "other", "buffers", name, "derived", dt, shape, int(math.prod(shape) * DTYPE_BYTES[dt]), 0,
                     "all", -1, C_BUFFERS, "created", note) for name, shape, dt, note in rows]


# ---------------------------------------------------------------- DSA-CP o_proj switch (§3.3)

def switch_rows(layer: int, block: str, module: str, role: str, shape: tuple[int, int], scheme: str, dtype: str,
                plan: ParallelPlan, prof: Any) -> list[Resident]:
    """Per-layer tensors of a module under the TP weight switch: main keeps a contiguous transposed
    copy of an unquantized row-parallel shard (gather dim 1; ``quantization/tp_weight_switch.py:167-215``
    @182b75ea); the release branches only clone the shard in place (``dsa_cp.py:1192-1233``@cf0baa38)."""
    if prof.compressed_attention != "main" or role != "row" or scheme != "FLOAT":
        return []
    n, kf = shape
    local = (kf // plan.tp, n)
    nb = int(math.prod(local) * DTYPE_BYTES[dtype])
    return [Resident(layer, block, module, "gather_input", "derived", dtype, local, nb, 0, "stage", -1, C_OPROJ,
                     "created", "transposed copy of the TP shard (TPWeightSwitch, gather dim 1)")]


def pool_rows(pools: dict[tuple[str, str], tuple[int, ...]]) -> list[Resident]:
    """One full-size gather buffer per (attribute, dtype, full shape), shared by every layer."""
    out = []
    for (module, dtype), shape in sorted(pools.items()):
        out.append(Resident(-1, "attention", f"{module}_full_pool", "gather_output", "derived", dtype, shape,
                            int(math.prod(shape) * DTYPE_BYTES[dtype]), 0, "all", -1, C_OPROJ, "created",
                            "one gather buffer shared by all layers (o_proj_full_pools)"))
    return out


# ---------------------------------------------------------------- KV pool (§4)

def kv_spec(spec: ModelSpec, plan: ParallelPlan, prof: Any, *, variant: str = "bf16", dcp: int = 1,
            mtp: bool = False, stage: int | None = None) -> PooledKVSpec:
    """The shared-block-id pool of one worker (six groups, §4.3), replicated on every TP rank (§4.6)."""
    if variant != "bf16":
        raise AuditInputError("--kv-cache-dtype", f"{variant}: compressed-attention caches are bf16 with int8 indexer "
                                                  "keys on A2/A3 (the SFA C8 switches are not read on this path, "
                                                  "model-deepseek-v4.md §4.6); give bf16")
    if dcp != 1:
        raise AuditInputError("--dcp", "decode context parallel has no compressed-attention support in vLLM-Ascend "
                                       "(model-deepseek-v4.md §4.6)")
    if spec.head_dim != 512 or (spec.dsa and spec.ID != 128):
        # the pool's pages are the engine's table (DSV4_BLOCK_SIZES, layer.py:34-52): 512-wide latents and
        # 128-wide indexer keys; another width has no page layout the engine defines
        raise AuditInputError(spec.name, f"compressed attention with head_dim {spec.head_dim} / index_head_dim "
                                         f"{spec.ID}: vLLM-Ascend's compressed caches are laid out for 512 / 128")
    stages = stage_layers(spec.Lyr, plan.pp)
    stage = plan.pp - 1 if stage is None else stage
    own = [spec.layer_kinds[i].compress_ratio for i in stages[stage]]
    mtp_ratios = [k.compress_ratio for k in spec.layer_kinds[spec.Lyr:]] if (mtp and stage == plan.pp - 1) else []
    bs, line = block_size(plan)
    window = spec.sliding_window
    cfg = compressed_cache_config(own, mtp_ratios, window=window, block_size=bs)
    return PooledKVSpec(variant="bf16", config=cfg, block_size=bs, in_flight=int(plan.max_num_batched_tokens),
                        main_layers=len(own), mtp_layers=len(mtp_ratios), engine_lines=(line,) if line else (),
                        rows=(("latent", LATENT_ROW), ("indexer", INDEXER_ROW)),
                        # DSpark's draft layers are window-only like MTP's: one SWA cache each, its own tensor
                        # (model-deepseek-v4.md §4.1, §4.3: NT = 22 + 3 for DSpark Flash)
                        drafter="DSpark" if spec.drafter == "dspark" else "MTP")
