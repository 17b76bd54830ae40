"""Fit the serving host model (``launch_us, prefill_token_us, decode_token_us, step_ms``) to measured
single-request step latencies and measured serving throughputs, with leave-one-out.

Only two kinds of evidence may be fitted (published README sections A/B and the latency CSV):
the four single-request latency rows and the six section-B throughput rows. Everything else is
validation. The device-time tables do not depend on the host constants, so every row's tables are
built once and the fit only re-runs the (1 ms) simulation.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..deployment import InstancePlan
from .costs import HOST_KEYS, ROLE
from .sim import BenchWorkload, Deployment, simulate

LATENCY_PLAN = dict(name="aggregated", count=1, tp=16, dp=1, ep=16, sp=False, max_num_seqs=16,
                    max_num_batched_tokens=4096, max_model_len=131072, gpu_memory_utilization=0.95, mtp=3)


def load_rows(path: Path) -> dict[str, Any]:
    return json.loads(Path(path).read_text(encoding="utf-8"))


def deployment(row: dict, engine: Any = "vllm-ascend@main") -> Deployment:
    from ..devices.profiles import load_device
    from ..engines.registry import as_engine
    from ..source import open_model
    src = open_model(row["model"], row.get("recipe"), tables=False)
    insts = [InstancePlan(**i) for i in row["instances"]]
    return Deployment(src.spec, as_engine(engine), src.scheme_recipe, load_device(row.get("device", "a3-752t")), insts)


def workload(row: dict, acceptance: float) -> BenchWorkload:
    return BenchWorkload(acceptance=acceptance, **row["workload"])


def step_ms(dep: Deployment, phase: str, query: int, context: int, host: np.ndarray) -> float:
    """One engine step of one request (the latency rows): an eager prefill chunk or a graph decode step."""
    from auditor_kernels.serving_core import rank_time, step_host
    c = dep.costs()[0]
    ctx, tok = c.ctx, c.tok
    dec = c.dec[None]
    rest = c.pre_rest[None]
    dctx = c.dec_ctx[None]
    if phase == "prefill":
        from auditor_kernels.serving_core import _bilinear
        pctx = _bilinear(tok, ctx, c.pre_ctx, float(query), float(context))
        dev = rank_time(0, True, float(query), pctx, 0, 0.0, 0.0, ctx, tok, dec, rest, dctx)
        return 1e3 * (dev + step_host(True, float(query), 0.0, c.launches_eager, c.launches_draft, host))
    dev = rank_time(0, False, 0.0, 0.0, 1, float(query), float(context), ctx, tok, dec, rest, dctx)
    return 1e3 * (dev + step_host(False, 0.0, float(query), c.launches_eager, c.launches_draft, host))


@dataclass
class Evidence:
    name: str
    kind: str               # "latency" | "throughput"
    measured: float
    predict: Any            # host vector -> predicted value


def evidence(rows: dict, acceptance: float = 0.7) -> list[Evidence]:
    out = []
    lat_dep = deployment({"model": "glm-5.1", "recipe": "w4a8", "instances": [LATENCY_PLAN]})
    for r in rows["latency"]:
        out.append(Evidence(r["scenario"], "latency", r["measured_ms"],
                            lambda h, r=r: step_ms(lat_dep, r["phase"], r["query_len"], r["context_len"], h)))
    from .bench import metrics
    for r in rows["rows"]:
        dep = deployment(r)
        wl = workload(r, acceptance)
        out.append(Evidence(r["id"], "throughput", r["measured_output_tok_s"],
                            lambda h, dep=dep, wl=wl: metrics(simulate(dep, wl, h))["output_throughput"]))
    return out


LO = np.array([0.0, 0.0, 0.0, 0.0])
HI = np.array([500.0, 500.0, 5000.0, 200.0])     # us, us, us, ms


def to_host(x: np.ndarray) -> np.ndarray:
    return np.array([x[0] * 1e-6, x[1] * 1e-6, x[2] * 1e-6, x[3] * 1e-3])


def fit(ev: list[Evidence], x0=(30.0, 100.0, 100.0, 20.0)) -> np.ndarray:
    """Minimise the mean squared log error over ``ev`` (bounded Nelder-Mead, restarted)."""
    from ..perf.calibrate import minimize_restarted

    def f(x):
        h = to_host(x)
        return float(np.mean([np.log(max(e.predict(h), 1e-9) / e.measured) ** 2 for e in ev]))
    return minimize_restarted(f, list(x0), LO, HI, max_restarts=3).x


def errors(ev: list[Evidence], x: np.ndarray) -> dict[str, float]:
    h = to_host(x)
    return {e.name: e.predict(h) / e.measured for e in ev}


def leave_one_out(ev: list[Evidence], x0=(30.0, 100.0, 100.0, 20.0)) -> dict[str, float]:
    """Ratio predicted/measured of each row from a fit without it."""
    out = {}
    for i, e in enumerate(ev):
        x = fit(ev[:i] + ev[i + 1:], x0)
        out[e.name] = e.predict(to_host(x)) / e.measured
    return out


__all__ = ["fit", "leave_one_out", "errors", "evidence", "load_rows", "deployment", "workload", "step_ms",
           "HOST_KEYS", "ROLE"]
