"""A CUDA run prints no vLLM-Ascend word: memory, perf, sweep, bench and plan on ``--engine vllm`` (text and the
string values of JSON) say GPU, NCCL and fp8 KV where the same commands on vLLM-Ascend say die, HCCL and
w4a8 / c8. The wording is the engine's (``Engine.device_noun``, ``outside_budget_words``, ``kv_link_words``,
``memory_savers``, ``plan_switches``); JSON keys (``dies``, ``tok_s_die``, ``nz_mode``) are the cross-engine
schema and are not checked."""
from __future__ import annotations

import json
import re

import pytest

from auditor.cli import main
from conftest import json_leaves

#: words only vLLM-Ascend / Ascend hardware have (case-sensitive, whole words)
ASCEND_ONLY = re.compile(r"\b(HCCL|HCCS|NPU|dies?|A3|A2|NZ|nz_mode|DSA-CP|MLAPO|FlashComm1?|CANN|msModelSlim|"
                         r"Ascend|vLLM-Ascend|w4a8|W4A8|c8|c8-indexer|MC2|ACL|SFA-C8|LI-C8)\b|tok_s_die")

CUDA = ["--recipe", "fp8-block", "--engine", "vllm", "--device", "h200", "--tp", "8"]
BENCH = ["--isl", "2048", "--osl", "128", "--concurrency", "4", "--mtp", "1"]
PLAN = ["--isl", "4096", "--osl", "512", "--ttft-ms", "5000", "--tpot-ms", "100", "--dies", "8,16",
        "--batch", "16,48,96", "--mtp", "0,1", "--simulate", "1"]
COMMANDS = {"memory": [], "perf": [], "sweep": [], "bench": BENCH, "plan": PLAN}


def _strings(o):
    return json_leaves(o, lambda x: isinstance(x, str))


def _run(capsys, argv):
    rc = main(argv)
    assert rc in (0, 3), capsys.readouterr()
    return capsys.readouterr().out


@pytest.mark.parametrize("cmd", list(COMMANDS))
@pytest.mark.parametrize("fmt", ["table", "json"])
def test_a_cuda_run_prints_no_ascend_word(shared_dir, capsys, cmd, fmt):
    model = str(shared_dir / "data" / "configs" / "glm-5.1")
    out = _run(capsys, [cmd, model, *CUDA, *COMMANDS[cmd], "--format", fmt])
    texts = [out] if fmt == "table" else list(_strings(json.loads(out)))
    hits = sorted({m.group(0) for t in texts for m in ASCEND_ONLY.finditer(t)})
    assert hits == [], f"{cmd} --format {fmt} on CUDA says {hits}"


def test_the_cuda_plan_says_gpus_and_nccl(shared_dir, capsys):
    model = str(shared_dir / "data" / "configs" / "glm-5.1")
    out = _run(capsys, ["plan", model, *CUDA, *PLAN])
    assert "tok_s_gpu" in out and "GPUs 8, 16" in out
    assert "NCCL" in out and "GB/s per GPU" in out
    # bf16 KV (1152 B latent) at batch 96 does not fit on 8 x H200: the CUDA remedy is an fp8 cache
    assert "binds: 8 GPUs: memory binds: a batch above 48" in out and "fp8 KV or more GPUs would help" in out


@pytest.mark.parametrize("cmd, words", [
    ("memory", ["DSA-CP=off", "nz_mode="]),
    ("bench", ["per die"]),
    ("plan", ["HCCL", "196 GB/s per die", "tok_s_die", "dies"]),
])
def test_the_ascend_run_keeps_its_words(shared_dir, capsys, cmd, words):
    model = str(shared_dir / "data" / "configs" / "glm-5.1")
    out = _run(capsys, [cmd, model, "--engine", "vllm-ascend@main", "--device", "a3-752t", "--tp", "8",
                        *COMMANDS[cmd]])
    for w in words:
        assert w in out, w
