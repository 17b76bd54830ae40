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


MAX_LEN = 1 << 24                    # the --isl / --osl cap
MAX_WORKLOAD_ROWS = 10_000_000


def from_csv(path: Path) -> PlanWorkload:
    """Columns ``isl,osl`` (or ``input_len,output_len`` / ``prompt_tokens,completion_tokens``), read
    through the one capped line reader; lengths are ASCII integers in 1..2^24."""
    from ..inputs import CSV_CAP, csv_header, parse_number
    path = Path(path)
    header, reader = csv_header(path, "workload CSV", CSV_CAP)
    names = [("isl", "osl"), ("input_len", "output_len"), ("prompt_tokens", "completion_tokens")]
    cols = next((c for c in names if set(c) <= set(header)), None)
    if cols is None:
        raise AuditInputError(path, f"workload CSV needs columns isl,osl (got {', '.join(header)[:200]})")
    ii, oi = header.index(cols[0]), header.index(cols[1])
    n = 0
    s_i = s_o = 0
    max_i = max_len = 0
    try:
        for row in reader:
            if not any(c.strip() for c in row):
                continue
            at = f"line {reader.line_num}: "
            if len(row) <= max(ii, oi):
                raise AuditInputError(path, at + "workload CSV row has too few columns")
            i = int(parse_number(row[ii], path, at + cols[0], lo=1, hi=MAX_LEN, integer=True))
            o = int(parse_number(row[oi], path, at + cols[1], lo=1, hi=MAX_LEN, integer=True))
            n += 1
            if n > MAX_WORKLOAD_ROWS:
                raise AuditInputError(path, f"more than {MAX_WORKLOAD_ROWS:,} requests")
            s_i, s_o = s_i + i, s_o + o
            max_i, max_len = max(max_i, i), max(max_len, i + o)
    except csv.Error as exc:
        raise AuditInputError(path, f"line {reader.line_num}: malformed CSV: {exc}") from None
    if not n:
        raise AuditInputError(path, "workload CSV has no rows")
    return PlanWorkload(round(s_i / n), round(s_o / n), max_len, n, str(path), max_i)
