"""``--launch`` with an upstream-vLLM (CUDA) launch script or ``vllm serve`` line (no Ascend variables): with
``--engine vllm`` it reads into the CUDA engine's deployment, ``--kv-cache-dtype fp8`` included (it was
dropped as "NOT modelled" and the cache sized as bf16), and gives the report the same flags typed out give.

Hand figure: GLM-5.1-FP8 with MTP on Hopper, fp8 = fp8_ds_mla: (78 + 1) layers x (656 + 132) B = 62,252 B per
token per rank (engine-vllm-cuda.md §2.2: 61,464 B for the 78 target layers, plus the MTP layer's 788)."""
from __future__ import annotations

import json

import pytest

from auditor.cli import main

SERVE = ("vllm serve {model} \\\n    --tensor-parallel-size 8 \\\n    --max-num-seqs 64 \\\n    --max-model-len 16384 \\\n"
         "    --gpu-memory-utilization 0.9 \\\n    --kv-cache-dtype fp8 \\\n"
         "    --speculative-config '{{\"method\": \"mtp\", \"num_speculative_tokens\": 3}}'\n")
SCRIPT = "#!/bin/bash\n# 8 x H200, as vllm-project/recipes GLM5.md serves it\nexport CUDA_VISIBLE_DEVICES=0,1,2,3,4,5,6,7\n"
FLAGS = ["--tp", "8", "--max-num-seqs", "64", "--max-model-len", "16384", "--gpu-memory-utilization", "0.9",
         "--kv-cache-dtype", "fp8", "--mtp", "3"]


@pytest.fixture
def model(shared_dir):
    return str(shared_dir / "data" / "configs" / "glm-5.1-fp8")


@pytest.fixture(params=["script", "command"])
def launch(request, tmp_path, model):
    text = SERVE.format(model=model)
    path = tmp_path / ("serve.sh" if request.param == "script" else "serve.txt")
    path.write_text(SCRIPT + text if request.param == "script" else text)
    return str(path)


def _memory(capsys, argv):
    assert main(["memory", *argv, "--format", "json"]) == 0
    cap = capsys.readouterr()
    return json.loads(cap.out), cap.err


def test_memory_reads_a_cuda_launch_into_the_cuda_engine(capsys, launch, model):
    rep, err = _memory(capsys, ["--launch", launch, "--engine", "vllm", "--device", "h200"])
    assert "NOT modelled" not in err and "kv-cache-dtype" not in err
    r = rep["runtime"]
    assert rep["engine"]["name"] == "vllm@0.28" and rep["plan"]["tp"] == 8 and rep["plan"]["mtp_drafter"]
    assert (r["max_model_len"], r["max_num_seqs"], r["mtp"], r["gpu_memory_utilization"]) == (16384, 64, 3, 0.9)
    assert r["kv_spec"]["variant"] == "fp8_ds_mla" and r["kv_bytes_per_token"] == 79 * (656 + 132)
    typed, _ = _memory(capsys, [model, "--engine", "vllm", "--device", "h200", *FLAGS])
    assert r["kv_tokens"] == typed["runtime"]["kv_tokens"] and rep["answer"] == typed["answer"]


def test_bench_reads_a_cuda_launch(capsys, launch):
    argv = ["bench", "--launch", launch, "--engine", "vllm", "--device", "h200", "--isl", "2048", "--osl", "128",
            "--concurrency", "4"]
    assert main(argv) == 0
    out = capsys.readouterr().out
    assert "vllm@0.28: 1 x aggregated TP8 DP1 MTP3 seqs 64" in out and "; 8 GPUs" in out
    assert main(argv + ["--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["instances"][0]["kv_tokens"] > 0


def test_the_ascend_reading_still_says_it_does_not_model_fp8(capsys, launch):
    """vLLM-Ascend selects its C8 caches through additional_config: a plain fp8 stays a named, unmodelled flag."""
    main(["memory", "--launch", launch, "--engine", "vllm-ascend@main", "--device", "a3-752t", "--format", "json"])
    err = capsys.readouterr().err              # (exit 3: the FP8 kv_b_proj refusal is that engine's)
    assert "NOT modelled" in err and "--kv-cache-dtype=fp8" in err


@pytest.mark.parametrize("engine, device, says", [(None, "h200", "give --engine vllm"),
                                                 ("vllm", "a3-752t", "give --engine vllm-ascend"),
                                                 ("vllm", "h200", None), ("vllm-ascend@main", "a3-752t", None)])
def test_an_engine_on_another_vendors_device_is_warned(capsys, launch, engine, device, says):
    """A CUDA script read without --engine is vLLM-Ascend's (the default): on an NVIDIA --device that is said,
    in one warning line, not silently modelled as an Ascend deployment; and the reverse."""
    main(["memory", "--launch", launch, "--device", device, "--format", "json"]
         + (["--engine", engine] if engine else []))
    warned = [l for l in capsys.readouterr().err.splitlines() if l.startswith("audit: warning: --device")]
    if says is None:
        assert warned == []
    else:
        assert len(warned) == 1 and says in warned[0]
