"""vLLM-Ascend, the engine family: everything it decides, one module per concern.

``versions`` (one row per release), ``placement`` and ``materializer`` + ``rules`` (what a rank
holds), ``kv`` (its KV cache), ``activation``, ``hccl`` and ``budget_terms`` (the rest of the HBM
budget), ``loglines`` (what it prints), ``launch`` (what it takes), ``kernel_paths`` and
``profiler`` (its kernels). ``engine.VllmAscend`` binds them as hooks. Copy this folder for
another engine family. Imports only generic modules (never another engine folder).
"""
from .engine import VllmAscend

__all__ = ["VllmAscend"]
