"""vLLM-Ascend's kernels as the Ascend profiler names them: kernel Type -> op class, and the
default Type -> kernel-table name of ``audit kernels import``.

``audit align`` classes a profile's rows with ``KERNEL_CLASSES``; ``audit kernels import`` names
measured rows with ``DEFAULT_MAPPING``. Both are data of this engine (its kernels, its CANN).
"""
from __future__ import annotations

#: (substring of Type or Name, op class); first match wins, Type is tried before Name. Collective
#: classes follow the perf model's collective kinds.
KERNEL_CLASSES: tuple[tuple[str, str], ...] = (
    ("SparseFlashAttention", "sfa"), ("LightningIndexer", "indexer_score"),
    ("FusedInferAttention", "attention"), ("FlashAttention", "attention"), ("PagedAttention", "attention"),
    ("GroupedMatmul", "grouped_matmul"), ("MoeGatingTopK", "router_topk"), ("TopK", "indexer_topk"),
    ("BatchMatMul", "bmm"), ("QuantBatchMatmul", "linear"), ("MatMul", "linear"), ("Matmul", "linear"),
    ("DynamicQuant", "linear"),
    ("AddRmsNorm", "add_rms_norm"), ("RmsNorm", "rms_norm"), ("LayerNorm", "layer_norm"),
    ("Swiglu", "swiglu"), ("SwiGlu", "swiglu"), ("Rope", "rope"), ("RotaryMul", "rope"), ("RotaryPosition", "rope"),
    ("ReshapeAndCache", "cache_write"), ("ScatterPaKvCache", "cache_write"), ("KvRmsNormRopeCache", "cache_write"),
    ("ScatterNdUpdate", "cache_write"),
    ("GatherV2", "embedding"), ("Embedding", "embedding"),
    ("MoeDistributeDispatch", "all_to_all"), ("MoeDistributeCombine", "all_to_all"), ("AllToAll", "all_to_all"),
    ("AllGather", "all_gather"), ("ReduceScatter", "reduce_scatter"), ("AllReduce", "all_reduce"),
    ("Add", "add"),
)
COLLECTIVE_CLASSES = ("all_gather", "reduce_scatter", "all_reduce", "all_to_all")
ANCHOR_CLASSES = ("sfa", "attention")
NORM_CLASSES = ("rms_norm", "add_rms_norm")


#: default Type -> our kernel name, used by ``audit kernels import`` without --map
DEFAULT_MAPPING: dict[str, str] = {
    "QuantBatchMatmulV3": "matmul_w8a8",
    "MatMulV2": "matmul_bf16",
    "MatMulV3": "matmul_bf16",
    "GroupedMatmul": "grouped_matmul",
    "SparseFlashAttention": "sparse_flash_attention",
    "LightningIndexer": "lightning_indexer",
}
