"""Collective communication cost: the alpha-beta model per interconnect tier.

This is the readable reference; ``auditor_kernels.collectives`` is the numba twin used in the hot
loop, and the tests check that both agree. Formulas follow TensorCast's ``comm_analytic.py`` as
summarised in the anchor (§4), with M = input bytes per rank, n = group size, alpha = link latency
and beta = effective link bandwidth (peak x comm efficiency, scaled for FULL_MESH groups):

    all-reduce      min(ring 2(n-1)a + 2(n-1)M/(n b),  tree 2 log2(n) a + 2M/b)
    all-gather      min((n-1)a, log2(n) a) + (n-1)M/b
    reduce-scatter  min((n-1)a, log2(n) a) + (n-1)M/(n b)
    all-to-all      min((n-1)a, log2(n) a) + max(sent, recv)/b

A collective launch adds the device's static comm cost (``static_us['comm']``, 10 us on Ascend).
A group of one rank costs nothing: no collective is issued.
"""
from __future__ import annotations

import math
from typing import TYPE_CHECKING

from ..errors import AuditInputError

if TYPE_CHECKING:
    from ..devices import Device

KINDS = ("all_reduce", "all_gather", "reduce_scatter", "all_to_all")


def group_tier(grid: tuple[int, ...], group_size: int, stride: int = 1) -> int:
    """Tier (index into ``grid``/``tiers``) a group of ``group_size`` ranks spaced ``stride`` apart
    communicates over: the outermost grid dimension in which its ranks differ.

    Ranks are numbered row-major over ``grid`` (innermost dimension fastest) and groups are
    aligned, so ranks 0, s, ..., (n-1)s differ in dimension d exactly when (n-1)s reaches the
    number of ranks inside one step of d. A3 grid (48, 8, 2): TP2 -> tier 2 (die pair), TP16 ->
    tier 1 (pod), 32 ranks -> tier 0. A single rank is given the innermost tier (it never talks).
    """
    if group_size < 1 or stride < 1:
        raise AuditInputError("group", f"group size and stride must be positive, got {group_size}, {stride}")
    span = (group_size - 1) * stride
    inner = 1
    inner_sizes = []
    for g in reversed(grid):
        inner_sizes.append(inner)
        inner *= g
    inner_sizes.reverse()                  # inner_sizes[d] = ranks in one step of dimension d
    for d, step in enumerate(inner_sizes):
        if span >= step:
            return d
    return len(grid) - 1


def tier_link(device: "Device", tier: int, group_size: int) -> tuple[float, float]:
    """(effective bytes/s, latency s) of ``tier`` for a group of ``group_size`` ranks.

    Effective bandwidth = peak x ``efficiency['comm']``; on a FULL_MESH tier a group of n out of
    the dimension's D ranks reaches the others over n-1 of its D-1 direct links, so the bandwidth
    scales by (n-1)/(D-1).
    """
    bw, lat = device.tiers[tier]
    bw *= device.efficiency["comm"]
    topo = device.tier_topologies[tier] if tier < len(device.tier_topologies) else "SWITCH"
    dim = device.grid[tier]
    if topo == "FULL_MESH" and dim > 1 and group_size > 1:
        bw *= (min(group_size, dim) - 1) / (dim - 1)
    return bw, lat


def _startup(n: int, alpha: float) -> float:
    """Latency term shared by all-gather, reduce-scatter, all-to-all: best of a ring and a tree."""
    return min((n - 1) * alpha, math.log2(n) * alpha)


def all_reduce_s(m: float, n: int, beta: float, alpha: float) -> float:
    if n <= 1:
        return 0.0
    ring = 2 * (n - 1) * alpha + 2 * (n - 1) * m / (n * beta)
    tree = 2 * math.log2(n) * alpha + 2 * m / beta
    return min(ring, tree)


def all_gather_s(m: float, n: int, beta: float, alpha: float) -> float:
    if n <= 1:
        return 0.0
    return _startup(n, alpha) + (n - 1) * m / beta


def reduce_scatter_s(m: float, n: int, beta: float, alpha: float) -> float:
    if n <= 1:
        return 0.0
    return _startup(n, alpha) + (n - 1) * m / (n * beta)


def all_to_all_s(sent: float, recv: float, n: int, beta: float, alpha: float) -> float:
    if n <= 1:
        return 0.0
    return _startup(n, alpha) + max(sent, recv) / beta


def collective_s(kind: str, m: float, n: int, beta: float, alpha: float, recv: float | None = None) -> float:
    """Wire time of one collective (no static cost). ``m`` is the input bytes per rank (for
    all-to-all the bytes sent; ``recv`` defaults to the same)."""
    if kind == "all_reduce":
        return all_reduce_s(m, n, beta, alpha)
    if kind == "all_gather":
        return all_gather_s(m, n, beta, alpha)
    if kind == "reduce_scatter":
        return reduce_scatter_s(m, n, beta, alpha)
    if kind == "all_to_all":
        return all_to_all_s(m, m if recv is None else recv, n, beta, alpha)
    raise AuditInputError("collective", f"unknown kind {kind!r} ({', '.join(KINDS)})")


def collective_time_s(device: "Device", kind: str, m: float, group_size: int, stride: int = 1,
                      recv: float | None = None) -> float:
    """Seconds for one collective on ``device``: tier from the group's position in the grid,
    wire time from the alpha-beta formula, plus the static comm cost (0 for a group of one)."""
    if group_size <= 1:
        return 0.0
    tier = group_tier(device.grid, group_size, stride)
    beta, alpha = tier_link(device, tier, group_size)
    return collective_s(kind, m, group_size, beta, alpha, recv) + device.static_us["comm"] * 1e-6
