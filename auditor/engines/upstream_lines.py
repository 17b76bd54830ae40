"""The lines upstream vLLM's KV-cache code prints, whichever platform plugin runs it.

vLLM-Ascend and vLLM on CUDA share ``vllm/v1/core/kv_cache_utils.py`` and ``vllm/utils/mem_utils.py``:
"Available KV cache memory", "GPU KV cache size", "Maximum concurrency" and the no-memory error are
the same text in both, so both families' ``loglines`` take them from here (each family keeps the
lines that are its own: the weights line, its kernels' errors, its breakdown form)."""
from __future__ import annotations

from ..units import GiB

DOCS = "See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details."


def format_gib(b: float) -> str:
    """``vllm.utils.mem_utils.format_gib``: round(b / 2^30, 2) printed with str()."""
    return str(round(b / GiB, 2))


def available_kv_line(kv_available_bytes: float) -> str:
    return "Available KV cache memory: %.2f GiB" % (kv_available_bytes / GiB)


def kv_cache_size_line(kv_tokens: int) -> str:
    return "GPU KV cache size: %s tokens" % f"{int(kv_tokens):,}"


def max_concurrency_line(max_model_len: int, concurrency: float) -> str:
    return "Maximum concurrency for %s tokens per request: %.2fx" % (f"{int(max_model_len):,}", concurrency)


def no_memory_error() -> str:
    return ("ValueError: No available memory for the cache blocks. Try increasing `gpu_memory_utilization` "
            "when initializing the engine. " + DOCS)
