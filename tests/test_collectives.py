"""Alpha-beta collectives: hand-computed times on the A3 and A2 profiles, tier selection, and
agreement between the Python reference and the numba kernel."""
from __future__ import annotations

import math

import pytest

from auditor.devices.profiles import load_device
from auditor.errors import AuditInputError
from auditor.perf import collectives as C
from auditor_kernels import collectives as K

# hand numbers below assume the TensorCast comm efficiency 0.7 (the shipped A3 profile is calibrated)
A3 = load_device("a3-752t").with_efficiency(comm=0.7)
A2 = load_device("a2-313t")
US = 1e-6


@pytest.mark.parametrize("grid, n, stride, tier", [
    ((48, 8, 2), 2, 1, 2),      # die pair (SIO)
    ((48, 8, 2), 16, 1, 1),     # anchor: TP16 on ranks 0-15 is tier 1
    ((48, 8, 2), 32, 1, 0),
    ((48, 8, 2), 2, 16, 0),     # DP2 of TP16 groups spans two pods
    ((48, 8, 2), 8, 2, 1),      # ranks 0,2,..,14: one die of each pair, same pod
    ((48, 8, 2), 1, 1, 2),
    ((128, 8), 4, 1, 1),
    ((128, 8), 16, 1, 0),
])
def test_group_tier(grid, n, stride, tier):
    assert C.group_tier(grid, n, stride) == tier


def test_group_tier_rejects_nonsense():
    with pytest.raises(AuditInputError):
        C.group_tier((48, 8, 2), 0)


def test_tp16_all_reduce_a3_by_hand():
    # tier 1: beta = 196e9 * 0.7 = 137.2e9 B/s, alpha = 0.5 us, n = 16, M = 2,195,200 B
    # ring = 2*15*0.5 + 2*15*M/(16*beta) = 15 + 30 = 45 us; tree = 2*4*0.5 + 2*M/beta = 4 + 32 = 36 us
    beta, alpha = C.tier_link(A3, 1, 16)
    assert beta == pytest.approx(137.2e9) and alpha == pytest.approx(0.5e-6)
    m = 2_195_200.0
    assert C.collective_s("all_reduce", m, 16, beta, alpha) == pytest.approx(36 * US)
    # plus the 10 us static comm cost
    assert C.collective_time_s(A3, "all_reduce", m, 16) == pytest.approx(46 * US)
    # tiny message: ring latency 15 us loses to tree 4 us
    assert C.collective_s("all_reduce", 0.0, 16, beta, alpha) == pytest.approx(4 * US)
    # two ranks: ring = 2*1*a + M/b, tree = 2*1*a + 2M/b -> ring wins
    assert C.collective_s("all_reduce", 137_200.0, 2, beta, alpha) == pytest.approx((1 + 1) * US)


def test_gather_scatter_all_to_all_a3_by_hand():
    beta, alpha = C.tier_link(A3, 1, 16)
    # startup = min(15*0.5, log2(16)*0.5) = 2 us
    assert C.collective_s("all_gather", 137_200.0, 16, beta, alpha) == pytest.approx((2 + 15) * US)
    assert C.collective_s("reduce_scatter", 2_195_200.0, 16, beta, alpha) == pytest.approx((2 + 15) * US)
    assert C.collective_s("all_to_all", 274_400.0, 16, beta, alpha, recv=137_200.0) == pytest.approx((2 + 2) * US)
    assert C.collective_s("all_to_all", 137_200.0, 16, beta, alpha) == pytest.approx((2 + 1) * US)


def test_full_mesh_scaling_a2():
    # 4 of 8 ranks on the HCCS full mesh: 196e9 * 0.7 * 3/7 = 58.8e9 B/s
    beta, alpha = C.tier_link(A2, 1, 4)
    assert beta == pytest.approx(58.8e9)
    # all-gather: min(3*0.5, 2*0.5) = 1 us + 3*58,800/58.8e9 = 3 us
    assert C.collective_time_s(A2, "all_gather", 58_800.0, 4) == pytest.approx((1 + 3 + 10) * US)
    # the whole mesh gets full bandwidth; a CLOS tier is never scaled
    assert C.tier_link(A2, 1, 8)[0] == pytest.approx(137.2e9)
    assert C.tier_link(A2, 0, 4)[0] == pytest.approx(25e9 * 0.7)


def test_single_rank_is_free_and_unknown_kind():
    assert C.collective_time_s(A3, "all_reduce", 1e9, 1) == 0.0
    with pytest.raises(AuditInputError, match="unknown kind"):
        C.collective_s("broadcast", 1.0, 4, 1e9, 1e-6)


def _formula(kind: str, m: float, n: int, b: float, a: float, recv: float) -> float:
    """The anchor's §4 formulas, written out here independently of the kernel."""
    start = min((n - 1) * a, math.log2(n) * a)
    if kind == "all_reduce":
        return min(2 * (n - 1) * a + 2 * (n - 1) * m / (n * b), 2 * math.log2(n) * a + 2 * m / b)
    if kind == "all_gather":
        return start + (n - 1) * m / b
    if kind == "reduce_scatter":
        return start + (n - 1) * m / (n * b)
    return start + max(m, recv) / b


@pytest.mark.parametrize("code, kind", [(K.ALL_REDUCE, "all_reduce"), (K.ALL_GATHER, "all_gather"),
                                        (K.REDUCE_SCATTER, "reduce_scatter"), (K.ALL_TO_ALL, "all_to_all")])
@pytest.mark.parametrize("m, n", [(0.0, 2), (4096.0, 16), (3.1e6, 16), (7.0e7, 32), (1.0e5, 3)])
def test_kernel_matches_written_out_formulas(code, kind, m, n):
    beta, alpha = 1.234e11, 0.7e-6
    ref = _formula(kind, m, n, beta, alpha, m * 0.5)
    assert K.collective_wire_s(code, m, float(n), beta, alpha, m * 0.5) == pytest.approx(ref, rel=1e-12)
    assert C.collective_s(kind, m, n, beta, alpha, recv=m * 0.5) == pytest.approx(ref, rel=1e-12)
    assert K.collective_time_s(code, m, float(n), beta, alpha, m * 0.5, 1e-5) == pytest.approx(ref + 1e-5)
    assert K.collective_time_s(code, m, 1.0, beta, alpha, m, 1e-5) == 0.0
