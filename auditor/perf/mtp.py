"""Speculative decoding arithmetic: how MTP acceptance turns decode steps into tokens.

A step verifies 1 + K tokens per request; draft i is kept only if drafts 1..i-1 were, so with a
per-draft acceptance a the expected tokens per step are 1 + a + a^2 + ... + a^K (docs/long-context-
kernels.md §5). Shared by ``audit perf`` (tokens/s of a step) and ``audit plan`` (throughput)."""
from __future__ import annotations

import numpy as np


def expected_tokens(k, a):
    """Tokens per request per decode step with K drafts of acceptance a: sum_{i<=K} a^i; ``a`` may also be
    a measured per-position ``perf.acceptance.Acceptance`` (1 + p_1 + ... + p_K)."""
    if hasattr(a, "tokens_per_step"):
        kk = np.asarray(k, dtype=np.float64)
        if kk.ndim == 0:
            return float(a.tokens_per_step(int(kk)))
        table = {int(v): a.tokens_per_step(int(v)) for v in np.unique(kk)}
        return np.array([table[int(v)] for v in kk.ravel()], dtype=np.float64).reshape(kk.shape)
    k = np.asarray(k, dtype=np.float64)
    out = (1 - a ** (k + 1)) / (1 - a) if a < 1 else k + 1
    return float(out) if out.ndim == 0 else out


__all__ = ["expected_tokens"]
