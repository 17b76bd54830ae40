"""``audit plan`` output: the ranked table, JSON, CSV and the Pareto PNG."""
from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

from tabulate import tabulate

from ..engines.registry import as_engine
from ..report.figure import new_figure, save_png
from .search import Config, PlanResult

COLUMNS = ["mode", "dies", "dies_used", "plan", "batch", "mtp", "util", "conc", "ttft_ms", "tpot_ms", "tok_s_die",
           "tok_s_user", "weights_gib", "kv_gib", "kv_tokens", "headroom_gib"]
CSV_COLUMNS = ["mode", "dies", "dies_used", "plan", "batch", "mtp", "util", "concurrency", "ttft_ms", "tpot_ms",
               "tok_s_die", "tok_s_user", "weights_gib", "kv_gib", "kv_tokens", "headroom_gib", "kv_edge"]


def _row(c: Config) -> list[Any]:
    plan = c.plan + (f" (P chunk {c.detail['p_max_num_batched_tokens']})" if c.mode == "disagg" else "")
    return [c.mode, c.dies, c.dies_used, plan, c.batch, c.mtp, f"{c.util:g}", c.concurrency or "-",
            f"{c.ttft_ms:.0f}", f"{c.tpot_ms:.1f}", f"{c.tok_s_die:.1f}", f"{c.tok_s_user:.1f}",
            f"{c.weights_gib:.2f}", f"{c.kv_gib:.2f}", f"{c.kv_tokens:,}",
            f"{c.headroom_gib:.2f}" + (" edge" if c.kv_edge else "")]


def _engine(head: dict) -> Any:
    return as_engine(head.get("engine") or None)


def _columns(head: dict, columns: list[str] = COLUMNS) -> list[str]:
    """The text table's headers in the engine's word for an accelerator (JSON and CSV keys stay the
    cross-engine schema: ``dies``, ``dies_used``, ``tok_s_die``)."""
    noun = _engine(head).device_noun.lower()
    return [c.replace("dies", noun + "s").replace("_die", "_" + noun) for c in columns]


def _helps(head: dict) -> str:
    """What would free memory: ``head["helps"]`` (the levers this model and engine have, ``memory_levers``),
    else the engine's own (``Engine.memory_savers``)."""
    eng = _engine(head)
    more = "more " + eng.device_noun + "s"
    out = head.get("helps")
    if out is None:
        out = eng.memory_savers(head.get("recipe"), head.get("kv_cache_dtype"))
    return f"{', '.join(out)} or {more}" if out else more


def memory_levers(dep: Any, kv_cache_dtype: str) -> list[str]:
    """The engine's memory savers (``Engine.memory_savers``) this model has: a recipe ("w4a8") where the
    model's family has it and the engine loads it, a KV cache ("c8 KV", "fp8 KV") where the engine's KV
    spec takes it for this model (DeepSeek-V4's pool on vLLM-Ascend is bf16 with int8 indexer keys).
    ``dep``: a ``DeploymentContext`` (its recipe is the one in use; its device, when given, the KV's arch)."""
    from ..errors import AuditInputError
    from ..model.families import recipes_of
    spec, plan, eng, recipe, device = dep.spec, dep.plan, dep.engine, dep.recipe, dep.device
    out = []
    for lever in eng.memory_savers(recipe, kv_cache_dtype):
        if lever.endswith(" KV"):
            try:
                eng.kv_spec(spec, plan, variant=lever[:-3], **({"arch": eng.soc(device)} if device else {}))
            except (AuditInputError, ValueError, KeyError):
                continue
        elif lever not in recipes_of(spec) or not eng.loads_recipe(spec, lever):
            continue
        out.append(lever)
    return out


def binds(res: PlanResult, n: int, head: dict, max_batch: int) -> str:
    """What limits the plan of ``n`` dies: memory (nothing, or no larger batch, fits) or the SLA."""
    rows = [c for c in res.configs if c.dies == n]
    helps = _helps(head)
    dies = _engine(head).devices(n)
    if not res.feasible_of(n):
        return f"{dies}: memory binds: no configuration fits; {helps} would help"
    best = next((c for c in res.best(len(res.configs)) if c.dies == n), None)
    if best is None:
        pool = [c for c in res.ranked() if c.dies == n and "simulation" not in c.detail] or rows
        near = min(pool, key=lambda c: max(c.ttft_ms / head["ttft_ms"], c.tpot_ms / head["tpot_ms"]))
        return (f"{dies}: SLA binds: {res.feasible_of(n):,} configurations fit, none meets TTFT <= {head['ttft_ms']:g} ms and "
                f"TPOT <= {head['tpot_ms']:g} ms; the closest, {near.plan} batch {near.batch} MTP {near.mtp}, "
                f"reaches TTFT {near.ttft_ms:.0f} ms, TPOT {near.tpot_ms:.1f} ms")
    if best.batch >= max_batch:
        return f"{dies}: the search binds: batch {best.batch} is the largest searched (--batch)"
    same = [c for c in rows if c.plan == best.plan and c.mtp == best.mtp and c.util == best.util
            and c.detail.get("p_max_num_batched_tokens") == best.detail.get("p_max_num_batched_tokens")
            and c.batch > best.batch]
    if not same:
        return (f"{dies}: memory binds: a batch above {best.batch} of {best.plan} does not fit the KV pool; "
                f"{helps} would help")
    nxt = min(same, key=lambda c: c.batch)
    return (f"{dies}: SLA binds: batch {nxt.batch} of {best.plan} fits but misses the SLA (TTFT {nxt.ttft_ms:.0f} ms, "
            f"TPOT {nxt.tpot_ms:.1f} ms{', simulated' if nxt.simulated else ', estimate'})")


def _plain(o: Any) -> Any:
    """numpy scalars from the kernel arrays -> Python numbers."""
    return o.item() if hasattr(o, "item") else str(o)


def plan_json(res: PlanResult, top: int, launch: list[dict], head: dict,
              per_budget: dict | None = None) -> dict[str, Any]:
    best = res.best(top)
    mb = int(head.get("max_batch", 0))
    return {**head, "workload": res.workload.__dict__, "evaluated": res.evaluated, "seconds": res.seconds,
            "configs_per_s": res.evaluated / res.seconds if res.seconds else None,
            "feasible": res.feasible, "meeting_sla": sum(c.meets_sla for c in res.ranked()),
            "simulated": res.simulated, "simulation_seconds": res.sim_seconds,
            "best": [c.to_json() for c in best],
            "best_per_budget": {str(n): ({**c.to_json(), "launch": (per_budget or {}).get(n, [])} if c else None)
                                for n, c in res.best_per_budget().items()},
            "binds": {str(n): binds(res, n, head, mb) for n in res.best_per_budget()},
            "best_by_mode": {m: [c.to_json() for c in res.best_of(m, top)] for m in ("agg", "disagg")},
            "disaggregated_verdicts": {str(n): v for n, v in res.disagg_verdicts.items()},
            "launch": launch, "notes": res.notes}


MODE_NAMES = {"agg": "aggregated", "disagg": "disaggregated (P/D)"}
SECTION_ROWS = 3


def _mode_sections(res: PlanResult, best: list[Config], tf: str, head: dict) -> list[str]:
    """Each deployment kind gets its say: its best rows when the ranked table has none of them, or
    why no configuration of that kind exists (for P/D: the side that fails and the closest instance)."""
    out: list[str] = []
    shown = {c.mode for c in best}
    for mode, name in MODE_NAMES.items():
        if mode in shown:
            continue
        rows = res.best_of(mode, SECTION_ROWS)
        if rows:
            out += ["", f"best {name}, not in the table above:",
                    tabulate([_row(c) for c in rows], _columns(head), tablefmt=tf, disable_numparse=True)]
        elif mode == "disagg" and res.disagg_verdicts:
            out.append("")
            out += [f"{name}: none within {_engine(head).devices(n)}: {v}" for n, v in sorted(res.disagg_verdicts.items())]
        elif mode == "disagg" and not res.has_mode(mode):
            out += ["", f"{name}: not searched (--no-disagg)" if not res.searched_disagg else
                    f"{name}: none meets the SLA"]
        else:
            out += ["", f"{name}: none meets the SLA"]
    return out


def _launch_lines(launch: list[dict]) -> list[str]:
    out = []
    for inst in launch:
        env = " ".join(f"{k}={v}" for k, v in inst["env"].items())
        # an engine without environment switches (upstream vLLM) gets the bare command, pasteable as is
        out += [f"# {inst['name']}", f"{env} \\\n    {inst['command']}" if env else inst["command"]]
    return out


def render_plan(res: PlanResult, fmt: str, top: int, launch: list[dict], head: dict,
                per_budget: dict | None = None) -> str:
    if fmt == "json":
        return json.dumps(plan_json(res, top, launch, head, per_budget), indent=1, default=_plain) + "\n"
    if fmt == "csv":
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(CSV_COLUMNS + ["meets_sla", "simulated"])
        for c in sorted(res.configs, key=lambda c: (not c.simulated, -c.tok_s_die)):
            w.writerow([getattr(c, k) for k in CSV_COLUMNS] + [int(c.meets_sla), int(c.simulated)])
        return buf.getvalue()
    tf = "github" if fmt == "markdown" else "simple"
    wl = res.workload
    best = res.best(top)
    utils = ", ".join(f"{u:g}" for u in head["gpu_memory_utilization"])
    eng = _engine(head)
    out = [f"audit plan: {head['model']} ({head['recipe']}, KV {head['kv_cache_dtype']}) on {head['device']}, "
           f"{head['engine']}; gpu-memory-utilization {utils}; launch path {head['model_path']}",
           f"workload: isl {wl.isl} osl {wl.osl}, SLA TTFT <= {head['ttft_ms']:g} ms, TPOT <= {head['tpot_ms']:g} ms, "
           f"MTP acceptance {_acceptance_text(head['mtp_acceptance'])}; {eng.device_noun}s {', '.join(map(str, head['dies']))}",
           f"{res.evaluated:,} configurations evaluated in {res.seconds:.2f} s "
           f"({res.evaluated / max(res.seconds, 1e-9):,.0f}/s); {res.feasible:,} fit in memory; "
           f"{res.simulated} simulated ({res.sim_seconds:.2f} s), {len(res.best(len(res.configs))):,} meet the SLA", ""]
    pb = res.best_per_budget()
    mb = int(head.get("max_batch", 0))
    if len(pb) > 1:
        out += [f"best per {eng.device_noun} budget:",
                tabulate([_row(c) if c else ["-", n] + ["-"] * (len(COLUMNS) - 2) for n, c in pb.items()],
                         _columns(head), tablefmt=tf, disable_numparse=True), ""]
    if not best:
        out.append("no memory-feasible configuration meets the SLA")
    else:
        out.append(tabulate([_row(c) for c in best], _columns(head), tablefmt=tf, disable_numparse=True))
    out += _mode_sections(res, best, tf, head)
    out += [""] + [f"binds: {binds(res, n, head, mb)}" for n in pb]
    if best and head.get("refused"):
        out += ["", f"no launch: the engine cannot start this: {head['refused']}"]
    elif best:
        out += ["", f"launch ({eng.devices(best[0].dies)}, {best[0].mode}, {best[0].plan}):"] + _launch_lines(launch)
        for n, c in pb.items():
            if c is not None and c is not best[0] and per_budget and per_budget.get(n):
                out += ["", f"launch ({eng.devices(n)}, {c.mode}, {c.plan}):"] + _launch_lines(per_budget[n])
    out += [""] + [f"note: {n}" for n in res.notes]
    return "\n".join(out) + "\n"


#: the chosen deployment and the SLA bound get colours no scatter uses, so a reader (and the test) finds them
CHOSEN_COLOR = "#d62728"
SLA_COLOR = "#2ca02c"


def write_pareto_png(res: PlanResult, path: Path, title: str, ttft_ms: float | None = None,
                     tpot_ms: float | None = None) -> Any:
    """The Pareto PNG: every configuration by tokens/s per die against tokens/s per user, each mode's
    front, the deployment the table ranks first (a star, labelled: the one the launch line starts) and
    the SLA: TPOT <= ``tpot_ms`` is tokens/s per user >= 1000 / ``tpot_ms`` (a vertical bound; TTFT
    has no axis here, so it is named in that bound's label). Returns the Figure (its axes map data to
    the PNG's pixels)."""
    fig = new_figure((7, 5))
    ax = fig.add_subplot()
    for mode, color in (("agg", "tab:blue"), ("disagg", "tab:orange")):
        pts = sorted(((c.tok_s_user, c.tok_s_die) for c in res.configs if c.mode == mode))
        if not pts:
            continue
        ax.scatter([p[0] for p in pts], [p[1] for p in pts], s=8, alpha=0.3, color=color)
        front, best = [], -1.0
        for u, d in sorted(pts, key=lambda p: -p[0]):      # Pareto: more per die at equal or better per user
            if d > best:
                front.append((u, d))
                best = d
        ax.plot([p[0] for p in front], [p[1] for p in front], "-o", ms=3, color=color,
                label=f"{'aggregated' if mode == 'agg' else 'disaggregated'} (Pareto)")
    if tpot_ms:
        ttft = f", TTFT <= {ttft_ms:g} ms" if ttft_ms else ""
        ax.axvline(1e3 / tpot_ms, color=SLA_COLOR, ls="--", lw=1.5,
                   label=f"SLA: TPOT <= {tpot_ms:g} ms (right of the line){ttft}")
    chosen = res.best(1)
    if chosen:
        c = chosen[0]
        ax.scatter([c.tok_s_user], [c.tok_s_die], marker="*", s=260, color=CHOSEN_COLOR, edgecolors="black",
                   linewidths=0.6, zorder=5,
                   label=f"chosen: {c.mode} {c.plan} batch {c.batch} MTP {c.mtp} ({c.dies_used} dies)")
        ax.annotate("chosen", (c.tok_s_user, c.tok_s_die), xytext=(10, -3), textcoords="offset points",
                    fontsize=8, color=CHOSEN_COLOR, fontweight="bold", va="center")
        ax.margins(y=0.08)
    ax.set_xlabel("output tokens/s per user")
    ax.set_ylabel("output tokens/s per die")
    ax.set_title(title, fontsize=9)
    fig.legend(fontsize=8, loc="outside lower center", ncol=2, frameon=False)
    ax.grid(alpha=0.3)
    save_png(fig, path, "--png")
    return fig


def _acceptance_text(value: Any) -> str:
    """One per-draft a, or a drafter's per-position rates (DSpark's goldens)."""
    if isinstance(value, (list, tuple)):
        return "per position " + "/".join(f"{p:.2f}" for p in value)
    return f"{value:g}"
