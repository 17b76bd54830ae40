"""PNG of the memory ledger: stacked bars per distinct rank group, by category, with the naive line."""
from __future__ import annotations

from pathlib import Path

from ..model.classify import CATEGORIES
from .memory_text import _rank_groups, _ranks_label
from .units import GiB


def write_memory_png(rep: dict, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = _rank_groups(rep["ranks"])[:24]
    labels = [_ranks_label(r) for r, _ in groups]
    fig, ax = plt.subplots(figsize=(max(6, 0.6 * len(groups) + 3), 4.5))
    bottom = [0.0] * len(groups)
    for c in CATEGORIES:
        vals = [g["by_category"][c] / GiB for _, g in groups]
        ax.bar(labels, vals, bottom=bottom, label=c)
        bottom = [b + v for b, v in zip(bottom, vals)]
    ax.plot(labels, [g["naive_bytes"] / GiB for _, g in groups], "k_", markersize=28, mew=2, label="naive")
    m, p = rep["model"], rep["plan"]
    ax.set_title(f"{m['name']} resident weights per rank\nTP{p['tp']} DP{p['dp']} EP{p['ep']} "
                 f"{'PP' + str(p['pp']) + ' ' if p['pp'] > 1 else ''}{'SP ' if p['sp'] else ''}"
                 f"{rep['engine']['label']} ({p['role']})", fontsize=9)
    ax.set_ylabel("GiB")
    ax.set_xlabel("ranks (identical ranks grouped)")
    ax.legend(fontsize=8, loc="lower right")
    plt.setp(ax.get_xticklabels(), rotation=30, ha="right", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
