"""Upstream vLLM's DeepSeek-V3.2 attention asserts a quantized KV cache (engine-vllm-cuda.md §2.1 and Part B §4.1:
``vllm/models/deepseek_v32`` NVIDIA attention, ``require_fp8_kv_cache = True``; index id 62662889848, listing
commit 1ba45afe): with a bf16 cache the engine stops building the model. memory says so as its answer (exit
3), perf / bench / plan / sweep refuse in one line (exit 2). GLM-5.x stays on deepseek_v2.py, which has no such
assert (GPU-01 runs GLM-5.2-FP8 with bf16 KV by default), and the older rows route DeepSeek-V3.2 through
deepseek_v2.py too (bfloat16 mapped to auto)."""
from __future__ import annotations

import json

import pytest

from auditor.cli import main

V32 = ["deepseek-v3.2", "--recipe", "fp8-block", "--device", "h200", "--tp", "8"]
ENGINE_SAYS = "deepseek_v32 (nvidia) requires an fp8 KV cache"


def test_memory_answers_with_the_engines_assertion(capsys):
    assert main(["memory", *V32, "--engine", "vllm@0.28", "--format", "json"]) == 3
    cap = capsys.readouterr()
    rep = json.loads(cap.out)
    assert rep["answer"].startswith("ENGINE CANNOT START: AssertionError: " + ENGINE_SAYS)
    assert ENGINE_SAYS in rep["runtime"]["startup_error"] and not rep["runtime"]["fits"]
    assert ENGINE_SAYS in cap.err


@pytest.mark.parametrize("kv", ["fp8", "fp8_ds_mla"])
def test_memory_takes_the_fp8_caches(capsys, kv):
    assert main(["memory", *V32, "--engine", "vllm@0.28", "--kv-cache-dtype", kv, "--format", "json"]) == 0
    rep = json.loads(capsys.readouterr().out)
    assert rep["runtime"]["startup_error"] is None and "CANNOT START" not in rep["answer"]
    # fp8_ds_mla on Hopper: 61 x (656 + 132) = 48,068 B per token (spec §2.2's table)
    assert rep["runtime"]["kv_bytes_per_token"] == 48_068


def test_the_older_path_takes_bf16(capsys):
    assert main(["memory", *V32, "--engine", "vllm@0.25", "--format", "json"]) == 0
    assert "CANNOT START" not in json.loads(capsys.readouterr().out)["answer"]


def test_glm_takes_bf16_on_the_same_release(shared_dir, capsys):
    model = str(shared_dir / "data" / "configs" / "glm-5.2-fp8")
    main(["memory", model, "--engine", "vllm@0.28", "--device", "b200", "--tp", "8", "--max-model-len", "32768",
          "--format", "json"])
    rep = json.loads(capsys.readouterr().out)
    assert rep["runtime"]["startup_error"] is None and rep["runtime"]["fits"]


@pytest.mark.parametrize("cmd", [
    ["perf"], ["sweep"], ["bench", "--isl", "1024", "--osl", "64", "--concurrency", "2"],
    ["plan", "--isl", "1024", "--osl", "64", "--ttft-ms", "5000", "--tpot-ms", "100", "--dies", "8"]])
def test_perf_bench_plan_refuse_in_one_line(capsys, cmd):
    assert main([cmd[0], *V32, "--engine", "vllm@0.28", *cmd[1:]]) == 2
    err = [line for line in capsys.readouterr().err.splitlines() if not line.startswith("audit: note:")]
    assert len(err) == 1 and ENGINE_SAYS in err[0] and "--kv-cache-dtype" in err[0]
