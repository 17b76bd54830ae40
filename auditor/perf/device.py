"""Device -> the plain arrays the perf kernel reads. Built at every evaluation (never cached) so
calibration can vary efficiencies and static costs between calls."""
from __future__ import annotations

import numpy as np
from auditor_kernels import kinds as K

from ..devices.profiles import Device, load_device
from ..parallel import ParallelPlan
from .collectives import group_tier, tier_link

__all__ = ["Device", "load_device", "device_vector", "kernel_vector", "group_table", "group_tiers"]


def device_vector(dev: Device) -> np.ndarray:
    """The ``dev`` vector documented in kernels/perf_core.py (slots ``kinds.DEV_*``)."""
    eff, st = dev.efficiency, dev.static_us
    out = np.zeros(K.N_DEV, dtype=np.float64)
    out[K.DEV_HBM] = dev.hbm_bytes_per_s
    out[K.DEV_ETA_MEMORY] = eff["memory"]
    out[K.DEV_ETA_COMPUTE] = eff["compute"]
    out[K.DEV_ETA_SFA_KV] = eff["sfa_kv"]
    out[K.DEV_ETA_INDEXER_CACHE] = eff["indexer_cache"]
    out[K.DEV_STATIC_MMA] = st["mma"] * 1e-6
    out[K.DEV_STATIC_GP] = st["gp"] * 1e-6
    out[K.DEV_STATIC_COMM] = st["comm"] * 1e-6
    out[K.DEV_VECTOR_PEAK] = (dev.vector_flops.get("BF16") or dev.vector_flops.get("F16")
                              or max(dev.vector_flops.values()))
    out[K.DEV_VECTOR_SORT] = dev.sort_rate
    # per-step host constants (devices.profiles.derived_host_ms); perf, sweep, bench and plan zero them
    # (``kernel_vector``) and add auditor.perf.host's per-step host model instead
    out[K.DEV_HOST_PREFILL] = dev.host_ms.get("prefill", 0.0) * 1e-3
    out[K.DEV_HOST_DECODE] = dev.host_ms.get("decode", 0.0) * 1e-3
    for name, code in K.DTYPES.items():
        out[K.DEV_MMA_PEAK + code] = dev.mma_flops.get(name, 0.0)
    return out


def kernel_vector(dev: Device) -> np.ndarray:
    """``device_vector`` without the per-step host slots: for callers that add ``auditor.perf.host``."""
    out = device_vector(dev)
    out[K.DEV_HOST_PREFILL] = out[K.DEV_HOST_DECODE] = 0.0
    return out


def group_tiers(dev: Device, plan: ParallelPlan) -> dict[str, tuple[int, int]]:
    """{group: (size, tier)}: TP ranks are contiguous, DP ranks TP apart, EP spans DP x TP."""
    sizes = {"tp": (plan.tp, 1), "dp": (plan.dp, plan.tp), "ep": (plan.ep, 1)}
    return {g: (n, group_tier(dev.grid, n, stride)) for g, (n, stride) in sizes.items()}


def group_table(dev: Device, plan: ParallelPlan) -> np.ndarray:
    """[N_GROUPS, N_GRP] rows (size, effective bytes/s, latency s), one per ``kinds.GROUPS`` code."""
    out = np.zeros((K.N_GROUPS, K.N_GRP))
    for g, (n, tier) in group_tiers(dev, plan).items():
        bw, lat = tier_link(dev, tier, n)
        row = K.GROUPS[g]
        out[row, K.GRP_SIZE] = n
        out[row, K.GRP_BW] = bw
        out[row, K.GRP_LATENCY] = lat
    return out
