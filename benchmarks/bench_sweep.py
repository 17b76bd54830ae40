"""Sweep throughput of the batched perf kernel (target: >= 100,000 configurations per second).

A configuration = one (TP, DP, tokens, context, batch, MTP) point evaluated for BOTH phases
(TTFT and decode step). Cold = including the Python build of the repetition programs of every
plan; warm = programs cached, pure kernel work.

    python benchmarks/bench_sweep.py
"""
from __future__ import annotations

import time

TARGET = 100_000


def bench_sweep(verbose: bool = True) -> dict[str, float]:
    from auditor.context import DeploymentContext
    from auditor.devices.profiles import load_device
    from auditor.model.presets import preset_spec
    from auditor.perf.api import cached_program
    from auditor.perf.sweep import run_sweep
    from auditor.parallel import ParallelPlan

    spec = preset_spec("glm-5.1")
    dev = load_device("a3-752t")
    base = ParallelPlan(sp=True, dsa_cp=True)          # FlashComm1 + enable_dsa_cp (DSA-CP)
    grid = dict(tps=[4, 8, 16], dps=[1, 2, 4], tokens=list(range(512, 16384 + 1, 512))[:20],
                contexts=list(range(0, 64000, 3200)), batches=[1, 2, 4, 8, 16, 32, 48, 64, 96, 128],
                mtps=[0, 1, 2, 3])
    small = {**grid, "tokens": [512], "contexts": [0], "batches": [1], "mtps": [0]}
    run_sweep(DeploymentContext(spec, base, "vllm-ascend@main", "w8a8", dev), **small)          # JIT + cache load
    cached_program.cache_clear()
    t = time.perf_counter()
    res = run_sweep(DeploymentContext(spec, base, "vllm-ascend@main", "w8a8", dev), **grid)
    cold = time.perf_counter() - t
    t = time.perf_counter()
    res = run_sweep(DeploymentContext(spec, base, "vllm-ascend@main", "w8a8", dev), **grid)
    warm = time.perf_counter() - t
    out = {"configs": res.n_configs, "cold_s": cold, "warm_s": warm,
           "cold_per_s": res.n_configs / cold, "warm_per_s": res.n_configs / warm}
    if verbose:
        print(f"sweep: {res.n_configs} configurations (x2 phases), GLM-5.1, 9 plans")
        print(f"  cold (program build included): {cold:.3f} s = {out['cold_per_s']:,.0f} configs/s")
        print(f"  warm (kernel only):            {warm:.3f} s = {out['warm_per_s']:,.0f} configs/s "
              f"(target >= {TARGET:,}) {'OK' if out['warm_per_s'] >= TARGET else 'MISSED'}")
    return out


if __name__ == "__main__":
    bench_sweep()
