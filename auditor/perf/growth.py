"""Time per op class across cached-context lengths: which ops carry the growth from 4k to 128k.

Why: a per-op table at one context cannot show a trend, and the trend is what disagrees with
long-context measurements. For each context L this evaluates a prefill chunk of ``tokens`` new
tokens on ``L - tokens`` cached ones (the whole prompt when L <= tokens) and a decode step at
context L, then sums the step time per op class, the collectives and the host overhead.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from typing import Any

from auditor_kernels import kinds as K

from ..context import DeploymentContext
from .api import CONTEXT_KINDS, Workload, evaluate_phase

COLLECTIVES, HOST = "collectives", "host"


@dataclass
class Growth:
    """ms per step by class and context, per phase; ``growing`` lists the context-dependent classes."""

    contexts: list[int]
    tokens: int
    mtp: int
    batch: int
    phases: dict[str, dict[str, list[float]]]      # phase -> class -> ms per context
    totals: dict[str, list[float]]                 # phase -> ms per context
    growing: set[str]

    def to_json(self) -> dict[str, Any]:
        return {"contexts": self.contexts, "tokens": self.tokens, "mtp": self.mtp, "batch": self.batch,
                "context_dependent": sorted(self.growing), "totals_ms": self.totals,
                "by_class_ms": self.phases}


def prefill_workload(length: int, tokens: int, batch: int, mtp: int) -> Workload:
    """A chunk of ``tokens`` new tokens ending at context ``length`` (the whole prompt if shorter)."""
    q = min(tokens, length)
    return Workload("prefill", q, length - q, batch, mtp)


def context_growth(dep: DeploymentContext, contexts: list[int], tokens: int, batch: int, mtp: int,
                   cache: Any = "bf16", phases: tuple[str, ...] = ("prefill", "decode")) -> Growth:
    """Step time per op class at each context (see the module docstring)."""
    by_phase: dict[str, dict[str, list[float]]] = {}
    totals: dict[str, list[float]] = {}
    growing: set[str] = set()
    for phase in phases:
        rows: dict[str, list[float]] = defaultdict(lambda: [0.0] * len(contexts))
        totals[phase] = []
        for j, length in enumerate(contexts):
            wl = (prefill_workload(length, tokens, batch, mtp) if phase == "prefill"
                  else Workload("decode", tokens, length, batch, mtp))
            ph = evaluate_phase(dep, wl, "repetition", cache=cache)
            o = ph.op_out
            for i, op in enumerate(ph.program.ops):
                if op.kind == K.ZERO:
                    continue
                rows[op.cls][j] += float(o[i, K.OUT_TIME] * o[i, K.OUT_COUNT]) * 1e3
                if op.kind in CONTEXT_KINDS:
                    growing.add(op.cls)
            rows[COLLECTIVES][j] += ph.comm_ms
            rows[HOST][j] += ph.host_ms
            totals[phase].append(ph.time_ms)
        by_phase[phase] = dict(rows)
    return Growth(list(contexts), tokens, mtp, batch, by_phase, totals, growing)


__all__ = ["Growth", "context_growth", "prefill_workload", "COLLECTIVES", "HOST"]
