"""`audit plan`'s estimate and operating point: the closed-loop burst at P by hand, the bisection on
concurrency, the per-instance margin utilisation, and the decode step the search times against
`audit perf`'s (one host model, counted once)."""
from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings, strategies as st

from auditor.cli import main
from auditor.context import DeploymentContext
from auditor.devices.profiles import load_device
from auditor.model.presets import preset_spec
from auditor.parallel import ParallelPlan
from auditor.planner.search import closed_loop, operating_point


def test_closed_loop_burst_by_hand():
    """8 clients, 2 P ranks of 10 s a prompt, 60 s of decode, 5 s P steps, SLA 100 s. First wave: 4
    rounds, mean wait (4 + 1) / 2 x 10 = 25 s; P clears it at 40 s, before the first decodes end (60 s),
    so the second wave waits one lockstep step: 10 + 5 = 15 s. Mean TTFT (25 + 15) / 2 = 20 s; the run
    lasts 5 x 10 + 2 x 60 + 5 = 175 s for 16 requests."""
    c, rate, ttft = closed_loop(8, 2, 10.0, 60.0, 100.0, t_step=5.0)
    assert c == 8 and ttft == pytest.approx(20.0) and rate == pytest.approx(16 / 175)


def test_closed_loop_p_bound_queue_and_sla():
    """P-bound: 8 clients, 1 P rank of 20 s, 10 s decode. First wave 8 rounds: (8 + 1) / 2 x 20 = 90 s;
    P clears it at 160 s, 150 s after the first decode ends: the second wave waits 20 + 150 + 20 (one
    step) = 190 s. Mean (90 + 190) / 2 = 140 s. An SLA of 100 s takes fewer clients: at 4 (the largest
    that meets it), rounds 4 -> 50 s, lag 4 x 20 - 10 + 20 = 90 s, mean (50 + 20 + 90) / 2 = 80 s."""
    assert closed_loop(8, 1, 20.0, 10.0, 1e9, t_step=20.0)[2] == pytest.approx(140.0)
    c, _, ttft = closed_loop(8, 1, 20.0, 10.0, 100.0, t_step=20.0)
    # c = 5: rounds 5 -> 60, lag 100 - 10 + 20 = 110 -> (60 + 20 + 110) / 2 = 95 s, also within 100 s
    assert c == 5 and ttft == pytest.approx(95.0)


@settings(max_examples=200, deadline=None)
@given(slots=st.integers(1, 4096), limit=st.integers(0, 5000))
def test_operating_point_finds_the_largest_ok_concurrency(slots, limit):
    """For a monotone SLA (ok while c <= limit) bisection returns min(limit, slots) whenever its seven
    runs suffice (always from at most 2^6 below the start), else an ok c no larger; c = 1 when none is."""
    calls = []

    def run(c):
        calls.append(c)
        return c <= limit, c

    c, res = operating_point(slots, run)
    assert res == c and len(calls) <= 8 and all(1 <= x <= slots for x in calls)
    want = min(limit, slots)
    if want == 0:
        assert c == 1
    else:
        assert c <= want
        if slots <= 64 or want == slots:
            assert c == want


def test_margin_util_is_the_largest_that_holds_the_outside_budget_items(capsys):
    """A DeepSeek-V3.2 P node (TP2, DSA-CP, 32,560-token chunks) holds ~5.9 GiB of SFA prefill transients
    the profile run does not see: at 0.92 `audit memory` reports a shortfall; plan runs it at the largest
    util whose margin is non-negative, and 0.01 more would be short again (both read back from `audit
    memory`'s own outside-budget table)."""
    from auditor.runtime.feasibility import margin_util
    spec, dev = preset_spec("deepseek-v3.2"), load_device("a3-752t")
    plan = ParallelPlan(tp=2, dp=16, ep=32, sp=True, dsa_cp=True, role="prefill", max_num_batched_tokens=32560, mtp=True)
    u = margin_util(DeploymentContext(spec, plan, "vllm-ascend@main", "w8a8", dev), util=0.92, max_model_len=65537,
                    max_num_seqs=16, max_num_batched_tokens=32560, mtp=1)
    assert 0.5 < u < 0.92

    def headroom(util):
        args = ["memory", "deepseek-v3.2", "--recipe", "w8a8", "--tp", "2", "--dp", "16", "--ep", "32", "--dsa-cp",
                "--role", "prefill", "--max-model-len", "65537", "--max-num-batched-tokens", "32560",
                "--max-num-seqs", "16", "--mtp", "1", "--mtp-drafter", "--gpu-memory-utilization", f"{util:.2f}",
                "--format", "json"]
        main(args)
        return json.loads(capsys.readouterr().out)["runtime"]["headroom_bytes"]

    assert headroom(0.92) < 0 and headroom(u) >= 0 and headroom(u + 0.01) < 0


def test_search_decode_step_is_perf_decode_step(capsys):
    """The search times a D instance's decode step with the same kernel tables and the same host model as
    `audit perf` (the device's per-step host slots were added on top before: 38 ms per step, twice)."""
    import numpy as np
    from auditor.planner.search import _Kernel
    from auditor.source import open_model
    src, dev = open_model("deepseek-v3.2", "w8a8", tables=False), load_device("a3-752t")
    kern = _Kernel(DeploymentContext(src.spec, None, "vllm-ascend@main", src.scheme_recipe, dev))
    plan = ParallelPlan(tp=4, dp=8, ep=32, sp=False, role="decode", max_num_batched_tokens=12, mtp=True)
    keys = np.array([[1.0, 4.0, 2.0]])
    t = kern.times(plan, "decode", keys, np.array([65000.0]))[0, 0] + kern.decode_host(plan, keys)[0]
    assert main(["perf", "deepseek-v3.2", "--recipe", "w8a8", "--tp", "4", "--dp", "8", "--ep", "32", "--role",
                 "decode", "--max-num-batched-tokens", "12", "--mtp", "2", "--phase", "decode", "--batch", "4",
                 "--context", "65000", "--graph", "repetition", "--format", "json"]) in (0, 3)
    js = json.loads(capsys.readouterr().out)
    assert t * 1e3 == pytest.approx(js["totals"]["time_ms"], rel=1e-6)
    assert not math.isnan(t)


def test_shortlist_caps_count_each_shape_once_per_row():
    """Three aggregated rows of one shape (TP8 DP2) and two of another: two of the first reach the queue
    (the per-shape cap), both of the second; the pair key and the instance key of a row are distinct."""
    from auditor.planner.search import Config, PlanResult, PlanSpace
    from auditor.planner.simulate import shortlist

    def row(tp, dp, b, v):
        return Config("agg", 16, 16, f"TP{tp} DP{dp}", b, 3, 1000.0, 30.0, v, 10.0, 0, 0, 0, 0, True,
                      {"tp": tp, "dp": dp, "replicas": 1})

    rows = [row(8, 2, 1, 9.0), row(8, 2, 2, 8.0), row(8, 2, 4, 7.0), row(16, 1, 1, 6.0), row(16, 1, 2, 5.0)]
    res = PlanResult(rows, 0, 0.0, None, [], {}, False, dies=(16,))
    (agg, disagg) = shortlist(res, PlanSpace(dies=(16,), simulate=4), 5000.0, 50.0)
    assert [(c.detail["tp"], c.batch) for c in agg] == [(8, 1), (8, 2), (16, 1), (16, 2)] and disagg == []


def test_a_row_at_the_kv_edge_ranks_after_the_rows_that_hold():
    """Best first, except that a row which needs the modelled KV pool to be exact comes after the rows
    that hold with 5 % less; among each kind, throughput per die decides."""
    from auditor.planner.search import Config, PlanResult

    def row(name, v, edge):
        c = Config("agg", 16, 16, name, 1, 3, 1000.0, 30.0, v, 10.0, 0, 0, 0, 0, True, {}, simulated=True)
        c.kv_edge = edge
        return c

    res = PlanResult([row("a", 9.0, True), row("b", 8.0, False), row("c", 7.0, True), row("d", 6.0, False)],
                     0, 0.0, None, [], {}, False, simulated=4, dies=(16,))
    assert [c.plan for c in res.best()] == ["b", "d", "a", "c"]


def test_kv_edge_flag_is_what_bench_sees_with_5_percent_fewer_blocks(tmp_path):
    """GLM-5.1 on 16 dies, 8k/1k: the simulated rows hold 4 full requests per rank with little KV to
    spare. Each row's flag is re-derived through `audit bench`'s own path (serving.sim.kv_sensitivity
    on the printed instance plans at the row's concurrency): edge iff the client with 5 % fewer blocks
    per rank misses the SLA or loses a fifth of the throughput. The case has both kinds, and the
    ranked table lists the rows that hold first."""
    from dataclasses import replace

    from auditor.planner.launch import instance_plans
    from auditor.planner.search import Config
    from auditor.serving.sim import BenchWorkload, Deployment, kv_sensitivity
    from auditor.source import open_model
    out = tmp_path / "p.json"
    assert main(["plan", "glm-5.1", "--dies", "16", "--isl", "8192", "--osl", "1024", "--ttft-ms", "30000",
                 "--tpot-ms", "80", "--format", "json", "-o", str(out)]) == 0
    best = json.loads(out.read_text())["best"]
    src = open_model("glm-5.1", "w8a8", tables=False)
    from auditor.perf.acceptance import resolve
    acc = resolve(src.spec, None).equivalent(1)          # plan's own: the family's measured default
    keys = ("tp", "dp", "ep", "sp", "dsa_cp", "dcp", "max_num_batched_tokens", "replicas")
    flags = []
    for b in best:
        assert b["mode"] == "agg" and b["simulated"]
        cfg = Config("agg", 16, b["dies_used"], b["plan"], b["batch"], b["mtp"], 0, 0, 0, 0, 0, 0, 0, 0, True,
                     {k: b[k] for k in keys if k in b}, util=b["util"])
        inst = instance_plans(cfg, max_model_len=8192 + 1024 + 1, isl=8192, kv_cache_dtype="bf16")[0]
        dep = Deployment(DeploymentContext(src.spec, None, "vllm-ascend@main", src.scheme_recipe,
                                           load_device("a3-752t")), [replace(inst, count=1)])
        c = b["concurrency"] // inst.count
        low, _ = kv_sensitivity(dep, BenchWorkload(c, 8192, 1024, 2 * c, prefix_caching=False, acceptance=acc))
        low_die = low * inst.count / b["dies_used"]
        assert b["kv_edge_tok_s_die"] == pytest.approx(low_die, rel=1e-3)
        flags.append(b["kv_edge"])
        if not b["kv_edge"]:
            assert low_die * 1.25 >= b["tok_s_die"]
    assert True in flags and False in flags
    assert flags == sorted(flags)


# ---------------------------------------------------------------- the P/D grid as arrays (issue 31)
@settings(max_examples=300, deadline=None)
@given(slots=st.integers(1, 5000), p_ranks=st.integers(0, 3000), t_pre=st.floats(1e-3, 50.0),
       t_dec=st.floats(0.0, 200.0), sla=st.floats(1e-3, 100.0), chunks=st.integers(1, 64))
def test_closed_loop_arrays_equal_the_scalar_call(slots, p_ranks, t_pre, t_dec, sla, chunks):
    """Element by element the array form returns exactly (==, not approx) what closed_loop returns."""
    import numpy as np

    from auditor.planner.search import closed_loop_v
    c, rate, ttft = closed_loop(slots, p_ranks, t_pre, t_dec, sla, t_pre / chunks)
    cv, rv, tv = closed_loop_v(np.array([[slots, 1]]), np.array([[p_ranks, 1]]), np.array([[t_pre]]),
                               np.array([[t_dec, t_dec]]), sla, np.array([[t_pre / chunks]]))
    assert int(cv[0, 0]) == c and float(rv[0, 0]) == rate and float(tv[0, 0]) == ttft


def _plan_space(dies, every_row):
    from auditor.perf.acceptance import resolve
    from auditor.planner.search import PlanSpace
    spec = preset_spec("glm-5.1")
    return spec, PlanSpace(dies=dies, acceptance=resolve(spec, None).equivalent(1), simulate=4,
                           tps=(1, 2, 4), batches=(4, 16, 32), every_row=every_row)


def test_built_rows_give_the_shortlist_and_counts_of_every_row():
    """Building only the P/D rows the outputs read (the default) gives the same shortlist, the same
    closest row and the same feasible counts as building every row (--csv)."""
    from auditor.planner.search import run_plan
    from auditor.planner.simulate import shortlist
    from auditor.planner.workload import from_lengths
    dev, wl = load_device("a3-752t"), from_lengths(4096, 1024)
    out = {}
    for every in (True, False):
        spec, space = _plan_space([32, 64], every)
        res = run_plan(DeploymentContext(spec, None, "vllm-ascend@main", "w8a8", dev), wl, replace_sim(space), 5000.0,
                       50.0)
        out[every] = res
    full, part = out[True], out[False]
    assert part.feasible == full.feasible == len(full.configs) > len(part.configs)
    for n in (32, 64):
        assert part.feasible_of(n, "disagg") == sum(c.dies == n and c.mode == "disagg" for c in full.configs)
    q_full, q_part = (shortlist(r, _plan_space([32, 64], False)[1], 5000.0, 50.0) for r in (full, part))
    assert [[c.key for c in q] for q in q_full] == [[c.key for c in q] for q in q_part] and any(q_full)
    for n in (32, 64):
        def near(res):
            rows = [c for c in res.configs if c.dies == n]
            return min(rows, key=lambda c: max(c.ttft_ms / 5000.0, c.tpot_ms / 50.0)).key
        assert near(full) == near(part)


def replace_sim(space):
    from dataclasses import replace
    return replace(space, simulate=0)       # the estimate only: the shortlist is compared, not simulated


def test_simulation_bound_counts_the_queue_cells():
    """sim_cells restates the kernel's waiting queues: kinds x ranks x (2 x prompts + 2), prompts = 2 x slots."""
    from auditor.planner.search import Config
    from auditor.planner.simulate import MAX_SIM_CELLS, sim_cells
    pd = Config("disagg", 8192, 4992, "p", 16, 3, 0, 0, 0, 0, 0, 0, 0, 0, True,
                {"p_dp": 2048, "n_prefill": 1, "dp": 128, "n_decode": 7})
    # 7 x 128 x 16 = 14,336 slots; ranks max(2048, 896); 2 x 2048 x (4 x 14,336 + 2)
    assert sim_cells(pd) == 2 * 2048 * 57_346 > MAX_SIM_CELLS
    agg = Config("agg", 128, 128, "a", 128, 3, 0, 0, 0, 0, 0, 0, 0, 0, True, {"dp": 128})
    assert sim_cells(agg) == 128 * (4 * 16_384 + 2) <= MAX_SIM_CELLS
