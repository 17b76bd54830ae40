"""serving.decompose: the chunk price, its growth and the TPOT that concurrency-1 throughput rows imply.

Expected figures come from closed forms written here (whole chunks: n chunks at contexts 0, c, ..., (n-1)c),
a partial chunk worked by hand, and, for the published DeepSeek-V3.2 weekly rows, the three equations
solved by hand: 4X + 24g + 1023t = 1024/26.1, 8X + 112g + 511t = 512/22.68, 16X + 480g + 1023t =
1024/22.77 give X = 0.510 s, g = -0.8 ms per 1k, t = 36.4 ms."""
from __future__ import annotations

import math
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from auditor.serving.decompose import SingleRequestRow, decompose


def _closed_form_seconds(n_chunks: int, chunk: int, osl: int, x: float, g: float, t: float) -> float:
    """One request's time with ``n_chunks`` whole chunks: n x X + g x (chunk / 1024) x n(n-1)/2, then t per
    output token after the first."""
    return n_chunks * x + g * chunk / 1024 * n_chunks * (n_chunks - 1) / 2 + (osl - 1) * t


@settings(max_examples=200, deadline=None)
@given(x=st.floats(0.01, 5.0), g=st.floats(0.0, 0.2), t=st.floats(0.001, 0.2),
       chunk=st.sampled_from([512, 2048, 4096, 8192]),
       counts=st.lists(st.integers(1, 64), min_size=3, max_size=6, unique=True),
       osls=st.lists(st.integers(2, 4096), min_size=6, max_size=6))
def test_whole_chunk_rows_give_back_their_prices(x, g, t, chunk, counts, osls):
    rows = [SingleRequestRow(n * chunk, osl, osl / _closed_form_seconds(n, chunk, osl, x, g, t))
            for n, osl in zip(counts, osls)]
    try:
        p = decompose(rows, chunk)
    except ValueError:
        # only when the lengths really cannot separate the three (checked by a determinant of our own)
        assert _rank_deficient(counts, osls[:len(counts)], chunk)
        return
    assert math.isclose(p.chunk_s, x, rel_tol=1e-6, abs_tol=1e-7)
    assert math.isclose(p.growth_s_per_k, g, rel_tol=1e-6, abs_tol=1e-7)
    assert math.isclose(p.tpot_s, t, rel_tol=1e-6, abs_tol=1e-8)
    assert max(abs(r) for r in p.residuals) < 1e-9


def _rank_deficient(counts: list[int], osls: list[int], chunk: int) -> bool:
    """Whether every 3 x 3 minor of the rows (n, chunk/1024 n(n-1)/2, osl - 1) is (numerically) zero."""
    import itertools
    m = [(n, chunk / 1024 * n * (n - 1) / 2, osl - 1) for n, osl in zip(counts, osls)]
    for a, b, c in itertools.combinations(m, 3):
        det = (a[0] * (b[1] * c[2] - b[2] * c[1]) - a[1] * (b[0] * c[2] - b[2] * c[0])
               + a[2] * (b[0] * c[1] - b[1] * c[0]))
        scale = max(abs(v) for row in (a, b, c) for v in row) ** 3
        if abs(det) > 1e-9 * scale:
            return False
    return True


def test_a_partial_last_chunk_is_priced_in_proportion():
    # 6,144 tokens in chunks of 4,096: a whole chunk at context 0 and half a chunk at context 4,096, so the
    # TTFT is 1.5 X + 0.5 x 4 g; with X = 1 s, g = 0.1 s: 1.7 s
    from auditor.serving.decompose import StepPrices
    p = StepPrices(chunk_s=1.0, growth_s_per_k=0.1, tpot_s=0.0, residuals=())
    assert math.isclose(p.ttft_s(6144, 4096), 1.7)
    assert math.isclose(p.ttft_s(4096, 4096), 1.0)
    assert math.isclose(p.ttft_s(100, 4096), 100 / 4096)


@pytest.mark.parametrize("rows, why", [
    ([SingleRequestRow(4096, 10, 1.0)] * 2, "three or more"),
    ([SingleRequestRow(4096, 10, 1.0), SingleRequestRow(4096, 20, 2.0), SingleRequestRow(4096, 30, 3.0)],
     "do not separate"),
    ([SingleRequestRow(4096, 10, 1.0), SingleRequestRow(8192, 10, 0.0), SingleRequestRow(16384, 10, 1.0)],
     "must be positive"),
])
def test_rows_that_cannot_fix_three_prices_are_refused(rows, why):
    with pytest.raises(ValueError, match=why):
        decompose(rows, 4096)


def test_the_weekly_deepseek_rows_imply_a_flat_prefill_and_a_36_ms_tpot(shared_dir: Path):
    """The published DeepSeek-V3.2 weekly file's three concurrency-1 cases, read from the file itself."""
    from auditor.launch.nightly import read_nightly
    cfg = read_nightly(str(shared_dir / "data" / "published" / "weekly" / "DeepSeek-V3.2-W8A8_A3_weekly.yaml"))
    test = cfg.tests[0]                                  # the case without --async-scheduling, as the CI row
    argv = test.nodes[0].argv
    chunk = int(argv[argv.index("--max-num-batched-tokens") + 1])
    singles = [c for c in test.cases.values() if c.concurrency == 1 and c.baseline > 0]
    assert chunk == 4096 and sorted(c.isl for c in singles) == [16384, 32768, 65536]
    p = decompose([SingleRequestRow(c.isl, c.osl, c.baseline) for c in singles], chunk)
    assert p.chunk_s == pytest.approx(0.510, abs=0.005)
    assert p.growth_s_per_k == pytest.approx(-0.0008, abs=0.0005)
    assert p.tpot_s == pytest.approx(0.0364, abs=0.0005)
