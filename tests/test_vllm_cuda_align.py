"""align on upstream vLLM (CUDA): a log in the engine's own words is read and explained by the CUDA
engine's ledger and budget. The log is what `audit memory` prints for one deployment (its
``vllm_log_lines``), once in audit's form and once in the engine's (``Model loading took X GiB memory and
T seconds``, gpu_model_runner.py): align's prediction must be memory's, figure for figure, with the
engine's own default gpu-memory-utilization (0.92 from v0.22; engine-vllm-cuda.md §1)."""
from __future__ import annotations

import json

import pytest

from auditor.cli import main

DEPLOY = ["glm-5.1", "--recipe", "fp8-block", "--engine", "vllm@0.28", "--device", "b200", "--tp", "8",
          "--max-model-len", "32768"]


def _memory(capsys) -> dict:
    assert main(["memory", *DEPLOY, "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize("with_seconds", [False, True])
def test_align_explains_the_engines_lines(with_seconds, tmp_path, capsys):
    mem = _memory(capsys)
    lines = list(mem["vllm_log_lines"])
    assert lines[0].startswith("Model loading took ")
    if with_seconds:                          # the engine's own form carries the load time
        lines[0] = lines[0] + " and 20.219445 seconds"
    log = tmp_path / "serve.log"
    log.write_text("".join(f"(EngineCore_DP0 pid=1) INFO 09-01 10:00:0{i} [gpu_worker.py:1] {ln}\n"
                           for i, ln in enumerate(lines)))
    code = main(["align", *DEPLOY, "--log", str(log), "--output-dir", str(tmp_path / "t"), "--no-png"])
    capsys.readouterr()
    assert code == 0
    t = json.loads((tmp_path / "t" / "ticket.json").read_text())
    assert t["verdict"]["explained"]
    pred, rt = t["kv"]["predicted"], mem["runtime"]
    assert (pred["weights_bytes"], pred["num_blocks"], pred["kv_tokens"]) == \
        (rt["weights_bytes"], rt["num_blocks"], rt["kv_tokens"])
    assert pred["settings"]["util"] == 0.92
