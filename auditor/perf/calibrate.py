"""Fit a device profile's efficiency constants to measured end-to-end latencies.

Why: the analytic model's efficiencies (fraction of peak FLOP/s and bandwidth actually reached,
fixed cost per kernel) are the least certain inputs; TensorCast's defaults miss the measured
GLM-5.1 latencies by ~29 % on average. Given a few measured scenarios we fit a *small* number of
those constants (few scenarios, so few knobs) and ship them with their provenance, the
per-scenario errors and a leave-one-out error that shows how much the fit generalises.

Method: each fitted constant is searched in log space (efficiencies span decades and must stay
positive) within physical bounds. Our own Nelder-Mead simplex search (``nelder_mead``, no scipy:
audit does not depend on it) minimises the mean absolute percentage error (MAPE) itself, the
figure reported; MAPE is not smooth, which a derivative-free simplex tolerates. Trial points are
clipped to the bounds, the start simplex is fixed (deterministic results), and the search is
restarted from its best point until a restart no longer improves it, because a simplex can
collapse early on a kinked objective.

Measurement file (CSV, '#' comment lines): ``scenario,phase,query_len,context_len,measured_ms``.
For prefill rows query_len is the new tokens and context_len the tokens already cached; for
decode rows query_len is the tokens verified per step (1 + MTP draft tokens) and context_len the
context length.
"""
from __future__ import annotations

import csv
import datetime as _dt
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Sequence

import numpy as np

from ..devices.profiles import Device
from ..errors import AuditInputError
from .host import HOST_KEYS, serving_block

if TYPE_CHECKING:
    from ..context import DeploymentContext


@dataclass(frozen=True)
class Scenario:
    name: str
    phase: str            # "prefill" | "decode"
    query_len: int
    context_len: int
    measured_ms: float


EvaluateFn = Callable[[Device, Scenario], float]   # modeled latency in ms


@dataclass(frozen=True)
class Param:
    """One fittable constant: where it lives in the profile and its physical bounds.

    ``static`` scales the per-kernel fixed costs (``static_us`` mma and gp together, keeping
    their ratio), because kernel launch and scheduling overhead is one phenomenon on the device.
    """
    name: str
    lo: float
    hi: float
    doc: str

    def get(self, dev: Device, base: Device) -> float:
        if self.name == "static":
            return dev.static_us["mma"] / base.static_us["mma"] if base.static_us["mma"] else 1.0
        if self.name in HOST_KEYS:
            return serving_block(dev)[self.name]            # host_params' defaults and fallbacks
        if self.name == "sort":
            return dev.sort_rate
        return dev.efficiency[self.name]

    def set(self, dev: Device, value: float, base: Device) -> Device:
        if self.name == "static":
            return replace(dev, static_us={**dev.static_us, "mma": base.static_us["mma"] * value,
                                           "gp": base.static_us["gp"] * value})
        if self.name in HOST_KEYS:
            return replace(dev, serving={**(dev.serving or {}), self.name: value})
        if self.name == "sort":
            return replace(dev, vector_sort_ops_per_s=value)
        return dev.with_efficiency(**{self.name: value})


PARAMS: dict[str, Param] = {p.name: p for p in (
    Param("compute", 0.05, 1.0, "fraction of MMA/vector peak reached"),
    Param("memory", 0.05, 1.0, "fraction of HBM peak reached on dense streams"),
    Param("sfa_kv", 0.005, 8.0, "fraction of HBM peak reached by SFA's KV gathers (above 1: served from L2)"),
    Param("indexer_cache", 0.01, 8.0, "fraction of HBM peak reached by the indexer's key-cache reads"),
    Param("comm", 0.05, 1.0, "fraction of link bandwidth reached"),
    Param("static", 0.05, 20.0, "multiplier of the per-kernel fixed cost (static_us mma and gp)"),
    Param("launch_us", 1.0, 1000.0, "host time per kernel or collective launched in an eager step (every "
                                    "prefill or mixed step; the GLM MTP drafter's K passes in a decode step), us"),
    Param("draft_launch_us", 1.0, 1000.0, "host time per kernel or collective of an eager MTP drafter pass run "
          "behind a replayed decode graph (GLM), us"),
    Param("async_overlap", 0.01, 1.0, "share of step_ms that --async-scheduling overlaps with the device step"),
    Param("prefill_token_us", 1.0, 1000.0, "host/uncounted time per prefill token of an eager step, us"),
    Param("cp_prefill_token_us", 0.01, 1000.0, "the same per prefill token a DSA-CP rank runs (tokens / TP of the "
                                              "step's), us"),
    Param("decode_token_us", 0.01, 5000.0, "time per decode token of any step, us"),
    Param("step_ms", 0.1, 500.0, "host time per engine step (graph replay, scheduling, sampling), ms"),
    Param("sort", 1e10, 1e13, "vector sort/merge element ops per second (the indexer's fused top-k)"),
)}
#: what ``audit calibrate`` fits by default on single-request latencies: the host model shared by perf,
#: sweep and bench (``auditor.perf.host``; the device's ``serving`` block), prefill tokens and the
#: per-step cost, both flat in context. The context-dependent ops (indexer, fused top-k, SFA) keep
#: their kernel-path constants (auditor/engines/vllm_ascend/kernel_paths.py) and the device's unfitted
#: efficiencies, so the growth from 3.5k to 32k context is predicted, not fitted. The shipped profiles'
#: serving block comes from the joint fit on latencies and serving throughputs (auditor.serving.calibrate).
DEFAULT_FIT = ("prefill_token_us", "step_ms")


@dataclass
class CalibrationResult:
    device: Device                      # the calibrated profile (calibration block filled in)
    fitted: dict[str, float]            # parameter name -> value
    scenarios: list[Scenario]
    before_ms: list[float]
    after_ms: list[float]
    loo_ms: list[float] = field(default_factory=list)   # each scenario predicted by a fit without it

    @staticmethod
    def _err(model: float, s: Scenario) -> float:
        return 100.0 * (model - s.measured_ms) / s.measured_ms

    @property
    def errors_before(self) -> list[float]:
        return [self._err(m, s) for m, s in zip(self.before_ms, self.scenarios)]

    @property
    def errors_after(self) -> list[float]:
        return [self._err(m, s) for m, s in zip(self.after_ms, self.scenarios)]

    @property
    def errors_loo(self) -> list[float]:
        return [self._err(m, s) for m, s in zip(self.loo_ms, self.scenarios)]

    @property
    def mape_before(self) -> float:
        return float(np.mean(np.abs(self.errors_before)))

    @property
    def mape_after(self) -> float:
        return float(np.mean(np.abs(self.errors_after)))

    @property
    def mape_loo(self) -> float | None:
        return float(np.mean(np.abs(self.errors_loo))) if self.loo_ms else None


MAX_QUERY_LEN = 1 << 24          # 16M tokens, the --isl / --max-model-len cap
MAX_MEASURED_MS = 1e9
MIN_MEASURED_MS = 1e-6          # 1 ns: a denormal "measurement" would make every relative error infinite


def load_scenarios(path: str | Path) -> list[Scenario]:
    """Read the measurement CSV through the one capped line reader; one AuditInputError naming file
    and line on any problem (numbers are ASCII, query_len 1..2^24, context_len 0..2^24, measured_ms
    in (0, 1e9])."""
    from ..inputs import CSV_CAP, iter_lines, parse_number
    path = Path(path)
    body = [(n, ln) for n, ln in iter_lines(path, "measurements", CSV_CAP)
            if ln.strip() and not ln.lstrip().startswith("#")]
    if not body:
        raise AuditInputError(path, "no measurements (expected scenario,phase,query_len,context_len,measured_ms)")
    try:
        rows = list(csv.reader([ln for _, ln in body]))
    except csv.Error as exc:
        raise AuditInputError(path, f"malformed CSV: {exc}") from None
    header = [h.strip() for h in rows[0]]
    need = ("scenario", "phase", "query_len", "context_len", "measured_ms")
    missing = [c for c in need if c not in header]
    if missing:
        raise AuditInputError(path, f"line {body[0][0]}: missing column(s) {', '.join(missing)}")
    idx = {c: header.index(c) for c in need}
    out: list[Scenario] = []
    for (lineno, _), row in zip(body[1:], rows[1:]):
        if len(row) < len(header):
            raise AuditInputError(path, f"line {lineno}: bad row (expected {len(header)} columns, got {len(row)})")
        at = f"line {lineno}: bad row: "
        q = parse_number(row[idx["query_len"]], path, at + "query_len", lo=1, hi=MAX_QUERY_LEN, integer=True)
        c = parse_number(row[idx["context_len"]], path, at + "context_len", lo=0, hi=MAX_QUERY_LEN, integer=True)
        ms = parse_number(row[idx["measured_ms"]], path, at + "measured_ms", lo=0, hi=MAX_MEASURED_MS)
        if 0 < ms < MIN_MEASURED_MS:
            raise AuditInputError(path, f"line {lineno}: measured_ms {row[idx['measured_ms']].strip()[:40]} is below "
                                        f"{MIN_MEASURED_MS:g} ms (1 ns): not a kernel or step time")
        s = Scenario(name=row[idx["scenario"]].strip(), phase=row[idx["phase"]].strip().lower(),
                     query_len=int(q), context_len=int(c), measured_ms=ms)
        if s.phase not in ("prefill", "decode"):
            raise AuditInputError(path, f"line {lineno}: phase must be prefill or decode, got {s.phase[:40]!r}")
        if not s.measured_ms > 0:
            raise AuditInputError(path, f"line {lineno}: query_len >= 1, context_len >= 0, measured_ms > 0 required")
        out.append(s)
        if len(out) > MAX_SCENARIOS:
            raise AuditInputError(path, f"more than {MAX_SCENARIOS} measurements: a fit costs rows x (1 + folds) x "
                                        "evaluations (100 rows took 149 s), so calibrate takes at most "
                                        f"{MAX_SCENARIOS} per file; split it")
    if not out:
        raise AuditInputError(path, "header but no measurement rows")
    return out


#: measurements one calibration fits: its cost is rows x (1 + MAX_LOO_FOLDS) x Nelder-Mead evaluations x one
#: perf evaluation (~1.5 ms); 20 rows took 30 s and 100 rows 149 s on 2 cores, so 64 bounds a run near 100 s
MAX_SCENARIOS = 64
MAX_LOO_FOLDS = 20              # leave-one-out up to 20 scenarios, 20-fold beyond


def _resolve(names: Sequence[str]) -> list[Param]:
    bad = [n for n in names if n not in PARAMS]
    if bad:
        raise AuditInputError("--fit", f"unknown constant(s) {', '.join(bad)} (known: {', '.join(PARAMS)})")
    if len(set(names)) != len(names) or not names:
        raise AuditInputError("--fit", "give each constant once, at least one")
    return [PARAMS[n] for n in names]


@dataclass(frozen=True)
class SimplexResult:
    x: np.ndarray          # best point found
    fun: float             # objective there
    iterations: int
    evaluations: int
    converged: bool        # stopped on the tolerances rather than on max_iter


#: Nelder-Mead coefficients (the textbook values): reflection, expansion, contraction, shrink
NM_REFLECT, NM_EXPAND, NM_CONTRACT, NM_SHRINK = 1.0, 2.0, 0.5, 0.5


def _start_simplex(x0: np.ndarray, lo: np.ndarray, hi: np.ndarray, step: float) -> np.ndarray:
    """x0 plus one vertex per axis, ``step`` along it (backwards when that would leave the
    bounds): fixed, so a fit is reproducible bit for bit."""
    simplex = [x0]
    for i in range(len(x0)):
        v = x0.copy()
        v[i] = x0[i] + step if x0[i] + step <= hi[i] else x0[i] - step
        simplex.append(np.clip(v, lo, hi))
    return np.array(simplex)


def nelder_mead(f: Callable[[np.ndarray], float], x0: Sequence[float], lo: Sequence[float],
                hi: Sequence[float], step: float = 0.25, xtol: float = 1e-8, ftol: float = 1e-12,
                max_iter: int = 2000) -> SimplexResult:
    """Minimise ``f`` over the box [lo, hi] with the Nelder-Mead simplex method.

    Why this method: the calibration objective (MAPE through the whole perf model) has no
    derivatives and kinks where a scenario's error changes sign. Bounds are kept by clipping
    every trial point onto the box. Stops when the simplex is smaller than ``xtol`` in every
    coordinate and its values differ by at most ``ftol``, or after ``max_iter`` iterations.
    """
    lo_a, hi_a = np.asarray(lo, dtype=float), np.asarray(hi, dtype=float)
    evals = 0

    def fc(x: np.ndarray) -> float:
        nonlocal evals
        evals += 1
        return float(f(x))

    simplex = _start_simplex(np.clip(np.asarray(x0, dtype=float), lo_a, hi_a), lo_a, hi_a, step)
    values = np.array([fc(v) for v in simplex])
    for it in range(1, max_iter + 1):
        order = np.argsort(values, kind="stable")
        simplex, values = simplex[order], values[order]
        if (np.max(np.abs(simplex[1:] - simplex[0])) <= xtol
                and np.max(np.abs(values[1:] - values[0])) <= ftol):
            return SimplexResult(simplex[0], float(values[0]), it - 1, evals, True)
        simplex, values = _nm_step(fc, simplex, values, lo_a, hi_a)
    best = int(np.argmin(values))
    return SimplexResult(simplex[best], float(values[best]), max_iter, evals, False)


def _nm_step(f: Callable[[np.ndarray], float], simplex: np.ndarray, values: np.ndarray,
             lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """One Nelder-Mead iteration on a sorted simplex (best first): replace the worst vertex by
    a reflected, expanded or contracted point, or shrink everything towards the best."""
    simplex, values = simplex.copy(), values.copy()
    centroid = simplex[:-1].mean(axis=0)
    worst = simplex[-1]
    xr = np.clip(centroid + NM_REFLECT * (centroid - worst), lo, hi)
    fr = f(xr)
    if fr < values[0]:
        xe = np.clip(centroid + NM_EXPAND * (xr - centroid), lo, hi)
        fe = f(xe)
        simplex[-1], values[-1] = (xe, fe) if fe < fr else (xr, fr)
        return simplex, values
    if fr < values[-2]:
        simplex[-1], values[-1] = xr, fr
        return simplex, values
    if fr < values[-1]:      # outside contraction, towards the reflected point
        xc = np.clip(centroid + NM_CONTRACT * (xr - centroid), lo, hi)
        fcv = f(xc)
        accept = fcv <= fr
    else:                    # inside contraction, towards the worst point
        xc = np.clip(centroid + NM_CONTRACT * (worst - centroid), lo, hi)
        fcv = f(xc)
        accept = fcv < values[-1]
    if accept:
        simplex[-1], values[-1] = xc, fcv
        return simplex, values
    for i in range(1, len(simplex)):
        simplex[i] = simplex[0] + NM_SHRINK * (simplex[i] - simplex[0])
        values[i] = f(simplex[i])
    return simplex, values


def minimize_restarted(f: Callable[[np.ndarray], float], x0: Sequence[float], lo: Sequence[float],
                       hi: Sequence[float], max_restarts: int = 8, ftol: float = 1e-12) -> SimplexResult:
    """``nelder_mead`` restarted from its own best point (with a fresh, smaller start simplex)
    until a restart improves the objective by no more than ``ftol``: a simplex that collapsed
    on a kink or against a bound gets new directions to try."""
    res = nelder_mead(f, x0, lo, hi, ftol=ftol)
    step = 0.25
    for _ in range(max_restarts):
        step *= 0.5
        again = nelder_mead(f, res.x, lo, hi, step=step, ftol=ftol)
        improved = again.fun < res.fun - ftol
        if again.fun <= res.fun:
            res = SimplexResult(again.x, again.fun, res.iterations + again.iterations,
                                res.evaluations + again.evaluations, again.converged)
        if not improved:
            break
    return res


def _fit_params(scen: Sequence[Scenario], evaluate_fn: EvaluateFn, device: Device,
                params: list[Param]) -> dict[str, float]:
    """Constants of ``params`` with minimum MAPE on ``scen`` (log space, bounded); the search
    starts from the device's current values."""
    lo = np.log([p.lo for p in params])
    hi = np.log([p.hi for p in params])
    x0 = np.clip(np.log([max(p.get(device, device), 1e-12) for p in params]), lo, hi)
    measured = np.array([s.measured_ms for s in scen])

    def mape(x: np.ndarray) -> float:
        dev = device
        for p, v in zip(params, np.exp(np.clip(x, lo, hi))):
            dev = p.set(dev, float(v), device)
        return float(np.mean(np.abs(np.array([evaluate_fn(dev, s) for s in scen]) / measured - 1.0)))

    best = minimize_restarted(mape, x0, lo, hi)
    return {p.name: float(v) for p, v in zip(params, np.exp(np.clip(best.x, lo, hi)))}


def _apply(device: Device, fitted: dict[str, float]) -> Device:
    dev = device
    for name, v in fitted.items():
        dev = PARAMS[name].set(dev, v, device)
    return dev


def fit(measurements: list[Scenario], evaluate_fn: EvaluateFn, device: Device,
        fit_names: Sequence[str] = DEFAULT_FIT, leave_one_out: bool = True,
        provenance: dict | None = None) -> CalibrationResult:
    """Fit ``fit_names`` constants of ``device`` to the measurements (minimum MAPE).

    The returned device carries a ``calibration`` block: the fitted values, the objective,
    per-scenario measured/before/after/leave-one-out figures and ``provenance`` (source file,
    model, plan...). Leave-one-out refits without each scenario in turn and predicts it, which
    is the honest error to expect on a new scenario of the same family.
    """
    params = _resolve(list(fit_names))
    if len(measurements) < 1:
        raise AuditInputError("measurements", "need at least one scenario")
    if len(params) >= len(measurements):
        raise AuditInputError("--fit", f"{len(params)} constants for {len(measurements)} scenarios: "
                                       "fit fewer constants than there are measurements")
    before = [evaluate_fn(device, s) for s in measurements]
    fitted = _fit_params(measurements, evaluate_fn, device, params)
    calibrated = _apply(device, fitted)
    after = [evaluate_fn(calibrated, s) for s in measurements]
    loo: list[float] = []
    if leave_one_out and len(measurements) > 1:
        # leave-one-out while it is cheap; beyond MAX_LOO_FOLDS scenarios, K-fold with K = MAX_LOO_FOLDS
        # (fold j holds scenarios i with i % K == j): K refits of O(n) each instead of n, so thousands
        # of rows stay bounded. Each scenario is still predicted by a fit that never saw it.
        n = len(measurements)
        k = min(n, MAX_LOO_FOLDS)
        loo = [0.0] * n
        for j in range(k):
            held = [i for i in range(j, n, k)]
            rest = [m for i, m in enumerate(measurements) if i % k != j]
            if len(params) >= len(rest):
                rest = [m for i, m in enumerate(measurements) if i not in held] or rest
            dev_j = _apply(device, _fit_params(rest, evaluate_fn, device, params))
            for i in held:
                loo[i] = evaluate_fn(dev_j, measurements[i])
    res = CalibrationResult(calibrated, fitted, list(measurements), before, after, loo)
    res.device = replace(calibrated, calibration=_block(res, device, params, provenance or {}))
    return res


def uncalibrated(device: Device) -> Device:
    """The profile as it was before its recorded calibration (``before`` values of the block);
    the device itself when it carries no calibration."""
    fitted = device.calibration.get("fitted") if device.calibration.get("status") == "calibrated" else None
    if not fitted:
        return device
    dev = replace(device, calibration={"status": "uncalibrated", "note": f"reverted from {device.name} calibration"})
    for name, entry in fitted.items():
        if name == "static":
            dev = dev.with_static(**entry["static_us_before"])
        elif name in HOST_KEYS:
            dev = replace(dev, serving={**(dev.serving or {}), name: entry["before"]})
        elif name == "sort":
            dev = replace(dev, vector_sort_ops_per_s=entry["before"])
        elif name in PARAMS:
            dev = dev.with_efficiency(**{name: entry["before"]})
    return dev


def _block(res: CalibrationResult, base: Device, params: list[Param], provenance: dict) -> dict:
    fitted_doc = {}
    for p in params:
        v = res.fitted[p.name]
        entry = {"value": round(v, 6), "before": round(p.get(base, base), 6), "bounds": [p.lo, p.hi], "doc": p.doc}
        if p.name == "static":
            entry["static_us"] = {"mma": round(base.static_us["mma"] * v, 4), "gp": round(base.static_us["gp"] * v, 4)}
            entry["static_us_before"] = {"mma": base.static_us["mma"], "gp": base.static_us["gp"]}
        fitted_doc[p.name] = entry
    rows = []
    for i, s in enumerate(res.scenarios):
        row = {"scenario": s.name, "phase": s.phase, "query_len": s.query_len, "context_len": s.context_len,
               "measured_ms": s.measured_ms, "before_ms": round(res.before_ms[i], 3),
               "after_ms": round(res.after_ms[i], 3), "error_before_pct": round(res.errors_before[i], 2),
               "error_after_pct": round(res.errors_after[i], 2)}
        if res.loo_ms:
            row["loo_ms"] = round(res.loo_ms[i], 3)
            row["error_loo_pct"] = round(res.errors_loo[i], 2)
        rows.append(row)
    return {
        "status": "calibrated",
        "date": _dt.date.today().isoformat(),
        "base_profile": base.name,
        **provenance,
        "objective": "mean absolute percentage error of end-to-end latency (log-space bounded fit)",
        "fitted": fitted_doc,
        "mape_before_pct": round(res.mape_before, 2),
        "mape_after_pct": round(res.mape_after, 2),
        "mape_leave_one_out_pct": None if res.mape_loo is None else round(res.mape_loo, 2),
        "scenarios": rows,
    }


# -- real model adapter and command ---------------------------------------------------------------

def perf_evaluator(dep: "DeploymentContext", mtp: int, batch: int = 1) -> EvaluateFn:
    """EvaluateFn over ``auditor.perf.api`` for a deployment (a ``DeploymentContext``; each call's device
    replaces its own, which the fit varies): prefill rows run query_len new tokens on
    context_len cached ones (chunked at the plan's max_num_batched_tokens, each chunk an eager step);
    decode rows verify query_len = 1 + MTP tokens per step (a graph step); host time is the serving
    host model of the device (``auditor.perf.host``)."""
    from .api import Workload, evaluate_phase

    def run(dev: Device, s: Scenario) -> float:
        if s.phase == "decode" and s.query_len != 1 + mtp:
            raise AuditInputError(s.name, f"decode query_len {s.query_len} != 1 + --mtp {mtp}")
        wl = Workload(phase=s.phase, tokens=s.query_len, context=s.context_len, batch=batch, mtp=mtp)
        return float(evaluate_phase(dep.with_(device=dev), wl).time_ms)

    return run


def render_table(res: CalibrationResult) -> str:
    from tabulate import tabulate

    rows = []
    for i, s in enumerate(res.scenarios):
        row = [s.name, f"{s.measured_ms:.2f}", f"{res.before_ms[i]:.2f}", f"{res.errors_before[i]:+.1f}",
               f"{res.after_ms[i]:.2f}", f"{res.errors_after[i]:+.1f}"]
        if res.loo_ms:
            row += [f"{res.loo_ms[i]:.2f}", f"{res.errors_loo[i]:+.1f}"]
        rows.append(row)
    head = ["scenario", "measured ms", "before ms", "err %", "after ms", "err %"]
    if res.loo_ms:
        head += ["leave-one-out ms", "err %"]
    mean = ["mean |error|", "", "", f"{res.mape_before:.1f}", "", f"{res.mape_after:.1f}"]
    if res.loo_ms:
        mean += ["", f"{res.mape_loo:.1f}"]
    rows.append(mean)
    fitted = ", ".join(f"{k}={v:.4g}" for k, v in res.fitted.items())
    return tabulate(rows, head, tablefmt="simple", disable_numparse=True) + f"\nfitted: {fitted}\n"


def git_head() -> str | None:
    """Commit of the perf model the constants were fitted against (None outside a checkout):
    fitted constants are only valid for the model that produced them."""
    import subprocess

    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=Path(__file__).parent,
                             capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() or None if out.returncode == 0 else None
