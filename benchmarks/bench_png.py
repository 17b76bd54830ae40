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
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET_S = 1.5
COMMANDS = {
    "audit memory": ["memory", "glm-5.1", "--tp", "16", "--dp", "2", "--ep", "32", "--sp", "--engine",
                     "vllm-ascend@0.18", "--role", "prefill", "--observed", "38GiB"],
    "audit perf": ["perf", "glm-5.1", "--tp", "16", "--dp", "2", "--ep", "32", "--sp", "--phase", "both",
                   "--tokens", "4096"],
}


def timed(argv: list[str]) -> float:
    t = time.perf_counter()
    subprocess.run([sys.executable, "-m", "auditor", *argv], check=True, capture_output=True)
    return time.perf_counter() - t


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    import auditor
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(Path(auditor.__file__).parent)],
                   check=True, capture_output=True)
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for label, argv in COMMANDS.items():
            base = argv + ["--format", "json", "-o", os.devnull]
            png = base + ["--png", str(Path(tmp) / "out.png")]
            timed(base), timed(png)            # warm caches (numba, fonts, page cache)
            without, with_png = [], []
            for _ in range(args.repeat):
                without.append(timed(base))
                with_png.append(timed(png))
            added_best = min(with_png) - min(without)
            added_median = statistics.median(with_png) - statistics.median(without)
            rows.append((label, min(without), min(with_png), added_best, added_median))
    print(f"\n--png cost, fresh processes, best of {args.repeat} (target: adds <= {TARGET_S:.1f} s)")
    print(f"  {'command':<14} {'without':>8} {'with':>8} {'added':>8} {'added (median)':>15}  ratio/target")
    for label, wo, wi, add, addm in rows:
        print(f"  {label:<14} {wo:>7.3f}s {wi:>7.3f}s {add:>7.3f}s {addm:>14.3f}s  {add / TARGET_S:>6.2f} "
              f"{'OK' if add <= TARGET_S else 'OVER'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
