"""Words and granularities that belong to one engine stay that engine's: the generic walk and the serving
model ask the engine instead of assuming vLLM-Ascend's."""
from __future__ import annotations

import json

import pytest

from auditor.cli import main
from auditor.engines.registry import as_engine
from auditor.serving.sim import BenchWorkload


@pytest.mark.parametrize("engine,device,said", [("vllm-ascend@main", "a3-752t", True), ("vllm@0.28", "h200", False)])
def test_fp8_note_is_the_engines(shared_dir, engine, device, said, capsys):
    model = str(shared_dir / "data" / "configs" / "glm-5.1-fp8")
    assert main(["memory", model, "--engine", engine, "--device", device, "--tp", "8", "--ep", "8",
                 "--max-model-len", "8192", "--format", "json"]) in (0, 3)
    msgs = [f["message"] for f in json.loads(capsys.readouterr().out)["findings"]]
    assert any("vLLM-Ascend has no FP8 linear method" in m for m in msgs) is said


def test_prefix_hits_are_whole_blocks_of_the_engines_block():
    wl = BenchWorkload(concurrency=1, isl=1000, osl=1, num_prompts=1, prefix_ratio=0.5)
    # 500 shared tokens: 3 blocks of 128 on vLLM-Ascend, 7 of 64 on upstream vLLM (sparse MLA)
    assert wl.hit_tokens_at(as_engine("vllm-ascend@main").prefix_block_tokens) == 384
    assert wl.hit_tokens_at(as_engine("vllm@0.28").prefix_block_tokens) == 448


@pytest.mark.parametrize("engine,device,bs,warned", [("vllm-ascend@main", "a3-752t", 64, True),
                                                      ("vllm-ascend@main", "a3-752t", 128, False),
                                                      ("vllm@0.28", "h200", 128, True), ("vllm@0.28", "h200", 64, False)])
def test_a_block_size_the_engine_replaces_is_said(shared_dir, engine, device, bs, warned, capsys):
    """--block-size is a deployment option; where the attention backend runs its own block (vLLM-Ascend's
    SFA: 128; upstream sparse MLA: 64) another value is a warning, not a silent change."""
    model = str(shared_dir / "data" / "configs" / ("glm-5.1" if engine.startswith("vllm-ascend") else "glm-5.1-fp8"))
    assert main(["memory", model, "--engine", engine, "--device", device, "--tp", "8", "--ep", "8",
                 "--max-model-len", "8192", "--block-size", str(bs), "--format", "json"]) in (0, 3)
    rep = json.loads(capsys.readouterr().out)
    assert any("--block-size" in f["message"] for f in rep["findings"]) is warned
