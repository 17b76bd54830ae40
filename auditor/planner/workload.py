"""The workload a plan serves: mean input/output lengths (``--isl/--osl``) or a CSV of requests."""
from __future__ import annotations

import csv
from dataclasses import dataclass
from pathlib import Path

from ..errors import AuditInputError


@dataclass(frozen=True)
class PlanWorkload:
    isl: int            # mean input length (prefill)
    osl: int            # mean output length (decode steps per request x accepted tokens)
    max_len: int        # longest request (isl + osl): the max_model_len to configure
    requests: int = 1
    source: str = "--isl/--osl"
    longest_isl: int = 0    # longest prompt (a P node's max_model_len is this + 1); 0: isl

    @property
    def max_isl(self) -> int:
        return self.longest_isl or self.isl

    @property
    def mean_context(self) -> int:
        """Steady-state decode sees, on average, the prompt plus half the output."""
        return self.isl + self.osl // 2


def from_lengths(isl: int, osl: int) -> PlanWorkload:
    if isl < 1 or osl < 1:
        raise AuditInputError("--isl/--osl", f"lengths must be at least 1, got {isl}/{osl}")
    return PlanWorkload(isl, osl, isl + osl)


def from_csv(path: Path) -> PlanWorkload:
    """Columns ``isl,osl`` (or ``input_len,output_len`` / ``prompt_tokens,completion_tokens``)."""
    try:
        rows = list(csv.DictReader(path.read_text(encoding="utf-8").splitlines()))
    except (OSError, UnicodeDecodeError) as exc:
        raise AuditInputError(path, f"cannot read workload CSV: {exc}") from None
    if not rows:
        raise AuditInputError(path, "workload CSV has no rows")
    names = [("isl", "osl"), ("input_len", "output_len"), ("prompt_tokens", "completion_tokens")]
    cols = next((c for c in names if set(c) <= set(rows[0])), None)
    if cols is None:
        raise AuditInputError(path, f"workload CSV needs columns isl,osl (got {', '.join(rows[0])})")
    try:
        pairs = [(int(r[cols[0]]), int(r[cols[1]])) for r in rows]
    except (TypeError, ValueError):
        raise AuditInputError(path, "workload CSV lengths must be integers") from None
    if any(i < 1 or o < 1 for i, o in pairs):
        raise AuditInputError(path, "workload CSV lengths must be at least 1")
    isl = round(sum(i for i, _ in pairs) / len(pairs))
    osl = round(sum(o for _, o in pairs) / len(pairs))
    return PlanWorkload(isl, osl, max(i + o for i, o in pairs), len(pairs), str(path), max(i for i, _ in pairs))
