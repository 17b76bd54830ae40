"""The one layer-range formatter: [0, 1, 2, 5, 7, 8] -> '0-2,5,7-8' (memory, perf and findings)."""
from __future__ import annotations

from collections.abc import Iterable


def ranges(values: Iterable[int | None]) -> str:
    """Sorted distinct integers as comma-separated runs; ``None`` entries (model-level items) are
    skipped, and nothing left gives '-'."""
    xs = sorted({x for x in values if x is not None})
    if not xs:
        return "-"
    parts, start, prev = [], xs[0], xs[0]
    for x in xs[1:] + [None]:
        if x is not None and x == prev + 1:
            prev = x
            continue
        parts.append(f"{start}" if start == prev else f"{start}-{prev}")
        if x is not None:
            start = prev = x
    return ",".join(parts)
