"""audit bench speed: one deployment's tables + simulation + the KV-edge check (two more simulations
at -5 % / +5 % of the KV pool) must take <= 1 s (issue 17).

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


if __name__ == "__main__":
    main()
