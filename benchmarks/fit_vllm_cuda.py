"""Refit (or check) the upstream-vLLM CUDA host model and kernel constants of the h200 / b200 profiles.

The fitted rows are GPU-02's rerun table only (GLM-5.2-FP8, 8 x B200, vLLM 0.28, async scheduling): mean TPOT
and output tokens/s. GPU-02's main table and GPU-19 (8 x H200) are predicted, never fitted. The observations
file lives beside the checkout (``../shared/data/published/gpu/vllm-cuda-observations.json``).

Run: python benchmarks/fit_vllm_cuda.py          (print the predictions of the shipped profiles)
     python benchmarks/fit_vllm_cuda.py --fit    (Nelder-Mead in log space from the shipped values; prints the
                                                  optimum: copy it into auditor/devices/{h200,b200}.json by hand)
"""
from __future__ import annotations

import contextlib
import io
import json
import sys
import tempfile
from pathlib import Path

import numpy as np

OBS = Path(__file__).resolve().parents[2] / "shared" / "data" / "published" / "gpu" / "vllm-cuda-observations.json"
DEVICES = Path(__file__).resolve().parents[1] / "auditor" / "devices"
NAMES = ("step_ms", "static_scale", "memory", "compute", "launch_us", "async_overlap")
LO, HI = np.log([0.05, 0.05, 0.3, 0.2, 0.5, 0.01]), np.log([20, 2.0, 0.95, 0.95, 200, 1.0])


def observation(oid: str) -> dict:
    return next(o for o in json.loads(OBS.read_text()) if o["id"] == oid)


def bench(args: list[str]) -> dict:
    from auditor.cli import main
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf), contextlib.redirect_stderr(io.StringIO()):
        main(["bench", *args, "--format", "json", "-q"])
    return json.loads(buf.getvalue())


def gpu02_args(conc: int, rerun: bool) -> list[str]:
    base = ["glm-5.2", "--recipe", "fp8-block", "--engine", "vllm@0.28", "--tp", "8", "--kv-cache-dtype", "fp8",
            "--concurrency", str(conc), "--num-prompts", str(max(4 * conc, 16)), "--isl", "8211", "--osl", "1024"]
    if rerun:
        return base + ["--max-model-len", "16384", "--gpu-memory-utilization", "0.93", "--async-scheduling",
                       "--max-num-batched-tokens", "16384"]
    return base + ["--max-model-len", "32768"]


def device_file(base: str, x: np.ndarray, where: Path) -> str:
    v = np.exp(np.clip(x, LO, HI))
    d = json.loads((DEVICES / f"{base}.json").read_text())
    d["static_us"].update(mma=5 * v[1], gp=2 * v[1], comm=10 * v[1])
    d["efficiency"].update(memory=v[2], compute=v[3])
    d["serving"].update(step_ms=v[0], launch_us=v[4], draft_launch_us=v[4], async_overlap=v[5])
    path = where / f"{base}.json"
    path.write_text(json.dumps(d))
    return str(path)


def rows(dev: str, rerun: bool) -> list[tuple[int, float, float, float, float]]:
    """(concurrency, predicted TPOT, measured TPOT, predicted output tok/s, measured) per GPU-02 row."""
    f = observation("GPU-02")["figures"]
    table = f["rerun_mml16384_gmu0.93_async_mnbt16384" if rerun else "rows_conc_TPOTms_interactivity_inTPS_outTPS"]
    out = []
    for conc, tpot, _, _, out_tps in table:
        r = bench([*gpu02_args(conc, rerun), "--device", dev])
        out.append((conc, r["mean_tpot_ms"], tpot, r["output_throughput"], out_tps))
    return out


def objective(x: np.ndarray, where: Path) -> float:
    e = [np.log(p / m) for c, p, m, pt, mt in rows(device_file("b200", x, where), True) for p, m in ((p, m), (pt, mt))]
    return float(np.mean(np.square(e)))


def nelder_mead(f, x0: np.ndarray, step: float = 0.3, iters: int = 120) -> np.ndarray:
    n = len(x0)
    pts = [x0] + [x0 + step * np.eye(n)[i] for i in range(n)]
    fs = [f(p) for p in pts]
    for _ in range(iters):
        order = np.argsort(fs)
        pts, fs = [pts[i] for i in order], [fs[i] for i in order]
        c = np.mean(pts[:-1], axis=0)
        xr = np.clip(c + (c - pts[-1]), LO, HI)
        fr = f(xr)
        if fr < fs[0]:
            xe = np.clip(c + 2 * (c - pts[-1]), LO, HI)
            fe = f(xe)
            pts[-1], fs[-1] = (xe, fe) if fe < fr else (xr, fr)
        elif fr < fs[-2]:
            pts[-1], fs[-1] = xr, fr
        else:
            xc = c + 0.5 * (pts[-1] - c)
            fc = f(xc)
            if fc < fs[-1]:
                pts[-1], fs[-1] = xc, fc
            else:
                pts = [pts[0]] + [pts[0] + 0.5 * (p - pts[0]) for p in pts[1:]]
                fs = [fs[0]] + [f(p) for p in pts[1:]]
    return pts[int(np.argmin(fs))]


def main(argv: list[str]) -> int:
    d = json.loads((DEVICES / "b200.json").read_text())
    x0 = np.log([d["serving"]["step_ms"], d["static_us"]["mma"] / 5, d["efficiency"]["memory"],
                 d["efficiency"]["compute"], d["serving"]["launch_us"], d["serving"]["async_overlap"]])
    if "--fit" in argv:
        with tempfile.TemporaryDirectory() as tmp:
            x = nelder_mead(lambda v: objective(v, Path(tmp)), x0)
        print(dict(zip(NAMES, np.round(np.exp(x), 4).tolist())))
        return 0
    for rerun in (True, False):
        print("GPU-02 " + ("rerun (fitted)" if rerun else "main (predicted)"))
        for conc, p, m, pt, mt in rows("b200", rerun):
            print(f"  conc {conc:4d}  TPOT {p:7.2f} / {m:6.2f} ms = {p / m:4.2f}   output {pt:7.1f} / {mt:6.0f} = {pt / mt:4.2f}")
    g = observation("GPU-19")["figures"]
    from auditor.perf.mtp import expected_tokens
    a = _per_draft(g["acceptance_length"], 3, expected_tokens)
    r = bench(["glm-5.1", "--recipe", "fp8-block", "--engine", "vllm@0.19", "--device", "h200", "--tp", "8",
               "--mtp", "3", "--mtp-acceptance", f"{a:.6f}", "--concurrency", "32", "--num-prompts", "32",
               "--request-rate", "10", "--isl", "8000", "--osl", "1024"])
    print(f"GPU-19 (predicted): output {r['output_throughput']:.1f} / {g['output_tok_s']} = "
          f"{r['output_throughput'] / g['output_tok_s']:.2f}, TTFT {r['mean_ttft_ms']:.0f} / {g['mean_ttft_ms']:.0f}, "
          f"TPOT {r['mean_tpot_ms']:.2f} / {g['mean_tpot_ms']}")
    return 0


def _per_draft(length: float, k: int, expected_tokens) -> float:
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if expected_tokens(k, mid) < length else (lo, mid)
    return (lo + hi) / 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
