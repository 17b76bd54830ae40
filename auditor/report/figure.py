"""The one way a report makes and writes a PNG: a matplotlib Figure on the Agg canvas, never
pyplot (its import and backend machinery cost ~0.2 s per command), saved through the one output
writer so a failed write is one ``audit: error:`` line. matplotlib is imported only when called."""
from __future__ import annotations

from pathlib import Path
from typing import Any

from ..outputs import open_output


def new_figure(figsize: tuple[float, float]) -> Any:
    """A Figure with the Agg canvas attached and constrained layout (legends placed outside)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=figsize, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def save_png(fig: Any, path: Path, option: str) -> None:
    """Write ``fig`` to ``path`` as PNG; ``option`` names the flag in any error."""
    with open_output(path, option) as f:
        fig.savefig(f, dpi=110, format="png")
