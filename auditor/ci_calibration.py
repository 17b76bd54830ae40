"""The serving calibration's second stage: the DSA-CP prefill price (``cp_prefill_token_us``), fitted on the
engine's own CI rows that run DSA-CP, each read as ``audit bench --launch`` reads it.

Why apart from the joint fit (``serving.calibrate``): none of the joint fit's rows runs DSA-CP (P8, the one
that does, sits at the KV edge), so it cannot inform the price of a DSA-CP rank's prefill tokens; and the
CI rows are CI configs, which only the CLI reads (``cli.bench.bench_inputs``), so this stage sits above
the CLI. The joint fit's constants are held; the rows are ``serving.ci_rows.CI_ROWS`` (published README
sections B, E, F) whose deployment has a rank that splits its prefill tokens over TP, on the calibrated
device, not at the KV edge.

    python -m auditor.ci_calibration [--shared ../shared] [--write]
"""
from __future__ import annotations

from pathlib import Path

from .serving.calibrate import CALIBRATED_DEVICE, CP_KEY, FIT_KEYS, Evidence, cp_block, fit_cp, left_out, to_host, \
    throughput_evidence, with_cp


def cp_evidence(published: Path, device: str = CALIBRATED_DEVICE) -> list[Evidence]:
    """The CI rows that inform the DSA-CP price (the KV-edge ones are returned too, marked ``edge``)."""
    from .cli.bench import bench_inputs
    from .serving.ci_rows import CI_ROWS
    out = []
    for r in CI_ROWS:
        dep, wl = bench_inputs(r.argv(published))
        if dep.device.name == device and any(c.token_split > 1 for c in dep.costs()):
            out.append(throughput_evidence(r.id, r.measured, dep, wl))
    return out


def main(argv: list[str] | None = None) -> int:
    import argparse
    import json

    import numpy as np

    from .devices.profiles import load_device
    from .outputs import write_output
    from .serving.ci_rows import published_dir
    ap = argparse.ArgumentParser(prog="python -m auditor.ci_calibration")
    ap.add_argument("--shared", default=None, help="the shared reference data (default: ../shared beside the checkout)")
    ap.add_argument("--write", action="store_true", help="write the price and its record into the A3 and A2 profiles")
    a = ap.parse_args(argv)
    pub = published_dir(Path(a.shared) if a.shared else None)
    if not pub.is_dir():
        print(f"{pub}: not found (the shared reference data sits beside the checkout); nothing fitted")
        return 2
    own = load_device(CALIBRATED_DEVICE).serving or {}
    x = np.array([float(own[k]) for k in FIT_KEYS])
    ev = cp_evidence(pub)
    cp = fit_cp(ev, to_host(x))
    h = with_cp(to_host(x), cp)
    print(f"{CP_KEY}={cp:.4g} on {sum(not e.edge for e in ev)} CI rows (the joint fit's constants held)")
    print(f"{'row':14s} {'measured':>10s} {'ratio':>7s}")
    for e in ev:
        print(f"{e.name:14s} {e.measured:10.2f} {e.predict(h) / e.measured:7.3f}"
              + (f"  not fitted: {left_out(e)}" if e.edge else ""))
    if a.write:
        for name in ("a3-752t", "a2-313t"):
            path = Path(__file__).resolve().parent / "devices" / f"{name}.json"
            doc = json.loads(path.read_text(encoding="utf-8"))
            doc["serving"] = {**doc.get("serving", {}), CP_KEY: round(cp, 4)}
            if name == CALIBRATED_DEVICE:
                doc.setdefault("calibration", {})["cp_stage"] = cp_block(ev, x, cp)
            write_output(path, json.dumps(doc, indent=2) + "\n", "--write")      # the one writer
            print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
