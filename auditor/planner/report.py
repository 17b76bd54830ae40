"""``audit plan`` output: the ranked table, JSON, CSV and the Pareto PNG."""
from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any

from tabulate import tabulate

from ..report.figure import new_figure, save_png
from .search import Config, PlanResult

COLUMNS = ["mode", "dies", "dies_used", "plan", "batch", "mtp", "ttft_ms", "tpot_ms", "tok_s_die", "tok_s_user",
           "weights_gib", "kv_gib", "kv_tokens", "headroom_gib"]


def _row(c: Config) -> list[Any]:
    return [c.mode, c.dies, c.dies_used, c.plan, c.batch, c.mtp, f"{c.ttft_ms:.0f}", f"{c.tpot_ms:.1f}",
            f"{c.tok_s_die:.1f}", f"{c.tok_s_user:.1f}", f"{c.weights_gib:.2f}", f"{c.kv_gib:.2f}",
            f"{c.kv_tokens:,}", f"{c.headroom_gib:.2f}"]


def _plain(o: Any) -> Any:
    """numpy scalars from the kernel arrays -> Python numbers."""
    return o.item() if hasattr(o, "item") else str(o)


def plan_json(res: PlanResult, top: int, launch: list[dict], head: dict) -> dict[str, Any]:
    best = res.best(top)
    return {**head, "workload": res.workload.__dict__, "evaluated": res.evaluated, "seconds": res.seconds,
            "configs_per_s": res.evaluated / res.seconds if res.seconds else None,
            "feasible": len(res.configs), "meeting_sla": sum(c.meets_sla for c in res.configs),
            "best": [c.to_json() for c in best],
            "best_by_mode": {m: [c.to_json() for c in res.best_of(m, top)] for m in ("agg", "disagg")},
            "disaggregated_verdicts": {str(n): v for n, v in res.disagg_verdicts.items()},
            "launch": launch, "notes": res.notes}


MODE_NAMES = {"agg": "aggregated", "disagg": "disaggregated (P/D)"}
SECTION_ROWS = 3


def _mode_sections(res: PlanResult, best: list[Config], tf: str) -> list[str]:
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
                    tabulate([_row(c) for c in rows], COLUMNS, tablefmt=tf, disable_numparse=True)]
        elif mode == "disagg" and res.disagg_verdicts:
            out.append("")
            out += [f"{name}: none within {n} dies: {v}" for n, v in sorted(res.disagg_verdicts.items())]
        elif mode == "disagg" and not any(c.mode == mode for c in res.configs):
            out += ["", f"{name}: not searched (--no-disagg)" if not res.searched_disagg else
                    f"{name}: none meets the SLA"]
        else:
            out += ["", f"{name}: none meets the SLA"]
    return out


def render_plan(res: PlanResult, fmt: str, top: int, launch: list[dict], head: dict) -> str:
    if fmt == "json":
        return json.dumps(plan_json(res, top, launch, head), indent=1, default=_plain) + "\n"
    if fmt == "csv":
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        w.writerow(COLUMNS + ["meets_sla"])
        for c in sorted(res.configs, key=lambda c: -c.tok_s_die):
            w.writerow([getattr(c, k) for k in COLUMNS] + [int(c.meets_sla)])
        return buf.getvalue()
    tf = "github" if fmt == "markdown" else "simple"
    wl = res.workload
    best = res.best(top)
    out = [f"audit plan: {head['model']} on {head['device']} ({head['engine']}), dies {head['dies']}, "
           f"isl {wl.isl} osl {wl.osl}, SLA TTFT <= {head['ttft_ms']:g} ms, TPOT <= {head['tpot_ms']:g} ms",
           f"{res.evaluated:,} configurations evaluated in {res.seconds:.2f} s "
           f"({res.evaluated / max(res.seconds, 1e-9):,.0f}/s); {len(res.configs):,} fit in memory, "
           f"{sum(c.meets_sla for c in res.configs):,} meet the SLA", ""]
    if not best:
        out.append("no memory-feasible configuration meets the SLA")
    else:
        out.append(tabulate([_row(c) for c in best], COLUMNS, tablefmt=tf, disable_numparse=True))
    out += _mode_sections(res, best, tf)
    if best:
        out += ["", f"launch ({best[0].mode}, {best[0].plan}):"]
        for inst in launch:
            env = " ".join(f"{k}={v}" for k, v in inst["env"].items())
            out += [f"# {inst['name']}", f"{env} \\\n    {inst['command']}"]
    out += [""] + [f"note: {n}" for n in res.notes]
    return "\n".join(out) + "\n"


def write_pareto_png(res: PlanResult, path: Path, title: str) -> None:
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
    ax.set_xlabel("output tokens/s per user")
    ax.set_ylabel("output tokens/s per die")
    ax.set_title(title, fontsize=9)
    fig.legend(fontsize=8, loc="outside lower center", ncol=2, frameon=False)
    ax.grid(alpha=0.3)
    save_png(fig, path, "--png")
