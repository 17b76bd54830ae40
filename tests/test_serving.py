"""audit bench: the scheduler simulation against hand calculations, the published serving rows,
and the sweep's per-row drafter charge."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given as hgiven
from hypothesis import settings
from hypothesis import strategies as st

from auditor.context import DeploymentContext
from auditor.cli import main

ROWS = Path(__file__).parent / "data" / "serving_published.json"


def _core(isl, osl, budget, k=0, acc=1.0, conc=1, n=1, seqs=4, blocks=1000, ranks=1, hit=0, warm=-1, balance=0,
          arrival=None, seed=0, launches=0.0, hp=None, graph_tokens=-1, preempts=None, split=1.0, async_sched=0,
          fixed=0, block_tokens=128, sla=None, gave_up=None):
    """One instance with flat tables: decode step 10 ms, eager step 100 ms; no host time unless ``hp``
    (launch s, prefill-token s, decode-token s, step s) and ``launches`` per eager step are given."""
    from auditor_kernels.serving_core import simulate

    from auditor.perf.host import full_host
    ctx = np.array([0.0, 1e6])
    tok = np.array([1.0, 1e6])
    dec = np.full((1, seqs + 1, 2), 0.010)
    rest = np.full((1, 2), 0.100)
    pctx = np.zeros((1, 2, 2))
    dctx = np.zeros((1, 2))
    send, first, done = np.full(n, -1.0), np.full(n, -1.0), np.full(n, -1.0)
    log = np.zeros((100000, 5))
    arr = np.zeros(n) if arrival is None else np.asarray(arrival, dtype=np.float64)
    nlog = simulate(1, np.array([ranks]), np.array([seqs]), np.array([budget]), np.array([blocks]),
                    np.array([block_tokens]), np.array([fixed]), np.array([k]), np.array([0]), np.array([float(launches)]), np.zeros(1), np.array([float(split)]),
                    ctx, tok, dec, rest,
                    pctx, dctx, np.zeros(7) if hp is None else full_host(hp), n, conc, isl,
                    osl, np.array([hit], np.int64), arr, np.atleast_1d(np.asarray(acc, dtype=np.float64)), 0.0, send,
                    first, done, log, warm, np.array([balance], np.int64), seed, np.array([graph_tokens], np.int64),
                    np.zeros(1, np.int64) if preempts is None else preempts, np.array([async_sched], np.int64),
                    np.array([block_tokens], np.int64), np.zeros(2) if sla is None else np.asarray(sla, np.float64),
                    np.zeros(1, np.int64) if gave_up is None else gave_up)
    return send, first, done, log[:nlog]


def _pd_core(n, isl, osl, hit, xfer, budgets, blocks, block_tokens, conc=None, ranks=(1, 1), k=0, acc=1.0,
             sla=None, gave_up=None, full=False):
    """P rank(s) and D rank(s) (max_num_seqs 4) with flat tables: eager step 100 ms, decode step 10 ms;
    returns (first token, done) per request, or (send, first, done) with ``full``."""
    from auditor_kernels.serving_core import simulate
    ctx = np.array([0.0, 1e6])
    tok = np.array([1.0, 1e6])
    dec = np.full((2, 5, 2), 0.010)
    rest = np.full((2, 2), 0.100)
    send, first, done = np.full(n, -1.0), np.full(n, -1.0), np.full(n, -1.0)
    simulate(2, np.array(ranks), np.array([4, 4]), np.array(budgets), np.array(blocks), np.array(block_tokens),
             np.array([0, 0]), np.array([0, k]), np.array([1, 2]), np.zeros(2), np.zeros(2), np.ones(2), ctx, tok, dec, rest,
             np.zeros((2, 2, 2)), np.zeros((2, 2)), np.zeros(7), n, n if conc is None else conc, isl, osl,
             np.broadcast_to(np.asarray(hit, np.int64), (2,)).copy(),
             np.zeros(n), np.atleast_1d(np.asarray(acc, np.float64)), xfer, send, first, done, np.zeros((100000, 5)), -1,
             np.array([0, 0], np.int64), 0,
             np.array([-1, -1], np.int64), np.zeros(2, np.int64), np.zeros(2, np.int64), np.array(block_tokens, np.int64),
             np.zeros(2) if sla is None else np.asarray(sla, np.float64), np.zeros(1, np.int64) if gave_up is None else gave_up)
    return (send, first, done) if full else (first, done)


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


def test_cold_rank_computes_the_prefix_then_later_requests_hit():
    # 300-token prompts whose first 256 tokens (2 blocks of 128) are shared; budget 100, one request at a
    # time. Cold rank: request 1 computes all 300 tokens (3 eager steps of 100 ms) and caches the 2 blocks;
    # request 2, admitted after it, computes only 300 - 256 = 44 tokens (one step)
    _, first, done, _ = _core(isl=300, osl=1, budget=100, conc=2, n=2, seqs=1, hit=256, warm=0)
    assert first.tolist() == pytest.approx([0.300, 0.400])
    # every rank warm (a warm-up per rank): both hit, one step each
    _, first, _, _ = _core(isl=300, osl=1, budget=100, conc=2, n=2, seqs=1, hit=256, warm=-1)
    assert first.tolist() == pytest.approx([0.100, 0.200])


def test_preemptions_are_counted_by_hand():
    """Two 100-token prompts, 200 output tokens each, 3 blocks of 128 tokens: both are admitted (one
    block each) and prefilled together; at 128 tokens both need a second block and one is left, so the
    later request is preempted (once). The first then takes the freed block for its third (300 tokens)
    and finishes; the second is recomputed and finishes alone. With 1000 blocks nothing is preempted."""
    got = np.zeros(1, np.int64)
    _, _, done, _ = _core(isl=100, osl=200, budget=1000, conc=2, n=2, blocks=3, preempts=got)
    assert got.tolist() == [1] and (done > 0).all() and done[1] > done[0]
    roomy = np.zeros(1, np.int64)
    _core(isl=100, osl=200, budget=1000, conc=2, n=2, blocks=1000, preempts=roomy)
    assert roomy.tolist() == [0]


def test_balance_scheduling_freezes_admission_while_a_rank_is_full():
    # 2 DP ranks, max_num_seqs 1; request 0 at t=0 (rank 0), request 1 at t=0.05 (rank 1, the least loaded).
    # Without balance scheduling rank 1 admits it at the next step (t=0.1): an eager step for both ranks
    # (rank 0 decodes inside it), first token at 0.2. With it, rank 0 is at its cap at the end of every step
    # until request 0 finishes (prefill 0-0.1, decodes 0.1-0.11-0.12), so request 1 waits: first at 0.22.
    kw = dict(isl=10, osl=3, budget=100, conc=2, n=2, seqs=1, ranks=2, arrival=[0.0, 0.05])
    _, first, _, _ = _core(**kw)
    assert first.tolist() == pytest.approx([0.100, 0.200])
    _, first, done, _ = _core(**kw, balance=1)
    assert done[0] == pytest.approx(0.120) and first[1] == pytest.approx(0.220)


def test_mtp_acceptance_is_sampled_with_the_series_mean():
    # K = 3 drafts, per-draft acceptance 0.5: 1 + 0.5 + 0.25 + 0.125 = 1.875 tokens per decode step on
    # average; 3751 output tokens = 1 (prefill) + 3750 / 1.875 = 2000 decode steps of 10 ms expected
    steps = []
    for seed in range(4):
        _, first, done, _ = _core(isl=10, osl=3751, budget=100, k=3, acc=0.5, seed=seed)
        steps.append((done[0] - first[0]) / 0.010)
    assert np.mean(steps) == pytest.approx(2000, rel=0.02)
    # reproducible per seed, different across seeds
    assert _core(isl=10, osl=3751, budget=100, k=3, acc=0.5, seed=1)[2][0] == \
        _core(isl=10, osl=3751, budget=100, k=3, acc=0.5, seed=1)[2][0]
    assert len(set(steps)) > 1


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


def _edge_or_miss(row: dict, ratio: float | None = None) -> None:
    """xfail a row the tool itself flags as at the KV edge (+-5% of the KV pool moves it by more than
    1.25x, ``serving.sim.kv_sensitivity``) when the measured figure lies inside that edge's span."""
    from auditor.serving.calibrate import deployment, workload
    from auditor.serving.sim import at_kv_edge, kv_edge_text, kv_sensitivity
    lo, hi = kv_sensitivity(deployment(row), workload(row))
    if at_kv_edge(lo, hi):
        m = row["measured_output_tok_s"]
        # the measured figure must lie inside the edge's span, or the edge does not explain the miss
        assert lo / 1.3 <= m <= hi * 1.3, (lo, hi, m)
        pytest.xfail(f"{kv_edge_text(lo, hi)} (measured {m:.1f})")


@pytest.mark.parametrize("row", _published()["rows"], ids=lambda r: r["id"])
def test_published_serving_rows_within_1_3x(row):
    from auditor.serving.bench import metrics
    from auditor.serving.calibrate import deployment, workload
    from auditor.serving.sim import simulate
    got = metrics(simulate(deployment(row), workload(row)))["output_throughput"]
    if not 1 / 1.3 <= got / row["measured_output_tok_s"] <= 1.3:
        _edge_or_miss(row)
    assert 1 / 1.3 <= got / row["measured_output_tok_s"] <= 1.3


@pytest.mark.parametrize("row", _published()["validation"], ids=lambda r: r["id"])
def test_validation_serving_rows_within_1_6x(row):
    """Nightly performance cases that are not section-B rows (validation only: nothing is fitted to them):
    N2 at 256 clients with graphs up to 48 tokens, N3's 64k P/D at 1 request/s, N13's 128k C8 P/D with
    a 90 % shared prefix. The issue's bar for results held back from the fit is 1.6x."""
    from auditor.serving.bench import metrics
    from auditor.serving.calibrate import deployment, workload
    from auditor.serving.sim import simulate
    got = metrics(simulate(deployment(row), workload(row)))["output_throughput"]
    assert 1 / 1.6 <= got / row["measured_output_tok_s"] <= 1.6


def test_sweep_charges_each_row_its_own_drafter():
    from auditor.devices.profiles import load_device
    from auditor.parallel import ParallelPlan
    from auditor.runtime.feasibility import grid_budget
    from auditor.runtime.weights import plan_weights
    from auditor.source import open_model
    src = open_model("glm-5.1", tables=False)
    dev = load_device("a3-752t")
    plan = ParallelPlan(tp=16, dp=1, ep=16)
    g = grid_budget(DeploymentContext(src.spec, plan, "vllm-ascend@main", src.scheme_recipe, dev),
                    batch=np.array([1.0, 1.0]), request_tokens=np.array([4096.0, 4096.0]),
                    step_tokens=np.array([4096.0, 4096.0]), mtp=np.array([0.0, 3.0]))
    w0 = max(plan_weights(DeploymentContext(src.spec, plan, "vllm-ascend@main", src.scheme_recipe)))
    w1 = max(plan_weights(DeploymentContext(src.spec, plan.with_(mtp=True), "vllm-ascend@main", src.scheme_recipe)))
    assert w1 > w0
    assert g["weights"][0] == w0 and g["weights"][1] == w1
    # the same row alone gets the same budget as inside the mixed grid
    alone = grid_budget(DeploymentContext(src.spec, plan, "vllm-ascend@main", src.scheme_recipe, dev),
                        batch=np.array([1.0]), request_tokens=np.array([4096.0]), step_tokens=np.array([4096.0]),
                        mtp=np.array([0.0]))
    assert alone["kv_free"][0] == g["kv_free"][0]


# -- one host model for perf, sweep and bench ------------------------------------------------------

def _latency_deployment():
    from auditor.serving.calibrate import LATENCY_PLAN, deployment
    return deployment({"model": "glm-5.1", "recipe": "w4a8", "instances": [LATENCY_PLAN]})


def test_perf_sweep_and_bench_agree_on_one_deployment():
    """GLM-5.1 W4A8 TP16 EP16 MTP3, budget 4096: the decode step at batch 4 and context 32768, and the TTFT
    of one 12288-token prompt (3 chunks of 4096 at contexts 0, 4096, 8192), are the same numbers in perf,
    sweep and bench (grid points of bench's tables: no interpolation)."""
    from auditor_kernels.serving_core import rank_time, step_host

    from auditor.perf.api import Workload, evaluate_phase
    from auditor.perf.sweep import run_sweep
    from auditor.serving.bench import metrics
    from auditor.serving.costs import host_params
    from auditor.serving.sim import BenchWorkload, simulate
    dep = _latency_deployment()
    c = dep.costs()[0]
    B, C = 4, 32768
    perf_dec = evaluate_phase(dep.base.with_plan(c.plan), Workload("decode", 1, C, B, 3)).time_s
    hp = host_params(dep.device)
    bench_dec = (rank_time(0, False, 0.0, 0.0, B, B * 4.0, float(C), c.ctx, c.tok, c.dec[None], c.pre_rest[None],
                           c.dec_ctx[None]) + step_host(False, 0.0, B * 4.0, c.launches_eager, c.launches_draft, hp))
    sw = run_sweep(dep.base.with_plan(c.plan.with_(mtp=False)), [16], [1], [12288], [C], [B], [3])
    (row,) = sw.rows
    assert bench_dec == pytest.approx(perf_dec, rel=1e-9)
    assert row[8] / 1e3 == pytest.approx(perf_dec, rel=1e-9)
    # TTFT: perf's chunked prefill, sweep's, and a one-request bench run (first token at the last chunk's end)
    perf_pre = evaluate_phase(dep.base.with_plan(c.plan), Workload("prefill", 12288, 0, 1, 3))
    assert [(s["tokens"], s["context"]) for s in perf_pre.steps] == [(4096, 0), (4096, 4096), (4096, 8192)]
    sw0 = run_sweep(dep.base.with_plan(c.plan.with_(mtp=False)), [16], [1], [12288], [0], [1], [3])
    run = metrics(simulate(dep, BenchWorkload(1, 12288, 1, 1, prefix_caching=False)))
    assert sw0.rows[0][7] / 1e3 == pytest.approx(perf_pre.time_s, rel=1e-9)
    assert run["mean_ttft_ms"] / 1e3 == pytest.approx(perf_pre.time_s, rel=1e-9)


def test_perf_prefill_is_chunked_with_a_host_cost_per_step():
    """TTFT = sum of chunk steps, each device time + host (launches x launch_us + tokens x prefill_token_us +
    step_ms): a 1-token prompt pays one step; 131072 tokens at a 4096 budget pay 32."""
    from auditor.perf.api import Workload, cached_program, evaluate_phase
    from auditor.perf.host import host_params, launch_counts
    dep = _latency_deployment()
    c = dep.costs()[0]
    hp = host_params(dep.device)
    n_launch, _ = launch_counts(cached_program(dep.base.with_plan(c.plan), "prefill", "expanded", True,
                                         "bf16").arrays(), 3)
    res = {}
    for t in (1, 8192, 131072):
        ph = evaluate_phase(dep.base.with_plan(c.plan), Workload("prefill", t, 0, 1, 3))
        assert len(ph.steps) == -(-t // 4096)
        host = sum(n_launch * hp[0] + s["tokens"] * hp[1] + hp[3] for s in ph.steps)
        assert ph.host_s == pytest.approx(host)
        assert ph.time_s == pytest.approx(sum(s["device_ms"] + s["host_ms"] for s in ph.steps) / 1e3)
        res[t] = ph.time_s
    assert res[1] < res[8192] < res[131072]
    # each further chunk attends to a longer context: the last chunk costs more device time than the first
    steps = evaluate_phase(dep.base.with_plan(c.plan), Workload("prefill", 131072, 0, 1, 3)).steps
    assert steps[-1]["device_ms"] > steps[0]["device_ms"]


def test_dsa_cp_prefill_pays_the_per_token_host_work_for_its_share_of_the_tokens():
    """Under DSA-CP each TP rank runs round_up(T, TP) / TP of a step's T tokens through the whole layer
    (sfa_cp.py:147-153@182b75ea), so the per-prefill-token term is paid for T / TP, at the DSA-CP rank's own
    price (``cp_prefill_token_us``, slot 6); without it every rank pays for all T at ``prefill_token_us``.
    Host time of ``audit perf``'s prefill restated by hand from the launch count and the device's constants,
    for the same DeepSeek-V3.2 prefill at TP8 with and without DSA-CP."""
    from auditor.devices.profiles import load_device
    from auditor.parallel import ParallelPlan
    from auditor.perf.api import Workload, cached_program, evaluate_phase
    from auditor.perf.host import host_params, launch_counts
    from auditor.source import open_model
    src, dev = open_model("deepseek-v3.2", "w8a8", tables=False), load_device("a3-752t")
    hp = host_params(dev)
    host = {}
    for sp in (False, True):
        plan = ParallelPlan(tp=8, dp=2, ep=16, sp=sp, dsa_cp=sp or None, role="prefill", max_num_batched_tokens=8192, mtp=True)
        prog = cached_program(DeploymentContext(src.spec, plan, "vllm-ascend@main", src.scheme_recipe), "prefill",
                              "expanded", True)
        n_launch, _ = launch_counts(prog.arrays(), 1)
        ph = evaluate_phase(DeploymentContext(src.spec, plan, "vllm-ascend@main", src.scheme_recipe, dev),
                            Workload("prefill", 20000, 0, 1, 1))
        share, per = (8, hp[6]) if sp else (1, hp[1])
        assert ph.host_s == pytest.approx(sum(n_launch * hp[0] + s["tokens"] / share * per + hp[3]
                                              for s in ph.steps))
        host[sp] = ph.host_s
    assert host[True] < host[False]


def test_token_split_divides_the_prefill_token_host_work_in_the_simulation():
    """A 400-token prompt in one 100 ms eager step with 1 ms of host work per prefill token: 0.5 s to the
    first token when the rank runs all 400 tokens, 0.2 s when DSA-CP splits them over 4 ranks (a vector
    without the DSA-CP price prices them at the plain one), 0.15 s at a DSA-CP price of 0.5 ms."""
    for split, at in ((1.0, 0.5), (4.0, 0.2)):
        _, first, _, _ = _core(isl=400, osl=1, budget=1000, hp=[0.0, 1e-3, 0.0, 0.0, 0.0], split=split)
        assert first[0] == pytest.approx(at)
    _, first, _, _ = _core(isl=400, osl=1, budget=1000, hp=[0.0, 1e-3, 0.0, 0.0, 0.0, 1.0, 5e-4], split=4.0)
    assert first[0] == pytest.approx(0.15)


def test_host_formula_in_numpy_matches_the_kernel():
    from auditor_kernels.serving_core import step_host

    from auditor.perf.host import HostModel
    from auditor.perf.host import full_host
    hm = HostModel(2000.0, 120.0, np.array([2e-4, 1.3e-4, 1e-6, 0.0135, 1.5e-4]))    # its own drafter price
    for eager, t, d in ((True, 4096.0, 12.0), (False, 0.0, 64.0)):
        assert float(hm.steps_s(eager, t, d)) == step_host(eager, t, d, 2000.0, 120.0, full_host(hm.hp))
    split = HostModel(2000.0, 120.0, hm.hp, token_split=8.0)
    assert float(split.steps_s(True, 4096.0, 12.0)) == pytest.approx(step_host(True, 4096.0, 12.0, 2000.0, 120.0,
                                                                                 full_host(hm.hp), 8.0))
    # a vector without the DSA-CP price prices a DSA-CP rank's tokens at the plain one
    assert split.step_s(True, 4096.0, 12.0) == pytest.approx(hm.step_s(True, 512.0, 12.0))
    # with its own price: 0.0135 + 12 x 1e-6 + 2000 x 2e-4 + 4096 / 8 x 2e-5 = 0.423752 s, by hand
    cp = HostModel(2000.0, 120.0, np.array([2e-4, 1.3e-4, 1e-6, 0.0135, 1.5e-4, 1.0, 2e-5]), token_split=8.0)
    assert cp.step_s(True, 4096.0, 12.0) == pytest.approx(0.423752)
    assert float(cp.steps_s(True, 4096.0, 12.0)) == pytest.approx(0.423752)
    # and a plain rank of the same vector pays prefill_token_us: 0.0135 + 12e-6 + 0.4 + 4096 x 1.3e-4
    plain = HostModel(2000.0, 120.0, cp.hp)
    assert plain.step_s(True, 4096.0, 12.0) == pytest.approx(0.0135 + 12e-6 + 0.4 + 4096 * 1.3e-4)


# -- fit and leave-one-out on the ten published rows -----------------------------------------------

@pytest.fixture(scope="module")
def fitted(once_per_run):
    """Evidence built once (cost tables cached per deployment); the shipped constants are the full fit's
    optimum (python -m auditor.serving.calibrate --write); each leave-one-out fold refits from there (the
    folds, ~19 s, once per run: ``once_per_run``)."""
    from auditor.devices.profiles import load_device
    from auditor.serving.calibrate import FIT_KEYS, errors, evidence, leave_one_out, load_rows
    ev = evidence(load_rows(ROWS))
    blk = load_device("a3-752t").serving
    x = np.array([blk[k] for k in FIT_KEYS])
    return {"ev": ev, "x": x, "fit": errors(ev, x), "loo": once_per_run("serving-loo", lambda: leave_one_out(ev, x))}


def test_shipped_constants_are_the_fit_optimum(fitted):
    """Refitting from the shipped serving block does not improve the objective: the block is the optimum of
    the current model (re-run python -m auditor.serving.calibrate --write when this fails)."""
    from auditor.serving.calibrate import fit, fitted_rows, msle
    ev, x = fitted_rows(fitted["ev"]), fitted["x"]
    assert msle(ev, fit(ev, x, iters=2)) >= msle(ev, x) - 1e-4


def test_fit_leaves_out_the_kv_edge_and_the_other_device(fitted):
    """The fit uses the rows that can inform the A3 host constants: P8 (at the KV edge) and P5 (the A2
    row) are predicted and reported but not fitted; every latency row is fitted."""
    from auditor.serving.calibrate import fitted_rows, left_out
    names = {e.name for e in fitted_rows(fitted["ev"])}
    assert {"3.5k-prefill", "3.5k-decode", "32k-prefill", "32k-decode", "P1", "P4", "P3a", "P6"} == names
    why = {e.name: left_out(e) for e in fitted["ev"]}
    assert why["P8"].startswith("KV edge") and why["P5"].startswith("a2-313t")


@pytest.mark.parametrize("name", ["3.5k-prefill", "3.5k-decode", "32k-prefill", "32k-decode"])
def test_latency_rows_within_15_percent(fitted, name):
    assert abs(fitted["fit"][name] - 1) <= 0.15
    assert abs(fitted["loo"][name] - 1) <= 0.15


def test_latency_growth_and_mean_within_10_percent():
    """The latency CSV (glm-5.1-a3-latency-calibration.csv) as audit perf prices it with the shipped
    constants: the mean error within 10 %, and the growth from the 3.5k rows to the 32k rows (prefill: a
    3500-token chunk at context 0 -> a 4096-token chunk at 28000, measured 2295.99 / 1553.21 = 1.478;
    decode: context 3500 -> 32000, measured 68.70 / 69.90 = 0.983) within 10 % of the measured growth."""
    from auditor.perf.host import host_params
    from auditor.serving.calibrate import step_ms
    dep = _latency_deployment()
    hp = host_params(dep.device)
    rows = {r["scenario"]: r for r in _published()["latency"]}
    got = {n: step_ms(dep, r["phase"], r["query_len"], r["context_len"], hp) for n, r in rows.items()}
    err = [got[n] / r["measured_ms"] - 1 for n, r in rows.items()]
    assert abs(sum(err) / len(err)) <= 0.10
    for a, b in (("3.5k-prefill", "32k-prefill"), ("3.5k-decode", "32k-decode")):
        measured = rows[b]["measured_ms"] / rows[a]["measured_ms"]
        assert abs((got[b] / got[a]) / measured - 1) <= 0.10, (a, b, got[b] / got[a], measured)


@pytest.mark.parametrize("row", _published()["rows"], ids=lambda r: r["id"])
def test_published_rows_leave_one_out(fitted, row):
    """Each throughput row predicted by a fit that never saw it (refit from the full optimum) within 1.3x."""
    if not 1 / 1.3 <= fitted["loo"][row["id"]] <= 1.3:
        _edge_or_miss(row)
    assert 1 / 1.3 <= fitted["loo"][row["id"]] <= 1.3


def test_kv_edge_is_flagged_where_the_pool_decides(capsys):
    """P8's deployment (six 131k requests per rank sharing a 117,888-token prefix in ~1,520 blocks) sits where
    one more or one fewer request fits: bench says so, with both figures (5 % fewer blocks cost more than
    a fifth of the throughput); P1 (4 requests of 5,000 tokens in ~1,000 blocks per rank) is nowhere near
    its edge."""
    from auditor.serving.calibrate import deployment, workload
    from auditor.serving.sim import at_kv_edge, kv_sensitivity
    rows = {r["id"]: r for r in _published()["rows"]}
    lo, hi = kv_sensitivity(deployment(rows["P8"]), workload(rows["P8"]))
    assert at_kv_edge(lo, hi) and hi > 1.25 * lo
    lo1, hi1 = kv_sensitivity(deployment(rows["P1"]), workload(rows["P1"]))
    assert not at_kv_edge(lo1, hi1)
    args = ["bench", "glm-5.1", "--tp", "4", "--dp", "8", "--ep", "32", "--sp", "--dsa-cp", "--kv-cache-dtype", "c8-indexer",
            "--hf-overrides", '{"use_index_cache": true, "index_topk_freq": 4}', "--max-num-seqs", "6",
            "--max-num-batched-tokens", "4096", "--max-model-len", "133120", "--gpu-memory-utilization", "0.9",
            "--mtp", "3", "--hccl-buffsize", "400", "--balance-scheduling", "--concurrency", "64",
            "--isl", "131072", "--osl", "1024", "--num-prompts", "256", "--prefix-ratio", "0.9",
            "--prefix-warm-ranks", "1", "--fused-mc2", "1"]
    assert main(args) == 0
    out = capsys.readouterr().out
    assert "note: KV edge: with 5% fewer / more KV blocks per rank the output throughput is" in out


def test_decode_rank_shares_the_prefix_and_pulls_only_the_suffix_once_it_holds_it():
    """P/D with a 256-token shared prefix (2 blocks of 128) in 300-token prompts: the P rank (warm)
    computes the 44-token suffixes of both requests in one 100 ms eager step. The D rank has 4 blocks.
    The first hand-off pulls the whole prompt (xfer 1 s) and leaves the prefix cached on that rank;
    the second pulls only its suffix (1 s x 44 / 300) and arrives first. Both fit at once because the
    prefix blocks are shared (2 shared + 1 + 1 = 4); each prompt needs 3 blocks on its own, so
    without sharing the second would wait for the first to finish (mooncake_connector.py:1866-1871)."""
    xfer = 1.0
    first, done = _pd_core(n=2, isl=300, osl=3, hit=256, xfer=xfer, budgets=(100, 100), blocks=(1000, 4),
                           block_tokens=(128, 128))
    # request 1 (suffix pull) is admitted on D at 0.1 + 44/300 s; its first D step samples the first token
    assert first[1] == pytest.approx(0.100 + xfer * 44 / 300 + 0.010)
    # request 0 (whole pull) arrives at 1.1 s and still finds a free block: the prefix is shared
    assert first[0] == pytest.approx(0.100 + xfer + 0.010)
    assert done[0] == pytest.approx(first[0] + 2 * 0.010)


@pytest.mark.parametrize("graph_tokens, done_at", [(-1, 0.200 + 4 * 0.010), (1, 0.200 + 4 * 0.010),
                                                   (0, 0.200 + 4 * (0.010 + 0.100))])
def test_decode_steps_above_the_largest_graph_run_eager(graph_tokens, done_at):
    """One request, 10-token prompt, 5 output tokens, no MTP: the prefill step is eager (100 ms device +
    1000 launches x 100 us host), then 4 decode steps of 1 token and 10 ms device. With graphs up to 1
    token (or no limit) they are replays (no host time here); with no graph (0, --enforce-eager) each
    pays the eager launches too."""
    _, first, done, _ = _core(isl=10, osl=5, budget=100, launches=1000.0, hp=[100e-6, 0.0, 0.0, 0.0, 100e-6],
                              graph_tokens=graph_tokens)
    assert first[0] == pytest.approx(0.200) and done[0] == pytest.approx(done_at)


def test_perf_decode_above_the_largest_graph_pays_the_eager_launches():
    """perf and bench agree on a decode step larger than the largest captured graph: both charge the
    eager launches of the step (the prefill program's kernels and collectives x launch_us) instead of the
    graph replay's drafter launches, at the same device time."""
    from auditor_kernels.serving_core import step_host

    from auditor.perf.api import Workload, cached_program, evaluate_phase
    from auditor.perf.host import host_params, launch_counts
    dep = _latency_deployment()
    c = dep.costs()[0]
    hp = host_params(dep.device)
    wl = Workload("decode", 1, 8192, 8, 3)                           # 8 requests x 4 tokens = 32 tokens
    graph = evaluate_phase(dep.base.with_plan(c.plan), wl)
    eager = evaluate_phase(dep.base.with_plan(c.plan), wl, graph_tokens=24)
    same = evaluate_phase(dep.base.with_plan(c.plan), wl, graph_tokens=32)
    n_eager, _ = launch_counts(cached_program(dep.base.with_plan(c.plan), "prefill", "expanded", True,
                                         "bf16").arrays(), 3)
    _, n_draft = launch_counts(cached_program(dep.base.with_plan(c.plan), "decode", "expanded", True,
                                         "bf16").arrays(), 3)
    assert same.host_s == pytest.approx(graph.host_s)
    # the graph step's drafter launches have their own price (hp[4], draft_launch_us; issue 29)
    assert eager.host_s - graph.host_s == pytest.approx(n_eager * hp[0] - n_draft * hp[4])
    assert eager.time_s - eager.host_s == pytest.approx(graph.time_s - graph.host_s)
    assert eager.host_s == pytest.approx(step_host(True, 0.0, 32.0, c.launches_eager, c.launches_draft, hp))


def test_decode_instance_blocks_hold_dcp_times_the_tokens():
    """A DCP-4 decode instance's block holds 4 x 128 = 512 tokens of each request (each rank keeps a
    quarter of the sequence). A 300-token prompt needs one such block: with D's pool of 1 block it is
    admitted after P's 100 ms step and the KV pull (no transfer time here), and each decode step adds
    a token: first token at 0.1 + 0.010 s. Counted in P's 128-token blocks it would need 3 of the one
    and never run (the simulation used the first instance's block size for both before)."""
    first, done = _pd_core(n=1, isl=300, osl=3, hit=0, xfer=0.0, budgets=(1000, 100), blocks=(1000, 1),
                           block_tokens=(128, 512))
    assert first[0] == pytest.approx(0.100 + 0.010) and done[0] == pytest.approx(0.100 + 3 * 0.010)


def test_prefix_hits_are_whole_scheduler_blocks_of_bs_times_dcp():
    """Under DCP the scheduler's (hashed) block is block_size x DCP tokens (patch_kv_cache_utils.py:41-43):
    a 10,000-token prompt with half of it shared hits in whole 128 x 16 = 2,048-token blocks at DCP 16 (4,096
    tokens), in 128-token ones without DCP (4,992); the simulation's own hit alignment is the same block."""
    from types import SimpleNamespace

    from auditor.serving.sim import BenchWorkload, hit_alignment
    wl = BenchWorkload(concurrency=1, isl=10_000, osl=1, num_prompts=1, prefix_ratio=0.5)
    for dcp, want in ((16, 4096), (1, 4992)):
        cost = SimpleNamespace(hit_alignment=0, block_tokens=128 * dcp, inst=SimpleNamespace(dcp=dcp))
        align = hit_alignment("vllm-ascend@main", cost)
        assert align == 128 * dcp == cost.block_tokens
        assert wl.hit_tokens_at(align) == want
    pooled = SimpleNamespace(hit_alignment=16_384, block_tokens=128, inst=SimpleNamespace(dcp=1))
    assert hit_alignment("vllm-ascend@main", pooled) == 16_384      # a pool's lcm (DeepSeek-V4) is its own


@pytest.mark.parametrize("seqs, k, budget, want", [(43, 3, 4096, 172), (256, 3, 8192, 512), (14, 2, 42, 42),
                                                   (4, 2, 8, 8)])
def test_default_graph_size_is_the_engines(seqs, k, budget, want):
    """A launch without cudagraph_capture_sizes replays decode steps up to vLLM-Ascend's default,
    min(max_num_seqs x (1 + K), 512) (platform.py:1275-1312@182b75ea), capped by max_num_batched_tokens;
    an explicit size or --enforce-eager (0) is kept. 256 seqs x 4 tokens > 512: a full batch runs eager."""
    from auditor.deployment import InstancePlan
    from auditor.serving.sim import graph_tokens
    inst = InstancePlan("aggregated", 1, 8, 1, 8, False, seqs, budget, 8192, 0.9, mtp=k)
    assert graph_tokens("vllm-ascend@main", inst) == want
    assert graph_tokens("vllm-ascend@main", InstancePlan(**{**inst.__dict__, "graph_tokens": 48})) == 48
    assert graph_tokens("vllm-ascend@main", InstancePlan(**{**inst.__dict__, "graph_tokens": 0})) == 0


def test_perf_uses_the_default_graph_size(capsys):
    """perf without --graph-max-tokens: 160 requests x 4 tokens = 640 > 512 runs eager (the default for
    the max_num_seqs the batch implies); with an explicit 1024 the same step is a replay."""
    base = ["perf", "deepseek-v3.2", "--recipe", "w8a8", "--tp", "8", "--dp", "4", "--ep", "32", "--mtp", "3",
            "--batch", "160", "--phase", "decode", "--context", "2000", "--format", "json"]
    out = {}
    for extra in ([], ["--graph-max-tokens", "1024"]):
        main(base + extra)
        out[bool(extra)] = json.loads(capsys.readouterr().out)["totals"]["host_ms"]
    assert out[False] > 5 * out[True]


def test_bench_names_preemptions_when_the_pool_binds():
    """P5's deployment (A2, 9-10 requests of up to 5,000 tokens per rank = 360-400 blocks, against a modelled
    pool of ~382) preempts; bench says how often and on which instance. With half as many blocks again
    the same run has none and no note."""
    from auditor.serving.calibrate import deployment, workload
    from auditor.serving.sim import scaled_pool, simulate
    row = {r["id"]: r for r in _published()["rows"]}["P5"]
    dep, wl = deployment(row), workload(row, 0.7)      # 2.53 tokens/step: requests hold their blocks longer
    blocks = dep.costs()[0].num_blocks
    assert blocks < 10 * -(-5000 // 128)
    run = simulate(dep, wl)
    n = int(run.preemptions.sum())
    assert n > 0 and any(note.startswith(f"{n} preemptions on the aggregated instance") for note in run.notes)
    run = simulate(scaled_pool(dep, 1.5), wl)
    assert int(run.preemptions.sum()) == 0 and not any("preemptions" in note for note in run.notes)



def test_fixed_blocks_per_request_limit_admission():
    """A pool whose requests hold a fixed count of blocks besides their growing ones (sliding windows and
    states of compressed attention): 2 requests of 300 tokens need 2 x (3 + 10) blocks; 25 blocks admit
    one at a time, 26 both at once (block 128, one rank, concurrency 2)."""
    _, first25, _, _ = _core(isl=300, osl=1, budget=1000, conc=2, n=2, seqs=2, blocks=25, fixed=10)
    _, first26, _, _ = _core(isl=300, osl=1, budget=1000, conc=2, n=2, seqs=2, blocks=26, fixed=10)
    assert first26[0] == first26[1]                 # one step prefills both
    assert first25[1] > first25[0]                  # the second waits for the first's blocks


def test_decode_rank_without_prefix_caching_pulls_every_prompt_whole():
    """The same P/D run with the D rank's prefix cache off (hits 256 on P, 0 on D: vLLM
    --no-enable-prefix-caching on the decode node): each hand-off pulls the whole prompt (1 s; the connector
    pulls prompt - locally computed tokens, mooncake_hybrid_connector.py:1350-1356@182b75ea) and nothing is
    shared, so the second prompt (3 blocks) waits on D's 4 blocks until the first finishes."""
    first, done = _pd_core(n=2, isl=300, osl=3, hit=(256, 0), xfer=1.0, budgets=(100, 100), blocks=(1000, 4),
                           block_tokens=(128, 128))
    # both suffixes are computed on P in one 100 ms step; both pulls land at 1.1 s; request 0 takes 3 blocks,
    # decodes 3 tokens (10 ms steps) and frees them at 1.13 s; request 1 then runs its three steps
    assert first.tolist() == pytest.approx([1.110, 1.140])
    assert done.tolist() == pytest.approx([1.130, 1.160])


def test_resampled_tables_are_kept_per_table_arrays_never_stale():
    """``serving.sim._resampled`` keeps the resampled step-cost tables of a deployment for its next runs:
    a hit equals a fresh resampling, and tables with other arrays (other values in the same shapes, or new
    arrays that may reuse a freed array's id) are resampled, never served from another's entry."""
    import types

    import numpy as np

    from auditor.serving import sim

    rng = np.random.default_rng(0)

    def costs(scale):
        ctx, tok = np.array([0.0, 1024.0, 4096.0]), np.array([1.0, 64.0, 4096.0])
        return types.SimpleNamespace(ctx=ctx, tok=tok, dec=scale * rng.random((5, 3)), pre_rest=scale * rng.random(3),
                                     pre_ctx=scale * rng.random((3, 3)), dec_ctx=scale * rng.random(3))

    a, b = costs(1.0), costs(2.0)
    first = sim._resampled([a, b], 6)
    again = sim._resampled([a, b], 6)
    assert again is first                                  # the kept entry
    sim._RESAMPLED.clear()
    fresh = sim._resampled([a, b], 6)
    assert all(np.array_equal(x, y) for x, y in zip(first, fresh))
    c = types.SimpleNamespace(**{**vars(a), "dec": a.dec * 3.0})        # same shapes, other values
    other = sim._resampled([c, b], 6)
    assert not np.array_equal(other[2], fresh[2])
    for _ in range(3):                                     # new arrays (ids of freed ones may recur)
        d = costs(float(_ + 5))
        got = sim._resampled([d], 4)
        sim._RESAMPLED.clear()
        assert all(np.array_equal(x, y) for x, y in zip(got, sim._resampled([d], 4)))
        del d


@settings(max_examples=120, deadline=None)
@hgiven(isl=st.integers(1, 600), osl=st.integers(1, 60), budget=st.integers(16, 512), k=st.integers(0, 3),
        acc=st.floats(0.0, 1.0), conc=st.integers(1, 8), n=st.integers(1, 24), seqs=st.integers(1, 6),
        blocks=st.integers(4, 400), rate=st.one_of(st.none(), st.floats(0.5, 200.0)),
        ttft=st.floats(0.0, 3.0), tpot=st.floats(0.0, 0.06), seed=st.integers(0, 3))
def test_a_run_gives_up_only_when_it_surely_misses_the_sla(isl, osl, budget, k, acc, conc, n, seqs, blocks, rate,
                                                           ttft, tpot, seed):
    # The early stop (kernel ``sla``) must change nothing but the length of a run that misses: a run that
    # does not give up equals the full run exactly; one that gives up is a full run whose mean TTFT or TPOT
    # (vllm bench serve's: over every request, TPOT over osl - 1 tokens) is over the SLA. 0 = no bound.
    arrival = None if rate is None else np.cumsum(np.random.default_rng(seed).exponential(1.0 / rate, n))
    kw = dict(isl=isl, osl=osl, budget=budget, k=k, acc=acc, conc=conc, n=n, seqs=seqs, blocks=blocks,
              arrival=arrival, seed=seed, block_tokens=16)
    gave_up = np.zeros(1, np.int64)
    _gives_up_only_on_a_miss(_core(**kw), _core(**kw, sla=(ttft, tpot), gave_up=gave_up), gave_up, osl, ttft, tpot)


def _gives_up_only_on_a_miss(full, part, gave_up, osl, ttft, tpot):
    """A run that did not give up equals the full run; one that did is a full run over the SLA."""
    if not gave_up[0]:
        for a, b in zip(full, part):
            np.testing.assert_array_equal(a, b)
        return
    send, first, done = full[:3]
    if (done < 0).any():
        return                          # a prompt larger than the pool: the full run fails the SLA too
    mean_ttft = float((first - send).mean())
    mean_tpot = float(((done - first) / max(osl - 1, 1)).mean())
    assert (ttft > 0 and mean_ttft > ttft) or (tpot > 0 and mean_tpot > tpot), (mean_ttft, mean_tpot)


@settings(max_examples=80, deadline=None)
@hgiven(n=st.integers(1, 20), conc=st.integers(1, 8), isl=st.integers(1, 400), osl=st.integers(1, 40),
        xfer=st.floats(0.0, 0.5), ranks=st.tuples(st.integers(1, 3), st.integers(1, 3)), k=st.integers(0, 2),
        acc=st.floats(0.0, 1.0), ttft=st.floats(0.0, 3.0), tpot=st.floats(0.0, 0.05))
def test_a_pd_run_gives_up_only_when_it_surely_misses_the_sla(n, conc, isl, osl, xfer, ranks, k, acc, ttft, tpot):
    # the same property across two instances, whose clocks differ: the bound's "now" must be a time no
    # later first token or finish of either instance precedes
    kw = dict(n=n, isl=isl, osl=osl, hit=0, xfer=xfer, budgets=(256, 64), blocks=(400, 400), block_tokens=(16, 16),
              conc=conc, ranks=ranks, k=k, acc=acc, full=True)
    gave_up = np.zeros(1, np.int64)
    _gives_up_only_on_a_miss(_pd_core(**kw), _pd_core(**kw, sla=(ttft, tpot), gave_up=gave_up), gave_up, osl, ttft,
                             tpot)


def test_perf_reads_the_drafter_and_async_flags_as_bench_does(capsys):
    """``audit perf --draft-eager`` adds the drafter's launches to a graph decode step at draft_launch_us, and
    ``--async-scheduling`` hides the async_overlap share of what may overlap (step_ms plus those launches), at
    most the device time: the host time by hand from the program's launch count and the profile's constants
    (DeepSeek-V3.2 on main, whose drafter is captured with the step unless the launch says otherwise)."""
    import json

    from auditor.cli import main
    from auditor.devices.profiles import load_device
    from auditor.parallel import ParallelPlan
    from auditor.perf.api import cached_program
    from auditor.perf.host import host_params, launch_counts
    from auditor.source import open_model
    base = ["perf", "deepseek-v3.2", "--tp", "8", "--dp", "2", "--ep", "16", "--phase", "decode", "--batch", "2",
            "--context", "4096", "--mtp", "2", "--format", "json"]
    got = {}
    for extra in ((), ("--draft-eager",), ("--draft-eager", "--async-scheduling")):
        assert main(base + list(extra)) == 0
        got[extra] = json.loads(capsys.readouterr().out)["steps"][0]
    hp = host_params(load_device("a3-752t"))
    src = open_model("deepseek-v3.2", None, tables=False)
    plan = ParallelPlan(tp=8, dp=2, ep=16, mtp=True)
    dec = cached_program(DeploymentContext(src.spec, plan, "vllm-ascend@main", src.scheme_recipe), "decode",
                         "expanded", True)
    _, n_draft = launch_counts(dec.arrays(), 2)
    assert n_draft > 50
    plain = got[()]["host_ms"]
    assert plain == pytest.approx((hp[3] + 2 * 3 * hp[2]) * 1e3)
    assert got[()]["tokens"] == 3 and got[()]["batch"] == 2         # a decode step: 1 + K tokens per request
    eager = got[("--draft-eager",)]["host_ms"]
    assert eager == pytest.approx(plain + n_draft * hp[4] * 1e3)
    dev = got[("--draft-eager", "--async-scheduling")]["device_ms"]
    hidden = hp[5] * min((hp[3] + n_draft * hp[4]) * 1e3, dev)
    assert got[("--draft-eager", "--async-scheduling")]["host_ms"] == pytest.approx(eager - hidden)


def test_the_calibration_says_how_far_the_rows_tell_acceptance_from_the_host_constants(fitted):
    """Per model family, the host constants refitted at a 10% higher and a 10% lower acceptance: each record's
    objective is what its constants give on rows built at that acceptance (recomputed here), the base is the
    shipped fit's, and the verdict follows the stated rule from those numbers."""
    import math

    from auditor.perf.acceptance import given, resolve
    from auditor.serving.calibrate import (ACCEPTANCE_STEP, FIT_KEYS, SEPARABLE_RATIO, acceptance_separation,
                                           evidence, fitted_rows, load_rows, msle)
    rows = load_rows(ROWS)
    got = acceptance_separation(rows, fitted["x"], fitted["ev"], iters=1)
    by_id = {r["id"]: r for r in rows["rows"]}
    assert {tuple(g["rows"]) for g in got} == {("P1", "P3a"), ("P4", "P6")}     # DeepSeek's default, GLM's
    for g in got:
        assert g["msle"] == pytest.approx(msle(fitted_rows(fitted["ev"]), fitted["x"]), abs=1e-5)
        for label, sign in (("higher", 1.0), ("lower", -1.0)):
            over = {}
            for n in g["rows"]:
                k = max(int(i.get("mtp", 0)) for i in by_id[n]["instances"])       # the row's own K
                a = resolve(by_id[n]["model"]).equivalent(k)
                over[n] = given(min(a * math.exp(sign * ACCEPTANCE_STEP), 0.99))
            ev = fitted_rows(evidence(rows, overrides=over))
            x = np.array([g[label]["constants"][k] for k in FIT_KEYS])
            assert msle(ev, x) == pytest.approx(g[label]["msle"], rel=1e-3, abs=1e-5)
        up, down = g["higher"]["msle"] / g["msle"], g["lower"]["msle"] / g["msle"]
        flat = 1 / SEPARABLE_RATIO <= min(up, down) <= SEPARABLE_RATIO
        assert g["separable"] is (not flat)
        assert ("cannot separate" in g["verdict"]) is flat


def test_the_runs_side_by_side_are_the_runs_one_after_another():
    """bench's run and its two KV-edge runs on threads (``run_with_sensitivity``) give, bit for bit, what the
    same simulations give one after another on one thread."""
    from auditor.serving.bench import metrics
    from auditor.serving.calibrate import deployment, load_rows, workload
    from auditor.serving.sim import run_with_sensitivity, scaled_pool, simulate
    rows = {r["id"]: r for r in load_rows(ROWS)["rows"]}
    for rid in ("P4", "P3a"):                       # aggregated; P/D
        dep, wl = deployment(rows[rid]), workload(rows[rid])
        run, lo, hi = run_with_sensitivity(dep, wl)
        assert metrics(run) == metrics(simulate(dep, wl))
        serial = [metrics(simulate(scaled_pool(dep, f), wl))["output_throughput"] for f in (0.95, 1.05)]
        assert [lo, hi] == serial
