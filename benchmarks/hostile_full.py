"""The full hostile-input run (issue 8): every named case, the slow bound cases, and the property
suites with many generated examples; prints the counts the README's closing note quotes.

    python benchmarks/hostile_full.py [--examples 1000] [--random] [--runxfail]

Counts: cases run, clean errors (exit 2, one ``audit: error:`` line), accepted (exit 0/3),
tracebacks, hangs, accepted-invalid, valid-refused, other contract failures, skipped.
``--runxfail`` also runs the reader cases marked xfail (to see what is still open).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
FILES = ["tests/test_hostile_cli.py", "tests/test_hostile_readers.py", "tests/test_hostile_props.py"]
KINDS = [("HANG", "hangs"), ("TRACEBACK", "tracebacks"), ("ACCEPTED-INVALID", "accepted-invalid"),
         ("VALID-REFUSED", "valid-refused")]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--examples", type=int, default=1000, help="hypothesis examples per property")
    ap.add_argument("--random", action="store_true", help="fresh random examples instead of the derandomized set")
    ap.add_argument("--runxfail", action="store_true", help="run the cases marked xfail as ordinary cases")
    args = ap.parse_args()
    env = {**os.environ, "AUDIT_SLOW": "1", "AUDIT_HOSTILE_EXAMPLES": str(args.examples)}
    if args.random:
        env["AUDIT_HOSTILE_RANDOM"] = "1"
    with tempfile.TemporaryDirectory() as tmp:
        xml = Path(tmp) / "hostile.xml"
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", f"--junitxml={xml}", *FILES]
        if args.runxfail:
            cmd.append("--runxfail")
        t = time.perf_counter()
        subprocess.run(cmd, cwd=ROOT, env=env)
        wall = time.perf_counter() - t
        counts: Counter = Counter()
        for tc in ET.parse(xml).getroot().iter("testcase"):
            counts["cases"] += 1
            failure = tc.find("failure")
            if failure is None:
                failure = tc.find("error")
            skipped = tc.find("skipped")
            if skipped is not None:
                counts["xfail (open, reader fix)" if "xfail" in (skipped.get("type") or "") + (skipped.get("message") or "")
                       else "skipped"] += 1
            elif failure is not None:
                text = (failure.get("message") or "") + (failure.text or "")
                kind = next((name for tag, name in KINDS if tag in text), "other contract failures")
                counts[kind] += 1
            else:
                counts["passed"] += 1
    print(f"\nhostile run: {wall:.0f} s, {args.examples} examples per property")
    for key in ["cases", "passed", "tracebacks", "hangs", "accepted-invalid", "valid-refused",
                "other contract failures", "xfail (open, reader fix)", "skipped"]:
        print(f"  {key:28s} {counts.get(key, 0)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
