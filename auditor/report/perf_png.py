"""PNG (``--png out.png``): time per op class per layer, stacked bars, one panel per phase.

Every op class shown gets its own colour from one categorical palette, the same colour in every
panel; classes below ``MIN_SHARE`` of every phase's time (or beyond the palette) are summed as
"other" in grey. The legend sits outside the panels, so it never hides a bar. matplotlib is
imported only here, without pyplot (the Agg canvas is all a file needs).
"""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

from .figure import new_figure, save_png
from ..perf.api import PerfResult

# Distinct hues (no two blues, no light variants of another entry); grey is reserved for "other".
PALETTE = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#bcbd22",
           "#17becf", "#000000", "#f0e442", "#800000")
OTHER = "other"
OTHER_COLOUR = "#b0b0b0"
MIN_SHARE = 0.01
BAR_WIDTH = 0.9
MODEL_LAYER = -1     # x position of ops outside decoder layers (embedding, lm_head)
CTX_HATCH = "///"    # classes whose cost grows with the cached context
CTX_SUFFIX = " (grows with context)"


def context_classes(res: PerfResult) -> set[str]:
    """Op classes whose cost depends on the cached context (SFA, indexer score and top-k, ...)."""
    return {e["kind"] for ph in res.phases.values() for e in ph.op_entries() if e.get("context_dependent")}


def class_times(res: PerfResult) -> dict[str, dict[str, dict[int, float]]]:
    """{phase: {op class: {layer: ms}}}; collectives are classes ``comm:<kind>``."""
    out: dict[str, dict[str, dict[int, float]]] = {}
    for name, ph in res.phases.items():
        per: dict[str, dict[int, float]] = defaultdict(lambda: defaultdict(float))
        for e in ph.op_entries():
            per[e["kind"]][MODEL_LAYER if e["layer"] is None else e["layer"]] += e["time_us"] / 1e3
        for c in ph.collective_entries():
            per[f"comm:{c['kind']}"][MODEL_LAYER if c["layer"] is None else c["layer"]] += c["time_us"] / 1e3
        out[name] = {k: dict(v) for k, v in per.items()}
    return out


def major_classes(times: dict[str, dict[str, dict[int, float]]], min_share: float = MIN_SHARE,
                  limit: int = len(PALETTE)) -> list[str]:
    """Classes worth a colour: at least ``min_share`` of some phase's total, largest first, at most
    ``limit`` (the rest is "other")."""
    share: dict[str, float] = defaultdict(float)
    for per in times.values():
        total = sum(sum(v.values()) for v in per.values()) or 1.0
        for cls, v in per.items():
            share[cls] = max(share[cls], sum(v.values()) / total)
    ranked = sorted((c for c, s in share.items() if s >= min_share), key=lambda c: (-share[c], c))
    return ranked[:limit]


def class_colours(classes: list[str]) -> dict[str, str]:
    """One palette colour per class, in order, and grey for "other"."""
    if len(classes) > len(PALETTE):
        raise ValueError(f"{len(classes)} classes for a {len(PALETTE)}-colour palette")
    return {**{c: PALETTE[i] for i, c in enumerate(classes)}, OTHER: OTHER_COLOUR}


def _bar_vertices(x: np.ndarray, bottom: np.ndarray, height: np.ndarray, width: float) -> np.ndarray:
    """[n, 4, 2] corners of n stacked-bar segments (zero-height segments are dropped)."""
    keep = height > 0
    x, b, h = x[keep], bottom[keep], height[keep]
    lo, hi = x - width / 2, x + width / 2
    return np.stack([np.stack([lo, b], 1), np.stack([hi, b], 1), np.stack([hi, b + h], 1),
                     np.stack([lo, b + h], 1)], axis=1)


def perf_figure(res: PerfResult) -> Any:
    from matplotlib.collections import PolyCollection
    from matplotlib.patches import Patch

    times = class_times(res)
    majors = major_classes(times)
    colours = class_colours(majors)
    growing = context_classes(res)
    fig = new_figure((15, 3.8 * len(times) + 0.6))
    axes = fig.subplots(len(times), 1, squeeze=False)[:, 0]
    used: list[str] = []
    for ax, (name, per) in zip(axes, times.items()):
        layers = sorted({L for v in per.values() for L in v})
        series = {c: per[c] for c in majors if c in per}
        minor = [c for c in per if c not in colours]
        if minor:
            other: dict[int, float] = defaultdict(float)
            for c in minor:
                for L, ms in per[c].items():
                    other[L] += ms
            series[OTHER] = dict(other)
        x = np.asarray(layers, dtype=np.float64)
        bottom = np.zeros(len(layers))
        for cls, v in series.items():
            ys = np.array([v.get(L, 0.0) for L in layers])
            if not ys.any():
                continue
            # one collection per class instead of one Rectangle per bar: ~2,000 patches cost seconds
            hatch = CTX_HATCH if cls in growing else None
            ax.add_collection(PolyCollection(_bar_vertices(x, bottom, ys, BAR_WIDTH), facecolors=colours[cls],
                                             edgecolors="white" if hatch else "none", linewidths=0, hatch=hatch,
                                             label=cls))
            bottom = bottom + ys
            if cls not in used:
                used.append(cls)
        ax.set_xlim(x.min() - 0.6, x.max() + 0.6)
        ax.set_ylim(0, float(bottom.max()) * 1.04 or 1.0)
        ph = res.phases[name]
        w = ph.workload
        ax.set_title(f"{res.model} {name}, context {w.context}: {ph.time_ms:.2f} ms incl. host {ph.host_ms:.2f} ms "
                     f"({res.plan.describe()}, {res.recipe}); layer {MODEL_LAYER} = embedding / lm_head; "
                     f"hatched = grows with context", fontsize=9)
        ax.set_xlabel("layer")
        ax.set_ylabel("ms")
    order = [c for c in majors if c in used] + ([OTHER] if OTHER in used else [])
    fig.legend(handles=[Patch(facecolor=colours[c], edgecolor="white" if c in growing else colours[c],
                              hatch=CTX_HATCH if c in growing else None,
                              label=c + (CTX_SUFFIX if c in growing else "")) for c in order],
               loc="outside right upper",
               fontsize=8, title="op class", title_fontsize=8, frameon=False)
    return fig


def write_png(res: PerfResult, path: Path) -> None:
    fig = perf_figure(res)
    save_png(fig, path, "--png")
