"""Ticket figures (matplotlib, Agg backend, imported lazily): the memory waterfall from the naive
estimate through the bridge steps to the resident figure with the observed value marked, and
predicted against measured time per op class."""
from __future__ import annotations

import textwrap
from pathlib import Path

from ..report.figure import new_figure, save_png
from ..units import GiB


def write_memory_waterfall(group: dict, path: Path, title: str) -> None:
    """The memory report's waterfall (one drawing function for both), ending at the predicted
    resident figure, with the observed one marked."""
    from ..report.memory_png import draw_memory_waterfall, waterfall_legend_handles

    steps = ([{"step": "naive estimate", "bytes": group["naive_bytes"]}] + list(group["bridge"])
             + [{"step": "predicted resident", "bytes": group["predicted_bytes"]}])
    fig = new_figure((10, 2 + 0.32 * len(steps)))
    ax = fig.add_subplot()
    draw_memory_waterfall(ax, steps, group["observed_bytes"], unit=("GiB per rank", GiB))
    ax.set_title(textwrap.fill(f"{title}: ranks {group['ranks']}", 90), fontsize=9)
    fig.legend(handles=waterfall_legend_handles("observed (engine log)"), loc="outside lower center", ncol=4, fontsize=8,
               frameon=False)
    save_png(fig, path, "--output-dir")


def write_time_by_class(rows: list[dict], path: Path, title: str) -> None:
    rows = [r for r in rows if r["predicted_us"] > 0 or (r["measured_us"] or 0) > 0]
    fig = new_figure((10, 4 + 0.25 * len(rows)))
    ax = fig.add_subplot()
    y = list(range(len(rows)))[::-1]
    ax.barh([v + 0.2 for v in y], [r["predicted_us"] / 1e3 for r in rows], height=0.4, label="predicted")
    ax.barh([v - 0.2 for v in y], [(r["measured_us"] or 0) / 1e3 for r in rows], height=0.4, label="measured")
    ax.set_yticks(y, [r["class"] for r in rows], fontsize=8)
    ax.set_xlabel("ms per step")
    ax.set_title(textwrap.fill(title, 90), fontsize=9)
    fig.legend(fontsize=8, loc="outside lower center", ncol=2, frameon=False)
    save_png(fig, path, "--output-dir")


MAX_WATERFALLS = 8


def figure_names(ticket: dict) -> list[str]:
    """The PNG names write_figures will write (known before writing, so the ticket can list them)."""
    names = []
    m = ticket.get("memory")
    if m and m["groups"]:
        names += ["memory_waterfall.png" if i == 0 else f"memory_waterfall_{i + 1}.png"
                  for i in range(min(len(m["groups"]), MAX_WATERFALLS))]
    t = ticket.get("time")
    if t and t["by_class"]:
        names.append("time_by_class.png")
    return names


def write_figures(ticket: dict, out_dir: Path) -> list[str]:
    """Write the PNGs the ticket has data for; returns their file names."""
    names = []
    m = ticket.get("memory")
    if m and m["groups"]:
        # one waterfall per rank group (a multi-group ticket shows each), at most MAX_WATERFALLS
        for i, g in enumerate(m["groups"][:MAX_WATERFALLS]):
            name = "memory_waterfall.png" if i == 0 else f"memory_waterfall_{i + 1}.png"
            write_memory_waterfall(g, out_dir / name, ticket["title"])
            names.append(name)
    t = ticket.get("time")
    if t and t["by_class"]:
        write_time_by_class(t["by_class"], out_dir / "time_by_class.png",
                            f"{t['phase']}: predicted vs measured per op class")
        names.append("time_by_class.png")
    return names
