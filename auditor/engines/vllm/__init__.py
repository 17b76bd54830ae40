"""Upstream vLLM on NVIDIA GPUs (CUDA), the engine family ``vllm``: everything it decides, one module
per concern.

``versions`` (one row per release), ``placement`` and ``materializer`` + ``rules`` (what a rank
holds), ``kv`` (its KV cache page math), ``budget`` (its KV budget formula), ``estimates`` (the
UNCONFIRMED sizes of the profiled terms), ``loglines`` (what it prints), ``launch`` (what it
takes). ``engine.Vllm`` binds them as hooks. Imports only generic modules (never another engine
folder).
"""
from .engine import Vllm

__all__ = ["Vllm"]
