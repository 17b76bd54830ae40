"""PNG of the memory report: a waterfall from the naive estimate to the resident figure.

Why a waterfall: the number a user questions is "why 38 GiB when the checkpoint says 25?". One bar
per bridge step, floating from the running total, answers it cause by cause; ``--observed`` (what
the engine printed) is a vertical line, so the gap to the model is visible too.

``draw_memory_waterfall`` draws on any matplotlib Axes and takes plain bridge steps, so other
reports (e.g. an alignment against an engine log) reuse it. matplotlib is imported only when a PNG
is written, and without pyplot (the Agg canvas is all a file needs).
"""
from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

from .figure import new_figure, save_png
from ..units import pick_unit

NAIVE_STEP = "naive estimate"
RESIDENT_STEP = "resident"
COLOURS = {"total": "#4c566a", "increase": "#d62728", "decrease": "#2ca02c", "observed": "#1f77b4"}


def draw_memory_waterfall(ax: Any, bridge_steps: Sequence[dict], observed_bytes: int | None = None,
                          unit: tuple[str, float] | None = None) -> list[Any]:
    """Horizontal waterfall on ``ax``: the first step (the naive estimate) and the last (resident)
    are totals drawn from zero; every step between is a signed change drawn from the running total
    (``left`` = total before it, ``width`` = its signed size, so a decrease has a negative width).

    ``bridge_steps``: ``[{"step": name, "bytes": n}, ...]`` as in the memory report's ``bridge``
    (first and last are absolute totals). Returns the bar patches, top to bottom."""
    if len(bridge_steps) < 2:
        raise ValueError("a waterfall needs at least a start and an end total")
    largest = max([abs(s["bytes"]) for s in bridge_steps] + [observed_bytes or 0])
    name, div = unit if unit is not None else pick_unit(largest)
    first, *middle, last = bridge_steps
    labels, lefts, widths, colours = [first["step"]], [0.0], [first["bytes"] / div], [COLOURS["total"]]
    running = first["bytes"]
    for s in middle:
        labels.append(s["step"])
        lefts.append(running / div)
        widths.append(s["bytes"] / div)
        colours.append(COLOURS["increase"] if s["bytes"] >= 0 else COLOURS["decrease"])
        running += s["bytes"]
    labels.append(("= " if last["step"] == RESIDENT_STEP else "") + last["step"])
    lefts.append(0.0)
    widths.append(last["bytes"] / div)
    colours.append(COLOURS["total"])

    ys = list(range(len(labels)))
    bars = ax.barh(ys, widths, left=lefts, color=colours, height=0.65, edgecolor="none")
    span = max(max(lefts[i] + widths[i], lefts[i]) for i in ys)
    for i in ys:             # value labels just past each bar's right end
        end = max(lefts[i], lefts[i] + widths[i])
        text = f"{widths[i]:.3f}" if i in (0, len(ys) - 1) else f"{widths[i]:+.3f}"
        ax.text(end + span * 0.01, i, text, va="center", ha="left", fontsize=7)
    for i in ys[:-1]:        # connectors: the running total carried to the next bar
        x = lefts[i] + widths[i]
        ax.plot([x, x], [i + 0.33, i + 0.67], color="#888888", linewidth=0.6)
    if observed_bytes is not None:
        ax.axvline(observed_bytes / div, color=COLOURS["observed"], linestyle="--", linewidth=1.2)
        ax.text(observed_bytes / div, -0.55, f"observed {observed_bytes / div:.3f}", color=COLOURS["observed"],
                ha="right", va="bottom", fontsize=7)
    ax.set_yticks(ys, labels, fontsize=8)
    ax.invert_yaxis()
    ax.set_xlabel(name)
    ax.set_xlim(0, max(span, (observed_bytes or 0) / div) * 1.12)
    ax.grid(axis="x", color="#dddddd", linewidth=0.5)
    ax.set_axisbelow(True)
    return list(bars.patches)


def waterfall_legend_handles(observed_label: str | None = None) -> list[Any]:
    """Legend entries for a waterfall; ``observed_label`` names the observed line (None: no line)."""
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    handles = [Patch(color=COLOURS["total"], label="total"), Patch(color=COLOURS["increase"], label="adds"),
               Patch(color=COLOURS["decrease"], label="removes")]
    if observed_label:
        handles.append(Line2D([], [], color=COLOURS["observed"], linestyle="--", label=observed_label))
    return handles


def memory_figure(rep: dict) -> Any:
    """The memory report's waterfall as a matplotlib Figure (Agg canvas attached)."""
    steps = rep["bridge"]
    observed = rep.get("observed", {}).get("observed_bytes")
    fig = new_figure((9, 0.32 * len(steps) + 1.9))
    ax = fig.add_subplot()
    draw_memory_waterfall(ax, steps, observed)
    m, p, w = rep["model"], rep["plan"], rep["worst_rank"]
    plan = (f"TP{p['tp']} DP{p['dp']} EP{p['ep']} " + (f"PP{p['pp']} " if p["pp"] > 1 else "")
            + ("SP " if p["sp"] else "") + f"role={p['role']}")
    ax.set_title(f"{m['name']} ({m['recipe'] or m['source']}): naive estimate -> resident weights, rank {w['rank']} "
                 f"(worst of {p['world']})\n{plan} | {rep['engine']['label']}", fontsize=9)
    fig.legend(handles=waterfall_legend_handles("observed (--observed)" if observed is not None else None), loc="outside lower center", ncol=4,
               fontsize=8, frameon=False)
    return fig


def write_memory_png(rep: dict, path: Path) -> None:
    save_png(memory_figure(rep), path, "--png")
