"""The PNGs (issue 7, "Plots"): a distinct colour per op class in the perf chart, legends outside
the data in both charts, and a memory waterfall whose bars add up from naive to resident."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from auditor.cli import main

matplotlib = pytest.importorskip("matplotlib")

GIB = 2 ** 30
P_NODE = ["--tp", "16", "--dp", "2", "--ep", "32", "--sp", "--engine", "vllm-ascend@0.18", "--role", "prefill"]


@pytest.fixture
def captured(monkeypatch):
    """The Figure objects the CLI builds and saves (the real --png path, not a re-creation)."""
    from auditor.report import memory_png, perf_png
    figs: dict[str, object] = {}
    for mod, name in ((perf_png, "perf_figure"), (memory_png, "memory_figure")):
        real = getattr(mod, name)

        def wrapper(*a, _real=real, _name=name, **kw):
            figs[_name] = fig = _real(*a, **kw)
            return fig
        monkeypatch.setattr(mod, name, wrapper)
    return figs


def _renderer(fig):
    fig.canvas.draw()
    return fig.canvas.get_renderer()


def _legend_clear_of_axes(fig) -> None:
    r = _renderer(fig)
    legends = list(fig.legends) + [ax.get_legend() for ax in fig.axes if ax.get_legend()]
    assert legends
    for leg in legends:
        lb = leg.get_window_extent(r)
        for ax in fig.axes:
            ab = ax.get_window_extent(r)
            # no overlap: the legend lies entirely left, right, above or below the axes' data area
            assert lb.x0 >= ab.x1 or lb.x1 <= ab.x0 or lb.y0 >= ab.y1 or lb.y1 <= ab.y0, (lb, ab)


def test_perf_png_has_one_distinct_colour_per_class(tmp_path, captured):
    png = tmp_path / "perf.png"
    assert main(["perf", "--tp", "16", "--dp", "2", "--ep", "32", "--sp", "--phase", "both", "--tokens", "4096",
                 "--png", str(png), "-o", str(tmp_path / "perf.txt")]) == 0
    fig = captured["perf_figure"]
    colour_of: dict[str, tuple] = {}
    for ax in fig.axes:
        for coll in ax.collections:
            label = coll.get_label()
            rgba = tuple(np.round(coll.get_facecolor()[0], 4))
            assert colour_of.setdefault(label, rgba) == rgba, f"{label} changes colour between panels"
    classes = sorted(colour_of)
    assert {"sfa", "indexer_score", "grouped_matmul", "comm:all_to_all"} <= set(classes)
    assert len(classes) >= 8                      # every class at >= 1 % of a phase has a colour of its own
    assert len(set(colour_of.values())) == len(classes), "two op classes share a colour"
    # the legend names exactly the classes drawn, each in its bar colour
    leg = fig.legends[0]
    from auditor.report.perf_png import CTX_SUFFIX
    legend_colour = {t.get_text().removesuffix(CTX_SUFFIX): tuple(np.round(h.get_facecolor(), 4))
                     for t, h in zip(leg.get_texts(), leg.legend_handles)}
    assert legend_colour == colour_of
    # the classes that grow with the context are hatched and say so in the legend
    hatched = {t.get_text() for t, h in zip(leg.get_texts(), leg.legend_handles) if h.get_hatch()}
    assert hatched == {c + CTX_SUFFIX for c in ("sfa", "indexer_score", "indexer_topk") if c in colour_of}
    # and those colours are really in the saved image
    img = (matplotlib.image.imread(png)[..., :3] * 255).round().astype(int).reshape(-1, 3)
    present = {tuple(p) for p in np.unique(img, axis=0)}
    for label, rgba in colour_of.items():
        assert tuple(int(round(c * 255)) for c in rgba[:3]) in present, f"{label} colour not in the PNG"
    _legend_clear_of_axes(fig)


def test_perf_minor_classes_are_grouped_as_other():
    from auditor.report.perf_png import OTHER, class_colours, major_classes
    # one phase, 100 ms in total: 'tiny' is 0.5% and falls under the 1% threshold
    times = {"prefill": {"big": {0: 60.0}, "mid": {0: 39.5}, "tiny": {0: 0.5}}}
    majors = major_classes(times)
    assert majors == ["big", "mid"]
    colours = class_colours(majors)
    assert OTHER in colours and colours[OTHER] not in {colours["big"], colours["mid"]}
    assert colours["big"] != colours["mid"]


def test_memory_waterfall_adds_up_from_naive_to_resident(tmp_path, captured):
    out = tmp_path / "m.json"
    png = tmp_path / "m.png"
    assert main(["memory", "glm-5.1", *P_NODE, "--observed", "38GiB", "--png", str(png),
                 "--format", "json", "-o", str(out)]) == 0
    rep = json.loads(out.read_text())
    assert png.stat().st_size > 0
    bridge = rep["bridge"]
    naive, resident = rep["naive"]["bytes"], rep["worst_rank"]["bytes"]
    assert f"{resident / GIB:.3f}" == "38.234" and f"{naive / GIB:.3f}" == "24.521"   # figures unchanged
    steps = [s["bytes"] for s in bridge[1:-1]]
    assert abs(naive + sum(steps) - resident) <= len(steps)        # per-step rounding to whole bytes

    fig = captured["memory_figure"]
    ax = fig.axes[0]
    bars = [p for p in ax.patches]
    assert len(bars) == len(bridge)
    widths = [b.get_width() * GIB for b in bars]
    lefts = [b.get_x() * GIB for b in bars]
    assert lefts[0] == 0 and widths[0] == pytest.approx(naive)
    assert lefts[-1] == 0 and widths[-1] == pytest.approx(resident)
    running = naive
    for s, left, width in zip(steps, lefts[1:-1], widths[1:-1]):
        assert left == pytest.approx(running) and width == pytest.approx(s)   # floats from the running total
        running += s
    assert widths[0] + sum(widths[1:-1]) == pytest.approx(widths[-1])
    # --observed is a vertical line at 38 GiB
    xs = [line.get_xdata() for line in ax.lines]
    assert any(len(x) == 2 and x[0] == x[1] == pytest.approx(38.0) for x in xs)
    labels = [t.get_text() for t in ax.get_yticklabels()]
    assert labels[0] == "naive estimate" and labels[-1] == "= resident"
    _legend_clear_of_axes(fig)


def test_waterfall_draws_on_any_axes():
    from matplotlib.figure import Figure

    from auditor.report.memory_png import draw_memory_waterfall
    ax = Figure().add_subplot()
    steps = [{"step": "naive estimate", "bytes": 10 * GIB}, {"step": "a", "bytes": 3 * GIB},
             {"step": "b", "bytes": -1 * GIB}, {"step": "resident", "bytes": 12 * GIB}]
    bars = draw_memory_waterfall(ax, steps, observed_bytes=13 * GIB)
    assert [(b.get_x(), b.get_width()) for b in bars] == [(0, 10), (10, 3), (13, -1), (0, 12)]


@pytest.mark.parametrize("argv", [
    ["memory", "glm-5.1", "--tp", "16", "--png"],
    ["memory", "glm-5.1", "--tp", "16", "--dp", "2", "--ep", "32", "--sp", "--max-model-len", "8192", "--hbm-png"],
    ["plan", "glm-5.1", "--dies", "32", "--tp", "16", "--isl", "1024", "--osl", "128", "--ttft-ms", "5000",
     "--tpot-ms", "200", "--png"],
    ["sweep", "glm-5.1", "--tp", "8,16", "--dp", "1,2", "--png"],
], ids=["memory-waterfall", "hbm-budget", "plan-pareto", "sweep-grid"])
def test_png_needs_no_pyplot(tmp_path, argv):
    """Every PNG is built on the Agg canvas without importing pyplot (its import alone costs a
    noticeable share of the 1.5 s budget)."""
    import subprocess
    import sys
    code = ("import sys; from auditor.cli import main; "
            f"rc = main({argv + [str(tmp_path / 'x.png')]!r} + ['-o', {str(tmp_path / 'x.txt')!r}]); "
            "print(rc, 'matplotlib.pyplot' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out[-2:] == ["0", "False"]
    assert Path(tmp_path / "x.png").stat().st_size > 0


def test_sweep_png(tmp_path):
    """sweep --png writes a PNG of the grid next to its table."""
    from auditor.cli import main
    out = tmp_path / "sweep.png"
    assert main(["sweep", "--tp", "8,16", "--dp", "1,2", "--batch", "1,8", "--png", str(out)]) == 0
    data = out.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 10_000
