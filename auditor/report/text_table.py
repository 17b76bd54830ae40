"""Fixed-width text tables for tables too long for tabulate (177,000 tensor rows: tabulate needs
~10 s, one ``str.format`` per row about 0.3 s).

The output is exactly tabulate's ``simple`` (text) and ``github`` (markdown) layouts with every
cell left-aligned (``disable_numparse=True``), so short and long tables of a report look alike.
"""
from __future__ import annotations

from typing import Callable, Sequence

import numpy as np

CHUNK_ROWS = 20_000


def tabulate(*args, **kwargs) -> str:
    """``tabulate.tabulate``, imported on the first table: the package (and the importlib.metadata,
    email and socket it pulls in, ~15-25 ms) is not loaded by a report written as JSON or CSV."""
    from tabulate import tabulate as _tabulate
    return _tabulate(*args, **kwargs)


def fixed_width_table(headers: Sequence[str], columns: Sequence[Sequence | np.ndarray], fmt: str = "table",
                      on_rows: Callable[[int], None] | None = None) -> str:
    """Render ``columns`` (equal-length sequences of cells, any type: str() is applied) under
    ``headers``; ``fmt`` is "table" (tabulate simple) or "markdown" (tabulate github).
    ``on_rows(n)`` is called after every chunk of ``n`` rows is laid out (a progress line)."""
    cols = [_cells(c) for c in columns]
    n = len(cols[0]) if cols else 0
    # tabulate pads every header by at least 2 (MIN_PADDING)
    widths = [max([len(h) + 2] + ([max(map(len, c))] if n else [])) for h, c in zip(headers, cols)]
    if fmt == "markdown":
        line = "| " + " | ".join(f"{{:<{w}}}" for w in widths) + " |"
        rule = "|" + "|".join("-" * (w + 2) for w in widths) + "|"
    else:    # tabulate leaves no trailing blanks: the last column is not padded, lines are stripped
        line = "  ".join([f"{{:<{w}}}" for w in widths[:-1]] + ["{}"])
        rule = "  ".join("-" * w for w in widths)
    parts = [line.format(*headers), rule]
    render = line.format
    for start in range(0, n, CHUNK_ROWS):
        stop = min(n, start + CHUNK_ROWS)
        lines = [render(*row) for row in zip(*(c[start:stop] for c in cols))]
        parts.append("\n".join(lines if fmt == "markdown" else [ln.rstrip() for ln in lines]))
        if on_rows is not None:
            on_rows(stop - start)
    return "\n".join(parts)


def _cells(col: Sequence | np.ndarray) -> list[str]:
    if isinstance(col, np.ndarray) and col.dtype.kind == "U":
        return col.tolist()
    cells = col.tolist() if isinstance(col, np.ndarray) else list(col)
    if set(map(type, cells)) <= {str}:
        return cells
    return ["" if x is None else str(x) for x in cells]
