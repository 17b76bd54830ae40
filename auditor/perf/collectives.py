"""Collective communication cost: the alpha-beta model per interconnect tier.

Topology (which tier a group uses, its effective bandwidth) lives here; the wire-time formulas
live once, in ``auditor_kernels.collectives`` (numba, called from the perf core's hot loop and
from ``collective_s`` below). Formulas follow TensorCast's ``comm_analytic.py`` as
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

from typing import TYPE_CHECKING

from auditor_kernels import collectives as K
from auditor_kernels.kinds import COLL_KINDS

from ..errors import AuditInputError

if TYPE_CHECKING:
    from ..devices.profiles import Device

KINDS = tuple(COLL_KINDS)


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


def collective_s(kind: str, m: float, n: int, beta: float, alpha: float, recv: float | None = None) -> float:
    """Wire time of one collective (no static cost), computed by the same numba kernel the perf
    core runs (kernels/collectives.py holds the formulas). ``m`` is the input bytes per rank (for
    all-to-all the bytes sent; ``recv`` defaults to the same)."""
    if kind not in COLL_KINDS:
        raise AuditInputError("collective", f"unknown kind {kind!r} ({', '.join(KINDS)})")
    return K.collective_wire_s(COLL_KINDS[kind], float(m), float(n), float(beta), float(alpha),
                               float(m if recv is None else recv))


def collective_time_s(device: "Device", kind: str, m: float, group_size: int, stride: int = 1,
                      recv: float | None = None) -> float:
    """Seconds for one collective on ``device``: tier from the group's position in the grid,
    wire time from the alpha-beta formula, plus the static comm cost (0 for a group of one)."""
    if group_size <= 1:
        return 0.0
    tier = group_tier(device.grid, group_size, stride)
    beta, alpha = tier_link(device, tier, group_size)
    return collective_s(kind, m, group_size, beta, alpha, recv) + device.static_us["comm"] * 1e-6
