"""`audit inventory --by tensor` on a full-size synthetic GLM-5.1 W8A8 checkpoint (177,102 tensors).

Target (issue #7): at most 3 s for the table format, as a fresh process, warm page cache (it took
10-14 s with a dict per tensor and tabulate). Also prints the summary-only run (what the per-tensor
table adds) and the markdown, CSV and JSON formats for reference.

    python benchmarks/bench_inventory_tensor.py [--model-dir DIR] [--repeat 3]
"""
from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

from fresh import CPU_SECONDS, compile_package, timed

TARGET_S = 3.0




def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--model-dir", type=Path, default=None)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    compile_package()
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = args.model_dir
        if model_dir is None:
            from auditor.synth import synthesize
            model_dir = Path(tmp) / "glm51-w8a8"
            res = synthesize(model_dir, model="glm-5.1", recipe="w8a8")
            print(f"synth: {res.tensors} tensors in {len(res.files)} files")
        runs = {
            "summary (table)": ["inventory", str(model_dir), "--no-progress"],
            "--by tensor (table)": ["inventory", str(model_dir), "--by", "tensor", "--no-progress"],
            "--by tensor (markdown)": ["inventory", str(model_dir), "--by", "tensor", "--no-progress", "--format",
                                       "markdown"],
            "--by tensor (csv)": ["inventory", str(model_dir), "--by", "tensor", "--no-progress", "--format", "csv"],
            "--by tensor (json)": ["inventory", str(model_dir), "--by", "tensor", "--no-progress", "--format", "json"],
        }
        best, cpu = {}, {}
        for label, argv in runs.items():
            argv = argv + ["-o", os.devnull]
            timed(argv)                                   # warm page cache
            CPU_SECONDS.clear()
            best[label] = min(timed(argv) for _ in range(args.repeat))
            cpu[label] = min(CPU_SECONDS)
    print(f"\n`audit inventory`, fresh process, best of {args.repeat} (target: --by tensor table <= {TARGET_S:.1f} s)")
    print(f"  {'run':<24} {'wall':>7}  {'cpu':>7}")
    for label, s in best.items():
        mark = ""
        if label == "--by tensor (table)":
            mark = f"  ratio wall/target {s / TARGET_S:.2f} {'OK' if s <= TARGET_S else 'OVER'}"
        print(f"  {label:<24} {s:6.3f}s  {cpu[label]:6.3f}s{mark}")
    print(f"  per-tensor table adds    {best['--by tensor (table)'] - best['summary (table)']:6.3f}s  "
          f"{cpu['--by tensor (table)'] - cpu['summary (table)']:6.3f}s")
    print(f"  load average now: {os.getloadavg()[0]:.2f} on {os.cpu_count()} cores")
    return 0


if __name__ == "__main__":
    sys.exit(main())
