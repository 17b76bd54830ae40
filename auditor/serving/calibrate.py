"""Fit the shared host model (``launch_us, prefill_token_us, step_ms`` of the device's ``serving``
block; ``auditor.perf.host``) to measured single-request step latencies and measured serving
throughputs, with leave-one-out.

Only two kinds of evidence may be fitted (published README sections A/B and the latency CSV):
the four single-request latency rows and the six section-B throughput rows. Everything else is
validation. Of those, the fit uses the rows that can inform the constants of the profile it writes
(``fitted_rows``): rows measured on that device (a3-752t; the one A2 row checks that A2 may share
A3's host constants) and not at the KV edge (a row whose throughput +-5% of the KV pool moves by
more than 1.25x is decided by memory, and its jumps make the objective non-smooth). The rows left
out are still predicted and reported. The device-time tables do not depend on the host constants,
so every row's tables are built once (``Deployment.costs``). A row's log prediction is close to
linear in the log of the host constants, so the fit is Gauss-Newton: linearise every row by
simulation, solve the bounded linear least squares, repeat, and finish with a compass search where
a schedule flip stops the linearisation; leave-one-out refits each fold the same way from the full
fit's optimum and checks the held-out row by one simulation.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..context import DeploymentContext
from ..deployment import InstancePlan
from .costs import HOST_KEYS, ROLE
from .sim import BenchWorkload, Deployment, simulate

LATENCY_PLAN = dict(name="aggregated", count=1, tp=16, dp=1, ep=16, sp=False, max_num_seqs=16,
                    max_num_batched_tokens=4096, max_model_len=131072, gpu_memory_utilization=0.95, mtp=3)


def load_rows(path: Path) -> dict[str, Any]:
    from ..inputs import load_json
    return load_json(path, "serving rows")


def deployment(row: dict, engine: Any = "vllm-ascend@main") -> Deployment:
    from ..devices.profiles import load_device
    from ..source import open_model
    src = open_model(row["model"], row.get("recipe"), tables=False, hf_overrides=row.get("hf_overrides"))
    insts = [InstancePlan(**i) for i in row["instances"]]
    return Deployment(DeploymentContext(src.spec, None, engine, src.scheme_recipe,
                                        load_device(row.get("device", "a3-752t"))), insts)


def workload(row: dict, acceptance: Any = None) -> BenchWorkload:
    """A row's client; ``acceptance`` None: the model family's measured default (``perf.acceptance``), the
    same as ``audit bench`` takes: acceptance is an input of the fit, never one of its parameters."""
    from ..perf.acceptance import resolve
    return BenchWorkload(acceptance=resolve(row["model"], acceptance), **row["workload"])


def step_ms(dep: Deployment, phase: str, query: int, context: int, host: np.ndarray) -> float:
    """One engine step of one request (the latency rows), as ``audit perf`` computes it: an eager
    prefill chunk or a graph decode step, device time plus the shared host model."""
    from ..perf.api import Workload, evaluate_phase
    c = dep.costs()[0]
    k = int(c.inst.mtp)
    if phase == "prefill":
        wl = Workload("prefill", int(query), int(context), 1, k)
    else:
        wl = Workload("decode", int(query), int(context), 1, k)
    ph = evaluate_phase(dep.base.with_plan(c.plan), wl, "repetition", cache=c.inst.kv_cache_dtype,
                        chunk=c.inst.max_num_batched_tokens, host=host)
    return ph.time_ms


#: the profile the joint fit writes its calibration block into (the A2 profile gets the same constants)
CALIBRATED_DEVICE = "a3-752t"


@dataclass
class Evidence:
    name: str
    kind: str               # "latency" | "throughput"
    measured: float
    predict: Any            # host vector -> predicted value
    #: a throughput row at the KV edge (``serving.sim.kv_sensitivity``): +-5% of the KV pool moves it by
    #: more than 1.25x, so its miss says more about memory than about the host constants
    edge: bool = False
    spread: tuple[float, float] | None = None
    device: str = CALIBRATED_DEVICE


def evidence(rows: dict, acceptance: Any = None, overrides: dict[str, Any] | None = None) -> list[Evidence]:
    """The fit's rows: the latency rows and the throughput rows (``acceptance`` for every row, or per row id
    in ``overrides``; None: the family's measured default)."""
    out = []
    lat_dep = deployment({"model": "glm-5.1", "recipe": "w4a8", "instances": [LATENCY_PLAN]})
    for r in rows["latency"]:
        out.append(Evidence(r["scenario"], "latency", r["measured_ms"],
                            lambda h, r=r: step_ms(lat_dep, r["phase"], r["query_len"], r["context_len"], h)))
    for r in rows["rows"]:
        out.append(throughput_evidence(r["id"], r["measured_output_tok_s"], deployment(r),
                                       workload(r, (overrides or {}).get(r["id"], acceptance))))
    return out


def throughput_evidence(name: str, measured: float, dep: Deployment, wl: BenchWorkload) -> Evidence:
    """One throughput row: the simulated output tok/s under a host vector as its prediction, its KV-edge
    spread (``kv_sensitivity``) and its device (the calibration rows and the CI rows alike)."""
    from .bench import metrics
    from .sim import at_kv_edge, kv_sensitivity
    lo, hi = kv_sensitivity(dep, wl)
    return Evidence(name, "throughput", measured, lambda h: metrics(simulate(dep, wl, h))["output_throughput"],
                    at_kv_edge(lo, hi), (lo, hi), dep.device.name)


def fitted_rows(ev: list[Evidence]) -> list[Evidence]:
    """The rows the fit uses: measured on the calibrated device and not at the KV edge."""
    return [e for e in ev if e.device == CALIBRATED_DEVICE and not e.edge]


def left_out(e: Evidence) -> str:
    """Why a row is predicted but not fitted ('' when it is fitted)."""
    if e.edge:
        from .sim import kv_edge_text
        return kv_edge_text(*e.spread)
    if e.device != CALIBRATED_DEVICE:
        return f"{e.device}: checks that the device shares {CALIBRATED_DEVICE}'s host constants"
    return ""


#: what the joint fit varies (the serving block keys, in HOST_KEYS units: us, us, us, ms); decode_token_us
#: stays at the profile's value (0: the step tables already count per-token decode work)
FIT_KEYS = ("launch_us", "prefill_token_us", "step_ms", "draft_launch_us", "async_overlap")
_SCALE = {"launch_us": 1e-6, "prefill_token_us": 1e-6, "cp_prefill_token_us": 1e-6, "decode_token_us": 1e-6, "step_ms": 1e-3,
          "draft_launch_us": 1e-6, "async_overlap": 1.0}
LO = np.array([1.0, 1.0, 1.0, 1.0, 0.01])
HI = np.array([1000.0, 1000.0, 200.0, 1000.0, 1.0])


def to_host(x: np.ndarray, base: np.ndarray | None = None, keys: tuple | None = None) -> np.ndarray:
    """Fitted values (us / ms) -> the host vector ``host_params`` returns (``keys``: FIT_KEYS as it is now)."""
    keys = FIT_KEYS if keys is None else keys
    h = np.zeros(len(HOST_KEYS)) if base is None else np.array(base, dtype=np.float64)
    for v, k in zip(x, keys):
        h[HOST_KEYS.index(k)] = v * _SCALE[k]
    if "draft_launch_us" not in keys and base is None:
        h[HOST_KEYS.index("draft_launch_us")] = h[HOST_KEYS.index("launch_us")]    # host_params' rule
    if "async_overlap" not in keys and base is None:
        h[HOST_KEYS.index("async_overlap")] = 1.0
    if "cp_prefill_token_us" not in keys and base is None:
        h[HOST_KEYS.index("cp_prefill_token_us")] = h[HOST_KEYS.index("prefill_token_us")]
    return h


@dataclass
class Linear:
    """log(prediction) of every row, linear in log(x) around ``x0`` (one simulation per parameter)."""
    x0: np.ndarray
    y0: np.ndarray          # log predictions at x0
    J: np.ndarray           # d log(pred) / d log(x)
    logm: np.ndarray        # log measured

    def predict(self, x: np.ndarray) -> np.ndarray:
        return self.y0 + self.J @ (np.log(x) - np.log(self.x0))


def linearize(ev: list[Evidence], x0: np.ndarray, base: np.ndarray | None = None, step: float = 0.05) -> Linear:
    x0 = np.asarray(x0, dtype=np.float64)
    y0 = np.log([max(e.predict(to_host(x0, base)), 1e-12) for e in ev])
    J = np.zeros((len(ev), len(x0)))
    for i in range(len(x0)):
        x = x0.copy()
        x[i] *= math.exp(step)
        J[:, i] = (np.log([max(e.predict(to_host(x, base)), 1e-12) for e in ev]) - y0) / step
    return Linear(x0, y0, J, np.log([e.measured for e in ev]))


def _solve(lin: Linear, rows: np.ndarray) -> np.ndarray:
    """Minimise the mean squared log error of ``rows`` on the linear model within [LO, HI]
    (bounded least squares by active-set clipping; a few parameters, so exhaustive over the bounds)."""
    J, r = lin.J[rows], lin.logm[rows] - lin.y0[rows]
    lo, hi = np.log(LO / lin.x0), np.log(HI / lin.x0)
    free = np.ones(len(lin.x0), bool)
    d = np.zeros(len(lin.x0))
    for _ in range(len(lin.x0) + 1):
        d[free] = np.linalg.lstsq(J[:, free], r - J[:, ~free] @ d[~free], rcond=None)[0] if free.any() else 0.0
        out = free & ((d < lo) | (d > hi))
        if not out.any():
            break
        d = np.clip(d, lo, hi)
        free &= ~out
    return lin.x0 * np.exp(np.clip(d, lo, hi))


def msle(ev: list[Evidence], x: np.ndarray, base: np.ndarray | None = None) -> float:
    return msle_at(ev, to_host(x, base))


def msle_at(ev: list[Evidence], h: np.ndarray) -> float:
    """Mean squared log error of ``ev``'s predictions under the host vector ``h``."""
    return float(np.mean([math.log(max(e.predict(h), 1e-12) / e.measured) ** 2 for e in ev]))


def fit(ev: list[Evidence], x0=(170.0, 130.0, 16.0, 170.0, 0.5), base: np.ndarray | None = None, iters: int = 8,
        tol: float = 1e-3) -> np.ndarray:
    """Gauss-Newton on the mean squared log error: linearise every row around x (one simulation per
    parameter), solve the bounded linear least squares, and keep the step when the simulated objective
    improves (else halve it): the simulation is piecewise in the constants (discrete schedules), so the
    best simulated point is kept. Where the linearisation stops helping (a schedule flips between the
    probe points) a compass search in log space finishes the job (``_compass``)."""
    x = np.asarray(x0, dtype=np.float64)
    fx = msle(ev, x, base)
    for _ in range(iters):
        lin = linearize(ev, x, base)
        target = _solve(lin, np.arange(len(ev)))
        step, moved = 1.0, False
        while step > 0.1:
            nx = x * (target / x) ** step
            fn = msle(ev, nx, base)
            if fn < fx:
                moved = np.max(np.abs(np.log(nx / x))) >= tol
                x, fx = nx, fn
                break
            step /= 2
        if not moved:
            break
    return _compass(ev, x, fx, base)


def _compass(ev: list[Evidence], x: np.ndarray, fx: float, base: np.ndarray | None,
             steps: tuple[float, ...] = (0.2, 0.1, 0.05, 0.02), budget: int = 80) -> np.ndarray:
    """Derivative-free polish: move one constant at a time by exp(+-step) (within LO/HI) while the
    simulated objective improves, then refine the step; at most ``budget`` objective evaluations."""
    n = 0
    for st in steps:
        improved = True
        while improved and n < budget:
            improved = False
            for i in range(len(x)):
                for sign in (1.0, -1.0):
                    nx = x.copy()
                    nx[i] = min(max(x[i] * math.exp(sign * st), LO[i]), HI[i])
                    if nx[i] == x[i]:
                        continue
                    n += 1
                    fn = msle(ev, nx, base)
                    if fn < fx - 1e-12:
                        x, fx, improved = nx, fn, True
                        break
                if improved or n >= budget:
                    break
    return x


def errors(ev: list[Evidence], x: np.ndarray, base: np.ndarray | None = None) -> dict[str, float]:
    h = to_host(x, base)
    return {e.name: e.predict(h) / e.measured for e in ev}


def leave_one_out(ev: list[Evidence], x: np.ndarray, base: np.ndarray | None = None, iters: int = 3,
                  ) -> dict[str, float]:
    """Ratio predicted/measured of each row from a fit without it (``fitted_rows``; a row the fit never
    uses is predicted from the full fit); each fold's Gauss-Newton starts at the full fit's optimum ``x``
    (a few iterations suffice: a fold moves the constants a little)."""
    out = {}
    used = fitted_rows(ev)
    for e in ev:
        xi = fit([o for o in used if o is not e], x, base, iters=iters) if e in used else x
        out[e.name] = e.predict(to_host(xi, base)) / e.measured
    return out


# -- can the rows tell MTP acceptance from the host constants? ---------------------------------------------
#: the acceptance change asked about: 10% in log, either way (GLM's 0.845 per draft -> 0.93 / 0.77)
ACCEPTANCE_STEP = math.log(1.1)
#: a refit at the changed acceptance whose objective is within this factor of the shipped fit's explains the
#: rows as well: they cannot tell that acceptance from the default
SEPARABLE_RATIO = 1.25


def acceptance_separation(rows: dict, x: np.ndarray, ev: list[Evidence] | None = None, iters: int = 3) -> list[dict]:
    """Whether the fitted rows can tell each model family's MTP acceptance from the host constants (issue 29).
    The fit holds acceptance at each family's measured default (``workload``), so it must say when the rows
    could not have told it otherwise, or that they lean away from it. Per family (the rows sharing one default),
    the host constants are refitted (``fit``, from ``x``) with that family's per-draft acceptance
    ``ACCEPTANCE_STEP`` higher and lower: both refits within ``SEPARABLE_RATIO`` of ``x``'s objective, the rows
    cannot separate acceptance from the host constants; one much better, they prefer that acceptance; both
    worse, they support the default. Acceptance itself is never fitted (issue 29: defaults from public
    measurements); this says how far the rows agree."""
    from ..perf.acceptance import given, resolve
    ev = evidence(rows) if ev is None else ev
    used = fitted_rows(ev)
    base = msle(used, x)
    by_id = {r["id"]: r for r in rows["rows"]}
    groups: dict[str, list[str]] = {}
    for e in used:
        if e.kind == "throughput":
            groups.setdefault(resolve(by_id[e.name]["model"]).source, []).append(e.name)
    out = []
    for source, names in groups.items():
        res = {}
        for label, sign in (("higher", 1.0), ("lower", -1.0)):
            changed = {}
            for n in names:
                r = by_id[n]
                k = max(int(inst.get("mtp", 0)) for inst in r["instances"])
                changed[n] = given(min(resolve(r["model"]).equivalent(k) * math.exp(sign * ACCEPTANCE_STEP), 0.99))
            ev2 = fitted_rows(evidence(rows, overrides=changed))
            x2 = fit(ev2, tuple(x), iters=iters)
            res[label] = {"msle": round(msle(ev2, x2), 5), "constants": {k: round(float(v), 4) for k, v in zip(FIT_KEYS, x2)}}
        up, down = res["higher"]["msle"] / base, res["lower"]["msle"] / base
        if min(up, down) < 1 / SEPARABLE_RATIO:
            verdict = "the rows prefer a " + ("higher" if up < down else "lower") + " acceptance than the default"
        elif min(up, down) > SEPARABLE_RATIO:
            verdict = "the rows support the default against both"
        else:
            verdict = "the rows cannot separate it from the host constants"
        out.append({"acceptance": source, "rows": names, "msle": round(base, 5), **res, "verdict": verdict,
                    "separable": not verdict.endswith("host constants")})
    return out


# -- the DSA-CP prefill price, fitted apart (stage 2) ------------------------------------------------------
#: none of the joint fit's rows runs DSA-CP (P8, the one that does, sits at the KV edge), so its price per
#: prefill token of a DSA-CP rank is fitted on the CI rows that run it, with the joint fit's constants held
CP_KEY = "cp_prefill_token_us"
#: the 1-D search's grid, us per prefill token of a DSA-CP rank (its floor: the Param's lower bound); the best
#: grid point is refined by golden section between its neighbours (the objective is piecewise: schedules flip)
CP_GRID = (0.01, 2.0, 5.0, 10.0, 20.0, 35.0, 50.0, 75.0, 100.0, 150.0, 200.0, 300.0)


def with_cp(host: np.ndarray, value_us: float) -> np.ndarray:
    """``host`` (a 7-slot vector) with the DSA-CP prefill price set to ``value_us``."""
    h = np.array(host, dtype=np.float64)
    h[HOST_KEYS.index(CP_KEY)] = value_us * _SCALE[CP_KEY]
    return h


def cp_msle(ev: list[Evidence], host: np.ndarray, value_us: float) -> float:
    return msle_at(ev, with_cp(host, value_us))


def fit_cp(ev: list[Evidence], host: np.ndarray, grid: tuple[float, ...] = CP_GRID, rounds: int = 8) -> float:
    """The DSA-CP price (us) of least mean squared log error over ``ev`` (the rows not at the KV edge), the
    other constants held at ``host``: the best of ``grid``, then golden section between its neighbours."""
    used = [e for e in ev if not e.edge]
    vals = [cp_msle(used, host, v) for v in grid]
    i = int(np.argmin(vals))
    a, b = grid[max(i - 1, 0)], grid[min(i + 1, len(grid) - 1)]
    best, fbest = grid[i], vals[i]
    g = (math.sqrt(5) - 1) / 2
    c, d = b - g * (b - a), a + g * (b - a)
    fc, fd = cp_msle(used, host, c), cp_msle(used, host, d)
    for _ in range(rounds):
        for v, f in ((c, fc), (d, fd)):
            if f < fbest:
                best, fbest = v, f
        if fc < fd:
            b, d, fd = d, c, fc
            c = b - g * (b - a)
            fc = cp_msle(used, host, c)
        else:
            a, c, fc = c, d, fd
            d = a + g * (b - a)
            fd = cp_msle(used, host, d)
    for v, f in ((c, fc), (d, fd)):
        if f < fbest:
            best, fbest = v, f
    return float(best)


__all__ = ["fit", "msle", "leave_one_out", "errors", "evidence", "load_rows", "deployment", "workload", "step_ms",
           "linearize", "to_host", "fitted_rows", "left_out", "FIT_KEYS", "HOST_KEYS", "ROLE", "CP_KEY",
           "fit_cp", "cp_msle", "with_cp", "cp_block", "acceptance_separation", "msle_at", "throughput_evidence",
           "SEPARABLE_RATIO", "ACCEPTANCE_STEP"]


def calibration_block(ev: list[Evidence], x: np.ndarray, loo: dict[str, float], base_device: Any,
                      source: str) -> dict:
    """The device profile's ``calibration`` block of a joint fit: the fitted serving constants, each
    row's ratio (fit and leave-one-out), and the latency rows as ``audit calibrate`` scenarios (their
    ``after_ms`` is what ``audit perf`` gives with the fitted constants)."""
    import datetime as _dt

    from ..perf.calibrate import PARAMS, git_head
    from ..perf.host import DEFAULT_HOST
    h = to_host(x)
    fitted = {k: {"value": round(float(v), 4), "before": DEFAULT_HOST[k], "bounds": [PARAMS[k].lo, PARAMS[k].hi],
                  "doc": PARAMS[k].doc} for k, v in zip(FIT_KEYS, x)}
    scen, rows = [], []
    for e in ev:
        got = e.predict(h)
        if e.kind == "latency":
            scen.append({"scenario": e.name, "measured_ms": e.measured, "after_ms": round(got, 3),
                         "error_after_pct": round(100 * (got / e.measured - 1), 2),
                         "loo_ms": round(loo[e.name] * e.measured, 3),
                         "error_loo_pct": round(100 * (loo[e.name] - 1), 2)})
        else:
            why = left_out(e)
            rows.append({"id": e.name, "measured_output_tok_s": e.measured, "after_output_tok_s": round(got, 2),
                         "ratio": round(got / e.measured, 3), "ratio_loo": round(loo[e.name], 3),
                         "fitted": not why, **({"not_fitted": why} if why else {}),
                         **({"kv_edge_tok_s": [round(v, 2) for v in e.spread]} if e.edge else {})})
    return {"status": "calibrated", "date": _dt.date.today().isoformat(), "base_profile": base_device.name,
            "source": source, "fitted_on_commit": git_head(),
            "objective": "mean squared log error over the four latency rows and the a3-752t serving throughputs "
                         "not at the KV edge (Gauss-Newton on simulated rows, bounded), acceptance held at the "
                         "measured defaults; every row is predicted, the ones not fitted say why",
            "fitted": fitted, "scenarios": scen, "throughput_rows": rows,
            "note": "Host model shared by audit perf, sweep and bench (auditor/perf/host.py): an eager step pays "
                    "launch_us per kernel and collective and prefill_token_us per prefill token a rank runs "
                    "(cp_prefill_token_us per token of a DSA-CP rank, which runs 1/TP of the step's: fitted apart, "
                    "cp_stage); a graph decode "
                    "step pays step_ms (overlapped with the device step under --async-scheduling) and, on GLM (drafter "
                    "forced eager), the drafter's launches at draft_launch_us. What they "
                    "absorb: launch_us the host launch of each eager kernel not hidden behind device work (and "
                    "the device idling between short eager kernels); prefill_token_us per-token eager prefill "
                    "work the roofline misses (kernels below their roofline efficiency); step_ms graph replay, "
                    "scheduling, input preparation and sampling; draft_launch_us each drafter kernel behind a replayed "
                    "graph; async_overlap the share of step_ms that --async-scheduling hides behind the device step "
                    "(the fit puts it near its 0.01 floor: the rows show almost no overlap). Context-dependent kernels keep "
                    "their kernel-path "
                    "constants (docs/long-context-kernels.md): growth with context is predicted, not fitted. "
                    "Refit with python -m auditor.serving.calibrate --write when the op model or the simulation "
                    "changes."}


def cp_block(ev: list[Evidence], x: np.ndarray, cp: float) -> dict:
    """The calibration block's record of the DSA-CP stage: the value, its rows and their ratios."""
    from ..perf.calibrate import PARAMS
    h = with_cp(to_host(x), cp)
    return {"fitted": {CP_KEY: {"value": round(cp, 4), "bounds": [PARAMS[CP_KEY].lo, PARAMS[CP_KEY].hi],
                                "doc": PARAMS[CP_KEY].doc}},
            "objective": "mean squared log error of output throughput over the CI rows of the published README's "
                         "sections B, E and F (auditor/serving/ci_rows.py, read as audit bench --launch reads them) "
                         "that run DSA-CP on a3-752t and are not at the KV edge; the joint fit's constants held; "
                         "grid then golden section (CP_GRID)",
            "rows": [{"id": e.name, "measured_output_tok_s": e.measured,
                      "after_output_tok_s": round(e.predict(h), 2), "ratio": round(e.predict(h) / e.measured, 3),
                      "fitted": not e.edge, **({"not_fitted": left_out(e)} if e.edge else {})} for e in ev]}


def main(argv: list[str] | None = None) -> int:
    """``python -m auditor.serving.calibrate [--write]``: the joint fit, its table and leave-one-out; with
    ``--write`` the serving block and calibration block of the shipped A3 and A2 profiles. The DSA-CP price
    and its record are kept as shipped: ``python -m auditor.ci_calibration --write`` refits them on the CI
    configs (it reads them as ``audit bench --launch`` does, so it lives above the CLI)."""
    import argparse

    from ..devices.profiles import load_device
    ap = argparse.ArgumentParser(prog="python -m auditor.serving.calibrate")
    ap.add_argument("--rows", default=str(Path(__file__).resolve().parents[2] / "tests" / "data" /
                                          "serving_published.json"))
    ap.add_argument("--write", action="store_true")
    a = ap.parse_args(argv)
    rows = load_rows(Path(a.rows))
    ev = evidence(rows)
    # from the shipped constants (a refit moves them only where the rows ask), the guess for a new key
    own = load_device(CALIBRATED_DEVICE).serving or {}
    x = fit(fitted_rows(ev), tuple(float(own.get(k, d)) for k, d in zip(FIT_KEYS, (170.0, 130.0, 16.0, 170.0, 0.5))))
    err, loo = errors(ev, x), leave_one_out(ev, x)
    print("fitted: " + ", ".join(f"{k}={v:.4g}" for k, v in zip(FIT_KEYS, x)))
    print(f"{'row':14s} {'measured':>10s} {'fit':>7s} {'LOO':>7s}")
    for e in ev:
        why = left_out(e)
        print(f"{e.name:14s} {e.measured:10.2f} {err[e.name]:7.3f} {loo[e.name]:7.3f}"
              + (f"  not fitted: {why}" if why else ""))
    sep = acceptance_separation(rows, x, ev)
    for g in sep:
        print(f"acceptance held at {g['acceptance']} (rows {', '.join(g['rows'])}): objective {g['msle']:.4f}; "
              f"refitted at 10% higher {g['higher']['msle']:.4f}, 10% lower {g['lower']['msle']:.4f}: {g['verdict']}")
    if a.write:
        import json as _json

        from ..outputs import write_output
        src = ("four single-request latency rows (" + rows["latency_source"] + ") and six serving throughputs ("
               + rows["source"][:160] + "...); MTP acceptance held at each family's measured default "
               "(auditor/perf/acceptance.py: GLM 3.16 tokens/step at MTP 3, vLLM-Ascend #9803; DeepSeek 0.7, "
               "assumed), not fitted; --async-scheduling as each row's launch sets it")
        for name in ("a3-752t", "a2-313t"):
            path = Path(__file__).resolve().parents[1] / "devices" / f"{name}.json"
            doc = _json.loads(path.read_text(encoding="utf-8"))
            doc.pop("host_ms", None)
            old = doc.get("serving", {})
            doc["serving"] = {**{k: round(float(v), 4) for k, v in zip(FIT_KEYS, x)},
                              "decode_token_us": old.get("decode_token_us", 0.0),
                              **({CP_KEY: old[CP_KEY]} if CP_KEY in old else {}),
                              "source": "joint fit, auditor/serving/calibrate.py (one host model for A3 and A2); "
                                        "see the a3-752t calibration block for the rows"}
            if name == "a3-752t":
                stage = doc.get("calibration", {}).get("cp_stage")
                doc["calibration"] = calibration_block(ev, x, loo, load_device(name), src)
                doc["calibration"]["acceptance_separation"] = sep
                if stage:
                    doc["calibration"]["cp_stage"] = stage
            write_output(path, _json.dumps(doc, indent=2) + "\n", "--write")      # the one writer
            print(f"wrote {path}")
        if CP_KEY in own:
            print(f"note: {CP_KEY} kept at {own[CP_KEY]:g}: refit it on the new constants with "
                  "python -m auditor.ci_calibration --write")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
