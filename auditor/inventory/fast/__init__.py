"""Accelerators of the inventory readers: the same answer as the exact reader, sooner, or None.

Why a seam: on a 180,000-tensor checkpoint the exact readers (``inventory/header.py``,
``index.py``, ``quantdesc.py``, ``shards.py``, ``scan.py``) spend most of their time building one
Python object per tensor. Machine-written files share byte-exact layouts, so the accelerators
here read them as numpy columns of byte positions instead (measured: 0.3-0.7 s of a 1-2 s
``audit memory``). Keeping them behind one seam keeps the exact readers the reference.

Contract, for every function decorated with ``accelerator``:
* it returns exactly what the exact reader would produce for the same input, or None;
* None means "declined" (an unusual layout, an escape, damage, a hash tie, ``AUDIT_EXACT``):
  the caller then runs the exact reader, which also words every error;
* it never raises for bad input and never judges a file on its own (an unforeseen exception
  inside one is turned into a decline and counted in ``FAILED``, which the tests check).

``AUDIT_EXACT=1`` in the environment makes every accelerator decline, so the exact readers
alone produce every report (CI runs the inventory and memory tests both ways).
"""
from __future__ import annotations

import functools
import os
from collections import Counter
from typing import Callable, TypeVar

EXACT_ENV = "AUDIT_EXACT"

F = TypeVar("F", bound=Callable)

# accelerator name -> calls that returned an answer (not None): lets a test prove the fast mode
# really ran the accelerators it compares against the exact readers
ANSWERED: Counter[str] = Counter()
# accelerator name -> calls that raised instead of declining (a bug; the caller still got None)
FAILED: Counter[str] = Counter()


def exact_only() -> bool:
    """True when ``AUDIT_EXACT`` is set to anything but "" or "0" (read on every call, so a test
    can switch modes with monkeypatch)."""
    return os.environ.get(EXACT_ENV, "") not in ("", "0")


def accelerator(fn: F) -> F:
    """Mark ``fn`` as an accelerator: it declines (returns None) when ``AUDIT_EXACT`` is set."""
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if exact_only():
            return None
        try:
            out = fn(*args, **kwargs)
        except (IndexError, KeyError, TypeError, ValueError, OverflowError, MemoryError):
            # a layout no one foresaw: declining is always correct (the exact reader runs);
            # counted so the tests that feed hostile input can insist it never happens
            FAILED[wrapper.__qualname__] += 1
            return None
        if out is not None:
            ANSWERED[wrapper.__qualname__] += 1
        return out
    wrapper.accelerator = True      # type: ignore[attr-defined]
    wrapper.__qualname__ = f"{fn.__module__.rsplit('.', 1)[-1]}.{fn.__qualname__}"
    return wrapper  # type: ignore[return-value]
