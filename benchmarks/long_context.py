"""Long-context study of `audit perf` (issue 11): the calibration under each kernel-path choice and
the latency it predicts at 4k / 32k / 64k / 128k context.

For every choice the public sources leave open (docs/long-context-kernels.md, "Unsettled"), the
shipped model is changed in that one respect, the two flat host constants of the serving block
(``prefill_token_us`` per prefill token, ``step_ms`` per step; ``launch_us`` stays at the shipped
value) are refitted on the four shipped GLM-5.1 rows (../shared/data), and the script prints the fit,
the leave-one-out errors and
the prefill (a 4096-token chunk ending at the context) and decode (one MTP-3 step) latencies.
Then the per-op-class breakdown of the shipped model at the four contexts.

    python benchmarks/long_context.py            # needs ../shared beside the checkout
"""
from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

from auditor.context import DeploymentContext
from auditor.devices.profiles import load_device
from auditor.model.presets import preset_spec
from auditor.parallel import ParallelPlan
from auditor.perf.api import Workload, evaluate_phase
from auditor.perf.calibrate import fit, load_scenarios
from auditor.perf.growth import context_growth, prefill_workload
from auditor.engines.vllm_ascend.kernel_paths import kernel_path, with_overrides
from auditor.report.perf_text import growth_tables

DATA = Path(__file__).resolve().parents[2] / "shared" / "data" / "glm-5.1-a3-latency-calibration.csv"
CONTEXTS = [4096, 32768, 65536, 131072]
ENGINE, RECIPE, MTP = "vllm-ascend@main", "w4a8", 3


def variants(dev):
    """(name, device, kernel path) per choice; the first is the shipped model."""
    bf16 = kernel_path("bf16")
    yield "shipped (bf16 path, r_sort 8, SFA gathers at HBM peak, key re-reads HBM at 0.6)", dev, bf16
    yield "r_sort 1 (sort 8x slower)", replace(dev, vector_sort_ops_per_s=dev.sort_rate / 8), bf16
    yield "SFA gathers HBM-bound at 0.5 of peak", dev.with_efficiency(sfa_kv=0.5), bf16
    yield "SFA gathers L2-served at 2x HBM peak", dev.with_efficiency(sfa_kv=2.0), bf16
    yield "indexer key re-reads hit L2 (4x HBM peak)", dev.with_efficiency(indexer_cache=4.0), bf16
    yield "LI-C8 indexer cache (int8 Cube, Mat-Duce)", dev, kernel_path("c8-indexer")
    yield "prefill top-k code path: 8 sort ops per key", dev, with_overrides(bf16, topk_per_key=8.0, topk_per_kept=0.0)
    yield "Cube and Vector overlap in the indexer", dev, with_overrides(bf16, indexer_vec_per_head=0.0,
                                                                        topk_per_key=0.0, topk_per_kept=0.0)
    yield "SFA: 64 query rows share one staged gather (TensorCast decode rule)", dev, with_overrides(bf16, sfa_tile_rows=64.0)


def main() -> int:
    if not DATA.is_file():
        print(f"skipped: {DATA} not found (the shared reference data sits beside the checkout)")
        return 0
    spec = preset_spec("glm-5.1")
    plan = ParallelPlan(tp=16, dp=1, ep=16, mtp=True).validate()
    scen = load_scenarios(DATA)
    shipped = load_device("a3-752t")
    base = shipped
    print(f"{'choice':<82} {'tok us':>9} {'step ms':>9} {'fit %':>6} {'LOO max %':>9}   "
          + "   ".join(f"P{c // 1024}k/D{c // 1024}k ms" for c in CONTEXTS))
    for name, dev, path in variants(base):
        def ev(d, s, path=path):
            wl = Workload(s.phase, s.query_len, s.context_len, 1, MTP)
            return evaluate_phase(DeploymentContext(spec, plan, ENGINE, RECIPE, d), wl, "repetition",
                                  cache=path).time_ms
        res = fit(scen, ev, dev, ("prefill_token_us", "step_ms"))
        d = res.device
        lat = []
        for c in CONTEXTS:
            p = evaluate_phase(DeploymentContext(spec, plan, ENGINE, RECIPE, d), prefill_workload(c, 4096, 1, MTP),
                               "repetition", cache=path).time_ms
            q = evaluate_phase(DeploymentContext(spec, plan, ENGINE, RECIPE, d), Workload("decode", 4096, c, 1, MTP),
                               "repetition", cache=path).time_ms
            lat.append(f"{p:8.0f}/{q:5.1f}")
        print(f"{name:<82} {res.fitted['prefill_token_us']:9.1f} {res.fitted['step_ms']:9.2f} "
              f"{res.mape_after:6.2f} {max(abs(e) for e in res.errors_loo):9.2f}   " + "   ".join(lat))
    print()
    g = context_growth(DeploymentContext(spec, plan, ENGINE, RECIPE, shipped), CONTEXTS, 4096, 1, MTP)
    print(growth_tables(g))
    return 0


if __name__ == "__main__":
    sys.exit(main())
