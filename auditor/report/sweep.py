"""Sweep output: the full grid as CSV, and the best configurations as a table / markdown / json."""
from __future__ import annotations

import csv
import io
import json
from pathlib import Path

from tabulate import tabulate

from ..outputs import open_output
from ..perf.sweep import COLUMNS, SweepResult

_INT = {"tp", "dp", "ep", "tokens", "context", "batch", "mtp", "decode_context", "fits"}
_DECIMALS = {"ttft_ms": 3, "decode_step_ms": 3, "prefill_tok_s_per_device": 2, "decode_tok_s_per_device": 2,
             "weights_gib": 3, "kv_free_gib": 3}


def _row(r) -> dict:
    return {c: (int(v) if c in _INT else round(float(v), 4)) for c, v in zip(COLUMNS, r)}


def write_sweep_csv(res: SweepResult, path: Path) -> None:
    with open_output(path, "--csv", text=True) as f:
        w = csv.writer(f)
        w.writerow(COLUMNS)
        for r in res.rows:
            w.writerow(list(_row(r).values()))


#: the ranked tables' columns and their short headings (the CSV keeps every column, full names)
_SHOWN = (("tp", "tp"), ("dp", "dp"), ("tokens", "tokens"), ("context", "ctx"), ("batch", "batch"),
          ("mtp", "mtp"), ("ttft_ms", "TTFT ms"), ("decode_step_ms", "step ms"),
          ("prefill_tok_s_per_device", "pre tok/s/die"), ("decode_tok_s_per_device", "dec tok/s/die"),
          ("weights_gib", "W GiB"), ("kv_free_gib", "KV free"))


def render_sweep(res: SweepResult, fmt: str, top: int = 5, context: dict | None = None) -> str:
    """``context``: what the grid was evaluated for (model, recipe, engine, device, KV dtype, ...),
    named above the tables and in the JSON."""
    context = context or {}
    by_ttft = [_row(r) for r in res.best("ttft_ms", largest=False, k=top)]
    by_dec = [_row(r) for r in res.best("decode_tok_s_per_device", largest=True, k=top)]
    if fmt == "json":
        return json.dumps({**context, "configurations": res.n_configs, "infeasible": res.n_infeasible, "skipped": res.skipped,
                           "notes": res.notes,
                           "best_ttft": by_ttft, "best_decode_tok_s_per_device": by_dec}, indent=1)
    if fmt == "csv":
        buf = io.StringIO()
        w = csv.writer(buf)
        w.writerow(["rank_by"] + COLUMNS)
        for label, rows in (("ttft", by_ttft), ("decode_tok_s_per_device", by_dec)):
            for r in rows:
                w.writerow([label] + list(r.values()))
        return buf.getvalue()
    tf = "github" if fmt == "markdown" else "simple"

    noun = "die"
    if context.get("engine"):
        from ..engines.registry import as_engine
        noun = as_engine(context["engine"]).device_noun.lower()     # the engine's word (die / gpu)
    heads = [h.replace("/die", "/" + noun) for _, h in _SHOWN]

    def table(rows: list[dict]) -> str:
        cells = [[str(r[c]) if c in _INT else f"{r[c]:.{_DECIMALS[c]}f}" for c, _ in _SHOWN] for r in rows]
        return tabulate(cells, heads, tablefmt=tf, disable_numparse=True,
                        colalign=["right"] * len(_SHOWN))

    out = []
    if context:
        shown = {"kv_cache_dtype": "KV", "gpu_memory_utilization": "util", "mtp_acceptance": "accept"}
        out.append("audit sweep: " + ", ".join(f"{shown.get(k, k)} {v}" for k, v in context.items()))
    out += [f"{res.n_configs} configurations evaluated, {res.n_infeasible} do not fit the device's HBM "
            "(fits = 0 in the CSV; never ranked)",
            "W = worst-rank weights, KV free = the pool left after the batch's requests (GiB)"]
    for s in res.skipped:
        out.append(f"skipped {s}")
    out += ["", f"best TTFT (prefill time per DP rank batch), top {top}:",
            table(by_ttft),
            "", f"best decode tokens/s per device, top {top}:",
            table(by_dec)]
    out += [f"note: {n}" for n in res.notes]
    return "\n".join(out) + "\n"


def write_sweep_png(res: SweepResult, path: Path, title: str) -> None:
    """TTFT against decode tokens/s per die of every configuration that fits, one colour per TP x DP,
    with the Pareto front (lower TTFT, more tokens/s) drawn; configurations that do not fit are grey."""
    import numpy as np

    from .figure import new_figure, save_png
    fig = new_figure((7.5, 5))
    ax = fig.add_subplot()
    col = {c: i for i, c in enumerate(COLUMNS)}
    rows = res.rows
    fits = rows[:, col["fits"]] > 0
    if (~fits).any():
        bad = rows[~fits]
        ax.scatter(bad[:, col["ttft_ms"]], bad[:, col["decode_tok_s_per_device"]], s=6, color="0.8",
                   label="does not fit HBM")
    good = rows[fits]
    plans = sorted({(int(t), int(d)) for t, d in good[:, [col["tp"], col["dp"]]]})
    for tp, dp in plans:
        sel = good[(good[:, col["tp"]] == tp) & (good[:, col["dp"]] == dp)]
        ax.scatter(sel[:, col["ttft_ms"]], sel[:, col["decode_tok_s_per_device"]], s=10, alpha=0.7,
                   label=f"TP{tp} DP{dp}")
    if len(good):
        order = np.argsort(good[:, col["ttft_ms"]], kind="stable")
        front, best = [], -1.0
        for r in good[order]:
            if r[col["decode_tok_s_per_device"]] > best:
                best = r[col["decode_tok_s_per_device"]]
                front.append((r[col["ttft_ms"]], best))
        ax.plot([p[0] for p in front], [p[1] for p in front], "-", color="black", lw=1, label="Pareto front")
    ax.set_xscale("log")
    from matplotlib.ticker import NullFormatter
    ax.xaxis.set_minor_formatter(NullFormatter())          # decades only: minor labels collide
    ax.set_xlabel("TTFT, ms (prefill of the batch per DP rank)")
    ax.set_ylabel("decode tokens/s per die")
    ax.set_title(title, fontsize=9, wrap=True)
    ax.grid(alpha=0.3)
    fig.legend(fontsize=7, loc="outside right upper", frameon=False)
    save_png(fig, path, "--png")
