"""DeepSeek-V4 in sweep and plan (issue 27): their grids price the six-group KV pool through its spec
(``PooledKVSpec.request_blocks`` / ``tokens_held``), and the weights of a row carry its own drafter's K
(DeepSeek-V4's drafter buffers are sized by K). The figures a sweep row and plan's own launch report are
memory's for the same flags (the expected numbers are memory's: the test is that no command reads the
deployment or the pool differently)."""
from __future__ import annotations

import json
import shlex

import pytest

from auditor.cli import main
from auditor.context import DeploymentContext

S, MML = 4, 16384          # 4 requests of 16k: Flash at TP8 DP2 holds 7.6 (memory: max concurrency)
MODEL = "deepseek-v4-flash"


def _json(args, capsys) -> dict:
    code = main(args)
    out = capsys.readouterr().out
    assert code in (0, 3), out[-500:]
    return json.loads(out)


@pytest.mark.parametrize("tp,dp", [(8, 2), (4, 4)])
def test_sweep_row_is_memorys_pool(tp, dp, capsys):
    flags = ["--tp", str(tp), "--dp", str(dp)]
    mem = _json(["memory", MODEL, "--format", "json", *flags, "--ep", str(tp * dp), "--max-num-seqs", str(S),
                 "--max-model-len", str(MML)], capsys)["runtime"]
    sw = _json(["sweep", MODEL, "--format", "json", *flags, "--ep", "on", "--tokens", "1", "--context", str(MML - 1),
                "--batch", str(S), "--mtp", "0", "--max-model-len", str(MML)], capsys)
    (row,) = sw["best_ttft"][:1]
    assert row["weights_gib"] == round(mem["weights_bytes"] / 2 ** 30, 4)
    # the pool's whole blocks less S requests of MML tokens, each by the pool's own demand (six groups)
    assert row["kv_free_gib"] == round((mem["kv_pool_bytes"] - S * mem["kv_bytes_per_request"]) / 2 ** 30, 4)


@pytest.mark.parametrize("mode", ["--no-disagg", "--disagg"])
def test_plans_own_launch_reads_back_as_its_figures(mode, capsys, monkeypatch):
    """plan's best deployment, its (decode or aggregated) launch read back by memory in vLLM's words:
    the weights, the KV pool and the KV tokens plan reported."""
    doc = _json(["plan", MODEL, "--dies", "16", "--isl", "4096", "--osl", "1024", "--ttft-ms", "10000",
                 "--tpot-ms", "100", mode, "--format", "json"], capsys)
    best, launch = doc["best"][0], doc["launch"][-1]          # aggregated, or P/D's decode instance
    assert best["mode"] == ("agg" if mode == "--no-disagg" else "disagg")
    assert best["mtp"] > 0                                    # the drafter's K is part of the weights
    for key, value in launch["env"].items():
        monkeypatch.setenv(key, str(value))
    flat = [tok for a in launch["args"][1:] for tok in shlex.split(a)]
    mem = _json(["memory", MODEL, *flat, "--format", "json"], capsys)["runtime"]
    assert mem["weights_bytes"] / 2 ** 30 == pytest.approx(best["weights_gib"], rel=1e-12)
    assert mem["kv_pool_bytes"] / 2 ** 30 == pytest.approx(best["kv_gib"], rel=1e-12)
    assert mem["kv_tokens"] == best["kv_tokens"]



def test_memory_levers_are_the_models_own():
    """plan's "would help" names only levers this model and engine have: DeepSeek-V4's pool refuses
    c8 KV (bf16 with int8 indexer keys), GLM-5.1 takes it; neither offers w4a8 when it is the recipe."""
    from auditor.parallel import ParallelPlan
    from auditor.planner.report import memory_levers
    from auditor.source import open_model
    v4, glm = open_model(MODEL, None, tables=False).spec, open_model("glm-5.1", None, tables=False).spec
    plan = ParallelPlan(tp=8)
    assert memory_levers(DeploymentContext(v4, plan, "vllm-ascend@main", "w8a8"), "bf16") == ["w4a8"]
    assert memory_levers(DeploymentContext(glm, plan, "vllm-ascend@main", "w8a8"), "bf16") == ["w4a8", "c8 KV"]
    assert memory_levers(DeploymentContext(glm, plan, "vllm-ascend@main", "w4a8"), "c8") == []


def test_plan_proposes_pro_at_one_million_tokens(capsys, monkeypatch):
    """Pro at a 1M-token prompt (issue 27: plan proposes Flash and Pro up to 1M): the DCP variants the
    planner searches from 32K are skipped (the pool has no DCP on vLLM-Ascend, model-deepseek-v4.md
    §4.6), a deployment is proposed, and its launch read back by memory holds plan's figures."""
    doc = _json(["plan", "deepseek-v4-pro", "--dies", "32", "--isl", "1000000", "--osl", "1024", "--ttft-ms",
                 "600000", "--tpot-ms", "200", "--format", "json"], capsys)
    best, launch = doc["best"][0], doc["launch"][-1]
    assert "DCP" not in best["plan"]
    for key, value in launch["env"].items():
        monkeypatch.setenv(key, str(value))
    flat = [tok for a in launch["args"][1:] for tok in shlex.split(a)]
    mem = _json(["memory", "deepseek-v4-pro", *flat, "--format", "json"], capsys)["runtime"]
    assert mem["max_model_len"] >= 1_000_000
    assert mem["weights_bytes"] / 2 ** 30 == pytest.approx(best["weights_gib"], rel=1e-12)
    assert mem["kv_tokens"] == best["kv_tokens"]


def test_a_pinned_dcp_is_the_engines_error(capsys):
    code = main(["plan", MODEL, "--dies", "16", "--isl", "65536", "--osl", "128", "--ttft-ms", "60000",
                 "--tpot-ms", "200", "--dcp", "4", "--tp", "4"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1 and "decode context parallel" in err[0]
