"""Upstream vLLM's KV cache of a rank for DSA models (DeepSeek-V3.2, GLM-5.x) on NVIDIA GPUs.

engine-vllm-cuda.md §2 and Part B §4: every DSA layer holds an MLA latent cache and, unless
IndexCache drops it, an indexer key cache; both are ``MLAAttentionSpec`` with one KV head, so they
are replicated on every TP rank (only DP splits them). All layers share one block size (64) and
form one ``UniformTypeKVCacheSpecs`` group whose page is the sum of every layer's page. The
latent's bytes per token depend on the KV dtype *and* the GPU architecture (the sparse-MLA
backend): ``fp8_ds_mla`` 656 B (FlashMLA sparse, Hopper), plain fp8 e4m3 576 B (FlashInfer MLA
sparse, Blackwell, v0.28), bf16 1152 B. Small pure functions, so the cache-group interface can
take them over.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...errors import AuditInputError
from ...model.spec import ModelSpec
from ...parallel import ParallelPlan, stage_layers
from ..kv_interface import KVSpec, PooledKVSpec, cdiv
from . import kv_compressed
from .versions import VllmProfile

#: FLASHMLA_SPARSE / FLASHINFER_MLA_SPARSE kernel block size [64] (flashmla_sparse.py @60191e18;
#: flashinfer_mla_sparse.py, index id 42223421); DeepSeekV32IndexerBackend uses 64 too
BLOCK_SIZE = 64
#: fp8_ds_mla: one fp32 scale per 128 latent values (flashmla_sparse.py @60191e18)
DS_MLA_SCALE_GROUP = 128
#: indexer keys: fp8 values plus one fp32 (ue8m0) scale per 128 (DeepseekV32IndexerCache, Part B §4.3)
INDEXER_SCALE_GROUP = 128

BF16, FP8_DS_MLA, FP8_E4M3 = "bf16", "fp8_ds_mla", "fp8_e4m3"
LAYOUTS = (BF16, FP8_DS_MLA, FP8_E4M3)
#: --kv-cache-dtype values this family accepts (vLLM's spellings); resolve_layout maps them
KV_DTYPES = ("auto", "bf16", "bfloat16", "fp8", "fp8_e4m3", "fp8_ds_mla")
#: the engine's device generations (``Vllm.soc``): compute capability major
HOPPER, BLACKWELL, BLACKWELL_WS = "sm90", "sm100", "sm120"


def mla_entry_bytes(layout: str, Lkv: int, Dr: int) -> int:
    """Bytes of one cached token of one layer's latent (head size Lkv + Dr = 576 for DSA models).

    bf16: 576 x 2 = 1152; plain fp8 e4m3: 576 x 1; fp8_ds_mla: Lkv fp8 NoPE + one fp32 scale per 128
    of them + Dr bf16 RoPE = 512 + 16 + 128 = 656 (Part B §4.2)."""
    if layout == BF16:
        return (Lkv + Dr) * 2
    if layout == FP8_E4M3:
        return Lkv + Dr
    if layout == FP8_DS_MLA:
        return Lkv + 4 * cdiv(Lkv, DS_MLA_SCALE_GROUP) + 2 * Dr
    raise ValueError(f"unknown MLA cache layout {layout!r}")


def indexer_entry_bytes(ID: int) -> int:
    """Bytes of one cached indexer key of one layer: ID fp8 + 4 B per 128 (128 -> 132), whatever the
    KV dtype (Part A §2.2)."""
    return ID + 4 * cdiv(ID, INDEXER_SCALE_GROUP)


def page_bytes(entry_bytes: int, block_size: int = BLOCK_SIZE, alignment: int = 0) -> int:
    """One layer's page: ``block_size`` entries, padded up to a multiple of ``alignment`` when the spec
    has one (DeepSeek-V4 caches pad to 576 B; the V3.2 / GLM specs have none)."""
    raw = block_size * entry_bytes
    return cdiv(raw, alignment) * alignment if alignment else raw


def blocks_for(tokens: int, block_size: int = BLOCK_SIZE) -> int:
    """Blocks one request of ``tokens`` tokens occupies in every layer of a group."""
    return cdiv(int(tokens), block_size)


@dataclass(frozen=True)
class CacheLayer:
    """One layer tensor of the KV cache: its kind and bytes per token."""
    name: str
    kind: str               # "mla" | "indexer"
    entry_bytes: int
    alignment: int = 0

    def page_bytes(self, block_size: int) -> int:
        return page_bytes(self.entry_bytes, block_size, self.alignment)


@dataclass(frozen=True)
class UniformGroup:
    """One ``UniformTypeKVCacheSpecs`` group: every layer has the same block size and one shared
    ``num_blocks``; a block's memory is the sum of the layers' pages (kv_cache_interface.py, index
    ids 55159087810, 54532791230)."""
    block_size: int
    layers: tuple[CacheLayer, ...]

    @property
    def page_bytes(self) -> int:
        return sum(l.page_bytes(self.block_size) for l in self.layers)

    def bytes_per_token(self) -> float:
        return self.page_bytes / self.block_size

    def num_blocks(self, available_bytes: int) -> int:
        """available // page (spec §4.4: exact ``get_num_blocks`` rounding UNCONFIRMED)."""
        return max(0, int(available_bytes) // self.page_bytes)

    def max_memory_usage_bytes(self, max_model_len: int) -> int:
        return blocks_for(max_model_len, self.block_size) * self.page_bytes

    def max_concurrency(self, num_blocks: int, max_model_len: int) -> float:
        """``num_blocks / cdiv(max_memory_usage_per_request, memory_per_block)`` (spec §1.3)."""
        return num_blocks / blocks_for(max_model_len, self.block_size)

    def kv_tokens(self, num_blocks: int, max_model_len: int) -> int:
        """"GPU KV cache size": int(max_concurrency x max_model_len) in current code (spec §1.3)."""
        return int(self.max_concurrency(num_blocks, max_model_len) * max_model_len)


def resolve_layout(kv_cache_dtype: str, *, arch: str, model_type: str, prof: VllmProfile) -> str:
    """The latent cache layout ``--kv-cache-dtype`` gives on ``arch`` (spec §2.1, Part B §4.1).

    * auto / bf16 / bfloat16: bf16 (the model dtype; GLM's default in v0.28, GPU-01).
    * fp8_ds_mla: FlashMLA sparse, compute capability 9.x and 10.x only.
    * DeepSeek-V3.2 (``DeepseekV32ForCausalLM.verify_and_update_config``, models/config.py, index id
      83456896): any fp8* becomes fp8_ds_mla ("Using custom fp8 kv-cache format for DeepSeekV3.2").
    * GLM-5.x (deepseek_v2.py path): fp8 on Hopper is fp8_ds_mla (GPU-01's KV-offload bytes,
      53,894 B/rank/token); on Blackwell SM100 it is plain e4m3 where FLASHINFER_MLA_SPARSE accepts fp8
      (v0.28, GPU-01's 1.942 ratio). Anything else is not read in code and refused."""
    v = kv_cache_dtype.lower()
    if v not in KV_DTYPES:
        raise AuditInputError("--kv-cache-dtype", f"must be one of {', '.join(KV_DTYPES)} for {prof.label}, "
                                                  f"got {kv_cache_dtype!r}")
    if v in ("auto", "bf16", "bfloat16"):
        return BF16
    if not arch:
        raise AuditInputError("--kv-cache-dtype", f"{kv_cache_dtype}: the fp8 cache layout of {prof.label} depends on "
                                                  "the GPU architecture (656 B fp8_ds_mla on Hopper, 576 B plain fp8 "
                                                  "on Blackwell); name an NVIDIA --device")
    if arch == BLACKWELL_WS:
        raise AuditInputError("--kv-cache-dtype", f"{kv_cache_dtype} on an SM120 GPU: the sparse-MLA backend and its "
                                                  "fp8 layout there are UNCONFIRMED for DeepSeek-V3.2 / GLM-5.x; "
                                                  "use bf16")
    if v == "fp8_ds_mla" or model_type == "deepseek_v32":
        return FP8_DS_MLA
    if arch == HOPPER:
        if v == "fp8_e4m3":
            raise AuditInputError("--kv-cache-dtype", "fp8_e4m3 on Hopper: FlashMLA sparse takes auto/bf16/fp8_ds_mla "
                                                      "only and no Hopper sparse backend with plain fp8 was read; use "
                                                      "fp8 (= fp8_ds_mla)")
        return FP8_DS_MLA
    if arch == BLACKWELL:
        if prof.blackwell_plain_fp8:
            return FP8_E4M3
        raise AuditInputError("--kv-cache-dtype", f"{kv_cache_dtype} on Blackwell with {prof.label}: FLASHINFER_MLA_SPARSE "
                                                  "lists only auto/bf16 in older copies and the fallback layout is "
                                                  "UNCONFIRMED; give fp8_ds_mla explicitly or use vllm@0.28")
    raise AuditInputError("--device", f"GPU generation {arch!r} has no modelled sparse-MLA backend")


def cache_layers(spec: ModelSpec, layers: list[int], *, layout: str, index_cache: bool) -> tuple[CacheLayer, ...]:
    """Every KV tensor of the given layers (main and MTP indices): one latent per layer, one indexer
    key cache where the layer keeps its indexer (IndexCache: a skip-top-k "shared" layer has none,
    #51209; MTP layers always have one)."""
    mla = mla_entry_bytes(layout, spec.Lkv, spec.Dr)
    idx = indexer_entry_bytes(spec.ID) if spec.dsa else 0
    out: list[CacheLayer] = []
    for l in layers:
        out.append(CacheLayer(f"model.layers.{l}.self_attn.attn", "mla", mla))
        if spec.dsa and spec.layer_has_indexer(l, index_cache):
            out.append(CacheLayer(f"model.layers.{l}.self_attn.indexer.k_cache", "indexer", idx))
    return tuple(out)


def worker_group(spec: ModelSpec, plan: ParallelPlan, prof: VllmProfile, *, layout: str, mtp: bool = False,
                 stage: int | None = None, block_size: int = BLOCK_SIZE) -> UniformGroup:
    """The one cache group of the worker on PP ``stage`` (default: the last, which holds the MTP layer)."""
    stages = stage_layers(spec.Lyr, plan.pp)
    stage = plan.pp - 1 if stage is None else stage
    layers = list(stages[stage])
    if mtp and stage == plan.pp - 1:
        layers += [spec.Lyr + k for k in range(spec.mtp_layers)]
    return UniformGroup(block_size, cache_layers(spec, layers, layout=layout, index_cache=prof.index_cache))


def kv_spec(spec: ModelSpec, plan: ParallelPlan, prof: VllmProfile, *, variant: str = "bf16", dcp: int = 1,
            mtp: bool = False, stage: int | None = None, arch: str = "") -> KVSpec:
    """The worker's cache as the generic ``KVSpec`` (same page bytes as ``worker_group``); a model with
    compressed-attention layers gets its pool of groups (``compressed_kv_spec``)."""
    if spec.layer_kinds:
        return compressed_kv_spec(spec, plan, prof, variant=variant, dcp=dcp, mtp=mtp, stage=stage, arch=arch)
    if not (spec.mla and spec.dsa):
        raise AuditInputError("--engine", f"{prof.label}: only DSA models (DeepSeek-V3.2, GLM-5.x) are modelled; "
                                          f"{spec.name} has no sparse-attention indexer")
    if dcp != 1:
        raise AuditInputError("--dcp", f"decode context parallel on {prof.label} is not modelled (how the indexer "
                                       "cache splits under DCP is UNCONFIRMED)")
    layout = resolve_layout(variant, arch=arch, model_type=spec.model_type, prof=prof)
    group = worker_group(spec, plan, prof, layout=layout, mtp=mtp, stage=stage)
    stages = stage_layers(spec.Lyr, plan.pp)
    own = len(stages[plan.pp - 1 if stage is None else stage])
    n_mla = sum(1 for l in group.layers if l.kind == "mla")
    n_idx = sum(1 for l in group.layers if l.kind == "indexer")
    return KVSpec(layout, "split", BLOCK_SIZE, 1, "replicated_indexer", mla_entry_bytes(layout, spec.Lkv, spec.Dr),
                  indexer_entry_bytes(spec.ID), own, n_mla - own, n_idx, 2)


#: --kv-cache-dtype values the DeepSeek-V4 FlashMLA path takes: every fp8* becomes fp8_ds_mla
#: (``_resolve_dsv4_kv_cache_dtype``, vllm/models/deepseek_v4/attention.py@e6643eca: "Using DeepSeek's
#: fp8_ds_mla KV cache format.")
COMPRESSED_FP8 = ("fp8", "fp8_e4m3", "fp8_ds_mla")


def compressed_kv_spec(spec: ModelSpec, plan: ParallelPlan, prof: VllmProfile, *, variant: str = "fp8",
                       dcp: int = 1, mtp: bool = False, stage: int | None = None, arch: str = "") -> PooledKVSpec:
    """The shared-block-id pool of one worker of a compressed-attention model (``kv_compressed``),
    replicated on every TP rank (one latent head; the indexer and compressors are replicated)."""
    v = variant.lower()
    if v not in COMPRESSED_FP8:
        raise AuditInputError("--kv-cache-dtype", f"{variant} for {spec.name} on {prof.label}: the FlashMLA "
                                                  "DeepSeek-V4 path asserts an fp8 cache ('DeepseekV4 fp8_ds_mla layout "
                                                  "only supports fp8 kv-cache'); the FlashInfer bf16 / fp8 rows "
                                                  "(--attention-backend FLASHINFER_MLA_SPARSE_DSV4) are not modelled; "
                                                  "give --kv-cache-dtype fp8")
    if arch == HOPPER:
        raise AuditInputError("--device", f"{spec.name} on an SM90 GPU with {prof.label}: how the HF release's FP4 "
                                          "experts run without FP4 units (a Marlin / FP8 repack) is not modelled; "
                                          "audit models DeepSeek-V4 on SM100 / SM120")
    if dcp != 1:
        raise AuditInputError("--dcp", f"decode context parallel for {spec.name} on {prof.label}: the sliding-window "
                                       "specs assert DCP == 1 (kv_cache_interface.py SlidingWindowSpec)")
    if spec.head_dim % 128 or spec.head_dim != 512 or (spec.dsa and spec.ID % 128):
        raise AuditInputError(spec.name, f"compressed attention with head_dim {spec.head_dim} / index_head_dim "
                                         f"{spec.ID}: the 584 B fp8_ds_mla row is laid out for 512 / 128")
    stages = stage_layers(spec.Lyr, plan.pp)
    stage = plan.pp - 1 if stage is None else stage
    own = [spec.layer_kinds[i].compress_ratio for i in stages[stage]]
    # the MTP layer's attention is built with ratio 1: window only (DeepseekV4Attention.__init__)
    mtp_ratios = [0 for _ in spec.layer_kinds[spec.Lyr:]] if (mtp and stage == plan.pp - 1) else []
    # the backend sets its block size whatever --block-size says (interface.py:620 in GPU-04's log)
    line = f"Setting kv cache block size to {kv_compressed.BLOCK_SIZE} for DEEPSEEK_SPARSE_SWA backend."
    cfg = kv_compressed.cache_config(own, mtp_ratios, window=spec.sliding_window, head_dim=spec.head_dim,
                                     index_dim=spec.ID or 128)
    return PooledKVSpec(variant=kv_compressed.FP8_DS_MLA, config=cfg, block_size=kv_compressed.BLOCK_SIZE,
                        in_flight=int(plan.max_num_batched_tokens), main_layers=len(own), mtp_layers=len(mtp_ratios),
                        engine_lines=(line,),
                        rows=(("latent", kv_compressed.DS_MLA_V4_ROW),
                              ("indexer", (spec.ID or 128) + 4 * cdiv(spec.ID or 128, 128))))
