"""Upstream vLLM (CUDA) budget and log lines: the formula over named terms derived by hand, and the
formatters reproducing GPU-04's verbatim v0.25 lines (../shared/data/published/gpu)."""
from __future__ import annotations

import json

import pytest
from hypothesis import given, strategies as st

from auditor.engines.vllm import budget, loglines

GiB = 1024 ** 3


def _gpu04(shared_dir):
    obs = json.loads((shared_dir / "data" / "published" / "gpu" / "vllm-cuda-observations.json").read_text())
    return next(o for o in obs if o["id"] == "GPU-04")


def test_formula_by_hand():
    t = budget.BudgetTerms(total_bytes=100 * GiB, gpu_memory_utilization=0.9, weights_bytes=60 * GiB,
                           peak_activation_bytes=2 * GiB, non_torch_bytes=GiB, cuda_graph_bytes=GiB // 2,
                           cuda_graph_applied=True)
    # 90 - 60 - 2 - 1 - 0.5 = 26.5 GiB
    assert t.available_kv_bytes() == int(26.5 * GiB)
    assert budget.available_kv_bytes(100 * GiB, 0.9, weights=60 * GiB, peak_activation=2 * GiB, non_torch=GiB,
                                     cuda_graph=GiB // 2, cuda_graph_applied=False) == 27 * GiB
    # --kv-cache-memory bypasses the formula and the graph term
    fixed = budget.BudgetTerms(100 * GiB, 0.9, 60 * GiB, 2 * GiB, GiB, GiB // 2, True, kv_cache_memory_bytes=5 * GiB)
    assert fixed.available_kv_bytes() == 5 * GiB and fixed.graph_deducted_bytes == 0


def test_startup_check_counts_memory_held_before_the_snapshot():
    # NCCL buffers and the CUDA context lower free memory: 95 GiB free of 100 fails at gmu 0.96
    assert budget.startup_fits(95 * GiB, 100 * GiB, 0.95)
    assert not budget.startup_fits(95 * GiB, 100 * GiB, 0.96)


def test_equivalent_gmu_reproduces_gpu04(shared_dir):
    ob = _gpu04(shared_dir)
    g = ob["figures"]["estimated_cuda_graph_GiB"] * GiB
    # the note names 0.9334 and 0.9666 at 0.95: T = G / (0.95 - 0.9334) is about 95 GiB
    eq, comp = budget.equivalent_gmu(0.95, g, 95.0 * GiB)
    assert round(eq, 4) == 0.9334 and round(comp, 4) == 0.9666
    assert loglines.cudagraph_note_line(0.95, eq, comp).startswith(
        ob["verbatim"][5].split("] ", 1)[1])


def test_formatters_reproduce_gpu04_lines(shared_dir):
    v = [line.split("] ", 1)[1] for line in _gpu04(shared_dir)["verbatim"]]
    assert loglines.weights_line(75.64 * GiB, 20.219445) == v[0]
    assert loglines.cudagraph_profile_line(42, 384, 26, 192) == v[2]
    assert loglines.cudagraph_estimate_line(1.58 * GiB) == v[3]
    assert loglines.available_kv_line(10.29 * GiB) == v[4]
    assert loglines.kv_cache_size_line(1_993_100) == v[6]
    assert loglines.max_concurrency_line(1_048_576, 1_993_100 / 1_048_576) == v[7]


def test_patterns_read_gpu04_lines(shared_dir):
    v = _gpu04(shared_dir)["verbatim"]
    assert loglines.parse("weights", v[0]) == (75.64, "GiB", 20.219445)
    assert loglines.parse("cudagraph_profile", v[2]) == (42, 384, 26, 192)
    assert loglines.parse("cudagraph_estimate", v[3]) == (1.58,)
    assert loglines.parse("available_kv", v[4]) == (10.29,)
    assert loglines.parse("kv_cache_size", v[6]) == (1_993_100,)
    assert loglines.parse("max_concurrency", v[7]) == (1_048_576, 1.90)
    assert loglines.parse("available_kv", v[6]) is None
    pat, form, marker = loglines.WEIGHTS_PATTERNS[0]
    assert marker in v[0] and pat.search(v[0]).group(1) == "75.64"


def test_errors_round_trip():
    err = loglines.shortfall_error(202752, 20.5 * GiB, 10.25 * GiB, 101376)
    assert loglines.parse("shortfall", err) == (202752, 20.5, 10.25, 101376)
    start = loglines.startup_memory_error(120 * GiB, 140.4 * GiB, 0.92)
    assert "(120.0/140.4 GiB)" in start and "(0.92, 129.17 GiB)" in start
    assert loglines.parse("startup_error", start) == (120.0, 140.4, 0.92, 129.17)


def test_breakdown_line_round_trip():
    t = budget.BudgetTerms(140 * GiB, 0.9, 90 * GiB, 3 * GiB, GiB, 2 * GiB, True)
    fit, full = budget.kv_cache_memory_suggestions(t, 139 * GiB)
    # 126 - (90 + 3 + 1 + 2) - 150 MiB; 139 - 96 - 150 MiB
    assert fit == int(30 * GiB - 150 * 2 ** 20) and full == int(43 * GiB - 150 * 2 ** 20)
    line = loglines.breakdown_line(139 * GiB, 140 * GiB, 0.9, 90 * GiB, 3 * GiB, GiB, 2 * GiB, fit, full, 30 * GiB)
    got = loglines.parse_breakdown(line)
    assert got["weights_gib"] == 90.0 and got["graph_gib"] == 2.0 and got["requested_gib"] == 126.0
    assert got["kv_cache_gib"] == 30.0 and got["total_gib"] == 140.0


@given(st.text(max_size=400))
def test_parsers_never_raise_on_any_text(text):
    for kind in loglines.PATTERNS:
        loglines.parse(kind, text)
    assert loglines.parse_breakdown(text) is None or "weights_gib" in loglines.parse_breakdown(text)


def test_overlong_line_is_not_a_log_line():
    assert loglines.parse("available_kv", "Available KV cache memory: 1.00 GiB" + " " * (1 << 16)) is None


#: a newer build's breakdown, verbatim from a public log (search-index file 63441798540, 94.97 GiB SM120 card)
CONSUMED = ("Free memory on device (91.64/94.97 GiB) on startup. Desired GPU memory utilization is (0.91, 86.42 GiB). "
            "Actual usage is 64.44 GiB for consumed memory (weights + non-torch), 4.19 GiB for peak activation, and "
            "0.25 GiB for CUDAGraph memory. Replace gpu_memory_utilization config with `--kv-cache-memory=18676332626` "
            "(17.39 GiB) to fit into requested memory, or `--kv-cache-memory=24274632704` (22.61 GiB) to fully utilize "
            "gpu memory. Current kv cache memory in use is 17.79 GiB.")


def test_newer_breakdown_form_keeps_weights_and_non_torch_together():
    assert loglines.parse_breakdown(CONSUMED) is None          # it lacks the generic weights / non-torch keys
    got = loglines.parse_consumed_breakdown(CONSUMED)
    assert got["form"] == "cuda-breakdown-consumed" and got["consumed_gib"] == 64.44
    assert got["activation_gib"] == 4.19 and got["graph_gib"] == 0.25
    assert got["total_gib"] == 94.97 and got["kv_cache_gib"] == 17.79
    # the line's own arithmetic: requested 0.91 x 94.97 = 86.42; 86.42 - 64.44 - 4.19 - 0.25 = 17.54 <= 17.79 in use
    assert round(0.91 * 94.97, 2) == got["requested_gib"]
