"""vLLM-Ascend's KV cache of a rank, per token and per block, by version and cache variant.

Rules: engine-vllm-ascend-runtime.md §1.1-§1.3 and §2.1. A DSA attention layer holds an MLA
latent cache (``B_mla`` bytes per token) and an indexer key cache (``B_idx``); the latent is
replicated on every TP rank (one KV head), so TP never divides it. Under DCP each rank stores
``bs`` of the ``bs*DCP`` tokens of a scheduler block; HEAD replicates the indexer cache on every
DCP rank. A plain-attention model holds K and V of its KV heads (sharded by TP, replicated when
there are fewer heads than ranks). Version differences come from the version rows (``versions.py``).
"""
from __future__ import annotations

from ...errors import AuditInputError
from ...model.spec import ModelSpec
from ...parallel import ParallelPlan, stage_layers
from ..kv_interface import KVSpec, cdiv
from .versions import EngineProfile

KV_DTYPES = ("bf16", "c8-indexer", "c8")
BLOCK_SIZE = 128            # refresh_block_size: forced to 128 with prefix caching / chunked prefill
C8_SCALE_BYTES = 2          # LI-C8 scale on A2/A3 is fp16 (A5: fp32, not modelled)


def mla_bytes(spec: ModelSpec, variant: str) -> int:
    """B_mla: ``(Lkv+Dr)*2`` in bf16; SFA-C8 packs int8 latent + bf16 rope + fp32 per-128 scales."""
    if variant == "c8":
        return spec.Lkv + 2 * spec.Dr + 4 * spec.Lkv // 128
    return (spec.Lkv + spec.Dr) * 2


def indexer_bytes(spec: ModelSpec, variant: str) -> int:
    """B_idx: ``ID*2`` in bf16; LI-C8 int8 keys plus one fp16 scale per token."""
    if variant in ("c8-indexer", "c8"):
        return spec.ID + C8_SCALE_BYTES
    return spec.ID * 2


def kv_spec(spec: ModelSpec, plan: ParallelPlan, rprof: EngineProfile, *, variant: str = "bf16",
            dcp: int = 1, mtp: bool = False, stage: int | None = None, block_size: int = BLOCK_SIZE) -> KVSpec:
    """KV spec of the worker on PP ``stage`` (default: the last stage, which holds the MTP layer)."""
    if variant not in KV_DTYPES:
        raise AuditInputError("--kv-cache-dtype", f"must be one of {', '.join(KV_DTYPES)}, got {variant!r}")
    if dcp < 1:
        raise AuditInputError("--dcp", f"must be a positive integer, got {dcp!r}")
    from .compressed import check_supported, has_compressed_layers, kv_spec as compressed_kv_spec
    if has_compressed_layers(spec):
        check_supported(spec, rprof)
        return compressed_kv_spec(spec, plan, rprof, variant=variant, dcp=dcp, mtp=mtp, stage=stage)
    stages = stage_layers(spec.Lyr, plan.pp)
    stage = plan.pp - 1 if stage is None else stage
    own = stages[stage]
    mtp_here = spec.mtp_layers if (mtp and stage == plan.pp - 1) else 0
    if spec.mla:
        if spec.dsa:
            if variant not in rprof.kv_switches:
                raise AuditInputError("--kv-cache-dtype", f"{variant} does not exist on {rprof.name} "
                                                          f"(available: {', '.join(rprof.kv_switches)})")
            if dcp > 1 and rprof.dcp_must_equal_tp and dcp != plan.tp:
                raise AuditInputError("--dcp", f"SFA decode context parallel needs DCP == TP on {rprof.name} "
                                               f"(platform._validate_parallel_config); got DCP {dcp}, TP {plan.tp}")
            # IndexCache: a "shared" layer has no indexer KV spec from v0.23.0rc1 on (sfa_v1.py:1453@182b75ea
            # _compose_sfa_kv_cache returns the main cache only when has_indexer is False)
            idx_layers = sum(1 for l in own if spec.layer_has_indexer(l, rprof.index_cache)) + mtp_here
            return KVSpec(variant, rprof.kv_layout, block_size, dcp, rprof.dcp_formula, mla_bytes(spec, variant),
                          indexer_bytes(spec, variant), len(own), mtp_here, idx_layers,
                          2 if variant == "c8" else 3)
        if variant != "bf16":
            raise AuditInputError("--kv-cache-dtype", f"{variant} is a sparse-attention (DSA) cache; "
                                                      f"{spec.name} has no indexer")
        return KVSpec(variant, rprof.kv_layout, block_size, dcp, "divided", mla_bytes(spec, variant), 0,
                      len(own), mtp_here, 0, 2)
    if variant != "bf16":
        raise AuditInputError("--kv-cache-dtype", f"{variant} is a sparse-attention (DSA) cache; "
                                                  f"{spec.name} has no indexer")
    heads = max(1, cdiv(spec.NKV, plan.tp)) if spec.NKV else max(1, cdiv(spec.NH, plan.tp))
    head_dim = spec.head_dim or spec.H // max(spec.NH, 1)
    return KVSpec(variant, "gqa", block_size, dcp, "divided", 2 * heads * head_dim * 2, 0, len(own),
                  mtp_here, 0, 2)
