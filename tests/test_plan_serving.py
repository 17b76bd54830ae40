"""`audit plan` on the serving model of `audit bench` (issue 17): the 64k DeepSeek-V3.2 P/D case of
the engine's tutorial, the best per die budget, the header, the binds line, exit 3 and the launch.

SLA of the 64k cases, from the tutorial (research/serving-facts.md §4.1): it publishes TPOT 32 ms at
1P1D and no TTFT. Its P instance (TP16 DSA-CP, 32,560-token chunks, MTP 1) prefills one 64k prompt in
~6.4 s in this serving model, so TTFT <= 15 s asks for P nodes about as fast as the tutorial's (one
prompt may wait for another per P rank); TTFT <= 30 s lets plan trade first-token latency for prefill
throughput per die.
"""
from __future__ import annotations

import json

import pytest

from auditor.cli import main
from auditor.context import DeploymentContext
from auditor.devices.profiles import load_device
from auditor.model.presets import preset_spec
from auditor.parallel import ParallelPlan
from auditor.runtime.feasibility import workload_fit

GiB = 1 << 30
#: the detail keys of a P/D row that ``planner.launch.instance_plans`` reads
PD_KEYS = ("n_prefill", "n_decode", "p_tp", "p_dp", "p_ep", "p_sp", "p_dsa_cp", "dsa_cp", "p_max_num_batched_tokens", "p_max_model_len",
           "p_max_num_seqs", "p_mtp", "p_util", "tp", "dp", "ep", "sp", "dcp", "max_num_batched_tokens")
CASE = ["plan", "deepseek-v3.2", "--recipe", "w8a8", "--dies", "64", "--isl", "65536", "--osl", "1024",
        "--ttft-ms", "30000", "--tpot-ms", "50"]


@pytest.fixture(scope="module")
def case64(tmp_path_factory):
    out = tmp_path_factory.mktemp("plan") / "p.json"
    assert main(CASE + ["--format", "json", "-o", str(out)]) == 0
    return json.loads(out.read_text())


def test_64k_deepseek_finds_a_feasible_ranked_pd_deployment(case64):
    """What plan finds at TTFT 30 s: P/D wins on 64 dies; P runs DSA-CP with a chunked budget from the
    searched ones and the MTP-1 drafter, as the tutorial's P does. Every P and D instance is re-checked
    through the one-workload memory API."""
    best = case64["best"][0]
    assert best["mode"] == "disagg" and best["simulated"] and best["meets_sla"]
    assert best["ttft_ms"] <= 30000 and best["tpot_ms"] <= 50
    assert best["p_sp"] and best["p_mtp"] == 1 and best["p_max_num_batched_tokens"] in (4096, 8192, 16384, 32560)
    spec, dev = preset_spec("deepseek-v3.2"), load_device("a3-752t")
    u = best["util"]
    chunk = best["p_max_num_batched_tokens"]
    p = ParallelPlan(tp=best["p_tp"], dp=best["p_dp"], ep=best["p_ep"], sp=True, dsa_cp=True, role="prefill",
                     max_num_batched_tokens=chunk)
    assert best["p_util"] <= 0.92 and u <= 0.92
    assert workload_fit(DeploymentContext(spec, p, "vllm-ascend@main", "w8a8", dev), batch=best["p_max_num_seqs"],
                        request_tokens=65537, step_tokens=chunk, mtp=1, util=best["p_util"]).fits
    d = ParallelPlan(tp=best["tp"], dp=best["dp"], ep=best["ep"], sp=best["sp"], role="decode",
                     max_num_batched_tokens=best["max_num_batched_tokens"], dcp=best["dcp"])
    assert workload_fit(DeploymentContext(spec, d, "vllm-ascend@main", "w8a8", dev), batch=best["batch"],
                        request_tokens=65536 + 1024, step_tokens=best["batch"] * (1 + best["mtp"]), mtp=best["mtp"],
                        util=u, dcp=best["dcp"]).fits
    assert best["n_prefill"] * best["p_tp"] * best["p_dp"] + best["n_decode"] * best["tp"] * best["dp"] \
        == best["dies_used"] <= 64


def test_64k_figures_are_the_bench_simulation_of_the_printed_launch(case64):
    """The ranked figures are exactly what `audit bench` reports for the instance plans the launch
    prints, at the concurrency the plan names (2 x concurrency prompts)."""
    from auditor.deployment import InstancePlan
    from auditor.planner.launch import instance_plans
    from auditor.planner.search import Config
    from auditor.serving.bench import metrics
    from auditor.serving.sim import BenchWorkload, Deployment, simulate
    from auditor.source import open_model
    b = case64["best"][0]
    cfg = Config("disagg", 64, b["dies_used"], b["plan"], b["batch"], b["mtp"], 0, 0, 0, 0, 0, 0, 0, 0, True,
                 {k: b[k] for k in PD_KEYS}, util=b["util"])
    insts = instance_plans(cfg, max_model_len=66560, isl=65536, kv_cache_dtype="bf16")
    assert all(isinstance(i, InstancePlan) for i in insts) and insts[0].mtp == 1
    src = open_model("deepseek-v3.2", "w8a8", tables=False)
    dep = Deployment(DeploymentContext(src.spec, None, "vllm-ascend@main", "w8a8", load_device("a3-752t")),
                     insts)
    c = b["concurrency"]
    m = metrics(simulate(dep, BenchWorkload(c, 65536, 1024, 2 * c, prefix_caching=False)))
    assert m["output_throughput"] / b["dies_used"] == pytest.approx(b["tok_s_die"])
    assert m["mean_ttft_ms"] == pytest.approx(b["ttft_ms"]) and m["mean_tpot_ms"] == pytest.approx(b["tpot_ms"])


def test_64k_launch_lines(case64):
    """A w8a8 (msModelSlim) recipe launches with --quantization ascend; a preset gets a placeholder path
    from the model's name and recipe; P carries kv_producer and the drafter, D kv_consumer; each instance
    its own gpu-memory-utilization (P's margin for its chunk's prefill transients)."""
    pl, dl = case64["launch"]
    b = case64["best"][0]
    for inst, u in ((pl, b["p_util"]), (dl, b["util"])):
        assert inst["command"].startswith("vllm serve <path-to-DeepSeek-V3.2-w8a8>")
        assert "--quantization ascend" in inst["args"] and f"--gpu-memory-utilization {u:g}" in inst["args"]
    chunk = case64["best"][0]["p_max_num_batched_tokens"]
    assert f"--max-num-batched-tokens {chunk}" in pl["args"] and "kv_producer" in pl["command"]
    assert '"num_speculative_tokens": 1' in pl["command"] and "enable_dsa_cp" in pl["command"]
    assert "kv_consumer" in dl["command"]
    assert case64["model_path"] == "<path-to-DeepSeek-V3.2-w8a8>" and case64["quantized"]


def test_launch_path_and_quantization_rules():
    from auditor.planner.launch import model_path, quantized_recipe
    assert model_path(None, "glm-5.1", "w8a8", True) == "<path-to-GLM-5.1-w8a8>"
    assert model_path("/ckpt/glm", "glm-5.1", "w4a8", False) == "/ckpt/glm"
    assert quantized_recipe("w4a8") and quantized_recipe("w8a8") and not quantized_recipe("fp8-block")
    assert not quantized_recipe("bf16")


def test_best_per_budget_header_and_binds(tmp_path, capsys):
    """--dies 32,64: each budget gets its own best (the best simulated row of that budget), the header
    names model, recipe, KV dtype, device, engine and the utilisation, and a binds line per budget."""
    args = ["plan", "glm-5.1", "--dies", "32,64", "--isl", "4096", "--osl", "1024", "--ttft-ms", "5000",
            "--tpot-ms", "50", "--tp", "4,8,16", "--batch", "4,16", "--mtp", "0,3", "--simulate", "2"]
    assert main(args) == 0
    text = capsys.readouterr().out
    first = text.splitlines()[0]
    assert first.startswith("audit plan: glm-5.1 (w8a8, KV bf16) on a3-752t, vllm-ascend@main; "
                            "gpu-memory-utilization 0.92; launch path <path-to-GLM-5.1-w8a8>")
    assert "best per die budget:" in text
    assert sum(l.startswith("binds: ") for l in text.splitlines()) == 2
    out = tmp_path / "p.json"
    assert main(args + ["--format", "json", "-o", str(out)]) == 0
    rep = json.loads(out.read_text())
    pb = rep["best_per_budget"]
    assert set(pb) == {"32", "64"}
    for n, c in pb.items():
        assert c and c["dies"] == int(n) and c["simulated"] and c["meets_sla"] and c["launch"]
        same = [r for r in rep["best"] + [c] if r["dies"] == int(n)]
        assert c["tok_s_die"] == max(r["tok_s_die"] for r in same)
    assert set(rep["binds"]) == {"32", "64"}


def test_nothing_fits_exits_3_and_says_memory_binds(capsys):
    """8 dies: a GLM-5.1 W8A8 rank holds 256/8 = 32 routed experts in each of 75 MoE layers at
    37,806,080 B per expert = 84.5 GiB, over 0.92 x 61.27 = 56.37 GiB: nothing fits, exit 3."""
    assert 32 * 37_806_080 * 75 / GiB > 0.92 * 61.27
    assert main(["plan", "glm-5.1", "--dies", "8", "--isl", "4096", "--osl", "1024", "--ttft-ms", "5000",
                 "--tpot-ms", "50", "--tp", "8", "--batch", "1", "--mtp", "0"]) == 3
    out = capsys.readouterr().out
    assert "binds: 8 dies: memory binds: no configuration fits; w4a8, c8 KV or more dies would help" in out


def test_util_list_is_searched_and_bad_values_are_one_line(capsys):
    assert main(["plan", "glm-5.1", "--dies", "32", "--isl", "4096", "--osl", "1024", "--ttft-ms", "5000",
                 "--tpot-ms", "50", "--gpu-memory-utilization", "1.5"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--gpu-memory-utilization" in err


def test_64k_dcp_rows_are_simulated_like_any_row(case64):
    """Long inputs search DCP = TP; a shortlisted DCP row is run through the serving model (its instance
    plan carries the DCP size: KV pool and step tables with SFA DCP), not left as an estimate: its
    figures are one replica's bench simulation at the plan's per-replica concurrency."""
    from auditor.deployment import InstancePlan
    from auditor.planner.launch import instance_plans
    from auditor.planner.search import Config
    from auditor.serving.bench import metrics
    from auditor.serving.sim import BenchWorkload, Deployment, simulate
    from auditor.source import open_model
    dcp_rows = [r for r in case64["best"] if r.get("dcp", 1) > 1 and r["simulated"] and r["meets_sla"]]
    assert dcp_rows, "the 64k case lists a simulated DCP row"
    src = open_model("deepseek-v3.2", "w8a8", tables=False)
    for r in dcp_rows[:2]:
        keys = ("replicas", "tp", "dp", "ep", "sp", "dsa_cp", "dcp") if r["mode"] == "agg" else PD_KEYS
        cfg = Config(r["mode"], 64, r["dies_used"], r["plan"], r["batch"], r["mtp"], 0, 0, 0, 0, 0, 0, 0, 0, True,
                     {k: r[k] for k in keys}, util=r["util"])
        insts = instance_plans(cfg, max_model_len=66560, isl=65536, kv_cache_dtype="bf16")
        assert insts[-1].dcp == r["dcp"] > 1
        reps = insts[0].count if r["mode"] == "agg" else 1
        if r["mode"] == "agg":
            insts = [InstancePlan(**{**insts[0].__dict__, "count": 1})]
        dep = Deployment(DeploymentContext(src.spec, None, "vllm-ascend@main", "w8a8", load_device("a3-752t")),
                     insts)
        conc = r["concurrency"] // reps
        m = metrics(simulate(dep, BenchWorkload(conc, 65536, 1024, 2 * conc, prefix_caching=False)))
        assert r["tpot_ms"] == pytest.approx(m["mean_tpot_ms"]) and r["ttft_ms"] == pytest.approx(m["mean_ttft_ms"])


def test_64k_shortlist_spreads_over_instance_shapes(case64):
    """The estimate ranks shapes least reliably, so the simulated rows hold at most two per deployment
    shape (decode or aggregated TP x DP, with the P shape and chunk) and four per instance shape
    (planner.simulate._shapes), and more than one shape is simulated."""
    from collections import Counter
    sim = [r for r in case64["best"] if r.get("simulated")]
    assert len(sim) >= 4
    pairs = Counter((r["mode"], r["tp"], r["dp"], r.get("p_tp"), r.get("p_dp"), r.get("p_max_num_batched_tokens"))
                    for r in sim)
    d_shapes = Counter((r["mode"], r["tp"], r["dp"]) for r in sim)
    p_shapes = Counter((r["p_tp"], r["p_dp"], r["p_max_num_batched_tokens"]) for r in sim if r["mode"] == "disagg")
    assert max(pairs.values()) <= 2 and max(d_shapes.values()) <= 4 and max(p_shapes.values()) <= 4
    assert len(d_shapes) >= 2
    # a fifth simulated P/D row must bring a second P shape (at most four share one)
    assert len(p_shapes) >= 2 or sum(p_shapes.values()) <= 4


def test_tutorial_64k_pd_is_no_better_than_what_plan_finds(tmp_path):
    """The engine's own 64k/3k DeepSeek-V3.2 P/D (tutorial DeepSeek-V3.2.md:424-608@182b75ea: P TP16 DP2
    DSA-CP, 32,560-token chunks, util 0.82, MTP 1, eager; D TP4 DP8, 4 sequences, MTP 2, graphs up to 12
    tokens), simulated at the largest concurrency that meets TTFT 30 s / TPOT 32 ms, is no better per die
    than the best plan proposes for the same 64 dies and SLA: the search covers that deployment's region."""
    from auditor.deployment import InstancePlan
    from auditor.planner.search import operating_point
    from auditor.serving.bench import metrics
    from auditor.serving.sim import BenchWorkload, Deployment, simulate
    from auditor.source import open_model
    out = tmp_path / "p.json"
    assert main(["plan", "deepseek-v3.2", "--recipe", "w8a8", "--dies", "64", "--isl", "64000", "--osl", "3000",
                 "--ttft-ms", "30000", "--tpot-ms", "32", "--format", "json", "-o", str(out)]) == 0
    best = json.loads(out.read_text())["best"][0]
    p = InstancePlan("prefill", 1, 16, 2, 32, True, 64, 32560, 68000, 0.82, mtp=1, kv_role="kv_producer", dsa_cp=True,
                     hccl_buffsize_mb=256, graph_tokens=0)
    d = InstancePlan("decode", 1, 4, 8, 32, False, 4, 12, 68000, 0.95, mtp=2, kv_role="kv_consumer",
                     hccl_buffsize_mb=256, graph_tokens=12)
    src = open_model("deepseek-v3.2", "w8a8", tables=False)
    dep = Deployment(DeploymentContext(src.spec, None, "vllm-ascend@main", "w8a8", load_device("a3-752t")),
                     [p, d])

    def run(c):
        m = metrics(simulate(dep, BenchWorkload(c, 64000, 3000, 2 * c, acceptance=0.7, prefix_caching=False)))
        return m["mean_ttft_ms"] <= 30000 and m["mean_tpot_ms"] <= 32, m

    c, m = operating_point(32, run)
    assert m["mean_ttft_ms"] <= 30000 and c >= 8
    assert best["tok_s_die"] >= m["output_throughput"] / 64


def test_64k_tutorial_sla_finds_the_tutorials_deployment(tmp_path):
    """The done-when of issue 17: at the tutorial's TPOT (32 ms) and a TTFT its P nodes meet (15 s, module
    docstring), plan's best on 64 dies is the tutorial's 1P1D (DeepSeek-V3.2.md:424-608@182b75ea): P =
    two TP16 ranks (its external DP 2 x TP16) with DSA-CP and 32,560-token chunks, D = TP4 x DP8 running
    4 sequences per rank. Nothing in the search is fitted to the tutorial (validation only)."""
    out = tmp_path / "p.json"
    assert main(["plan", "deepseek-v3.2", "--recipe", "w8a8", "--dies", "64", "--isl", "64000", "--osl", "3000",
                 "--ttft-ms", "15000", "--tpot-ms", "32", "--format", "json", "-o", str(out)]) == 0
    b = json.loads(out.read_text())["best"][0]
    assert b["mode"] == "disagg" and b["simulated"] and b["meets_sla"] and b["dies_used"] == 64
    assert b["p_tp"] == 16 and b["n_prefill"] * b["p_dp"] == 2 and b["p_sp"]
    assert b["p_max_num_batched_tokens"] == 32560 and b["p_mtp"] == 1
    assert b["tp"] == 4 and b["n_decode"] * b["dp"] == 8 and b["dcp"] == 1 and b["batch"] == 4


def test_shortlist_on_two_threads_equals_one():
    """The queues (one per die budget and mode) simulate on two threads; every figure and flag must be
    what one thread gives, row for row."""
    import copy
    from dataclasses import asdict, replace

    from auditor.planner.search import PlanSpace, run_plan
    from auditor.planner.simulate import simulate_shortlist
    from auditor.planner.workload import PlanWorkload

    spec, dev = preset_spec("glm-5.1"), load_device("a3-752t")
    wl = PlanWorkload(isl=4096, osl=1024, max_len=5120)
    space = PlanSpace(dies=[16, 32], tps=(4, 8, 16), batches=(4, 16), mtps=(0, 3), simulate=0)
    est = run_plan(DeploymentContext(spec, None, "vllm-ascend@main", "w8a8", dev), wl, space, 5000.0, 50.0)
    assert est.simulated == 0
    rows = {}
    for workers in (1, 2):
        res = copy.deepcopy(est)
        n = simulate_shortlist(res, DeploymentContext(spec, None, "vllm-ascend@main", "w8a8", dev), wl,
                               replace(space, simulate=2), 5000.0, 50.0, workers=workers)
        assert n >= 4
        rows[workers] = [asdict(c) for c in res.configs]
    assert sum(r["simulated"] for r in rows[1]) >= 4
    assert rows[1] == rows[2]


def test_row_scheduler_runs_exactly_the_rows_one_thread_runs():
    """``_run_rows`` (rows, not queues, spread over threads, a free thread running ahead speculatively)
    gives every row what the stopping rule run queue by queue gives, and no figure to a row the rule does
    not reach: fake rows whose simulated figure is fixed per row, so the rule stops inside each queue."""
    import threading
    import time

    from auditor.planner.search import Config
    from auditor.planner.simulate import _run_rows

    def row(est, sim, ok=True):
        c = Config("agg", 16, 16, "p", 1, 0, 1.0, 1.0, est, 1.0, 0.0, 0.0, 0, 0.0, True, {"x": 1})
        c.detail["sim"], c.detail["ok"] = sim, ok
        return c

    def build():
        # first = 2: rows 0-1 always; row 2 (est 70 > best 60) runs; row 3 (est 55 <= 60) stops the queue
        a = [row(100, 50), row(90, 60), row(70, 65), row(55, 99), row(50, 99)]
        b = [row(80, 10, ok=False), row(75, 20), row(60, 30), row(40, 99)]     # a miss, then every row runs
        c = [row(30, 5)]
        return [a, b, c]

    seen = []

    def sim(c):
        time.sleep(0.002 * c.detail["sim"] % 0.05)     # vary finishing order across threads
        seen.append(threading.get_ident())
        c.simulated, c.tok_s_die, c.meets_sla = True, float(c.detail["sim"]), c.detail["ok"]
        c.detail["simulated_as"] = c.detail["sim"]

    def sequential(queues, first):
        n = 0
        for q in queues:
            best = 0.0
            for i, c in enumerate(q):
                if i >= first and c.tok_s_die <= best:
                    break
                sim(c)
                n += 1
                if c.meets_sla:
                    best = max(best, c.tok_s_die)
        return n

    from dataclasses import asdict
    for first in (1, 2, 3):
        one, many = build(), build()
        n1 = sequential(one, first)
        for workers in (1, 2, 3):
            many = build()
            assert _run_rows(many, workers, first, 1, sim) == n1
            assert [[asdict(c) for c in q] for q in many] == [[asdict(c) for c in q] for q in one]
    # the rule stops queue a at row 3 with first = 2: rows 3-4 keep their estimates, unsimulated
    q = build()
    _run_rows(q, 2, 2, 1, sim)
    assert [c.simulated for c in q[0]] == [True, True, True, False, False]
    assert q[0][3].tok_s_die == 55 and "simulated_as" not in q[0][3].detail


def test_overlapped_shortlist_equals_simulating_after_the_estimate():
    """``run_plan`` simulates the aggregated queues while it estimates the P/D rows (``Shortlist``): every
    row, note and count must be what estimating everything first and then ``simulate_shortlist`` on one
    thread gives, with two utils searched (the aggregated rows of both are in the early queues)."""
    import copy
    from dataclasses import asdict, replace

    from auditor.planner.search import PlanSpace, _notes, run_plan
    from auditor.planner.simulate import simulate_shortlist
    from auditor.planner.workload import PlanWorkload

    spec, dev = preset_spec("glm-5.1"), load_device("a3-752t")
    base = DeploymentContext(spec, None, "vllm-ascend@main", "w8a8", dev)
    wl = PlanWorkload(isl=4096, osl=1024, max_len=5120)
    space = PlanSpace(dies=[16, 32], tps=(4, 8, 16), batches=(4, 16, 32), mtps=(0, 3), utils=(0.9, 0.92), simulate=2)
    est = run_plan(base, wl, replace(space, simulate=0), 5000.0, 50.0)
    ref = copy.deepcopy(est)
    ref.notes = _notes(space, wl, base.engine)         # worded for the simulated space, as run_plan words them
    n = simulate_shortlist(ref, base, wl, space, 5000.0, 50.0, workers=1)
    got = run_plan(base, wl, space, 5000.0, 50.0)
    assert got.simulated == n >= 8
    assert [asdict(c) for c in got.configs] == [asdict(c) for c in ref.configs]
    assert got.notes == ref.notes
