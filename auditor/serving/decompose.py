"""What single-request throughput rows of one deployment say about its step times, before any model.

Why: a CI case at concurrency 1 (``batch_size: 1``, every prompt sent at once, so one request at a time)
publishes only output tokens/s, yet ``osl / (tok/s)`` is one request's whole time, ``TTFT + (osl - 1) x
TPOT``. With chunked prefill (chunks of ``max_num_batched_tokens``) the TTFT is a price per chunk plus a
price that grows with the context each chunk attends to, so three or more such rows of one launch fix
three numbers: the chunk price at no context, its growth per 1k tokens of context, and the TPOT. Solving
for them says whether the rows agree with each other and with another row of the same launch, and where
audit's own times differ, without fitting anything to the model (``benchmarks/bench_ci_corpus.py``).

The chunk sizes follow vLLM's scheduler: a prompt of ``isl`` tokens runs in ``ceil(isl / chunk)`` steps,
each attending to the tokens before it plus its own; a partial last chunk is priced in proportion.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class SingleRequestRow:
    """One concurrency-1 row: prompt and output lengths and the measured output tokens/s."""

    isl: int
    osl: int
    tok_s: float


@dataclass(frozen=True)
class StepPrices:
    """The three numbers the rows fix, and how far each row is from them (relative, time per request)."""

    chunk_s: float          # one full chunk's time at no context
    growth_s_per_k: float   # added to a chunk's time per 1,024 tokens of context before it
    tpot_s: float           # one output token after the first
    residuals: tuple[float, ...]

    def ttft_s(self, isl: int, chunk: int) -> float:
        n_full, n_ctx = _chunk_terms(isl, chunk)
        return self.chunk_s * n_full + self.growth_s_per_k * n_ctx


def _chunk_terms(isl: int, chunk: int) -> tuple[float, float]:
    """(full-chunk equivalents, sum over chunks of the context before each, in units of 1,024 tokens)."""
    if isl < 1 or chunk < 1:
        raise ValueError(f"isl {isl} and chunk {chunk} must be positive")
    full, ctx, done = 0.0, 0.0, 0
    while done < isl:
        size = min(chunk, isl - done)
        full += size / chunk
        ctx += done / 1024 * size / chunk       # a partial chunk's growth term in proportion, as its price
        done += size
    return full, ctx


def decompose(rows: list[SingleRequestRow], chunk: int) -> StepPrices:
    """The chunk price, its growth and the TPOT that the rows imply (least squares on per-request time;
    exact for three independent rows). Raises ValueError when the rows cannot separate the three
    (fewer than three, or prompts that do not vary the chunk count and context independently of osl)."""
    if len(rows) < 3:
        raise ValueError(f"{len(rows)} rows: three or more fix chunk price, growth and TPOT")
    a = np.zeros((len(rows), 3))
    t = np.zeros(len(rows))
    for i, r in enumerate(rows):
        if r.osl < 1 or not r.tok_s > 0:
            raise ValueError(f"row {i}: osl {r.osl} and tok/s {r.tok_s} must be positive")
        a[i] = (*_chunk_terms(r.isl, chunk), r.osl - 1)
        t[i] = r.osl / r.tok_s
    if np.linalg.matrix_rank(a) < 3:
        raise ValueError("the rows do not separate chunk price, growth and TPOT (their lengths are not independent)")
    x, *_ = np.linalg.lstsq(a, t, rcond=None)
    res = tuple(float(v) for v in (a @ x - t) / t)
    return StepPrices(float(x[0]), float(x[1]), float(x[2]), res)


__all__ = ["SingleRequestRow", "StepPrices", "decompose"]
