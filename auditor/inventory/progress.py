"""A minimal stderr progress line for long header scans (no third-party dependency).

Scanning ~100 shards of a hub checkpoint on a network filesystem can take seconds; a single
``\\r``-rewritten line tells the user the tool is alive without polluting logs (it is only shown
on a terminal).
"""
from __future__ import annotations

import sys
import time
from typing import TextIO


class ProgressLine:
    """``label  12/100 files  3.4 MB`` rewritten in place; throttled to ~10 redraws a second."""

    def __init__(self, total: int, label: str = "scanning headers", stream: TextIO | None = None,
                 enabled: bool = True, min_interval: float = 0.1, unit: str = "files"):
        self.total = total
        self.unit = unit
        self.label = label
        self.stream = stream if stream is not None else sys.stderr
        self.enabled = enabled
        self.min_interval = min_interval
        self.done = 0
        self.nbytes = 0
        self._last = 0.0
        self._width = 0

    def update(self, nbytes: int = 0, step: int = 1) -> None:
        self.done += step
        self.nbytes += nbytes
        now = time.monotonic()
        if self.enabled and (now - self._last >= self.min_interval or self.done >= self.total):
            self._last = now
            self._draw()

    def _draw(self) -> None:
        text = f"{self.label} {self.done}/{self.total} {self.unit}"
        if self.nbytes:
            text += f" {self.nbytes / 1e6:.1f} MB"
        pad = max(0, self._width - len(text))
        self._width = len(text)
        self.stream.write("\r" + text + " " * pad)
        self.stream.flush()

    def close(self) -> None:
        """Erase the line so the report that follows starts on a clean terminal line."""
        if self.enabled and self._width:
            self.stream.write("\r" + " " * self._width + "\r")
            self.stream.flush()
        self._width = 0

    def __enter__(self) -> "ProgressLine":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def want_progress(requested: bool | None, n_items: int, stream: TextIO | None = None,
                  threshold: int = 8) -> bool:
    """Explicit True/False wins; otherwise only on a terminal and only for more than ``threshold`` items."""
    if requested is not None:
        return requested
    stream = stream if stream is not None else sys.stderr
    try:
        tty = stream.isatty()
    except (AttributeError, ValueError):
        tty = False
    return bool(tty) and n_items > threshold
