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

GiB = 1 << 30
_DOCS = "See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details."


def format_gib(b: float) -> str:
    """Upstream ``vllm.utils.mem_utils.format_gib``: round(b / 2^30, 2) printed with str()."""
    return str(round(b / GiB, 2))


def weights_line(weights_bytes: float) -> str:
    return "Loading model weights took %.4f GB" % (weights_bytes / GiB)


def available_kv_line(kv_available_bytes: float) -> str:
    return "Available KV cache memory: %.2f GiB" % (kv_available_bytes / GiB)


def kv_cache_size_line(kv_tokens: int) -> str:
    return "GPU KV cache size: %s tokens" % f"{int(kv_tokens):,}"


def max_concurrency_line(max_model_len: int, concurrency: float) -> str:
    return "Maximum concurrency for %s tokens per request: %.2fx" % (f"{int(max_model_len):,}", concurrency)


def no_memory_error() -> str:
    return ("ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` "
            "when initializing the engine. " + _DOCS)


def shortfall_error(max_model_len: int, needed_bytes: float, available_bytes: float, estimated_max_len: int) -> str:
    """The ValueError raised when one request of max_model_len does not fit."""
    est = (f"Based on the available memory, the estimated maximum model length is {estimated_max_len}. "
           if estimated_max_len > 0 else "")
    return (f"ValueError: To serve at least one request with the models's max seq len ({max_model_len}), "
            f"({format_gib(needed_bytes)} GiB KV cache is needed, which is larger than the available KV cache "
            f"memory ({format_gib(available_bytes)} GiB). {est}Try increasing `gpu_memory_utilization` or "
            f"decreasing `max_model_len` when initializing the engine. " + _DOCS)
