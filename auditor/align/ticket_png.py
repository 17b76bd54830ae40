"""Ticket figures (matplotlib, Agg backend, imported lazily): the memory waterfall from the naive
estimate through the bridge steps to the resident figure with the observed value marked, and
predicted against measured time per op class."""
from __future__ import annotations

from pathlib import Path

GiB = 1 << 30


def _plt():
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    return plt


def write_memory_waterfall(group: dict, path: Path, title: str) -> None:
    plt = _plt()
    steps = [(s["step"], s["bytes"] / GiB) for s in group["bridge"]]
    fig, ax = plt.subplots(figsize=(10, 4 + 0.25 * len(steps)))
    labels, lefts, widths, colors = ["naive estimate"], [0.0], [group["naive_bytes"] / GiB], ["#888888"]
    x = group["naive_bytes"] / GiB
    for name, v in steps:
        labels.append(name)
        lefts.append(x if v >= 0 else x + v)
        widths.append(abs(v))
        colors.append("#d62728" if v >= 0 else "#2ca02c")
        x += v
    labels.append("= predicted resident")
    lefts.append(0.0)
    widths.append(group["predicted_bytes"] / GiB)
    colors.append("#1f77b4")
    y = list(range(len(labels)))[::-1]
    ax.barh(y, widths, left=lefts, color=colors)
    ax.set_yticks(y, labels, fontsize=8)
    obs = group["observed_bytes"] / GiB
    ax.axvline(obs, color="black", linestyle="--", label=f"observed {obs:.3f} GiB")
    ax.set_xlabel("GiB per rank")
    ax.set_title(f"{title}: ranks {group['ranks']}", fontsize=9)
    ax.legend(loc="lower right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_time_by_class(rows: list[dict], path: Path, title: str) -> None:
    plt = _plt()
    rows = [r for r in rows if r["predicted_us"] > 0 or (r["measured_us"] or 0) > 0]
    fig, ax = plt.subplots(figsize=(10, 4 + 0.25 * len(rows)))
    y = list(range(len(rows)))[::-1]
    ax.barh([v + 0.2 for v in y], [r["predicted_us"] / 1e3 for r in rows], height=0.4, label="predicted")
    ax.barh([v - 0.2 for v in y], [(r["measured_us"] or 0) / 1e3 for r in rows], height=0.4, label="measured")
    ax.set_yticks(y, [r["class"] for r in rows], fontsize=8)
    ax.set_xlabel("ms per step")
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_figures(ticket: dict, out_dir: Path) -> list[str]:
    """Write the PNGs the ticket has data for; returns their file names."""
    names = []
    m = ticket.get("memory")
    if m and m["groups"]:
        write_memory_waterfall(m["groups"][0], out_dir / "memory_waterfall.png", ticket["title"][:100])
        names.append("memory_waterfall.png")
    t = ticket.get("time")
    if t and t["by_class"]:
        write_time_by_class(t["by_class"], out_dir / "time_by_class.png",
                            f"{t['phase']}: predicted vs measured per op class")
        names.append("time_by_class.png")
    return names
