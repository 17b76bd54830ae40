"""PNG (``--png out.png``): time per op class per layer, stacked bars, one panel per phase."""
from __future__ import annotations

from collections import defaultdict
from pathlib import Path

from ..perf.api import PerfResult


def write_png(res: PerfResult, path: Path) -> None:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    phases = list(res.phases.items())
    fig, axes = plt.subplots(len(phases), 1, figsize=(14, 4 * len(phases)), squeeze=False)
    for ax, (name, ph) in zip(axes[:, 0], phases):
        per: dict[str, dict[int, float]] = defaultdict(lambda: defaultdict(float))
        layers: set[int] = set()
        model_layer = -1
        for e in ph.op_entries():
            L = model_layer if e["layer"] is None else e["layer"]
            per[e["kind"]][L] += e["time_us"] / 1e3
            layers.add(L)
        for c in ph.collective_entries():
            L = model_layer if c["layer"] is None else c["layer"]
            per[f"comm:{c['kind']}"][L] += c["time_us"] / 1e3
            layers.add(L)
        xs = sorted(layers)
        bottom = [0.0] * len(xs)
        for cls in sorted(per, key=lambda k: -sum(per[k].values())):
            ys = [per[cls].get(x, 0.0) for x in xs]
            if not any(ys):
                continue
            ax.bar(xs, ys, bottom=bottom, label=cls, width=0.9)
            bottom = [b + y for b, y in zip(bottom, ys)]
        ax.set_title(f"{res.model} {name}: {ph.time_ms:.2f} ms ({res.plan.describe()}, {res.recipe}); "
                     "layer -1 = embedding/lm_head")
        ax.set_xlabel("layer")
        ax.set_ylabel("ms")
        ax.legend(fontsize=7, ncol=4, loc="upper right")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
