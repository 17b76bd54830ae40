"""Upstream vLLM on NVIDIA GPUs as an Engine: its version rows plus the hooks the generic flow calls.

Each hook delegates to the module of this folder that holds the fact (placement, materializer
rules, KV cache, budget terms, log lines, launch command). Nothing outside this folder knows an
upstream-vLLM CUDA fact; the folder imports only generic modules.
"""
from __future__ import annotations

from typing import Any, ClassVar, Sequence

from ...errors import AuditInputError
from ..base import Engine
from ..registry import register
from . import estimates, kv, launch, loglines, versions
from .materializer import CudaMaterializer
from .placement import resolve_placement

#: device profile name -> the engine's GPU generation (compute capability major)
GPU_GENERATION = {"h200": kv.HOPPER, "h20": kv.HOPPER, "gh200": kv.HOPPER, "b200": kv.BLACKWELL,
                  "rtx-pro-6000": kv.BLACKWELL_WS}


@register
class Vllm(Engine):
    family: ClassVar[str] = "vllm"
    profiles: ClassVar[dict[str, Any]] = versions.PROFILES
    aliases: ClassVar[dict[str, str]] = versions.ALIASES
    kv_dtypes: ClassVar[tuple[str, ...]] = kv.KV_DTYPES
    block_size: ClassVar[int] = kv.BLOCK_SIZE
    #: prefix-cache hits are whole blocks of the sparse-MLA block size (spec §2: 64)
    prefix_block_tokens: ClassVar[int] = kv.BLOCK_SIZE
    others_at_start_bytes: ClassVar[int] = estimates.HELD_BEFORE_SNAPSHOT_BYTES
    term_docs: ClassVar[dict[str, str]] = estimates.TERM_DOCS
    materializer_fields: ClassVar[tuple[str, ...]] = ("gate_dtype", "kv_b_kept", "indexer_fused_wk", "index_cache")
    budget_labels: ClassVar[dict[str, str]] = {"non_torch": "non-torch increase", "graph": "CUDA graph estimate",
                                               "weights": "Model loading took"}

    @property
    def default_gpu_memory_utilization(self) -> float:
        return self.profile.default_gmu

    # ------------------------------------------------------------ weights
    def placement(self, spec: Any, plan: Any) -> Any:
        return resolve_placement(spec, plan, self.profile)

    def materializer(self, spec: Any, plan: Any, layout: Any, stored: Any, desc: Any,
                     row_cache: dict | None = None, arch: str = "") -> CudaMaterializer:
        return CudaMaterializer(spec, plan, self.profile, layout, stored, desc, row_cache, arch=arch)

    # ------------------------------------------------------------ runtime memory
    def kv_spec(self, spec: Any, plan: Any, *, variant: str = "bf16", dcp: int = 1, mtp: bool = False,
                stage: int | None = None, arch: str = "") -> Any:
        return kv.kv_spec(spec, plan, self.profile, variant=variant, dcp=dcp, mtp=mtp, stage=stage, arch=arch)

    def soc(self, device: Any) -> str:
        return GPU_GENERATION.get(getattr(device, "name", str(device)), "")

    def activation_terms(self, spec: Any, *, tokens: Any, seqs: Any, mtp: Any = 0, max_model_len: int | None = None,
                         **kw: Any) -> dict[str, Any]:
        return estimates.activation_terms(spec, tokens=tokens, seqs=seqs, mtp=mtp, max_model_len=max_model_len)

    def activation_peak(self, terms: dict[str, Any]) -> Any:
        return sum(terms.values())

    def non_torch_terms(self, plan: Any, *, hccl_buffsize_mb: int = 0, dcp: int = 1, **state: Any) -> dict[str, int]:
        return dict(estimates.NON_TORCH_TERMS)

    def graph_deducted_bytes(self) -> int:
        return estimates.CUDA_GRAPH_BYTES if self.profile.cudagraph_profiled else 0

    def term_ranges(self, p_act: float, non_torch: dict[str, int], graph: int) -> dict[str, tuple[float, float]]:
        out = {"activation peak": (p_act * estimates.ACT_LOW, p_act * estimates.ACT_HIGH)}
        if graph:
            out["CUDA graph estimate"] = tuple(float(x) for x in estimates.CUDA_GRAPH_RANGE)
        return out

    def unbudgeted_items(self, spec: Any, plan: Any, kvs: Any, **kw: Any) -> list[tuple[str, int]]:
        if self.profile.cudagraph_profiled:
            return []
        return [("CUDA graph pool (not profiled before v0.21: must fit in the 1 - gmu headroom)",
                 estimates.CUDA_GRAPH_BYTES)]

    def budget_assumptions(self, spec: Any = None, kv: Any = None) -> Sequence[str]:
        return tuple(estimates.ASSUMPTIONS) + tuple(self.profile.notes)

    # ------------------------------------------------------------ what it prints and takes
    #: the module of log-line formatters and readers (the base class's hooks, bound to this family's)
    loglines = loglines
    parse_breakdown = staticmethod(loglines.parse_breakdown)
    weights_patterns = classmethod(lambda cls: loglines.WEIGHTS_PATTERNS)

    def launch(self, model: str, instance: Any, *, quantized: bool = False) -> dict[str, Any]:
        return launch.launch_instance(model, instance, default_gmu=self.profile.default_gmu)

    # ------------------------------------------------------------ kernels
    def kernel_path(self, variant: str) -> Any:
        raise AuditInputError("--engine", f"{self.profile.label}: the GPU kernel program (FlashMLA sparse, DeepGEMM, "
                                          "the MoE backend) is not modelled yet; perf, bench and plan need it")
