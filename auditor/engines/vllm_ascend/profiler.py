"""vLLM-Ascend's kernels as the Ascend profiler names them: kernel Type -> op class, and the
default Type -> kernel-table name of ``audit kernels import``.

``audit align`` classes a profile's rows with ``kernel_class``; ``audit kernels import`` names
measured rows with ``DEFAULT_MAPPING``. Both are data of this engine (its kernels, its CANN).

Source of the table: the 108 kernel Types of vLLM-Ascend 0.18.0 / torch 2.9.0 / CANN 8.5 on A3
(Ascend/msmodeling @84fec853, ``tensor_cast/performance_model/profiling_database/data/
ATLAS_800_A3_752T_128G_DIE/vllm_ascend/vllm0.18.0_torch2.9.0_cann8.5/``: one ``{Type}.csv`` per Type,
``op_mapping.yaml`` = "op_mapping L..." below), the HCCL Types kept apart under ``hccl/v8.5/``, and the
0.13/0.15 directories for older builds (research note kernel-types.md §1). Every Type of that list is
placed here or explicitly ignored (``IGNORE``, with the reason); tests/test_align_profile.py checks it.

Lookup order (``kernel_class``): the exact Type; the Type with a Triton / ATB launch-config suffix
removed (``_0``, ``_1``, ``_200000000``, ``_mix_aic``); then ``KERNEL_PATTERNS`` by substring, longest
and most specific names first (the old single list matched ``TopK`` inside ``ApplyTopKTopPCustom``,
``DynamicQuant`` inside ``AddRmsNormDynamicQuant`` and ``RmsNorm`` inside ``KvRmsNormRopeCache``:
research §0.4); then the same for Name. ``GatherV2*`` is context-dependent (``gather_class``).
"""
from __future__ import annotations

IGNORE = "ignore"

#: exact kernel Type -> op class, or "ignore: reason" (time listed, never fitted)
KERNEL_TYPES: dict[str, str] = {
    # attention. Anchors (one per decoder layer) are ANCHOR_TYPES below.
    "SparseFlashAttention": "sfa",                 # DSA (V3.2 / GLM-5): sfa_v1.py:1009
    "FusedInferAttentionScore": "attention",       # MLA without indexer (DSv3/R1), dense GQA (op_mapping L575-593)
    "RINGMLAPrefillBF16Kernel": "attention",       # ATB ring MLA prefill, 0.13/0.15 (mla_v1.py:1094; op_mapping L27)
    "AttentionUpdate": "attention",                # LSE merge of chunked-context / CP partials, not an anchor (L1378-1386)
    "PagedCacheLoadNdKernel": "attention",         # paged KV load for chunked-context prefill, not an anchor (L1388-1394)
    "LightningIndexer": "indexer_score", "LightningIndexerVllm": "indexer_score",
    "LightningIndexerQuant": "indexer_score",      # top-k fused in (sfa_v1.py:975,988)
    # matmuls
    "MatMulV2": "linear", "MatMulV3": "linear", "MatMulCommon": "linear",        # op_mapping L275-289
    "QuantBatchMatmulV3": "linear",                                             # W8A8 (L358-386)
    "DynamicQuant": "linear",                      # per-token quant before a W8A8 matmul (LINEAR_DYNAMIC; L848-861)
    "AscendQuantV2": "linear", "AscendQuantV2Aicore": "linear",                 # static quant (L839-847)
    "BatchMatMulNd": "bmm", "BatchMatMulV2": "bmm", "TransposeBatchMatMul": "bmm",   # L291-300, L1338-1341
    "batch_matmul_transpose": "bmm",               # W_UV up-proj custom op (sfa_v1.py:807)
    "GroupedMatmul": "grouped_matmul", "GroupedMatmulSwigluQuant": "grouped_matmul",  # L407-413, L445-451
    # fused MoE and MLA preprocessing (composites: see COMPOSITES)
    "DispatchFFNCombine": "moe_fused", "DispatchFFNCombineBF16": "moe_fused",   # L471-523 (35.3 % of DSv3)
    "DispatchGmmCombineDecode": "moe_fused",       # VLLM_ASCEND_ENABLE_FUSED_MC2=2 (dispatch_gmm_combine_decode_def.cpp:219)
    "mla_preprocess": "mla_preprocess",            # MLAPO (sfa_v1.py:843, mla_v1.py:1453; L608-640)
    "MoeGatingTopK": "router_topk",                # device_op.py:258 (L545-553)
    "MoeTokenPermute": "moe_routing", "MoeTokenUnpermute": "moe_routing",      # L525-543
    # norms (NORM_WEIGHT below) and friends
    "RmsNorm": "rms_norm", "AddRmsNorm": "add_rms_norm", "AddRmsNormBias": "add_rms_norm",
    "AddRmsNormDynamicQuant": "add_rms_norm",      # residual add+norm+quant of W8A8 (norm_quant_fusion_pass.py:310)
    "AddRmsNormDynamicQuantAiCore": "add_rms_norm",
    "KvRmsNormRopeCache": "kv_norm_rope_cache",    # kv_a norm + k_pe rope + latent cache write (sfa_v1.py:756-781)
    "split_qkv_rmsnorm_rope_kernel": "qk_norm_rope",  # Qwen3-style QK-norm + RoPE (split_qkv_rmsnorm_rope.py:26)
    "LayerNormV3": "layer_norm", "LayerNormV3WithImplMode": "layer_norm",     # indexer k_norm (L711-718)
    "SwiGlu": "swiglu",
    "InterleaveRope": "rope", "_triton_rope": "rope", "_triton_rope_siso": "rope",
    "ApplyRotaryPosEmb": "rope", "AtbRopeKernel": "rope",
    "ReshapeAndCacheNdKernel": "cache_write", "reshape_and_cache": "cache_write",  # device_op.py:32; L691-701
    "ScatterNdUpdate": "cache_write", "ScatterNdUpdateAiCore": "cache_write",  # indexer key cache (sfa_v1.py:1190-1200)
    "Add": "add", "AddAiCore": "add", "muls_add_kernel": "add",               # L337-345, L1367-1374
    # collectives (HCCL Types under hccl/v8.5/; MC2 dispatch/combine token_dispatcher.py:214,307)
    "hcom_allReduce_": "all_reduce", "hcom_allGather_": "all_gather", "hcom_reduceScatter_": "reduce_scatter",
    "HcomReduceScatter": "reduce_scatter",
    "hcom_alltoall_": "all_to_all", "hcom_alltoallv_": "all_to_all",
    "MoeDistributeDispatchV2": "all_to_all", "MoeDistributeCombineV2": "all_to_all",
    "MoeDistributeDispatch": "all_to_all", "MoeDistributeCombine": "all_to_all",
    "hcom_broadcast_": "broadcast",                # PP broadcast_tensor_dict (model_runner_v1.py:1415): reported, not fitted
    # embedding / gathers (GatherV2* is context-dependent: gather_class)
    "GatherV2": "embedding", "GatherV2AiCore": "embedding",
    "GatherV3": "gather", "Index": "gather",
    "GatherElementsV2": "misc_vector", "IndexFill": "misc_vector", "IndexPutV2": "misc_vector",
    "LinearIndex": "misc_vector", "ScatterElementsV2": "misc_vector",          # L1048-1056
    # sampling (after lm_head; not part of a model step)
    "ApplyTopKTopPCustom": "sampler", "ApplyTopKTopPWithSorted": "sampler",   # sampler.py:164 (L1208-1213)
    "ArgMaxV2": "sampler", "expand_kernel": "sampler", "rejection_random_sample_kernel": "sampler",
    "sample_recovered_tokens_kernel": "sampler", "rejection_greedy_sample_triton": "sampler",
    # data movement: launches and costs NPU time (unlike the model's zero-cost layout kind)
    **{t: "layout" for t in ("AsStrided", "AsStridedAiCore", "BroadcastTo", "ConcatD", "Fill", "Pack", "PadV3",
                             "PadV3AiCore", "RepeatInterleave", "Slice", "SliceAiCore", "TensorMove",
                             "TensorMoveAiCore", "Tile", "Transpose", "TransposeAiCore", "ZerosLike", "TransData")},
    # elementwise glue, masks, metadata (L1004-1010, L1284-1306, L347-356)
    **{t: "misc_vector" for t in ("Cast", "CastAiCore", "ClipByValueV2", "Equal", "FloorDiv", "FloorMod", "Greater",
                                  "GreaterEqual", "Less", "LessAiCore", "Log", "LogicalAnd", "LogicalAndAiCore",
                                  "LogicalNot", "LogicalNotAiCore", "MaskedFill", "MaskedFillAiCore", "Mul",
                                  "MulAiCore", "Muls", "Neg", "NotEqual", "RealDiv", "SelectV2", "Sub", "SubAiCore",
                                  "Range", "Cumsum", "ReduceSum", "SoftmaxV2", "Sort")},
    # explicitly ignored
    "MemSet": "ignore: workspace zero-init, zero-cost in msmodeling (op_mapping L1323-1328)",
    "reduce_scatterAicpuKernel": "ignore: AICPU launch companion of hcom_reduceScatter_ (time inside it, L923-933)",
    "allgatherAicpuKernel": "ignore: AICPU launch companion of hcom_allGather_ (time inside it, L913-921)",
    "allreduceAicpuKernel": "ignore: AICPU launch companion of hcom_allReduce_ (time inside it, L1330-1336)",
    "HistogramV2": "ignore: no call site in vllm-ascend v0.18 (origin unconfirmed)",
    "prepare_inputs_padded_kernel": "ignore: spec-decode bookkeeping (ops/triton/spec_decode/utils.py:22)",
}

#: substring fallback for Types not listed (newer builds, suffixed names), most specific first
KERNEL_PATTERNS: tuple[tuple[str, str], ...] = (
    ("AicpuKernel", "ignore: AICPU launch companion of an hcom kernel"),
    ("ApplyTopKTopP", "sampler"), ("rejection", "sampler"),
    ("SparseFlashAttention", "sfa"), ("LightningIndexer", "indexer_score"),
    ("RINGMLA", "attention"), ("FusedInferAttention", "attention"), ("FlashAttention", "attention"),
    ("PagedAttention", "attention"), ("AttentionUpdate", "attention"), ("PagedCacheLoad", "attention"),
    ("DispatchFFNCombine", "moe_fused"), ("DispatchGmmCombine", "moe_fused"),
    ("mla_preprocess", "mla_preprocess"), ("split_qkv_rmsnorm_rope", "qk_norm_rope"),
    ("KvRmsNormRopeCache", "kv_norm_rope_cache"),
    ("AddRmsNormDynamicQuant", "add_rms_norm"), ("AddRmsNorm", "add_rms_norm"), ("RmsNorm", "rms_norm"),
    ("LayerNorm", "layer_norm"),
    ("GroupedMatmul", "grouped_matmul"), ("MoeGatingTopK", "router_topk"), ("MoeToken", "moe_routing"),
    ("batch_matmul_transpose", "bmm"), ("BatchMatMul", "bmm"), ("QuantBatchMatmul", "linear"),
    ("MatMul", "linear"), ("Matmul", "linear"), ("DynamicQuant", "linear"), ("AscendQuant", "linear"),
    ("Swiglu", "swiglu"), ("SwiGlu", "swiglu"), ("triton_rope", "rope"), ("Rope", "rope"), ("RotaryMul", "rope"),
    ("RotaryPosition", "rope"),
    ("ReshapeAndCache", "cache_write"), ("reshape_and_cache", "cache_write"), ("ScatterPaKvCache", "cache_write"),
    ("ScatterNdUpdate", "cache_write"),
    ("GatherV2", "embedding"), ("Embedding", "embedding"),
    ("MoeDistributeDispatch", "all_to_all"), ("MoeDistributeCombine", "all_to_all"), ("AllToAll", "all_to_all"),
    ("alltoall", "all_to_all"), ("AllGather", "all_gather"), ("ReduceScatter", "reduce_scatter"),
    ("AllReduce", "all_reduce"), ("broadcast", "broadcast"), ("muls_add", "add"),
    ("MemSet", "ignore: workspace zero-init"),
)

COLLECTIVE_CLASSES = ("all_gather", "reduce_scatter", "all_reduce", "all_to_all")
#: the attention kernels that occur once per decoder layer (AttentionUpdate / PagedCacheLoad do not)
ANCHOR_TYPES = ("SparseFlashAttention", "FusedInferAttentionScore", "RINGMLAPrefillBF16Kernel")
#: norms before the anchor, by class: input norm (RmsNorm / AddRmsNorm* incl. the W8A8 fused
#: AddRmsNormDynamicQuant), q_a norm (RmsNorm), kv_a norm (KvRmsNormRopeCache). MLAPO holds the q_a
#: and kv_a norms inside mla_preprocess (torch_binding.cpp:743-752: gamma1, gamma2), so it counts 2.
NORM_WEIGHT: dict[str, int] = {"rms_norm": 1, "add_rms_norm": 1, "kv_norm_rope_cache": 1, "mla_preprocess": 2}
NORM_CLASSES = tuple(NORM_WEIGHT)
ANCHOR_CLASSES = ("sfa", "attention")

#: measured classes that fuse several modelled op kinds: compared with the sum of those kinds
COMPOSITES: dict[str, tuple[str, ...]] = {
    "moe_fused": ("grouped_matmul", "swiglu", "all_to_all"),
    "mla_preprocess": ("linear", "rms_norm", "rope", "cache_write", "bmm"),
    "kv_norm_rope_cache": ("rms_norm", "rope", "cache_write"),
    "qk_norm_rope": ("rms_norm", "rope"),
}

_SUFFIXES = ("_mix_aic", "_mix_aiv")


def _strip_suffix(typ: str) -> str:
    """``mla_preprocess_0_mix_aic`` -> ``mla_preprocess``, ``muls_add_kernel_1`` -> ``muls_add_kernel``,
    ``reshape_and_cache_200000000`` -> ``reshape_and_cache`` (Triton / kernel-instance suffixes;
    msmodeling parse_kernel_details.py:297-300 merges the same)."""
    t = typ
    for s in _SUFFIXES:
        if t.endswith(s):
            t = t[: -len(s)]
    head, sep, tail = t.rpartition("_")
    while sep and tail.isdigit() and head:
        t = head
        head, sep, tail = t.rpartition("_")
    return t


def _lookup(text: str) -> str | None:
    if not text:
        return None
    hit = KERNEL_TYPES.get(text) or KERNEL_TYPES.get(_strip_suffix(text))
    if hit:
        return hit
    low = text.lower()
    for needle, cls in KERNEL_PATTERNS:
        if needle in text or (cls in COLLECTIVE_CLASSES and needle.lower() in low):
            return cls
    return None


def kernel_class(typ: str, name: str = "") -> str | None:
    """Our op class of one kernel ("ignore: why" for kernels listed but never fitted), or None
    (unmapped). Type first, then Name."""
    return _lookup(typ) or _lookup(name)


def gather_class(shapes: list[tuple[int, ...]], hidden: int | None) -> str:
    """GatherV2 is the embedding only when its first input is the [vocab/tp, hidden] table (op_mapping
    L302-309: aclnnEmbedding -> GatherV2, inputs weight, indices, axis); any other GatherV2 is a gather."""
    if shapes and len(shapes[0]) == 2 and shapes[0][0] >= 1024 and (hidden is None or shapes[0][1] == hidden):
        return "embedding"
    return "gather"


_NOT_ANCHORS = ("AttentionUpdate", "PagedCacheLoad")


def is_anchor(typ: str, cls: str | None) -> bool:
    """One kernel per decoder layer: SFA, FIA, ring-MLA prefill (ANCHOR_TYPES), never the chunked-context
    helpers AttentionUpdate / PagedCacheLoadNdKernel (op_mapping L1378-1394: 3 per layer)."""
    if cls == "sfa":
        return True
    return cls == "attention" and not any(n in typ for n in _NOT_ANCHORS)


#: default Type -> our kernel name, used by ``audit kernels import`` without --map
DEFAULT_MAPPING: dict[str, str] = {
    "QuantBatchMatmulV3": "matmul_w8a8",
    "MatMulV2": "matmul_bf16",
    "MatMulV3": "matmul_bf16",
    "GroupedMatmul": "grouped_matmul",
    "SparseFlashAttention": "sparse_flash_attention",
    "LightningIndexer": "lightning_indexer",
}

#: the 108 Types of the public vLLM-Ascend 0.18 / CANN 8.5 list (msmodeling directory) plus the HCCL
#: and older-build Types (research §1.2-1.3): tests assert each is placed or ignored
PUBLIC_TYPES = (
    "Add AddAiCore AddRmsNormBias AddRmsNormDynamicQuant AddRmsNormDynamicQuantAiCore ApplyTopKTopPCustom ArgMaxV2 "
    "AsStrided AsStridedAiCore AscendQuantV2 AscendQuantV2Aicore AttentionUpdate BatchMatMulNd BatchMatMulV2 "
    "BroadcastTo Cast CastAiCore ClipByValueV2 ConcatD Cumsum DispatchFFNCombine DynamicQuant Equal Fill FloorDiv "
    "FloorMod FusedInferAttentionScore GatherElementsV2 GatherV2 GatherV2AiCore GatherV3 Greater GreaterEqual "
    "GroupedMatmul GroupedMatmulSwigluQuant HistogramV2 Index IndexFill IndexPutV2 InterleaveRope KvRmsNormRopeCache "
    "LayerNormV3 LayerNormV3WithImplMode Less LessAiCore LightningIndexer LinearIndex Log LogicalAnd LogicalAndAiCore "
    "LogicalNot LogicalNotAiCore MaskedFill MaskedFillAiCore MatMulCommon MatMulV2 MatMulV3 MemSet "
    "MoeDistributeCombineV2 MoeDistributeDispatchV2 MoeGatingTopK MoeTokenPermute MoeTokenUnpermute Mul MulAiCore "
    "Muls Neg NotEqual Pack PadV3 PadV3AiCore PagedCacheLoadNdKernel QuantBatchMatmulV3 RealDiv ReduceSum "
    "RepeatInterleave ReshapeAndCacheNdKernel RmsNorm ScatterElementsV2 ScatterNdUpdate ScatterNdUpdateAiCore "
    "SelectV2 Slice SliceAiCore SoftmaxV2 Sort SparseFlashAttention Sub SubAiCore SwiGlu TensorMove TensorMoveAiCore "
    "Tile Transpose TransposeAiCore TransposeBatchMatMul ZerosLike _triton_rope _triton_rope_siso "
    "batch_matmul_transpose_0 expand_kernel mla_preprocess_0_mix_aic muls_add_kernel prepare_inputs_padded_kernel "
    "reduce_scatterAicpuKernel rejection_random_sample_kernel sample_recovered_tokens_kernel "
    "split_qkv_rmsnorm_rope_kernel"
).split()
EXTRA_TYPES = (
    "hcom_allReduce_ hcom_allGather_ hcom_reduceScatter_ hcom_alltoall_ hcom_alltoallv_ hcom_broadcast_ "
    "allgatherAicpuKernel allreduceAicpuKernel HcomReduceScatter RINGMLAPrefillBF16Kernel TransData AddRmsNorm "
    "ApplyRotaryPosEmb AtbRopeKernel ApplyTopKTopPWithSorted rejection_greedy_sample_triton Range "
    "reshape_and_cache_200000000 split_qkv_rmsnorm_rope_kernel_0 muls_add_kernel_1 _triton_rope_1 "
    "LightningIndexerVllm LightningIndexerQuant DispatchFFNCombineBF16 DispatchGmmCombineDecode"
).split()
