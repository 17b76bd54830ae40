"""The GPU kernels upstream vLLM runs for a DSA model (DeepSeek-V3.2, GLM-5.x), as the constants the
generic op program (``auditor/perf/program.py``) asks a kernel path for, plus the kernel names its
ops take on CUDA.

What runs, as engine-vllm-cuda.md gives it (file at the index copy or commit the spec names):

* **Sparse MLA attention.** Hopper (SM90): ``FLASHMLA_SPARSE``
  (``vllm/v1/attention/backends/mla/flashmla_sparse.py`` @60191e18: compute capability 9.x/10.x, kernel
  block 64, KV dtypes auto/bf16/fp8_ds_mla). Blackwell (SM100) with a plain fp8 cache:
  ``FLASHINFER_MLA_SPARSE`` (``flashinfer_mla_sparse.py``, index id 42223421: ``major == 10``, fp8 e4m3,
  block 64, head size 576); with a bf16 / fp8_ds_mla cache on SM100, FlashMLA sparse. Each query row
  gathers its own top-k latent entries (one staged set per row: tile 1), all local heads sharing it;
  bytes per entry are the KV spec's (``kv.py``: 1152 bf16, 656 fp8_ds_mla, 576 fp8), never a copy here.
* **Lightning indexer.** ``DeepseekV32IndexerBackend``: DeepGEMM ``fp8_mqa_logits`` (prefill) and
  ``fp8_paged_mqa_logits`` (decode, block 64) over the fp8 key cache of 128 + 4 B per key (Part B §4.3):
  fp8 q.k on the tensor cores. The per-head ReLU, weight and head sum are fused in the same kernel
  (UNCONFIRMED count: 3 CUDA-core ops per (row, key, head)); a request's keys are read once for all of its
  query rows in a step (decode: the 1 + K rows of ``next_n``; UNCONFIRMED tile for prefill, where the
  kernel blocks query rows: modelled as one read per 64 rows).
* **Top-k.** vLLM's CUDA per-row top-k over the indexer logits (kernel name and algorithm UNCONFIRMED;
  modelled as a radix select: 2 element ops per scored key and 1 per kept index, at the device's sort
  rate).
* **Dense FP8 linears.** ``DeepGemmFp8BlockScaledMMKernel`` (``kernels/linear/scaled_mm/deep_gemm.py``
  @0236228d) when N % 64 == 0 and K % 128 == 0 (``should_use_deepgemm_for_fp8_linear``), activations
  quantized per token in groups of 128 at run time (Part B §2.2 item 4). The roofline prices it at the
  device's F8 peak; the per-token quantization is the FP8 scheme's dynamic term.
* **Routed experts.** ``select_fp8_moe_backend`` (``fused_moe/oracle/fp8.py`` @001a058b, Part B §2.4):
  SM90 block FP8 takes Triton first under TP only and FlashInfer-CUTLASS first under EP; otherwise
  FLASHINFER_TRTLLM leads (GPU-01 logs ``Using FLASHINFER_TRTLLM Fp8 MoE backend`` at B200 TP8,
  ``fp8.py:411``). Same roofline for every backend (no backend efficiency is measured); the name is
  reported.
* **CUDA graphs.** Decode steps replay a FULL graph, mixed / prefill steps above the largest capture
  size run piecewise-compiled (``Vllm.graph_max_tokens``).

No DSA context parallel, no NZ weight format and no FlashComm1 exist upstream (``placement.py`` refuses
the switches). What a prefill or decode step costs the host is the device profile's ``serving`` block.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...errors import AuditInputError
from . import kv

#: MoE backends of ``select_fp8_moe_backend`` this model reaches on CUDA (oracle/fp8.py @001a058b)
TRITON, FLASHINFER_CUTLASS, FLASHINFER_TRTLLM = "TRITON", "FLASHINFER_CUTLASS", "FLASHINFER_TRTLLM"


def moe_backend(arch: str, ep: bool) -> str:
    """The FP8 block MoE backend the oracle picks (Part B §2.4): on SM90 Triton under TP only and
    FlashInfer-CUTLASS under EP; on SM100 the priority list leads with FLASHINFER_TRTLLM (AITER is
    ROCm-only), as GPU-01 logs at B200 TP8."""
    if arch == kv.HOPPER:
        return FLASHINFER_CUTLASS if ep else TRITON
    return FLASHINFER_TRTLLM


def attention_backend(arch: str, layout: str) -> str:
    """The sparse-MLA backend of a cache layout (spec §2.1): FlashInfer MLA sparse for plain fp8 on
    SM100, FlashMLA sparse otherwise."""
    return "FLASHINFER_MLA_SPARSE" if layout == kv.FP8_E4M3 else "FLASHMLA_SPARSE"


@dataclass(frozen=True)
class CudaKernelPath:
    """The kernel constants of one ``--kv-cache-dtype`` on one GPU generation (the generic program's
    kernel-path interface: ``name``, ``arch``, ``indexer_dtype``, ``indexer_tile``,
    ``indexer_vec_per_head_total``, ``topk_per_key``, ``topk_per_kept``, ``sfa_tile_rows``) plus
    ``kernel_for``: the CUDA kernel an op of the program runs as."""

    name: str                 # the --kv-cache-dtype value (the KV spec resolves its layout with ``arch``)
    arch: str                 # the engine's GPU generation (``Vllm.soc``)
    indexer_dtype: str = "F8"                 # DeepGEMM fp8 q.k
    #: query rows of one request sharing one read of its key cache (prefill blocks; decode: all 1+K rows)
    indexer_prefill_rows: float = 64.0
    indexer_vec: float = 3.0                  # ReLU, head weight, head sum per (row, key, head), fused
    topk_per_key: float = 2.0
    topk_per_kept: float = 1.0
    sfa_tile_rows: float = 1.0

    def indexer_tile(self, index_heads: int) -> float:
        return self.indexer_prefill_rows

    def indexer_vec_per_head_total(self, index_heads: int) -> float:
        return self.indexer_vec

    def kernel_for(self, cls: str, dtype: str, *, layout: str, ep: bool) -> str | None:
        """The CUDA kernel an op of class ``cls`` runs as (None: keep the program's generic name)."""
        if cls == "sfa":
            return "flashinfer_mla_sparse" if attention_backend(self.arch, layout) == "FLASHINFER_MLA_SPARSE" \
                else "flash_mla_sparse"
        if cls == "linear":
            return "deep_gemm.fp8_gemm_nt" if dtype == "F8" else "cublas_gemm"
        if cls == "grouped_matmul":
            return f"fused_moe[{moe_backend(self.arch, ep)}]"
        return KERNELS.get(cls)


#: the other op classes' kernels on CUDA (names as the spec's log lines and backends give them;
#: the norms and the cache write are vLLM's custom ops, UNCONFIRMED names)
KERNELS = {"indexer_score": "deep_gemm.fp8_mqa_logits", "indexer_topk": "top_k_per_row",
           "bmm": "torch.bmm (W_UK_T / W_UV)", "rms_norm": "rms_norm", "add_rms_norm": "fused_add_rms_norm",
           "router_topk": "grouped_topk", "cache_write": "concat_and_cache_mla"}


def kernel_path(variant: str, arch: str) -> CudaKernelPath:
    """The kernel path of ``--kv-cache-dtype variant`` on ``arch`` (the KV spec resolves the layout)."""
    if variant.lower() not in kv.KV_DTYPES:
        raise AuditInputError("--kv-cache-dtype", f"must be one of {', '.join(kv.KV_DTYPES)}, got {variant!r}")
    if not arch:
        raise AuditInputError("--device", "upstream vLLM's kernels depend on the GPU generation; name an NVIDIA "
                                          "--device (h200, b200, ...)")
    return CudaKernelPath(variant, arch)


__all__ = ["CudaKernelPath", "kernel_path", "moe_backend", "attention_backend", "KERNELS"]
