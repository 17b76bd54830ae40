"""plan's Pareto PNG marks the chosen deployment and the SLA bound (issue 30: it marked neither).

The PNG is decoded and the pixels at the chosen deployment's and the TPOT bound's coordinates are
checked for their colours; without the marks those pixels are the plain scatter or the background."""
from __future__ import annotations

import numpy as np
import pytest

from auditor.planner.report import CHOSEN_COLOR, SLA_COLOR, write_pareto_png
from auditor.planner.search import Config, PlanResult
from auditor.planner.workload import from_lengths

DPI = 110           # report.figure.save_png's


def _config(mode: str, user: float, die: float, meets: bool, batch: int) -> Config:
    return Config(mode=mode, dies=16, dies_used=16, plan="TP8 DP2", batch=batch, mtp=0, ttft_ms=500.0,
                  tpot_ms=1e3 / user, tok_s_die=die, tok_s_user=user, weights_gib=30.0, kv_gib=20.0,
                  kv_tokens=100_000, headroom_gib=5.0, meets_sla=meets)


def _result() -> PlanResult:
    # TPOT <= 50 ms: 20 tok/s per user and more meet it; the best of those per die is (25, 400)
    rows = [_config("agg", 10, 900, False, 128), _config("agg", 15, 700, False, 64),
            _config("agg", 25, 400, True, 16), _config("agg", 40, 200, True, 4),
            _config("disagg", 12, 800, False, 96), _config("disagg", 30, 300, True, 8)]
    return PlanResult(configs=rows, evaluated=len(rows), seconds=0.01, workload=from_lengths(4096, 1024), notes=[])


def _rgb(hex_colour: str) -> np.ndarray:
    return np.array([int(hex_colour[i:i + 2], 16) / 255 for i in (1, 3, 5)])


def _near(img: np.ndarray, x: float, y: float, colour: str, r: int = 2) -> bool:
    """Some pixel within ``r`` of display point (x, y) (origin bottom left) has ``colour``."""
    row, col = int(round(img.shape[0] - y)), int(round(x))
    patch = img[max(row - r, 0):row + r + 1, max(col - r, 0):col + r + 1, :3]
    return bool((np.abs(patch - _rgb(colour)).max(axis=-1) < 0.12).any())


def _decode(path) -> np.ndarray:
    from matplotlib.image import imread
    return imread(path)


def _to_pixels(fig, ax, x: float, y: float) -> tuple[float, float]:
    """Data -> the PNG's pixels: the figure laid out at the dpi the PNG was written at."""
    fig.set_dpi(DPI)
    fig.canvas.draw()
    px, py = ax.transData.transform((x, y))
    return float(px), float(py)


def test_chosen_deployment_and_sla_bound_are_drawn(tmp_path) -> None:
    res, png = _result(), tmp_path / "pareto.png"
    fig = write_pareto_png(res, png, "toy", ttft_ms=2000, tpot_ms=50)
    img = _decode(png)
    assert img.shape[:2] == (5 * DPI, 7 * DPI)
    ax = fig.axes[0]
    chosen = res.best(1)[0]
    assert (chosen.tok_s_user, chosen.tok_s_die) == (25, 400)
    assert _near(img, *_to_pixels(fig, ax, 25, 400), CHOSEN_COLOR)
    # no other configuration is marked chosen
    for c in res.configs:
        if c is not chosen:
            assert not _near(img, *_to_pixels(fig, ax, c.tok_s_user, c.tok_s_die), CHOSEN_COLOR, r=1)
    # TPOT <= 50 ms is a vertical bound at 1000 / 50 = 20 tok/s per user, dashed: most of its rows are drawn
    (y0, y1) = ax.get_ylim()
    ys = np.linspace(y0, y1, 41)[1:-1]
    on_line = [_near(img, *_to_pixels(fig, ax, 20, y), SLA_COLOR, r=1) for y in ys]
    assert sum(on_line) >= 0.4 * len(ys), sum(on_line)
    off_line = [_near(img, *_to_pixels(fig, ax, 33, y), SLA_COLOR, r=1) for y in ys]
    assert sum(off_line) == 0
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert any("TPOT <= 50 ms" in t and "TTFT <= 2000 ms" in t for t in labels)
    assert any(t.startswith("chosen: agg TP8 DP2 batch 16") for t in labels)


def test_no_sla_no_chosen_when_nothing_meets_it(tmp_path) -> None:
    """Without an SLA there is no bound, and with no row meeting it there is no chosen mark."""
    res = _result()
    for c in res.configs:
        c.meets_sla = False
    png = tmp_path / "p.png"
    fig = write_pareto_png(res, png, "toy")
    img = _decode(png)
    for colour in (CHOSEN_COLOR, SLA_COLOR):
        assert not (np.abs(img[..., :3] - _rgb(colour)).max(axis=-1) < 0.12).any()
    assert not any(t.get_text().startswith(("chosen", "SLA")) for t in fig.legends[0].get_texts())


@pytest.mark.parametrize("colour", [CHOSEN_COLOR, SLA_COLOR])
def test_marks_use_colours_the_scatter_does_not(colour) -> None:
    """The test above finds the marks by colour: neither mode's colour may be close to them."""
    from matplotlib.colors import to_rgb
    for scatter in ("tab:blue", "tab:orange"):
        assert np.abs(np.array(to_rgb(scatter)) - _rgb(colour)).max() > 0.3
