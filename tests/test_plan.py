"""`audit plan`: output structure, every listed configuration fits and meets the SLA."""
from __future__ import annotations

import json

import pytest

from auditor.cli import main
from auditor.devices.profiles import load_device
from auditor.model.presets import preset_spec
from auditor.parallel import ParallelPlan
from auditor.planner.search import expected_tokens
from auditor.runtime.feasibility import workload_fit

ARGS = ["plan", "glm-5.1", "--dies", "64", "--isl", "4096", "--osl", "1024", "--ttft-ms", "2000", "--tpot-ms", "60",
        "--tp", "8,16", "--batch", "1,4,16", "--mtp", "0,2"]


def test_expected_tokens_per_step():
    # K=2, a=0.5: 1 + 0.5 + 0.25 = 1.75; K=0: 1
    assert expected_tokens(2, 0.5) == pytest.approx(1.75) and expected_tokens(0, 0.5) == pytest.approx(1.0)


def test_plan_json_structure_and_feasibility(tmp_path):
    out, png = tmp_path / "p.json", tmp_path / "p.png"
    assert main(ARGS + ["--format", "json", "-o", str(out), "--png", str(png)]) == 0
    rep = json.loads(out.read_text())
    assert png.stat().st_size > 0
    best = rep["best"]
    assert best and rep["evaluated"] > 0 and rep["launch"]
    assert {c["mode"] for c in best} <= {"agg", "disagg"}
    assert [c["tok_s_die"] for c in best] == sorted((c["tok_s_die"] for c in best), reverse=True)
    spec, dev = preset_spec("glm-5.1"), load_device("a3-752t")
    for c in best:
        assert c["ttft_ms"] <= 2000 and c["tpot_ms"] <= 60 and c["meets_sla"]
        assert c["dies_used"] <= c["dies"] == 64
        # independent check through the one-workload API: B full-length requests fit the D/agg rank
        plan = ParallelPlan(tp=c["tp"], dp=c["dp"], ep=c["ep"], sp=c["sp"], role=c["role"])
        fit = workload_fit(spec, plan, "vllm-ascend@main", "w8a8", dev, batch=c["batch"], request_tokens=4096 + 1024,
                           step_tokens=c["batch"] * (1 + c["mtp"]), mtp=c["mtp"])
        assert fit.fits, (c["plan"], fit.verdict())
    cmd = " ".join(rep["launch"][0]["args"])
    assert "--tensor-parallel-size" in cmd and "--gpu-memory-utilization 0.9" in cmd and "--max-num-seqs" in cmd


def test_plan_table_and_bad_input(capsys):
    assert main(ARGS) == 0
    out = capsys.readouterr().out
    assert "tok_s_die" in out and "vllm serve" in out and "configurations evaluated" in out
    assert main(["plan", "glm-5.1", "--dies", "32", "--ttft-ms", "2000", "--tpot-ms", "50"]) == 2
    assert "--isl" in capsys.readouterr().err
