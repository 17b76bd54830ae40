"""The alpha-beta collective cost (formulas in ``auditor.perf.collectives``' docstring) with plain
float arguments, so the perf core can call it from inside njit loops over layers and ops.

Kind codes: ``kinds.ALL_REDUCE``, ``ALL_GATHER``, ``REDUCE_SCATTER``, ``ALL_TO_ALL`` (``recv`` used
only by all-to-all). ``beta`` is the effective bandwidth (bytes/s, already scaled by comm efficiency and
FULL_MESH share), ``alpha`` the latency (s), ``static_s`` the per-collective launch cost (s).
"""
from __future__ import annotations

import math

from numba import njit

from .kinds import ALL_GATHER, ALL_REDUCE, ALL_TO_ALL, REDUCE_SCATTER

__all__ = ["ALL_REDUCE", "ALL_GATHER", "REDUCE_SCATTER", "ALL_TO_ALL", "collective_wire_s", "collective_time_s"]


@njit(cache=True)
def collective_wire_s(kind: int, m: float, n: float, beta: float, alpha: float, recv: float) -> float:
    """Wire time only; the formulas and their source are listed in auditor.perf.collectives."""
    if n <= 1.0:
        return 0.0
    lg = math.log2(n)
    startup = min((n - 1.0) * alpha, lg * alpha)
    if kind == ALL_REDUCE:
        ring = 2.0 * (n - 1.0) * alpha + 2.0 * (n - 1.0) * m / (n * beta)
        tree = 2.0 * lg * alpha + 2.0 * m / beta
        return min(ring, tree)
    if kind == ALL_GATHER:
        return startup + (n - 1.0) * m / beta
    if kind == REDUCE_SCATTER:
        return startup + (n - 1.0) * m / (n * beta)
    if kind == ALL_TO_ALL:
        return startup + max(m, recv) / beta
    return math.nan


@njit(cache=True)
def collective_time_s(kind: int, m: float, n: float, beta: float, alpha: float, recv: float,
                      static_s: float) -> float:
    """Wire time plus the static launch cost; zero for a group of one rank."""
    if n <= 1.0:
        return 0.0
    return collective_wire_s(kind, m, n, beta, alpha, recv) + static_s
