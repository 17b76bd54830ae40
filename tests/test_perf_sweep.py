"""The batched sweep kernel agrees with single evaluations; ``audit sweep`` writes the grid."""
from __future__ import annotations

import csv

import pytest

from auditor.context import DeploymentContext
from auditor.cli import main
from auditor.devices.profiles import load_device
from auditor.model.presets import preset_spec
from auditor.perf.api import Workload, evaluate
from auditor.perf.sweep import COLUMNS, run_sweep
from auditor.parallel import ParallelPlan

SPEC = preset_spec("glm-5.1")
DEV = load_device("a3-752t")
ENGINE = "vllm-ascend@main"


def test_batched_kernel_matches_single_evaluations():
    res = run_sweep(DeploymentContext(SPEC, ParallelPlan(sp=True), ENGINE, "w8a8", DEV), [4, 16], [2], [512, 4096],
                    [0, 3000], [1, 4], [0, 2])
    assert res.n_configs == 2 * 2 * 2 * 2 * 2 and not res.skipped
    col = {c: i for i, c in enumerate(COLUMNS)}
    for row in res.rows[::5]:
        tp, dp, ep = int(row[col["tp"]]), int(row[col["dp"]]), int(row[col["ep"]])
        assert ep == tp * dp
        plan = ParallelPlan(tp=tp, dp=dp, ep=ep, sp=True)
        kw = dict(tokens=int(row[col["tokens"]]), context=int(row[col["context"]]), batch=int(row[col["batch"]]),
                  mtp=int(row[col["mtp"]]))
        pre = evaluate(DeploymentContext(SPEC, plan, ENGINE, "w8a8", DEV), Workload("prefill", **kw))
        dec = evaluate(DeploymentContext(SPEC, plan, ENGINE, "w8a8", DEV), Workload("decode", **kw))
        assert row[col["ttft_ms"]] == pytest.approx(pre.phases["prefill"].time_ms, rel=1e-9)
        assert row[col["decode_step_ms"]] == pytest.approx(dec.phases["decode"].time_ms, rel=1e-9)
        per_dev = kw["batch"] * (1 + kw["mtp"]) / (dec.phases["decode"].time_s * tp)
        assert row[col["decode_tok_s_per_device"]] == pytest.approx(per_dev, rel=1e-9)


def test_impossible_plans_are_skipped():
    res = run_sweep(DeploymentContext(SPEC, ParallelPlan(), ENGINE, "w8a8", DEV), [3, 4], [1], [128], [0], [1], [0])
    assert len(res.skipped) == 1 and "tp3" in res.skipped[0]
    assert set(res.rows[:, 0]) == {4}


def test_sweep_cli_csv(tmp_path):
    out = tmp_path / "s.csv"
    rep = tmp_path / "best.txt"
    assert main(["sweep", "--tp", "8,16", "--dp", "1,4", "--tokens", "1024,4096", "--context", "0",
                 "--batch", "1,8", "--sp", "--csv", str(out), "-o", str(rep)]) == 0
    rows = list(csv.DictReader(out.open()))
    assert len(rows) == 2 * 2 * 2 * 2 and list(rows[0]) == COLUMNS
    assert {(r["tp"], r["dp"], r["ep"]) for r in rows} == {("8", "1", "8"), ("8", "4", "32"), ("16", "1", "16"),
                                                          ("16", "4", "64")}
    # EP8 holds 256/8 = 32 routed experts per rank: 32 x 75 MoE layers x 3 x 6144 x 2048 B (W8A8)
    # = 84.4 GiB, past a 61.27 GiB die: such rows are marked and never rank
    assert {r["fits"] for r in rows if r["ep"] == "8"} == {"0"}
    rows = [r for r in rows if r["fits"] == "1"]
    assert rows
    text = rep.read_text()
    assert "best TTFT" in text and "best decode tokens/s per device" in text
    js_path = tmp_path / "best.json"
    assert main(["sweep", "--tp", "8,16", "--dp", "1,4", "--tokens", "1024,4096", "--context", "0",
                 "--batch", "1,8", "--sp", "--format", "json", "-o", str(js_path)]) == 0
    import json
    js = json.loads(js_path.read_text())
    assert js["configurations"] == 16
    assert js["infeasible"] == 16 - len(rows)
    best = min(rows, key=lambda r: float(r["ttft_ms"]))
    assert js["best_ttft"][0]["ttft_ms"] == pytest.approx(float(best["ttft_ms"]), abs=1e-3)
    top_dec = max(rows, key=lambda r: float(r["decode_tok_s_per_device"]))
    assert js["best_decode_tok_s_per_device"][0]["decode_tok_s_per_device"] == pytest.approx(
        float(top_dec["decode_tok_s_per_device"]), abs=1e-3)


def test_grid_kernel_equals_full_evaluation():
    """The sweep's split (context-independent ops once per key, attention-like ops per context)
    must add up to the full per-op evaluation of every grid point."""
    import numpy as np
    from auditor_kernels import kinds as K
    from auditor_kernels.perf_core import evaluate_program, sweep_grid

    from auditor.perf.api import cached_program
    from auditor.perf.device import device_vector, group_table
    plan = ParallelPlan(tp=8, dp=2, ep=16, sp=True)
    prog = cached_program(DeploymentContext(SPEC, plan, ENGINE, "w8a8"), "decode", "repetition", True)
    arrays = prog.arrays()
    keys = np.array([[1.0, 4.0, 0.0], [1.0, 16.0, 3.0]])
    ctx = np.array([0.0, 1000.0, 50000.0])
    dv, grp = device_vector(DEV), group_table(DEV, plan)
    grid = sweep_grid(*arrays, 1, 8.0, keys, ctx, dv, grp)
    op_out = np.empty((arrays[0].shape[0], K.N_OUT))
    co_out = np.empty((arrays[3].shape[0], K.N_CO_OUT))
    for u, (tok, bat, mtp) in enumerate(keys):
        for c, context in enumerate(ctx):
            full = evaluate_program(*arrays, 1, 8.0, tok, context, bat, mtp, dv, grp, op_out, co_out)
            assert grid[u, c] == pytest.approx(full, rel=1e-12)
    assert grid[0, 2] > grid[0, 1] > grid[0, 0]          # longer context costs more


def test_no_infeasible_configuration_among_the_best():
    # TP4 DP1 holds ~178 GiB of weights per rank (EP off: every expert TP/4-sharded); TP16 DP2 EP32 ~29 GiB
    res = run_sweep(DeploymentContext(SPEC, ParallelPlan(sp=True), ENGINE, "w8a8", DEV), [4, 16], [1, 2], [4096], [0],
                    [1, 32], [0], ep_on=True, decode_follows_prefill=True)
    col = {c: i for i, c in enumerate(COLUMNS)}
    tp4 = res.rows[res.rows[:, col["tp"]] == 4]
    assert (tp4[:, col["fits"]] == 0).all() and (tp4[:, col["weights_gib"]] > 61.27).all()
    for column, largest in (("ttft_ms", False), ("decode_tok_s_per_device", True)):
        best = res.best(column, largest, k=10)
        assert len(best) and (best[:, col["fits"]] == 1).all()
    # decode continues the prefill: its context is the prefill length
    assert (res.rows[:, col["decode_context"]] == 4096).all()
    plan = ParallelPlan(tp=16, dp=2, ep=32, sp=True)
    row = res.rows[(res.rows[:, col["tp"]] == 16) & (res.rows[:, col["dp"]] == 2) & (res.rows[:, col["batch"]] == 1)][0]
    dec = evaluate(DeploymentContext(SPEC, plan, ENGINE, "w8a8", DEV),
                   Workload("decode", tokens=4096, context=4096, batch=1))
    assert row[col["decode_step_ms"]] == pytest.approx(dec.phases["decode"].time_ms, rel=1e-9)


def test_sweep_takes_the_runtime_options(capsys):
    """--max-model-len refuses rows whose requests are longer (a 4,096-token prompt plus its first
    decode step needs 4,097); --hccl-buffsize and --dcp reach the budget (a larger mc2 buffer leaves
    less KV on every EP row)."""
    import json as _json
    from auditor.cli import main
    base = ["sweep", "--tp", "16", "--dp", "1,2", "--tokens", "4096", "--format", "json"]
    assert main(base + ["--max-model-len", "4096"]) == 0
    short = _json.loads(capsys.readouterr().out)
    assert short["infeasible"] == short["configurations"]
    assert main(base + ["--max-model-len", "8K"]) == 0
    assert _json.loads(capsys.readouterr().out)["infeasible"] < short["configurations"]
    assert main(base) == 0
    small = _json.loads(capsys.readouterr().out)["best_ttft"]
    assert main(base + ["--hccl-buffsize", "2000"]) == 0
    big = _json.loads(capsys.readouterr().out)["best_ttft"]
    by = {(r["tp"], r["dp"]): r["kv_free_gib"] for r in small}
    assert big and all((r["tp"], r["dp"]) in by for r in big)
    assert all(r["kv_free_gib"] < by[(r["tp"], r["dp"])] for r in big)


def _json_run(argv, capsys):
    import json as _json
    assert main(argv) == 0
    return _json.loads(capsys.readouterr().out)


def test_sweep_max_num_batched_tokens_is_the_engines_budget(capsys):
    """sweep --max-num-batched-tokens T (default 8192, as every other command): a 16,384-token prompt is
    prefilled in ceil(16384 / T) chunks and the budget is sized for T, so each row is what `audit perf` gives
    for the same flags (TTFT, the worst rank's weights, the KV left after the request), and a larger budget
    leaves less KV: the profile run holds at least one bf16 hidden state per batched token."""
    from auditor.units import GiB
    rows = {}
    for t, chunks in ((4096, 4), (32768, 1), (None, 2)):
        extra = [] if t is None else ["--max-num-batched-tokens", str(t)]
        sw = _json_run(["sweep", "--tp", "16", "--dp", "1", "--tokens", "16384", "--format", "json", "--quiet"]
                       + extra, capsys)
        (row,) = sw["best_ttft"]
        perf = _json_run(["perf", "--tp", "16", "--ep", "16", "--tokens", "16384", "--format", "json", "--quiet"]
                         + extra, capsys)
        assert len(perf["prefill"]["steps"]) == chunks
        hbm = perf["hbm"]
        assert row["ttft_ms"] == pytest.approx(perf["prefill"]["totals"]["time_ms"], abs=1e-4)
        assert row["weights_gib"] == pytest.approx(hbm["runtime"]["weights_bytes"] / GiB, abs=1e-4)
        assert row["kv_free_gib"] == pytest.approx((hbm["runtime"]["kv_pool_bytes"] - hbm["kv_needed_bytes"]) / GiB,
                                                   abs=1e-4)
        rows[t] = row
    assert rows[None] != rows[4096] and rows[None] != rows[32768]
    # 28,672 more batched tokens x hidden 6144 (GLM-5.1's config.json hidden_size) x 2 bytes, one bf16 hidden
    # state each: a lower bound on what the larger budget takes from the KV pool
    assert SPEC.H == 6144
    hidden_state = (32768 - 4096) * 6144 * 2 / GiB
    assert rows[4096]["kv_free_gib"] - rows[32768]["kv_free_gib"] >= hidden_state


def test_sweep_max_num_batched_tokens_takes_any_text_as_a_length_or_one_bad_parameter():
    """Values from outside: whatever text --max-num-batched-tokens gets, sweep parses it as the other commands do
    (vLLM's human-readable lengths, within the option's cap) or refuses it as a bad parameter of that option."""
    import click
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from auditor.cli.perf import sweep_command
    from auditor.lengths import parse_length
    from auditor.errors import AuditInputError

    @settings(max_examples=60, deadline=None, derandomize=True)
    @given(st.one_of(st.text(max_size=10), st.integers(-10, 10 ** 9).map(str),
                     st.sampled_from(["8k", "32K", "25.6k", "0", "-1", "1e3", "nan", "inf", ""])))
    def check(text):
        try:
            want = parse_length(text, "--max-num-batched-tokens")
        except AuditInputError:
            want = None
        try:
            ctx = sweep_command.make_context("sweep", ["--max-num-batched-tokens", text])
        except click.BadParameter as exc:
            assert want is None and exc.param.opts[0] == "--max-num-batched-tokens"
            return
        assert ctx.params["max_num_batched_tokens"] == want
    check()
