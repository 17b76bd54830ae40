"""The benchmarks call the code's internals (a cold program cache, the sweep's grid); a refactor that
moves one breaks the script, not a test. This runs the sweep benchmark once and checks it counted its
grid: 3 TP x 3 DP x 20 token counts x 20 contexts x 10 batches x 4 MTP = 144,000 configurations."""
from __future__ import annotations

import importlib.util
from pathlib import Path

BENCH = Path(__file__).resolve().parents[1] / "benchmarks"


def _load(name: str):
    spec = importlib.util.spec_from_file_location(name, BENCH / f"{name}.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_sweep_benchmark_runs_its_whole_grid():
    out = _load("bench_sweep").bench_sweep(verbose=False)
    assert out["configs"] == 3 * 3 * 20 * 20 * 10 * 4
    assert out["cold_s"] > 0 and out["warm_s"] > 0


def test_perf_benchmark_clears_the_program_cache_it_times():
    from auditor.perf.api import cached_program
    cached_program.cache_clear()        # what bench_perf.py / bench_sweep.py call for a cold build
    from auditor.perf import api
    assert api._cached_program.cache_info().currsize == 0
