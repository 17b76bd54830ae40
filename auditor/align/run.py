"""``audit align`` as a library call: evidence files + plan -> the ticket (a JSON-ready dict).

Rendering (markdown, PNG) lives in ``ticket_md.py`` / ``ticket_png.py``; the CLI only parses options.
"""
from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..context import DeploymentContext
from ..engines.registry import as_engine
from ..parallel import ParallelPlan
from ..layer_ranges import ranges
from .evidence.bench import read_bench
from .evidence.logs import LogEvidence, read_logs
from .evidence.profile import read_profiles
from .kv import observed_kv, predicted_kv
from .ranks import observed_weights, sizes_from_config, sizes_from_workers
from ..units import GiB

SCHEMA = 1
#: a candidate "explains" the weights when every observed rank is within this share of the observed value
EXPLAINED = 0.01
#: DP sizes searched when neither the command line nor the log says (EP = TP x DP when EP is on)
DP_SEARCH = (1, 2, 4, 8)
RECIPE_PRUNE = 0.25


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
    runtime: dict = field(default_factory=dict)   # runtime options given on the command line only
    recipe_pinned: bool = False


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
    if kw.get("ep") == getattr(req.plan, "ep", None):
        kw.pop("ep")
    if kw:
        notes.append("parallel sizes from the log's worker prefixes / config line: "
                     + ", ".join(f"{k.upper()}{v}" for k, v in kw.items()))
    return req.plan.with_(**kw), notes


def _dp_known(req: AlignRequest, logs: LogEvidence) -> bool:
    from .ranks import sizes_from_config
    return ("dp" in req.pinned or "dp" in sizes_from_config(logs)
            or any(w.dp is not None and w.dp > 0 for w in logs.workers.values()))


def _recipes(req: AlignRequest, source) -> list[str]:
    """The recipes searched: the checkpoint's own (its tensors, or its quant description) when it has
    one or --recipe was given; else every recipe, the model's default first."""
    from ..model.families import recipes_of
    RECIPES = recipes_of(source.spec)
    if req.recipe_pinned or not source.synthesized or (source.kind == "config-only" and source.desc is not None
                                                       and source.recipe is None):
        return [source.recipe or source.scheme_recipe]
    first = source.recipe or source.scheme_recipe
    return [first] + [r for r in RECIPES if r != first]


def memory_section(source, plan: ParallelPlan, logs: LogEvidence, req: AlignRequest, engines) -> dict:
    from ..engines.bridge import C_MLAPO
    from ..source import open_model
    from .memory_fit import LedgerCache, fit_memory
    pinned = {k: v for k, v in req.pinned.items() if k in ("role", "sp", "dsa_cp", "layer_sharding",
                                                             "shared_expert_dp", "mtp", "nz_mode")}
    drop = frozenset({C_MLAPO}) if logs.mlapo_disabled else frozenset()
    recipes = _recipes(req, source)
    # a recipe none of the candidate engines loads for this model is not searched (Engine.loads_recipe)
    recipes = [r for r in recipes if any(as_engine(e).loads_recipe(source.spec, r) for e in engines)] or recipes[:1]
    dps = [plan.dp] if _dp_known(req, logs) else [d for d in DP_SEARCH if plan.tp * d * plan.pp <= 65_536]
    obs0 = observed_weights(logs, plan)
    max_rank = max(obs0.bytes_by_rank, default=0)
    dps = [d for d in dps if plan.tp * d * plan.pp > max_rank] or [plan.dp]
    results = []          # (fit, recipe, plan, observed, cache, MemoryFit)
    searched_extra = []
    evaluated = materialized = 0
    seconds = 0.0
    pruned = []
    for rec in recipes:
        src = source if rec == recipes[0] else open_model(req.model, rec)
        cache = LedgerCache(src, drop)
        if rec == recipes[0]:
            first_cache = cache
        else:
            # a recipe whose plain configuration is further from every observed rank than the default recipe's
            # by more than RECIPE_PRUNE of the observed value, at every DP, is not searched further (bf16
            # holds twice w8a8's bytes: no engine option bridges that)
            near = False
            for dp in dps:
                b = plan if dp == plan.dp else plan.with_(dp=dp, ep=plan.tp * dp if plan.ep > 1 else plan.ep)
                try:
                    b.validate()
                    tot = cache.totals(b, as_engine(req.engine).key)
                except Exception:                   # noqa: BLE001
                    continue
                ref = first_cache.totals(b, as_engine(req.engine).key)
                o = observed_weights(logs, b)
                if any(abs(tot[r] - v) <= abs(ref[r] - v) + RECIPE_PRUNE * v
                       for r, v in o.bytes_by_rank.items() if r < len(tot)):
                    near = True
                    break
            if not near:
                pruned.append(rec)
                continue
        for dp in dps:
            base = plan if dp == plan.dp else plan.with_(dp=dp, ep=plan.tp * dp if plan.ep > 1 else plan.ep)
            try:
                base.validate()
            except Exception:                       # noqa: BLE001 - an impossible DP size is not a candidate
                continue
            obs = observed_weights(logs, base)
            mf = fit_memory(cache, base, obs, pinned, engines, top=req.top)
            evaluated += mf.evaluated
            seconds += mf.seconds
            for f in mf.fits:
                results.append((f, rec, base, obs, cache, mf))
        materialized += cache.materialized
    if len(recipes) > 1:
        searched_extra.append("recipe")
    if len(dps) > 1:
        searched_extra.append("dp")
    # candidates that explain every rank within EXPLAINED tie on the searched recipe / DP: the checkpoint's
    # default recipe and the first DP win unless another one is needed to explain the figures; then the
    # residual beyond print resolution, the rank grouping, the option count and the residual decide
    def key(x):
        f, rec, b = x[0], x[1], x[2]
        ok = f.max_rel <= EXPLAINED
        return (not ok, 0.0 if ok else f.score, not f.grouping_ok, (rec != recipes[0]) + (b.dp != dps[0]),
                f.score, f.candidate.complexity(), f.max_abs)
    results.sort(key=key)
    results = results[:req.top]
    best, rec, base, obs, cache, mf = results[0]
    audit = cache.audit(best.candidate.plan, best.candidate.engine)
    groups = []
    by_pair: dict[tuple[int, int], list[int]] = {}
    for r, b in obs.bytes_by_rank.items():
        by_pair.setdefault((b, int(round(best.ranks_bytes[r]))), []).append(r)
    for (ob, pr), ranks in sorted(by_pair.items(), key=lambda kv: kv[1][0]):
        r0 = ranks[0]
        groups.append({"ranks": ranges(ranks), "count": len(ranks), "observed_bytes": ob,
                       "predicted_bytes": pr, "delta_bytes": ob - pr, "relative": (ob - pr) / ob if ob else None,
                       "naive_bytes": int(round(audit.ledger.naive[r0])), "rank0": r0,
                       "bridge": [{"step": s, "bytes": b} for s, b in audit.bridge(r0)]})
    cands = []
    for f, r, b, *_ in results:
        j = f.to_json()
        j["recipe"], j["dp"] = r, b.dp
        extra = ([r] if "recipe" in searched_extra else []) + ([f"DP{b.dp}"] if "dp" in searched_extra else [])
        j["label"] = ", ".join(extra + [j["label"]])
        cands.append(j)
    notes = list(obs.notes) + [f"{x['dimension']} not searched: {x['why']}" for x in mf.skipped]
    if pruned:
        notes.append(f"recipes {', '.join(pruned)}: their plain configuration is further from every observed rank "
                     f"than the default recipe's by more than {RECIPE_PRUNE:.0%}, so their options were not searched")
    if logs.mlapo_disabled:
        notes.append(f"MLAPO disabled by the engine ({logs.mlapo_disabled[0]}): no candidate adds MLAPO's fused copies")
    return {
        "observed": [{"rank": r, "bytes": b, "where": str(obs.lines[r].where)} for r, b in obs.bytes_by_rank.items()],
        "candidates": cands,
        "groups": groups,
        "search": {"dimensions": searched_extra + mf.searched, "skipped": mf.skipped, "evaluated": evaluated,
                   "materialized": materialized, "recipes": recipes, "dps": dps, "pruned_recipes": pruned},
        "notes": notes,
        "_seconds": seconds,
        "_best": best, "_audit": audit, "_recipe": rec, "_plan": base, "_cache": cache, "_obs": obs,
    }


def rank_differences(groups: list[dict]) -> list[str]:
    """Why ranks differ, in words: the bridge steps whose bytes differ between the first group and each
    other group of the best candidate."""
    out = []
    if len(groups) < 2:
        return out
    ref = groups[0]
    ref_steps = {s["step"]: s["bytes"] for s in ref["bridge"]}
    for g in groups[1:]:
        steps = {s["step"]: s["bytes"] for s in g["bridge"]}
        diffs = [(k, steps.get(k, 0) - ref_steps.get(k, 0)) for k in dict.fromkeys([*ref_steps, *steps])]
        diffs = [(k, d) for k, d in diffs if abs(d) >= 1 << 20]
        naive = g["naive_bytes"] - ref["naive_bytes"]
        parts = [f"{k} {d / GiB:+.3f} GiB" for k, d in sorted(diffs, key=lambda kd: -abs(kd[1]))[:3]]
        if abs(naive) >= 1 << 20:
            parts.insert(0, f"the plain shard of the stored weights {naive / GiB:+.3f} GiB (uneven split of "
                            "experts or layers over the ranks)")
        d = g["observed_bytes"] - ref["observed_bytes"]
        out.append(f"ranks {g['ranks']} hold {abs(d) / GiB:.3f} GiB {'more' if d > 0 else 'less'} than ranks "
                   f"{ref['ranks']} in the log; the best candidate says: " + ("; ".join(parts) or
                                                                               "no modelled difference"))
    return out


#: a KV figure (available bytes, tokens, concurrency, shortfall) further off than this contradicts a candidate
#: (the evidence corpus' tolerance for the engine's logged KV memory, ``auditor.evidence.KV_AVAILABLE_REL_TOL``)
def _kv_tolerance() -> float:
    from ..evidence import KV_AVAILABLE_REL_TOL
    return KV_AVAILABLE_REL_TOL


def contradictions(kv: dict | None, logs: LogEvidence | None) -> list[str]:
    """Observed figures the best candidate does not reproduce: a KV figure outside its tolerance, and an
    out-of-memory where the candidate predicts the deployment fits."""
    out = []
    tol = _kv_tolerance()
    for c in (kv or {}).get("compared") or []:
        rel = c.get("relative")
        if rel is not None and abs(rel) > tol:
            out.append(f"{c['figure']} observed {c['observed']:,.6g} vs predicted {c['predicted']:,.6g} {c['unit']} "
                       f"({rel * 100:+.1f}%, tolerance {tol * 100:g}%; {c.get('where', '')})")
    pred = (kv or {}).get("predicted") or {}
    if logs is not None and logs.ooms and pred.get("available_kv_bytes", 0) > 0:
        o = logs.ooms[0]
        out.append(f"the log runs out of memory ({o.tried_bytes / GiB:.2f} GiB allocation, {o.where}) where the best "
                   f"candidate fits with {pred['available_kv_bytes'] / GiB:.2f} GiB of KV cache")
    return out


def verdict(memory: dict | None, logs: LogEvidence | None, recipe: str | None, kv: dict | None = None) -> dict:
    """EXPLAINED only when the best candidate reproduces the weights within EXPLAINED on every rank AND every
    other observed figure (KV lines, an out-of-memory) within its tolerance; a contradicting figure is named and
    makes it PARTLY EXPLAINED; a cause the text itself names that audit does not model (a CANN regression) is
    said to be one the model cannot tell. When unexplained, what could explain the figures, said first."""
    contra = contradictions(kv, logs)
    outside = [f"{text} ({where})" for text, where in (logs.outside if logs is not None else [])][:3]
    cannot = ([f"the evidence itself names a cause outside audit's model: {outside[0]}; audit models neither CANN, "
               "driver nor firmware versions, so it cannot tell whether that is the cause"] if outside else [])
    if memory is None:
        level = "unexplained" if contra else None
        summary = ("no weights line: nothing to explain (predictions use the pinned or inferred plan)" if not contra
                   else "UNEXPLAINED: no weights line, and the observed figures contradict the pinned / inferred "
                        "plan's prediction")
        return {"explained": None if not contra else False, "level": level, "summary": summary,
                "reasons": cannot, "contradictions": contra, "rank_notes": []}
    best = memory["candidates"][0]
    worst = max((abs(g["relative"]) for g in memory["groups"] if g["relative"] is not None), default=0.0)
    explained = worst <= EXPLAINED
    reasons, notes = [], []
    obs_min = min((g["observed_bytes"] for g in memory["groups"]), default=0)
    naive = min((g["naive_bytes"] for g in memory["groups"]), default=0)
    if obs_min and naive and obs_min < naive:
        notes.append(f"the observed {obs_min / GiB:.3f} GiB is BELOW the naive stored size per rank "
                     f"{naive / GiB:.3f} GiB: with this plan the weights cannot all be resident -- more ranks "
                     "share them (another TP/DP/EP), another recipe, or the figure is not the weights")
    if not best.get("grouping_matches", True):
        notes.append("rank groupings disagree: the log's ranks split into groups the best candidate does not "
                     "reproduce (see the memory table)")
    notes += rank_differences(memory["groups"])
    if explained and not contra and not outside:
        summary = (f"EXPLAINED: {best['label']} reproduces every rank within {worst * 100:.2f}% "
                   f"(limit {EXPLAINED * 100:g}%) and every other observed figure within its tolerance")
    elif explained:
        # the verdict line names the first few; the ticket's contradictions list has them all
        shown = "; ".join(contra[:3]) + (f"; and {len(contra) - 3} more (listed below)" if len(contra) > 3 else "")
        what = (f"{len(contra)} observed figure(s) contradict it: " + shown) if contra else \
            "but the evidence names a cause outside the model"
        summary = (f"PARTLY EXPLAINED: {best['label']} reproduces the weights on every rank within "
                   f"{worst * 100:.2f}%, {what}")
        reasons += cannot
    else:
        summary = (f"UNEXPLAINED: no searched configuration reproduces the weights within {EXPLAINED * 100:g}% "
                   f"(best: {best['label']}, {worst * 100:.1f}% off)")
        searched = memory["search"]
        if "recipe" not in searched["dimensions"]:
            reasons.append(f"another recipe than {recipe} (the checkpoint's quant description decides; "
                           "re-run with --recipe to try one)")
        else:
            reasons.append("a recipe outside " + ", ".join(searched["recipes"]))
        reasons[:0] = cannot
        reasons += ["a CANN / driver regression (vllm-ascend #9422: CANN 9.0 raised GLM-5.1 w8a8 weights from "
                    "25 GB to 36 GB per rank with the same engine options)",
                    "an engine build audit does not model (a vLLM-Ascend version newer than its profiles, or "
                    "local patches)",
                    "engine options outside the searched space (see Candidate configurations)"]
    ok = explained and not contra and not outside
    return {"explained": ok, "level": "explained" if ok else ("partly explained" if explained else "unexplained"),
            "summary": summary, "reasons": reasons, "contradictions": contra, "rank_notes": notes,
            "worst_relative": worst}


def time_section(source, plan: ParallelPlan, engine: str, req: AlignRequest, profile, bench) -> dict:
    from ..devices.profiles import load_device
    from ..perf.api import Workload, evaluate_phase
    from .time_fit import bench_vs_model, fit_time
    dev = load_device(req.device) if req.device else load_device()
    recipe = source.scheme_recipe
    spec = source.spec
    perf_plan = plan.with_(mtp=bool(req.mtp) or plan.mtp)
    dep = DeploymentContext(spec, perf_plan, engine, recipe, dev)
    phases = {}
    wanted = {req.phase}
    if bench is not None and bench.serve:
        wanted |= {"prefill", "decode"}
    for ph in sorted(wanted):
        wl = Workload(ph, req.tokens, req.context if ph == "prefill" else max(req.context, req.tokens),
                      req.batch, req.mtp)
        phases[ph] = evaluate_phase(dep, wl)

    def scenario_ms(sc):
        wl = Workload(sc.phase, sc.query_len if sc.phase == "prefill" else 1, sc.context_len, req.batch, req.mtp)
        return evaluate_phase(dep, wl).time_ms

    tf = fit_time(phases[req.phase], profile, dev, top=req.top, engine=engine)
    return {"device": dev.name, "engine": engine, "phase": tf.phase, "workload": tf.workload,
            "predicted_total_ms": tf.predicted_total_ms, "measured_total_ms": tf.measured_total_ms,
            "profile": ({"files": profile.files, "ranks": len(profile.ranks), "steps": profile.steps,
                         "layers": profile.layers, "skipped_rows": profile.skipped_rows,
                         "aggregated": profile.aggregated} if profile else None),
            "by_class": tf.by_class, "by_layer": tf.by_layer, "discrepancies": tf.discrepancies,
            "unmapped": tf.unmapped, "phase_totals_ms": {k: v.time_ms for k, v in phases.items()},
            "measured_only": tf.measured_only, "predicted_only": tf.predicted_only, "merged": tf.merged,
            "host_ms": tf.host_ms, "ignored": profile.ignored if profile else [],
            "rank_total_us": ({str(r): v for r, v in profile.rank_total_us.items()} if profile else {}),
            "rank_source": ({str(r): v for r, v in profile.rank_source.items()} if profile else {}),
            "bench": bench_vs_model(bench, phases, scenario_ms)}


def parsed_lines(logs: LogEvidence) -> list[dict]:
    """Every parsed log line the per-rank tables do not show: engine config, non-default args, the MLAPO
    warning."""
    out = []
    keep = ("tensor_parallel_size", "data_parallel_size", "pipeline_parallel_size", "decode_context_parallel_size",
            "max_seq_len", "quantization", "kv_cache_dtype", "enforce_eager", "speculative_config")
    for c in logs.configs:
        text = ", ".join(f"{k}={c.fields[k]}" for k in keep if k in c.fields)
        out.append({"what": f"engine config ({c.version or 'version ?'})", "text": text[:400], "where": str(c.where)})
    for nd in logs.non_default:
        text = ", ".join(f"{k}={v!r}" for k, v in nd.args.items())
        out.append({"what": "non-default args", "text": text[:400] + (" ..." if len(text) > 400 else ""),
                    "where": str(nd.where)})
    for w in logs.mlapo_disabled:
        out.append({"what": "MLAPO disabled warning", "text": "the engine disabled MLAPO (no fused copies)",
                    "where": str(w)})
    return out


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
        if r["measured_us"] and r["predicted_us"] > 0:
            figures.append((f"time {r['class']}", (r["measured_us"] - r["predicted_us"]) / r["measured_us"]))
    for b in t.get("bench", []):
        if b.get("relative") is not None:
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
        profile = read_profiles(req.profiles, n_layers=source.spec.Lyr, hidden=source.spec.H, engine=req.engine)
    engine_note = None
    # unpinned: every version of the request's engine family (another family reads other logs and has
    # other memory rules: its rows are no candidates for this log)
    engines = tuple(type(as_engine(req.engine)).profiles)
    engine = req.engine
    if "engine" in req.pinned:
        eng = as_engine(req.engine)
        engine, engine_note = eng.key, eng.note
        engines = (engine,)
    memory = memory_section(source, plan, logs, req, engines) if logs is not None and logs.weights else None
    seconds = memory.pop("_seconds") if memory else 0.0
    best = memory.pop("_best") if memory else None
    audit = memory.pop("_audit") if memory else None
    if memory:
        rec_used = memory.pop("_recipe")
        memory.pop("_cache"), memory.pop("_obs"), memory.pop("_plan")
        if rec_used != (source.recipe or source.scheme_recipe):
            from ..source import open_model as _open
            source = _open(req.model, rec_used)
    if best is not None:
        engine, plan_used = best.candidate.engine, best.candidate.plan
    else:
        plan_used = plan
    kv = None
    if logs is not None:
        ranks_bytes, w_note = None, None
        if best is not None:
            ranks_bytes = best.ranks_bytes
        else:
            # no weights line (an OOM-only, KV-only or npu-smi-only log): the pinned / inferred plan's ledger
            from ..engines.bridge import C_MLAPO
            from .memory_fit import LedgerCache
            drop = frozenset({C_MLAPO}) if logs.mlapo_disabled else frozenset()
            ranks_bytes = LedgerCache(source, drop).totals(plan_used, as_engine(engine).key)
            w_note = (f"KV prediction: W from the ledger of the pinned / inferred plan {plan_used.describe()} on "
                      f"{as_engine(engine).label} (the log has no weights line)")
        pred = predicted_kv(source, plan_used, engine, ranks_bytes, logs, req.device, req.runtime)
        if pred and w_note:
            pred["assumptions"].insert(0, w_note)
        kv = {"observed": observed_kv(logs, plan_used), "predicted": pred,
              "compared": pred.pop("compared") if pred else [],
              "predicted_note": None if pred else "not predicted"}
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
        title_bits.append(f"weights max residual {best.max_abs / GiB:.3f} GiB")
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
    ticket["parsed"] = parsed_lines(logs) if logs is not None else []
    ticket["verdict"] = verdict(memory, logs, source.recipe or source.scheme_recipe, kv)
    if profile is not None:
        ticket["assumptions"] = list(dict.fromkeys(ticket["assumptions"] + profile.notes))
    ticket["tolerance"] = tolerance_check(ticket, req.tolerance)
    ticket["_timings"] = {"memory_search_s": round(seconds, 3)}
    return ticket
