"""audit bench speed: one deployment's tables + simulation + the KV-edge check (two more simulations
at -5 % / +5 % of the KV pool) must take <= 1 s (issue 17); then every CI row as a fresh process (issue 30).

Run: python benchmarks/bench_bench.py (after one warm-up run has filled numba's cache)."""
from __future__ import annotations

import json
import time
from pathlib import Path

ROWS = Path(__file__).resolve().parents[1] / "tests" / "data" / "serving_published.json"


def main() -> None:
    from auditor.serving.bench import metrics
    from auditor.serving.calibrate import deployment, workload
    from auditor.serving.sim import kv_sensitivity, simulate
    rows = json.loads(ROWS.read_text())["rows"]
    simulate(deployment(rows[0]), workload(rows[0]))       # compile / load the numba cache
    worst = 0.0
    for r in rows:
        t = time.perf_counter()
        dep, wl = deployment(r), workload(r)
        m = metrics(simulate(dep, wl))
        kv_sensitivity(dep, wl)
        dt = time.perf_counter() - t
        worst = max(worst, dt)
        print(f"{r['id']:4s} {dt * 1e3:8.1f} ms  output {m['output_throughput']:8.1f} tok/s "
              f"(measured {r['measured_output_tok_s']:.1f}, ratio {m['output_throughput'] / r['measured_output_tok_s']:.2f})")
    print(f"worst {worst * 1e3:.1f} ms: {'OK' if worst <= 1.0 else 'TOO SLOW'} (target <= 1000 ms)")
    fresh_ci_rows()


def fresh_ci_rows() -> None:
    """Every CI row of the published README's sections B, E, F (auditor/serving/ci_rows.py) as a user runs it:
    `audit bench --launch CONFIG [--case NAME]`, a fresh process each, best of two (issue 30: <= 1 s)."""
    import sys
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from fresh import compile_package, run_fresh
    from auditor.serving.ci_rows import CI_ROWS, published_dir
    pub = published_dir()
    if not pub.is_dir():
        print(f"CI rows: skipped, {pub} not found (the shared reference data sits beside the checkout)")
        return
    compile_package()
    times = sorted(((min(run_fresh(["bench", *r.argv(pub)])[0] for _ in range(2)), r.id) for r in CI_ROWS),
                   reverse=True)
    print("CI rows, fresh process: " + " ".join(f"{rid} {t:.2f} s" for t, rid in times))
    print(f"worst {times[0][1]} {times[0][0]:.2f} s: {'OK' if times[0][0] <= 1.0 else 'TOO SLOW'} (target <= 1 s)")


if __name__ == "__main__":
    main()
