"""Upstream vLLM's KV budget on a CUDA worker, as the engine's own function over named terms.

engine-vllm-cuda.md §1.1-§1.2 (``gpu_worker.py`` copy @35d5cda1; the v0.25 log shows the same
structure)::

    requested     = total_memory x gpu_memory_utilization          (init_device, a fraction of TOTAL)
    non_kv        = weights + torch peak increase + non-torch increase   (MemoryProfilingResult)
    available_kv  = requested - non_kv - CUDA-graph estimate        (estimate only where profiled, v0.21+)

``--kv-cache-memory`` replaces the whole formula (profiling skipped). NCCL and custom all-reduce
buffers are allocated in ``init_device`` *before* the memory snapshot ("This ensures NCCL buffers
are allocated before we measure available memory"), so they are not a term of ``available_kv``:
they lower the free memory the start-up check compares with ``requested``.
"""
from __future__ import annotations

from dataclasses import dataclass

from ...units import MiB

#: the suggested --kv-cache-memory values leave a 150 MiB redundancy buffer (spec §1.1, DEBUG line)
SUGGESTION_REDUNDANCY_BYTES = 150 * MiB


@dataclass(frozen=True)
class BudgetTerms:
    """The named terms of one worker's budget, in bytes (the engine's own names)."""
    total_bytes: int                     # init_snapshot.total_memory (device profile hbm_usable_bytes)
    gpu_memory_utilization: float
    weights_bytes: int                   # model_memory_usage ("Model loading took X GiB")
    peak_activation_bytes: int           # r.torch_peak_increase of profile_run()
    non_torch_bytes: int                 # r.non_torch_increase (cuBLAS / DeepGEMM workspaces, ...)
    cuda_graph_bytes: int = 0            # cudagraph_memory_estimate
    cuda_graph_applied: bool = False     # subtracted (VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS, v0.21+)
    kv_cache_memory_bytes: int | None = None   # --kv-cache-memory: skips the formula

    @property
    def requested_bytes(self) -> float:
        return self.total_bytes * self.gpu_memory_utilization

    @property
    def non_kv_bytes(self) -> int:
        return self.weights_bytes + self.peak_activation_bytes + self.non_torch_bytes

    @property
    def graph_deducted_bytes(self) -> int:
        return self.cuda_graph_bytes if self.cuda_graph_applied and self.kv_cache_memory_bytes is None else 0

    def available_kv_bytes(self) -> int:
        """What ``determine_available_memory`` returns (negative: "No available memory")."""
        if self.kv_cache_memory_bytes is not None:
            return int(self.kv_cache_memory_bytes)
        return int(self.requested_bytes - self.non_kv_bytes - self.graph_deducted_bytes)

    def as_named(self) -> dict[str, int]:
        """The subtracted terms by the names the engine's DEBUG breakdown uses."""
        return {"weight": self.weights_bytes, "peak activation": self.peak_activation_bytes,
                "non-torch memory": self.non_torch_bytes, "CUDAGraph memory": self.graph_deducted_bytes}


def available_kv_bytes(total_bytes: int, gpu_memory_utilization: float, *, weights: int, peak_activation: int,
                       non_torch: int, cuda_graph: int = 0, cuda_graph_applied: bool = False) -> int:
    """``gmu x total - weights - peak activation - non-torch - CUDA graph`` (the graph term only where
    the version profiles it)."""
    return BudgetTerms(total_bytes, gpu_memory_utilization, weights, peak_activation, non_torch, cuda_graph,
                       cuda_graph_applied).available_kv_bytes()


def startup_fits(free_bytes: int, total_bytes: int, gpu_memory_utilization: float) -> bool:
    """``init_device``: the engine refuses to start when free memory (after NCCL and the CUDA context)
    is below ``requested``."""
    return free_bytes >= total_bytes * gpu_memory_utilization


def equivalent_gmu(gpu_memory_utilization: float, cuda_graph_bytes: int, total_bytes: int) -> tuple[float, float]:
    """The v0.21+ note's two figures: the utilization that gives the same KV without graph profiling
    (u - G/T) and the one that keeps the pre-v0.21 KV with it (u + G/T). GPU-04: 0.95, 1.58 GiB,
    ~95 GiB -> 0.9334 and 0.9666."""
    d = cuda_graph_bytes / total_bytes
    return gpu_memory_utilization - d, gpu_memory_utilization + d


def kv_cache_memory_suggestions(terms: BudgetTerms, free_at_start_bytes: int) -> tuple[int, int]:
    """The DEBUG line's two ``--kv-cache-memory`` values: one that fits ``requested`` and one that fills
    the free memory, each less the 150 MiB buffer (spec §1.1; exact expression UNCONFIRMED)."""
    used = terms.non_kv_bytes + terms.cuda_graph_bytes
    fit = int(terms.requested_bytes - used - SUGGESTION_REDUNDANCY_BYTES)
    full = int(free_at_start_bytes - used - SUGGESTION_REDUNDANCY_BYTES)
    return fit, full


__all__ = ["BudgetTerms", "available_kv_bytes", "startup_fits", "equivalent_gmu", "kv_cache_memory_suggestions"]
