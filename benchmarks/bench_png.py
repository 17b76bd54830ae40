"""What `--png` adds to a command: `audit memory` and `audit perf`, with and without `--png`.

Target (issue #7): `--png` adds at most 1.5 s (matplotlib imported lazily, Agg canvas, no pyplot).
Each configuration runs as a fresh process, alternating with/without so machine noise hits both;
the added time is best-with minus best-without (and the medians, for the noisy 2-core machine).

    python benchmarks/bench_png.py [--repeat 5]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
from pathlib import Path

from fresh import CPU_SECONDS, compile_package, timed

TARGET_S = 1.5
COMMANDS = {
    "audit memory": ["memory", "glm-5.1", "--tp", "16", "--dp", "2", "--ep", "32", "--sp", "--engine",
                     "vllm-ascend@0.18", "--role", "prefill", "--observed", "38GiB"],
    "audit perf": ["perf", "glm-5.1", "--tp", "16", "--dp", "2", "--ep", "32", "--sp", "--phase", "both",
                   "--tokens", "4096"],
}




def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    compile_package()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for label, argv in COMMANDS.items():
            base = argv + ["--format", "json", "-o", os.devnull]
            png = base + ["--png", str(Path(tmp) / "out.png")]
            timed(base), timed(png)            # warm caches (numba, fonts, page cache)
            without, with_png, cpu_without, cpu_with = [], [], [], []
            for _ in range(args.repeat):
                without.append(timed(base))
                cpu_without.append(CPU_SECONDS[-1])
                with_png.append(timed(png))
                cpu_with.append(CPU_SECONDS[-1])
            added_best = min(with_png) - min(without)
            added_median = statistics.median(with_png) - statistics.median(without)
            added_cpu = min(cpu_with) - min(cpu_without)
            rows.append((label, min(without), min(with_png), added_best, added_median, added_cpu))
    print(f"\n--png cost, fresh processes, best of {args.repeat} (target: adds <= {TARGET_S:.1f} s)")
    print(f"  {'command':<14} {'without':>8} {'with':>8} {'added':>8} {'added (median)':>15} {'added cpu':>10}"
          "  ratio/target")
    for label, wo, wi, add, addm, addc in rows:
        print(f"  {label:<14} {wo:>7.3f}s {wi:>7.3f}s {add:>7.3f}s {addm:>14.3f}s {addc:>9.3f}s  "
              f"{add / TARGET_S:>6.2f} {'OK' if add <= TARGET_S else 'OVER'}")
    print(f"  load average now: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    return 0


if __name__ == "__main__":
    sys.exit(main())
