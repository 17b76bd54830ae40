"""Device -> the plain arrays the perf kernel reads. Built at every evaluation (never cached) so
calibration can vary efficiencies and static costs between calls."""
from __future__ import annotations

import numpy as np

from ..devices.profiles import Device, load_device
from ..parallel import ParallelPlan
from .collectives import group_tier, tier_link

__all__ = ["Device", "load_device", "device_vector", "group_table", "group_tiers"]


def device_vector(dev: Device) -> np.ndarray:
    """The ``dev`` vector documented in kernels/perf_core.py."""
    eff, st = dev.efficiency, dev.static_us
    mma = [dev.mma_flops.get(k, 0.0) for k in ("F32", "BF16", "F16", "I8", "F8")]
    vec = dev.vector_flops.get("BF16") or dev.vector_flops.get("F16") or max(dev.vector_flops.values())
    return np.array([dev.hbm_bytes_per_s, eff["memory"], eff["compute"], eff["sfa_kv"], eff["indexer_cache"],
                     st["mma"] * 1e-6, st["gp"] * 1e-6, st["comm"] * 1e-6, vec, *mma], dtype=np.float64)


def group_tiers(dev: Device, plan: ParallelPlan) -> dict[str, tuple[int, int]]:
    """{group: (size, tier)}: TP ranks are contiguous, DP ranks TP apart, EP spans DP x TP."""
    sizes = {"tp": (plan.tp, 1), "dp": (plan.dp, plan.tp), "ep": (plan.ep, 1)}
    return {g: (n, group_tier(dev.grid, n, stride)) for g, (n, stride) in sizes.items()}


def group_table(dev: Device, plan: ParallelPlan) -> np.ndarray:
    """[3, 3] rows (size, effective bytes/s, latency s) for tp, dp, ep."""
    out = np.zeros((3, 3))
    for i, (n, tier) in enumerate(group_tiers(dev, plan).values()):
        bw, lat = tier_link(dev, tier, n)
        out[i] = (n, bw, lat)
    return out
