"""The lines upstream vLLM prints on a CUDA worker about its memory, formatted as the engine
formats them (engine-vllm-cuda.md §1.1-§1.4, the v0.25 log of GPU-04), and bounded regular
expressions ``audit align`` can read them back with.

* ``gpu_model_runner.load_model``: "Model loading took X GiB memory and Y seconds"
* ``gpu_worker.determine_available_memory``: "Available KV cache memory: %.2f GiB"
* ``kv_cache_utils._report_kv_cache_config``: "GPU KV cache size: N tokens" (``f"{n:,}"``) and
  "Maximum concurrency for L tokens per request: Z.ZZx"
* the CUDA-graph lines of v0.21+ (profiling, estimate, the equivalent-utilization note, pool, capture)
* the ValueErrors at start-up (free memory below the request) and when one request does not fit.
"""
from __future__ import annotations

import re

from ...units import GiB
from ..upstream_lines import (DOCS as _DOCS, available_kv_line, format_gib, kv_cache_size_line,  # noqa: F401
                              max_concurrency_line, no_memory_error)





def weights_line(weights_bytes: float, seconds: float | None = None) -> str:
    """'Model loading took 75.64 GiB memory and 20.219445 seconds' (GPU-04, v0.25): the size through
    ``format_gib`` and the seconds with %.6f (both UNCONFIRMED in code; the log fits either)."""
    text = "Model loading took %s GiB memory" % format_gib(weights_bytes)
    return text + (" and %.6f seconds" % seconds if seconds is not None else "")








def cudagraph_profile_line(piecewise: int, piecewise_largest: int, full: int, full_largest: int) -> str:
    return (f"Profiling CUDA graph memory: PIECEWISE={piecewise} (largest={piecewise_largest}), "
            f"FULL={full} (largest={full_largest})")


def cudagraph_estimate_line(graph_bytes: float) -> str:
    return "Estimated CUDA graph memory: %.2f GiB total" % (graph_bytes / GiB)


def cudagraph_note_line(gmu: float, equivalent: float, compensating: float) -> str:
    """gpu_worker.py:553 at v0.25 (GPU-04), printed when the estimate is subtracted."""
    return ("CUDA graph memory profiling is enabled (default since v0.21.0). The current "
            f"--gpu-memory-utilization={gmu:.4f} is equivalent to --gpu-memory-utilization={equivalent:.4f} "
            "without CUDA graph memory profiling. To maintain the same effective KV cache size as before, "
            f"increase --gpu-memory-utilization to {compensating:.4f}. To disable, set "
            "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0.")


def cudagraph_pool_line(actual_bytes: float, estimated_bytes: float) -> str:
    return "CUDA graph pool memory: %.2f GiB (actual), %.2f GiB (estimated)" % (actual_bytes / GiB,
                                                                               estimated_bytes / GiB)


def graph_capture_line(seconds: float, graph_bytes: float) -> str:
    return "Graph capturing finished in %.0f secs, took %.2f GiB" % (seconds, graph_bytes / GiB)


def startup_memory_error(free_bytes: float, total_bytes: float, gmu: float) -> str:
    """init_device's ValueError when free memory is below ``gmu x total``."""
    return (f"ValueError: Free memory on device ({format_gib(free_bytes)}/{format_gib(total_bytes)} GiB) on startup "
            f"is less than desired GPU memory utilization ({gmu}, {format_gib(total_bytes * gmu)} GiB). Decrease GPU "
            "memory utilization or reduce GPU memory used by other processes.")




def v32_kv_dtype_error() -> str:
    """The AssertionError ``DeepseekV32Attention.__init__`` raises on a bf16 KV cache, as worded in
    ``vllm/models/deepseek_v32/attention.py`` (index id 62662889848, listing commit 1ba45afe)."""
    return ("AssertionError: deepseek_v32 (nvidia) requires an fp8 KV cache served by a sparse MLA backend. "
            "Launch with --kv-cache-dtype fp8 (FlashInfer sparse) or --kv-cache-dtype fp8_ds_mla (FlashMLA sparse).")


def shortfall_error(max_model_len: int, needed_bytes: float, available_bytes: float, estimated_max_len: int) -> str:
    """kv_cache_utils' ValueError when one request of max_model_len does not fit (spec §1.3, unchanged
    since v0.9; the tail after "Try increasing gpu_memory_utilization" is cut in the spec and written
    as the vLLM-Ascend pin prints it)."""
    est = (f"Based on the available memory, the estimated maximum model length is {estimated_max_len}. "
           if estimated_max_len > 0 else "")
    return (f"ValueError: To serve at least one request with the model's max seq len ({max_model_len}), "
            f"({format_gib(needed_bytes)} GiB KV cache is needed, which is larger than the available KV cache "
            f"memory ({format_gib(available_bytes)} GiB). {est}Try increasing `gpu_memory_utilization` or "
            f"decreasing `max_model_len` when initializing the engine. " + _DOCS)


def breakdown_line(free: float, total: float, gmu: float, weights: float, activation: float, non_torch: float,
                   graph: float, fit: int, full: int, kv: float) -> str:
    """compile_or_warm_up_model's DEBUG suggestion (spec §1.1), all sizes in bytes."""
    g = lambda b: format_gib(b)       # noqa: E731
    return (f"Free memory on device ({g(free)}/{g(total)} GiB) on startup. Desired GPU memory utilization is "
            f"({gmu}, {g(total * gmu)} GiB). Actual usage is {g(weights)} GiB for weight, {g(activation)} GiB for "
            f"peak activation, {g(non_torch)} GiB for non-torch memory, and {g(graph)} GiB for CUDAGraph memory. "
            f"Replace gpu_memory_utilization config with `--kv-cache-memory={fit}` ({g(fit)} GiB) to fit into "
            f"requested memory, or `--kv-cache-memory={full}` ({g(full)} GiB) to fully utilize gpu memory. "
            f"Current kv cache memory in use is {g(kv)} GiB.")


# ---------------------------------------------------------------- reading them back
#: lines longer than this are not log lines
MAX_LINE = 1 << 16
#: a printed number: digits with optional thousands commas and decimals, bounded (no backtracking)
NUM = r"[-+]?(?:\d{1,3}(?:,\d{3}){1,6}|\d{1,20})(?:\.\d{1,12})?"
_SP = r"[ \t]{0,8}"

PATTERNS: dict[str, re.Pattern] = {
    # "and X seconds" is what the engine prints (gpu_model_runner.py); audit's own line has no load time
    "weights": re.compile(rf"Model loading took ({NUM}){_SP}(GiB|GB) memory(?: and ({NUM}) seconds)?", re.ASCII),
    "available_kv": re.compile(rf"Available KV cache memory: ({NUM}) GiB", re.ASCII),
    "kv_cache_size": re.compile(rf"GPU KV cache size: ({NUM}) tokens", re.ASCII),
    "max_concurrency": re.compile(rf"Maximum concurrency for ({NUM}) tokens per request: ({NUM})x", re.ASCII),
    "cudagraph_profile": re.compile(rf"Profiling CUDA graph memory: PIECEWISE=(\d{{1,6}}) \(largest=(\d{{1,8}})\), "
                                    rf"FULL=(\d{{1,6}}) \(largest=(\d{{1,8}})\)", re.ASCII),
    "cudagraph_estimate": re.compile(rf"Estimated CUDA graph memory: ({NUM}) GiB total", re.ASCII),
    "cudagraph_note": re.compile(rf"--gpu-memory-utilization=({NUM}) is equivalent to --gpu-memory-utilization="
                                 rf"({NUM}) without CUDA graph memory profiling.{{0,120}}? increase "
                                 rf"--gpu-memory-utilization to ({NUM})", re.ASCII),
    "cudagraph_disabled": re.compile(rf"CUDA graph memory profiling is disabled.{{0,400}}?from ({NUM}) to ({NUM})",
                                     re.ASCII),
    "cudagraph_pool": re.compile(rf"CUDA graph pool memory: ({NUM}) GiB \(actual\), ({NUM}) GiB \(estimated\)",
                                 re.ASCII),
    "graph_capture": re.compile(rf"Graph capturing finished in ({NUM}) secs, took ({NUM}) GiB", re.ASCII),
    "startup_error": re.compile(rf"Free memory on device \(({NUM})/({NUM}) GiB\) on startup is less than desired "
                                rf"GPU memory utilization \(({NUM}), ({NUM}) GiB\)", re.ASCII),
    "shortfall": re.compile(rf"max seq len \((\d{{1,12}})\), \(({NUM}) GiB KV cache is needed, which is larger than "
                            rf"the available KV cache memory \(({NUM}) GiB\)\.(?: Based on the available memory, the "
                            rf"estimated maximum model length is (\d{{1,12}})\.)?", re.ASCII),
    "breakdown": re.compile(rf"Free memory on device \(({NUM})/({NUM}) GiB\) on startup\. Desired GPU memory "
                            rf"utilization is \(({NUM}), ({NUM}) GiB\)\. Actual usage is ({NUM}) GiB for weight, "
                            rf"({NUM}) GiB for peak activation, ({NUM}) GiB for non-torch memory, and ({NUM}) GiB for "
                            rf"CUDAGraph memory\.", re.ASCII),
    # newer form: weights and non-torch reported together (gpu_worker.py:855 in a 2026-09 build, search-index
    # file 63441798540; the upstream release that changed it is UNCONFIRMED)
    "breakdown_consumed": re.compile(rf"Free memory on device \(({NUM})/({NUM}) GiB\) on startup\. Desired GPU memory "
                                     rf"utilization is \(({NUM}), ({NUM}) GiB\)\. Actual usage is ({NUM}) GiB for "
                                     rf"consumed memory \(weights \+ non-torch\), ({NUM}) GiB for peak activation, and "
                                     rf"({NUM}) GiB for CUDAGraph memory\.", re.ASCII),
}
_KV_IN_USE = re.compile(rf"Current kv cache memory in use is ({NUM}) GiB", re.ASCII)

#: the per-worker weights line as ``audit align`` reads every family's: (pattern, form, marker); the form is
#: "upstream": upstream vLLM prints this line on every platform (vLLM-Ascend reads it as the same form)
WEIGHTS_PATTERNS: tuple[tuple[re.Pattern, str, str], ...] = ((PATTERNS["weights"], "upstream", "Model loading took"),)


def _num(text: str) -> float | str:
    """A printed number without its thousands commas; a unit group ("GiB") stays text."""
    return text if text.isalpha() else float(text.replace(",", ""))


def parse(kind: str, line: str) -> tuple[float | str | None, ...] | None:
    """The groups of one of the ``PATTERNS`` lines (numbers as floats, commas removed), or None when it
    is not one."""
    if not isinstance(line, str) or len(line) > MAX_LINE:
        return None
    m = PATTERNS[kind].search(line)
    if not m:
        return None
    return tuple(_num(g) if g is not None else None for g in m.groups())


def parse_breakdown(line: str) -> dict | None:
    """The DEBUG suggestion line as the generic GiB keys (Engine.parse_breakdown), or None. The newer
    form that reports weights + non-torch as one sum is ``parse_consumed_breakdown``: it lacks the
    generic keys, so it is not returned here."""
    vals = parse("breakdown", line)
    if vals is None:
        return None
    free, total, util, req, w, a, n, g = vals
    kv = _KV_IN_USE.search(line)
    return {"form": "cuda-breakdown", "free_gib": free, "total_gib": total, "util": util, "requested_gib": req,
            "weights_gib": w, "activation_gib": a, "non_torch_gib": n, "graph_gib": g,
            "kv_cache_gib": _num(kv.group(1)) if kv else None}


def parse_consumed_breakdown(line: str) -> dict | None:
    """The newer breakdown ("W GiB for consumed memory (weights + non-torch)"), or None."""
    vals = parse("breakdown_consumed", line)
    if vals is None:
        return None
    free, total, util, req, consumed, a, g = vals
    kv = _KV_IN_USE.search(line)
    return {"form": "cuda-breakdown-consumed", "free_gib": free, "total_gib": total, "util": util,
            "requested_gib": req, "consumed_gib": consumed, "activation_gib": a, "graph_gib": g,
            "kv_cache_gib": _num(kv.group(1)) if kv else None}
