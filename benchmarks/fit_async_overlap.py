"""Fit ``async_overlap`` (the share of a graph decode step's host work that ``--async-scheduling`` runs while the
device executes: ``step_ms`` plus the eager GLM drafter's launches, ``kernels/serving_core.async_host``) on the
rows that inform it, with every other host constant held at the joint fit (``python -m auditor.serving.calibrate``).

Why a separate fit: the joint fit's rows (the latency CSV and section B of the published README) hold three
launches with ``--async-scheduling`` (P1, P4, P6) at 3.5k / 128k input, where the step's host work and the
device time cannot be told apart; the section-E rows add the decode-bound deployments that set the flag
(the weekly GLM-5.1 C8 configs at 3.5k and 64k, their P/D variants) and the UCM 4-node P/D report, whose
decode node's mean TPOT (20.2 ms) times the decode step directly. Fitted rows: P1, P4, P6, E-PD20, E-PD50,
E-PD64k, E-A3-20, E-A3-50, E-A3-64k (output tok/s) and UCM-PD (output tok/s and mean TPOT). Not fitted: P8
(KV edge: +-5 % of its KV pool moves it by more than 1.25x, as calibrate.py leaves it out), the DeepSeek-V3.2
weekly rows (their launch does not set the flag, so the constant does not act on them), P3a and P5 (no flag).

Objective: mean squared log error of audit / measured over the fitted figures; a grid over [0.01, 1] refined
by golden-section search (the rows are piecewise smooth in the constant: scheduling flips make steps).

Run: python benchmarks/fit_async_overlap.py [--write] (about two minutes; --write puts the value in the
serving blocks of the a3-752t and a2-313t profiles, which share the host model)."""
from __future__ import annotations

import argparse
import json
import math
import shlex
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_ci_corpus import CI_ROWS, UCM, UCM_MEASURED, bench  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
DEVICES = ROOT / "auditor" / "devices"
FITTED = ("P1", "P4", "P6", "E-PD20", "E-PD50", "E-PD64k", "E-A3-20", "E-A3-50", "E-A3-64k")


def jobs(shared: Path) -> list[tuple[str, list[str], float]]:
    pub = shared / "data" / "published"
    out = [(rid, ["--launch", str(pub / f)] + (["--case", case] if case else []) + shlex.split(extra), measured)
           for rid, _sec, f, case, extra, measured in CI_ROWS if rid in FITTED]
    out.append(("UCM-PD", shlex.split(UCM), UCM_MEASURED["tok_s"]))
    return out


def device_file(tmp: Path, overlap: float) -> Path:
    doc = json.loads((DEVICES / "a3-752t.json").read_text(encoding="utf-8"))
    doc["serving"]["async_overlap"] = overlap
    path = tmp / f"a3-752t-overlap-{overlap:.4f}.json"
    path.write_text(json.dumps(doc), encoding="utf-8")
    return path


def evaluate(overlap: float, rows: list, tmp: Path) -> tuple[float, dict[str, float]]:
    dev = device_file(tmp, overlap)
    logs, ratios = [], {}
    for rid, args, measured in rows:
        r = bench([*args, "--device", str(dev)])
        if "error" in r:
            raise SystemExit(f"{rid}: {r['error']}")
        ratios[rid] = r["tok_s"] / measured
        logs.append(math.log(ratios[rid]))
        if rid == "UCM-PD":
            ratios["UCM-TPOT"] = r["tpot_ms"] / UCM_MEASURED["tpot_ms"]
            logs.append(math.log(ratios["UCM-TPOT"]))
    return sum(x * x for x in logs) / len(logs), ratios


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--shared", default="/work/shared")
    ap.add_argument("--write", action="store_true")
    a = ap.parse_args()
    rows = jobs(Path(a.shared))
    with tempfile.TemporaryDirectory() as t:
        tmp = Path(t)
        seen: dict[float, tuple[float, dict]] = {}

        def f(x: float) -> float:
            x = round(x, 4)
            if x not in seen:
                seen[x] = evaluate(x, rows, tmp)
                print(f"async_overlap {x:.4f}: msle {seen[x][0]:.5f}  " +
                      " ".join(f"{k} {v:.2f}" for k, v in seen[x][1].items()), flush=True)
            return seen[x][0]

        grid = [0.01, 0.2, 0.4, 0.6, 0.8, 1.0]
        best = min(grid, key=f)
        i = grid.index(best)
        lo, hi = grid[max(i - 1, 0)], grid[min(i + 1, len(grid) - 1)]
        g = (math.sqrt(5) - 1) / 2
        c, d = hi - g * (hi - lo), lo + g * (hi - lo)
        for _ in range(6):
            if f(c) < f(d):
                hi = d
            else:
                lo = c
            c, d = hi - g * (hi - lo), lo + g * (hi - lo)
        x = min(seen, key=lambda k: seen[k][0])
    print(f"fitted async_overlap = {x:.4f} (msle {seen[x][0]:.5f}, at the floor 0.01: {seen[0.01][0]:.5f})")
    if a.write:
        for name in ("a3-752t", "a2-313t"):
            path = DEVICES / f"{name}.json"
            doc = json.loads(path.read_text(encoding="utf-8"))
            doc["serving"]["async_overlap"] = x
            if "calibration" in doc:
                doc["calibration"]["async_overlap_fit"] = {
                    "value": x, "msle": round(seen[x][0], 5), "msle_at_floor": round(seen[0.01][0], 5),
                    "ratios": {k: round(v, 3) for k, v in seen[x][1].items()},
                    "source": "benchmarks/fit_async_overlap.py: fitted alone, the other host constants held at the "
                              "joint fit, on " + ", ".join(FITTED) + " and UCM-PD tok/s and mean TPOT (published "
                              "README sections B and E); run it after python -m auditor.serving.calibrate --write, "
                              "whose own async_overlap (fitted on section B alone, at its 0.01 floor) it replaces"}
            path.write_text(json.dumps(doc, indent=2) + "\n", encoding="utf-8")
            print(f"wrote {path}")


if __name__ == "__main__":
    main()
