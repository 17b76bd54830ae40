"""``audit align`` as a library call: evidence files + plan -> the ticket (a JSON-ready dict).

Rendering (markdown, PNG) lives in ``ticket_md.py`` / ``ticket_png.py``; the CLI only parses options.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..engines.registry import as_engine
from ..parallel import ParallelPlan
from ..report.ranges import ranges
from .evidence.bench import read_bench
from .evidence.logs import LogEvidence, read_logs
from .evidence.profile import read_profiles
from .kv import observed_kv, predicted_kv
from .ranks import observed_weights, sizes_from_config, sizes_from_workers

SCHEMA = 1


@dataclass
class AlignRequest:
    model: str | None
    recipe: str | None
    plan: ParallelPlan
    engine: str
    pinned: dict[str, Any]                 # plan option -> value, only those given on the command line
    logs: list[Path] = field(default_factory=list)
    profiles: list[Path] = field(default_factory=list)
    benches: list[Path] = field(default_factory=list)
    device: str | None = None
    phase: str = "prefill"                 # the phase the profile recorded
    tokens: int = 4096
    context: int = 0
    batch: int = 1
    mtp: int = 0
    tolerance: float | None = None         # relative, e.g. 0.05
    top: int = 10


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _evidence(kind: str, paths: list[Path]) -> list[dict]:
    return [{"kind": kind, "path": str(p), "bytes": Path(p).stat().st_size, "sha256": _sha256(Path(p))}
            for p in paths]


def infer_plan(req: AlignRequest, logs: LogEvidence | None) -> tuple[ParallelPlan, list[str]]:
    """Parallel sizes: the flags the user gave, else the worker prefixes, else the config line."""
    notes: list[str] = []
    sizes = {}
    if logs is not None:
        sizes = {**sizes_from_config(logs), **sizes_from_workers([w for w in logs.workers.values() if w.is_worker])}
    kw = {}
    for k in ("tp", "dp", "pp"):
        if k not in req.pinned and k in sizes and sizes[k] != getattr(req.plan, k):
            kw[k] = sizes[k]
    if "ep" not in req.pinned and "ep" in sizes:
        kw["ep"] = kw.get("tp", req.plan.tp) * kw.get("dp", req.plan.dp)
    if kw:
        notes.append("parallel sizes from the log's worker prefixes / config line: "
                     + ", ".join(f"{k.upper()}{v}" for k, v in kw.items()))
    return req.plan.with_(**kw), notes


def memory_section(source, plan: ParallelPlan, logs: LogEvidence, req: AlignRequest, engines) -> dict:
    from .memory_fit import LedgerCache, fit_memory
    obs = observed_weights(logs, plan)
    pinned = {k: v for k, v in req.pinned.items() if k in ("role", "sp", "dsa_cp", "layer_sharding",
                                                             "shared_expert_dp", "mtp", "nz_mode")}
    fit = fit_memory(LedgerCache(source), plan, obs, pinned, engines, top=req.top)
    best = fit.fits[0] if fit.fits else None
    groups = []
    if best is not None:
        audit = fit.best_audit
        by_pair: dict[tuple[int, int], list[int]] = {}
        for r, b in obs.bytes_by_rank.items():
            by_pair.setdefault((b, int(round(best.ranks_bytes[r]))), []).append(r)
        for (ob, pr), ranks in sorted(by_pair.items(), key=lambda kv: kv[1][0]):
            r0 = ranks[0]
            groups.append({"ranks": ranges(ranks), "count": len(ranks), "observed_bytes": ob,
                           "predicted_bytes": pr, "delta_bytes": ob - pr, "relative": (ob - pr) / pr if pr else None,
                           "naive_bytes": int(round(audit.ledger.naive[r0])),
                           "bridge": [{"step": s, "bytes": b} for s, b in audit.bridge(r0)]})
    return {
        "observed": [{"rank": r, "bytes": b, "where": str(obs.lines[r].where)} for r, b in obs.bytes_by_rank.items()],
        "candidates": [f.to_json() for f in fit.fits],
        "groups": groups,
        "search": {"dimensions": fit.searched, "skipped": fit.skipped, "evaluated": fit.evaluated,
                   "materialized": fit.materialized,
                   "seconds": round(fit.seconds, 3)},
        "notes": obs.notes + [f"{x['dimension']} not searched: {x['why']}" for x in fit.skipped],
        "_best": best, "_audit": fit.best_audit,
    }


def time_section(source, plan: ParallelPlan, engine: str, req: AlignRequest, profile, bench) -> dict:
    from ..devices.profiles import load_device
    from ..perf.api import Workload, evaluate_phase
    from .time_fit import bench_vs_model, fit_time
    dev = load_device(req.device) if req.device else load_device()
    recipe = source.scheme_recipe
    spec = source.spec
    perf_plan = plan.with_(mtp=bool(req.mtp) or plan.mtp)
    phases = {}
    wanted = {req.phase}
    if bench is not None and bench.serve:
        wanted |= {"prefill", "decode"}
    for ph in sorted(wanted):
        wl = Workload(ph, req.tokens, req.context if ph == "prefill" else max(req.context, req.tokens),
                      req.batch, req.mtp)
        phases[ph] = evaluate_phase(spec, perf_plan, engine, wl, dev, recipe)

    def scenario_ms(sc):
        wl = Workload(sc.phase, sc.query_len if sc.phase == "prefill" else 1, sc.context_len, req.batch, req.mtp)
        return evaluate_phase(spec, perf_plan, engine, wl, dev, recipe).time_ms

    tf = fit_time(phases[req.phase], profile, dev, top=req.top)
    return {"device": dev.name, "engine": engine, "phase": tf.phase, "workload": tf.workload,
            "predicted_total_ms": tf.predicted_total_ms, "measured_total_ms": tf.measured_total_ms,
            "profile": ({"files": profile.files, "ranks": len(profile.ranks), "steps": profile.steps,
                         "layers": profile.layers} if profile else None),
            "by_class": tf.by_class, "by_layer": tf.by_layer, "discrepancies": tf.discrepancies,
            "unmapped": tf.unmapped, "phase_totals_ms": {k: v.time_ms for k, v in phases.items()},
            "bench": bench_vs_model(bench, phases, scenario_ms)}


def tolerance_check(ticket: dict, limit: float | None) -> dict:
    """Every compared figure whose relative deviation exceeds ``limit``."""
    figures = []
    mem = ticket.get("memory") or {}
    for g in mem.get("groups", []):
        if g["relative"] is not None:
            figures.append((f"memory ranks {g['ranks']}", g["relative"]))
    for c in (ticket.get("kv") or {}).get("compared", []):
        if c["relative"] is not None:
            figures.append((f"kv {c['figure']}", c["relative"]))
    t = ticket.get("time") or {}
    for r in t.get("by_class", []):
        if r["measured_us"] is not None and r["predicted_us"] > 0:
            figures.append((f"time {r['class']}", (r["measured_us"] - r["predicted_us"]) / r["predicted_us"]))
    for b in t.get("bench", []):
        if b["relative"] is not None:
            figures.append((f"bench {b['metric']} {b['stat']}", b["relative"]))
    exceeded = [{"figure": n, "relative": v} for n, v in figures if limit is not None and abs(v) > limit]
    return {"limit": limit, "compared": len(figures), "exceeded": exceeded,
            "ok": not exceeded if limit is not None else None}


def run_align(req: AlignRequest) -> dict:
    """Read the evidence, explain memory and time, and return the ticket."""
    from ..source import open_model
    logs = read_logs(req.logs) if req.logs else None
    profile = None
    bench = read_bench(req.benches) if req.benches else None
    plan, notes = infer_plan(req, logs)
    plan.validate()
    source = open_model(req.model, req.recipe)
    if req.profiles:
        profile = read_profiles(req.profiles, n_layers=source.spec.Lyr)
    engine_note = None
    engines = None
    engine = req.engine
    if "engine" in req.pinned:
        eng = as_engine(req.engine)
        engine, engine_note = eng.key, eng.note
        engines = (engine,)
    memory = memory_section(source, plan, logs, req, engines) if logs is not None and logs.weights else None
    best = memory.pop("_best") if memory else None
    audit = memory.pop("_audit") if memory else None
    if best is not None:
        engine, plan_used = best.candidate.engine, best.candidate.plan
    else:
        plan_used = plan
    kv = None
    if logs is not None:
        pred = predicted_kv(source, plan_used, engine, best.ranks_bytes if best is not None else None, logs,
                            req.device)
        kv = {"observed": observed_kv(logs, plan_used), "predicted": pred,
              "compared": pred.pop("compared") if pred else [],
              "predicted_note": None if pred else "not predicted: the KV budget needs a candidate's weights "
                                                  "(no 'Loading model weights' line in the logs)"}
    time = time_section(source, plan_used, engine, req, profile, bench) if (profile or bench) else None
    assumptions = list(notes)
    if engine_note:
        assumptions.append(engine_note)
    if "engine" in req.pinned and engine_note is None:
        assumptions.append("--engine takes the plain profile keys (version-string resolution not on main)")
    if memory:
        assumptions += memory.pop("notes")
    if kv and kv["predicted"]:
        assumptions += kv["predicted"].pop("assumptions")
    if audit is not None:
        assumptions += audit.assumptions
    if time and time["profile"]:
        assumptions.append(f"profile: {time['profile']['ranks']} rank(s), {time['profile']['steps']} step(s); "
                           f"times are per step, mean over ranks; layers anchored on the attention kernel")
    if time:
        assumptions.append(f"modelled workload {time['workload']} on {time['device']}; ops and collectives "
                           "serialised (no overlap)")
    title_bits = [source.spec.name, plan_used.describe(), as_engine(engine).label]
    if best is not None:
        title_bits.append(f"weights max residual {best.max_abs / 2**30:.3f} GiB")
    ticket = {
        "schema": SCHEMA, "tool": "audit align",
        "title": "Alignment: " + " | ".join(title_bits),
        "configuration": {"model": source.describe(), "plan": {
            "tp": plan_used.tp, "dp": plan_used.dp, "ep": plan_used.ep, "pp": plan_used.pp, "sp": plan_used.sp,
            "dsa_cp": plan_used.dsa_cp, "role": plan_used.role, "mtp_drafter": plan_used.mtp,
            "layer_sharding": list(plan_used.layer_sharding), "nz_mode": plan_used.nz_mode,
            "shared_expert_dp": plan_used.shared_expert_dp},
            "engine": engine, "engine_label": as_engine(engine).label, "engine_note": engine_note,
            "pinned": sorted(req.pinned), "source": "best candidate" if best is not None else "options"},
        "evidence": _evidence("log", req.logs) + _evidence("profile", req.profiles) + _evidence("bench", req.benches),
        "memory": memory, "kv": kv, "time": time,
        "assumptions": list(dict.fromkeys(assumptions)),
        "findings": [{"severity": f.severity, "tensor": f.tensor, "message": f.message}
                     for f in (audit.findings if audit is not None else [])][:20],
    }
    ticket["tolerance"] = tolerance_check(ticket, req.tolerance)
    return ticket
