"""Speculative-decoding acceptance as measured: per draft position, by model family and drafter.

Why: tokens per decode step decide TPOT and throughput as much as the step time does, and one assumed
per-draft acceptance (0.7, 2.53 tokens per step with MTP 3) sat 20 % under the one public GLM-5 MTP 3
measurement (3.16), so the host constants fitted around it absorbed the error. A default here is a
public measurement with its source, or, where none is published, named as an assumption.

vLLM reports acceptance per position as the share of drafts whose position-i token is accepted
(``num_accepted_tokens_per_pos[i] / num_drafts``): an unconditional rate ``p_i`` (non-increasing, since
draft i counts only after drafts 1..i-1 were kept), and the mean acceptance length is ``1 + sum p_i``.
The simulation samples each step's chain with the conditional rates ``p_i / p_{i-1}``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import AuditInputError


@dataclass(frozen=True)
class Acceptance:
    """Unconditional acceptance rate per draft position (``rates[0]`` for draft 1), and where it is from."""

    rates: tuple[float, ...]
    source: str
    per_draft: float | None = None      # the geometric form: p_i = a^i (one value given or measured)

    def rate(self, i: int) -> float:
        """p_i (1-based); past the given positions the last conditional ratio continues."""
        if self.per_draft is not None:
            return self.per_draft ** i
        if i <= len(self.rates):
            return self.rates[i - 1]
        last = self.rates[-1] / (self.rates[-2] if len(self.rates) > 1 else 1.0)
        return self.rates[-1] * last ** (i - len(self.rates))

    def tokens_per_step(self, k: int) -> float:
        """Mean tokens a request gains per decode step with K drafts: 1 + p_1 + ... + p_K."""
        return 1.0 + sum(self.rate(i) for i in range(1, int(k) + 1))

    def conditional(self, k: int) -> np.ndarray:
        """P(draft i kept | drafts 1..i-1 kept) for i = 1..max(K, 1): what the simulation samples."""
        out, prev = [], 1.0
        for i in range(1, max(int(k), 1) + 1):
            p = self.rate(i)
            out.append(min(1.0, p / prev) if prev > 0 else 0.0)
            prev = p
        return np.array(out, dtype=np.float64)

    def equivalent(self, k: int) -> float:
        """The per-draft a whose 1 + a + ... + a^K equals ``tokens_per_step(K)`` (perf, sweep and plan
        take one a)."""
        if self.per_draft is not None or k <= 0:
            return self.per_draft if self.per_draft is not None else self.rate(1)
        return geometric(self.tokens_per_step(k), k)

    def text(self, k: int) -> str:
        if self.per_draft is not None:
            head = f"{self.per_draft:.3g} per draft"
        else:
            head = "per position " + "/".join(f"{self.rate(i):.2f}" for i in range(1, max(int(k), 1) + 1))
        return f"{head} = {self.tokens_per_step(k):.2f} tokens/step at K={k} ({self.source})"


def plan_value(acc: Acceptance) -> "float | Acceptance":
    """What sweep and plan search with: one per-draft a where the acceptance is geometric (the form their
    grids have always taken), else the per-position measurement itself, so each K of a grid gets its own
    1 + p_1 + ... + p_K (DSpark's goldens are not geometric: a = p_1 would put 6.3 tokens a step at K = 7
    where they give 4.57)."""
    return acc.per_draft if acc.per_draft is not None else acc


def value_text(value: "float | Acceptance") -> str:
    """A plan's acceptance as its header prints it."""
    if isinstance(value, Acceptance):
        return "per position " + "/".join(f"{p:.2f}" for p in value.rates)
    return f"{value:g}"


def value_json(value: "float | Acceptance") -> "float | list[float]":
    return list(value.rates) if isinstance(value, Acceptance) else value


def geometric(tokens: float, k: int) -> float:
    """The a in (0, 1] with 1 + a + ... + a^K = ``tokens`` (bisection; ``tokens`` in (1, K + 1])."""
    if not 1.0 < tokens <= k + 1:
        raise AuditInputError("--mtp-acceptance", f"{tokens:g} tokens per step is not in (1, {k + 1}] for K={k}")
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        if sum(mid ** i for i in range(k + 1)) < tokens:
            lo = mid
        else:
            hi = mid
    return (lo + hi) / 2


#: vLLM-Ascend issue #9803 (published README section E): GLM-5 W4A8 with MTP 3 logs a mean acceptance
#: length of 3.16 tokens per step. One mean figure: the split over positions is taken geometric.
GLM_MTP = Acceptance((), "GLM-5 MTP 3: mean acceptance length 3.16, vLLM-Ascend issue #9803; geometric split "
                     "over positions assumed", per_draft=geometric(3.16, 3))
#: DSpark per-position goldens (the CI passes at >= golden - 0.03): vLLM-Ascend
#: tests/e2e/.../spec_decode/test_dspark_deepseekv4.py:38-53, 103-106 @182b75ea, K = 7, DSA-CP on
#: (spec/model-deepseek-v4.md, "DSpark acceptance goldens")
DSPARK = Acceptance((0.88, 0.74, 0.58, 0.49, 0.40, 0.30, 0.18),
                    "DeepSeek-V4-Flash DSpark goldens, test_dspark_deepseekv4.py:38-53@182b75ea")
#: no public measurement for this family and drafter: audit's earlier single assumption
ASSUMED = Acceptance((), "assumed: no public measurement for this model family", per_draft=0.7)


def default_acceptance(spec: Any, drafter: str = "mtp") -> Acceptance:
    """The measured default for a model family and drafter (``ASSUMED`` where none is published)."""
    name = str(getattr(spec, "name", spec)).lower()
    if drafter == "dspark":
        return DSPARK
    if name.startswith("glm"):
        return GLM_MTP
    return ASSUMED


def given(value: float | tuple[float, ...]) -> Acceptance:
    """``--mtp-acceptance A`` (today's per-draft a) or ``p1,p2,...`` (per-position rates, non-increasing)."""
    if isinstance(value, tuple):
        if not value or any(not 0.0 < p <= 1.0 for p in value) or any(b > a for a, b in zip(value, value[1:])):
            raise AuditInputError("--mtp-acceptance", "per-position rates must be in (0, 1] and non-increasing")
        return Acceptance(tuple(float(p) for p in value), "given per position (--mtp-acceptance)")
    return Acceptance((), "given (--mtp-acceptance)", per_draft=float(value))


def resolve(spec: Any, value: Any = None, drafter: str | None = None, engine: Any = None) -> Acceptance:
    """What a command uses: the user's value, else the engine's default for the family
    (``Engine.measured_acceptance``: a measurement is one engine's), else the family's default here.
    ``drafter`` None: the spec's own (``ModelSpec.drafter``; a model name string drafts with MTP)."""
    if drafter is None:
        drafter = getattr(spec, "drafter", "mtp")
    if isinstance(value, Acceptance):
        return value
    if value is not None:
        return given(value)
    if engine is not None:
        from ..engines.registry import as_engine
        measured = as_engine(engine).measured_acceptance(spec, drafter)
        if measured is not None:
            tokens, k, source = measured
            return ASSUMED if tokens is None else Acceptance((), source, per_draft=geometric(tokens, k))
    return default_acceptance(spec, drafter)


__all__ = ["Acceptance", "plan_value", "value_text", "value_json", "geometric", "GLM_MTP", "DSPARK", "ASSUMED", "default_acceptance", "given", "resolve"]
