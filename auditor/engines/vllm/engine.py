"""Upstream vLLM on NVIDIA GPUs as an Engine: its version rows plus the hooks the generic flow calls.

Each hook delegates to the module of this folder that holds the fact (placement, materializer
rules, KV cache, budget terms, log lines, launch command). Nothing outside this folder knows an
upstream-vLLM CUDA fact; the folder imports only generic modules.
"""
from __future__ import annotations

from typing import Any, ClassVar, Sequence

from ..base import Engine
from ..registry import register
from . import estimates, kernels, kv, kv_compressed, launch, loglines, versions
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
    #: a ``vllm serve --kv-cache-dtype fp8`` line is this engine's fp8 cache (kv.resolve_layout per GPU)
    launch_kv_cache_dtypes: ClassVar[tuple[str, ...]] = tuple(v for v in kv.KV_DTYPES if v.startswith("fp8"))
    block_size: ClassVar[int] = kv.BLOCK_SIZE
    #: prefix-cache hits are whole blocks of the sparse-MLA block size (spec §2: 64)
    prefix_block_tokens: ClassVar[int] = kv.BLOCK_SIZE
    others_at_start_bytes: ClassVar[int] = estimates.HELD_BEFORE_SNAPSHOT_BYTES
    term_docs: ClassVar[dict[str, str]] = estimates.TERM_DOCS
    materializer_fields: ClassVar[tuple[str, ...]] = ("gate_dtype", "kv_b_kept", "indexer_fused_wk", "index_cache")
    budget_labels: ClassVar[dict[str, str]] = {"non_torch": "non-torch increase", "graph": "CUDA graph estimate",
                                               "weights": "Model loading took"}

    # the engine's words in generic output (Engine.device_noun, ...)
    device_noun: ClassVar[str] = "GPU"
    #: outside the budget on CUDA: what init_device allocates before the snapshot (NCCL / custom
    #: all-reduce buffers, the CUDA context: budget.py) and, before v0.21, the CUDA graph pool
    outside_budget_words: ClassVar[str] = ("NCCL / custom all-reduce buffers and the CUDA context allocated before "
                                           "the memory snapshot, the CUDA graph pool where it is not profiled")
    prefill_mtp_source: ClassVar[str] = "an assumption: no upstream P/D recipe read sets it"

    def kv_link_words(self, bytes_per_s: float) -> str:
        return (f"{bytes_per_s / 1e9:g} GB/s per GPU, an assumption: no NVIDIA P/D transfer figure is given "
                "(UNCONFIRMED)")

    def memory_savers(self, recipe: str | None, kv_cache_dtype: str | None) -> list[str]:
        """An fp8 KV cache (fp8_ds_mla 656 B on Hopper, plain fp8 576 B on Blackwell, against 1152 B bf16)."""
        return [] if (kv_cache_dtype or "").lower().startswith("fp8") else ["fp8 KV"]

    @property
    def default_gpu_memory_utilization(self) -> float:
        return self.profile.default_gmu

    # ------------------------------------------------------------ weights
    def loads_recipe(self, spec: Any, recipe: str) -> bool:
        """A compressed-attention model's msModelSlim W8A8 / W4A8 checkpoints need vLLM-Ascend's --quantization
        ascend: CUDA loads its HF release (fp8-block) or bf16. (Other families keep every recipe searchable: their
        int8 schemes show as an error finding.)"""
        return recipe in ("bf16", "fp8-block") or not getattr(spec, "layer_kinds", ())

    def placement(self, spec: Any, plan: Any) -> Any:
        return resolve_placement(spec, plan, self.profile)

    def materializer(self, spec: Any, plan: Any, layout: Any, stored: Any, desc: Any,
                     row_cache: dict | None = None, arch: str = "") -> CudaMaterializer:
        return CudaMaterializer(spec, plan, self.profile, layout, stored, desc, row_cache, arch=arch)

    # ------------------------------------------------------------ runtime memory
    def kv_spec(self, spec: Any, plan: Any, *, variant: str = "bf16", dcp: int = 1, mtp: bool = False,
                stage: int | None = None, arch: str = "") -> Any:
        return kv.kv_spec(spec, plan, self.profile, variant=variant, dcp=dcp, mtp=mtp, stage=stage, arch=arch)

    def kv_refusal(self, spec: Any, variant: str) -> str | None:
        """DeepSeek-V3.2 on the ``deepseek_v32`` package asserts a quantized cache (``versions.py``,
        ``v32_requires_quantized_kv``); GLM-5.x (deepseek_v2.py) takes bf16."""
        if (self.profile.v32_requires_quantized_kv and getattr(spec, "model_type", "") == "deepseek_v32"
                and str(variant).lower() in ("auto", "bf16", "bfloat16")):
            return loglines.v32_kv_dtype_error()
        return None

    def soc(self, device: Any) -> str:
        return GPU_GENERATION.get(getattr(device, "name", str(device)), "")

    def device_mismatch(self, device: Any) -> str | None:
        """Upstream vLLM's CUDA engine is modelled on the NVIDIA profiles of ``GPU_GENERATION`` only."""
        if self.soc(device):
            return None
        return (f"--device {getattr(device, 'name', device)} is not one of the NVIDIA GPUs {self.label} is modelled "
                f"on ({', '.join(GPU_GENERATION)}); for an Ascend NPU give --engine vllm-ascend")

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
        extra = (kv_compressed.BUDGET_ASSUMPTION,) if getattr(kv, "config", None) is not None else ()
        return tuple(estimates.assumptions(spec)) + extra + tuple(self.profile.notes)

    # ------------------------------------------------------------ what it prints and takes
    #: the module of log-line formatters and readers (the base class's hooks, bound to this family's)
    loglines = loglines
    parse_breakdown = staticmethod(loglines.parse_breakdown)
    weights_patterns = classmethod(lambda cls: loglines.WEIGHTS_PATTERNS)

    def launch(self, model: str, instance: Any, *, quantized: bool = False) -> dict[str, Any]:
        return launch.launch_instance(model, instance, default_gmu=self.profile.default_gmu)

    # ------------------------------------------------------------ kernels
    def untimed(self, spec: Any) -> str | None:
        """DeepSeek-V4 on CUDA: its memory is modelled, its timing is not (no op program on the GPU kernels)."""
        if getattr(spec, "layer_kinds", ()):
            return (f"{self.profile.label}: perf / bench / plan of {spec.name}'s compressed attention (DeepSeek-V4 "
                    "family) are not modelled on CUDA (its FlashMLA sparse DeepSeek-V4 kernels, compressors, MXFP4 "
                    "MoE backend and mHC ops have no GPU op program); audit memory is, and vLLM-Ascend times it")
        return None

    def kernel_path(self, variant: str) -> Any:
        """Without a device generation there is no kernel program: the backends depend on it."""
        return kernels.kernel_path(variant, "")

    def kernel_path_on(self, variant: str, arch: str) -> Any:
        """FlashMLA / FlashInfer MLA sparse, DeepGEMM indexer logits and FP8 GEMMs, the oracle's MoE
        backend (``kernels.py``) for ``--kv-cache-dtype variant`` on ``arch``."""
        return kernels.kernel_path(variant, arch)

    def graph_max_tokens(self, max_num_seqs: int, mtp: int, max_num_batched_tokens: int) -> int:
        """Upstream's default largest capture size, ``min(max_num_seqs x (1 + K) x 2, 512)`` capped by
        ``max_num_batched_tokens`` (``vllm/config/vllm.py`` ``_set_cudagraph_sizes``, the rule vLLM-Ascend
        re-states without the x 2; GPU-04 logs ``PIECEWISE=42 (largest=384), FULL=26 (largest=192)`` at
        max_num_seqs 64, MTP 2: 64 x 3 x 2 = 384). A decode step (at most max_num_seqs x (1 + K) tokens)
        therefore always replays a graph."""
        return int(min(max_num_seqs * (1 + mtp) * 2, MAX_DEFAULT_CAPTURE, max_num_batched_tokens))

    def measured_acceptance(self, spec: Any, drafter: str = "mtp") -> tuple[float, int, str] | None:
        """GLM with MTP on upstream vLLM: GPU-19's measured acceptance length (``estimates``); vLLM-Ascend's
        GLM figure (3.16 at MTP 3) is that engine's measurement, not this one's. Other families: none
        measured on CUDA (the generic table's assumption)."""
        if drafter == "mtp" and str(getattr(spec, "name", spec)).lower().startswith("glm"):
            return estimates.GLM_MTP_CUDA_LENGTH, estimates.GLM_MTP_CUDA_K, estimates.GLM_MTP_CUDA_SOURCE
        return None, 0, "no measurement on upstream vLLM"

    def drafter_eager(self, spec: Any, async_scheduling: bool = False) -> bool:
        """Upstream's MTP proposer (EagleProposer, method "mtp") runs its passes under the CUDA graphs of the
        decode step when graphs are on (UNCONFIRMED in code here: no file:line in the spec); no GLM
        exception as on vLLM-Ascend."""
        return False


#: the default capture-size ceiling (vllm/config/vllm.py ``_set_cudagraph_sizes``)
MAX_DEFAULT_CAPTURE = 512
