"""The lines vLLM / vLLM-Ascend print about the KV budget, formatted exactly as the engine formats
them (engine-vllm-ascend-runtime.md §3.5), so a user can diff them against a real log.

* ``NPUWorker.determine_available_memory``: "Available KV cache memory: %.2f GiB"
* ``kv_cache_utils.get_kv_cache_configs``: "GPU KV cache size: %s tokens" (``f"{n:,}"``) and
  "Maximum concurrency for %s tokens per request: %.2fx" (``f"{L:,}"``)
* ``NPUModelRunner.load_model``: "Loading model weights took %.4f GB" (bytes / 2^30)
* ``kv_cache_utils._check_enough_kv_cache_memory``: the two ValueErrors, with upstream's own
  "models's" and its doubled opening parenthesis; sizes through ``format_gib`` = round(b/2^30, 2).
"""
from __future__ import annotations

import re
from ...units import GiB
from ..upstream_lines import (DOCS as _DOCS, available_kv_line, format_gib, kv_cache_size_line,  # noqa: F401
                              max_concurrency_line, no_memory_error)





def weights_line(weights_bytes: float) -> str:
    return "Loading model weights took %.4f GB" % (weights_bytes / GiB)








def ffn_combine_window_error(rows: int, hidden: int, topk: int, needed_bytes: int, buffsize_mb: int) -> str:
    """dispatch_ffn_combine's tiling error when the HCCL window is too small (verbatim format,
    ``csrc/mc2/dispatch_ffn_combine/op_host/dispatch_ffn_combine_tiling.cpp:286-290``@182b75ea; its
    text says + 3MB, the check adds 10 MB); the profile run stops on it."""
    need_mb = -(-needed_bytes // (1024 * 1024))
    return (f"HCCL_BUFFSIZE is too SMALL, m = {rows}, k = {hidden}, topK = {topk} expected HCCL_BUFFSIZE is "
            f"((m * k * topK * sizeof(int8_t)) * 3 + 3MB)= {need_mb}MB, HCCL_BUFFSIZE={buffsize_mb}MB.")




def shortfall_error(max_model_len: int, needed_bytes: float, available_bytes: float, estimated_max_len: int) -> str:
    """The ValueError raised when one request of max_model_len does not fit."""
    est = (f"Based on the available memory, the estimated maximum model length is {estimated_max_len}. "
           if estimated_max_len > 0 else "")
    return (f"ValueError: To serve at least one request with the models's max seq len ({max_model_len}), "
            f"({format_gib(needed_bytes)} GiB KV cache is needed, which is larger than the available KV cache "
            f"memory ({format_gib(available_bytes)} GiB). {est}Try increasing `gpu_memory_utilization` or "
            f"decreasing `max_model_len` when initializing the engine. " + _DOCS)


# ---------------------------------------------------------------- reading the engine's memory lines
#: lines longer than this are not log lines (the parser stays linear and bounded on any input)
MAX_LINE = 1 << 16
_NUM = "0123456789.+-eE"


def _float_at(text: str, i: int) -> tuple[float | None, int]:
    """The number starting at ``text[i]`` (after spaces and an opening '(' or '`'), and the index past it."""
    n = len(text)
    while i < n and text[i] in " (`=":
        i += 1
    j = i
    while j < n and text[j] in _NUM:
        j += 1
    if j == i:
        return None, i
    try:
        return float(text[i:j].rstrip(".")), j
    except ValueError:
        return None, j


def _float_before(text: str, end: int) -> float | None:
    """The number that ends just before ``text[end]`` (spaces skipped)."""
    j = end
    while j > 0 and text[j - 1] == " ":
        j -= 1
    i = j
    while i > 0 and text[i - 1] in _NUM and j - i < 32:
        i -= 1
    if i == j:
        return None
    try:
        return float(text[i:j])
    except ValueError:
        return None


def _after(text: str, key: str, start: int = 0) -> tuple[float | None, int]:
    k = text.find(key, start)
    if k < 0:
        return None, start
    return _float_at(text, k + len(key))


def _before(text: str, key: str, start: int = 0) -> float | None:
    k = text.find(key, start)
    return None if k < 0 else _float_before(text, k)


#: the older "Memory profiling takes ..." forms: (form, marker that tells it, (key, label) of each figure)
_PROFILING_FORMS = (
    ("profiling", "torch peak memory increase:",
     (("non_kv_gib", "Total non KV cache memory:"), ("activation_gib", "torch peak memory increase:"),
      ("non_torch_gib", "non-torch forward increase memory:"), ("weights_gib", "weights memory:"))),
    ("profiling-v0", "model weights take",
     (("weights_gib", "model weights take"), ("non_torch_gib", "non_torch_memory takes"),
      ("activation_gib", "PyTorch activation peak memory takes"), ("kv_cache_gib", "reserved for KV Cache is"))),
)


def parse_breakdown(line: str) -> dict | None:
    """The engine's memory breakdown in one log line, as a dict of GiB figures, or None when the line
    is not one. Linear time: ``str.find`` / ``split`` only, no regular expressions.

    Forms (runtime-facts.md §3):

    * ``breakdown`` (vllm-ascend >= v0.19.1rc1, ``worker/worker.py:773-793``@182b75ea): "Free memory on
      device (F/T GiB) on startup. Desired GPU memory utilization is (u, R GiB). Actual usage: W GiB for
      weights, A GiB for peak activation, N GiB for non-torch memory, G GiB for NPU graph memory. ...
      Current KV cache memory: K GiB." (+ " After warmup: torch reserved memory r GiB, torch allocated
      memory a GiB." from v0.24.0rc1) -> free, total, util, requested, weights, activation, non_torch,
      graph, kv_cache (+ reserved_after_warmup, allocated_after_warmup; kv_cache_memory_fit/_full bytes)
    * ``profiling`` (upstream ``MemoryProfilingResult.__repr__``, DEBUG): "Memory profiling takes S
      seconds. Total non KV cache memory: X GiB; torch peak memory increase: A GiB; non-torch forward
      increase memory: N GiB; weights memory: W GiB." -> non_kv, activation, non_torch, weights
    * ``profiling-v0`` (older upstream INFO): "... model weights take W GiB; non_torch_memory takes N GiB;
      PyTorch activation peak memory takes A GiB; the rest of the memory reserved for KV Cache is K GiB."
    """
    if not isinstance(line, str) or len(line) > MAX_LINE:
        return None
    out: dict = {}
    k = line.find("Free memory on device")
    if k >= 0 and line.find("Actual usage:", k) >= 0:
        free, i = _float_at(line, k + len("Free memory on device"))
        if free is not None and i < len(line) and line[i] == "/":
            total, _ = _float_at(line, i + 1)
        else:
            total = None
        util, i = _after(line, "Desired GPU memory utilization is", k)
        req = None
        if util is not None and i < len(line) and line[i] == ",":
            req, _ = _float_at(line, i + 1)
        a = line.find("Actual usage:", k)
        out = {"form": "breakdown", "free_gib": free, "total_gib": total, "util": util, "requested_gib": req,
               "weights_gib": _before(line, " GiB for weights", a),
               "activation_gib": _before(line, " GiB for peak activation", a),
               "non_torch_gib": _before(line, " GiB for non-torch memory", a),
               "graph_gib": _before(line, " GiB for NPU graph memory", a)}
        fit, _ = _after(line, "--kv-cache-memory=", a)
        c = line.find("--kv-cache-memory=", a)
        full, _ = _after(line, "--kv-cache-memory=", c + 1) if c >= 0 else (None, 0)
        out["kv_cache_memory_fit_bytes"] = int(fit) if fit is not None else None
        out["kv_cache_memory_full_bytes"] = int(full) if full is not None else None
        out["kv_cache_gib"], _ = _after(line, "Current KV cache memory:", a)
        w = line.find("After warmup:", a)
        if w >= 0:
            out["reserved_after_warmup_gib"], _ = _after(line, "torch reserved memory", w)
            out["allocated_after_warmup_gib"], _ = _after(line, "torch allocated memory", w)
    elif line.find("Memory profiling takes") >= 0:
        for form, marker, labels in _PROFILING_FORMS:
            if line.find(marker) >= 0:
                out = {"form": form, **{key: _after(line, label)[0] for key, label in labels}}
                break
        if out.get("form") == "profiling-v0":
            t = line.find("total_gpu_memory")
            if t >= 0:
                out["total_gib"] = _after(line, "(", t)[0]
    if not out:
        return None
    needed = ("weights_gib", "activation_gib", "non_torch_gib")
    if any(out.get(key) is None for key in needed):
        return None
    return out


def parse_weights_line(line: str) -> float | None:
    """'Loading model weights took W GB' -> W (GiB, the engine divides by 2^30), else None."""
    if not isinstance(line, str) or len(line) > MAX_LINE:
        return None
    return _after(line, "Loading model weights took")[0]


def parse_available_kv_line(line: str) -> float | None:
    """'Available KV cache memory: K GiB' -> K, else None."""
    if not isinstance(line, str) or len(line) > MAX_LINE:
        return None
    return _after(line, "Available KV cache memory:")[0]


# ---------------------------------------------------------------- reading them back (audit align)
#: a printed number: digits with optional thousands commas and decimals, bounded (no backtracking)
NUM = r"[-+]?(?:\d{1,3}(?:,\d{3}){1,6}|\d{1,20})(?:\.\d{1,12})?"
_SP = r"[ \t]{0,8}"
#: the per-worker weights lines this engine (and the upstream runner it may run) prints:
#: (pattern with groups number, unit[, seconds], form, marker substring tested first)
WEIGHTS_PATTERNS: tuple[tuple[re.Pattern, str, str], ...] = (
    (re.compile(rf"Loading model weights took ({NUM}){_SP}(GiB|GB|MiB|MB)\b", re.ASCII), "ascend-v1", "took"),
    (re.compile(rf"Model loading took ({NUM}){_SP}(GiB|GB|MiB|MB)(?: memory)? and ({NUM}) ?s(?:econds)?", re.ASCII),
     "upstream", "took"),
)
