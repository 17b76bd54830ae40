"""audit bench and audit plan on upstream vLLM (CUDA), against the public observations (issue 28's Done-when).

Every measured figure is read from ``../shared/data/published/gpu/vllm-cuda-observations.json``; the tests
skip when it is absent. The h200 / b200 host model and kernel constants were fitted on GPU-02's *rerun* table
only (``benchmarks/fit_vllm_cuda.py``; the profiles' calibration blocks): GPU-19 and GPU-02's main table below
are predictions, not fits.
"""
from __future__ import annotations

import json
import shlex

import pytest

from auditor.cli import main
from auditor.perf.mtp import expected_tokens

WITHIN = 1.3


def _obs(shared_dir, oid):
    path = shared_dir / "data" / "published" / "gpu" / "vllm-cuda-observations.json"
    return next(o for o in json.loads(path.read_text()) if o["id"] == oid)


def _bench(capsys, args):
    assert main(["bench", *args, "--format", "json", "-q"]) == 0
    return json.loads(capsys.readouterr().out)


def _per_draft(length: float, k: int) -> float:
    """The per-draft acceptance a whose 1 + a + ... + a^K is the observed mean acceptance length."""
    lo, hi = 0.0, 1.0
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if expected_tokens(k, mid) < length else (lo, mid)
    return (lo + hi) / 2


def test_gpu19_output_throughput_within_1_3x(shared_dir, capsys):
    """GLM-5.1-FP8 on 8 x H200, TP8, MTP 3, vLLM 0.19, vllm bench serve random 8000 / 1024, request rate 10, 32
    prompts (vllm-project/recipes GLM/GLM5.md @8959cf6); acceptance as the run measured it (1.64 tokens/step)."""
    g = _obs(shared_dir, "GPU-19")
    cfg, fig = g["config"], g["figures"]
    a = _per_draft(fig["acceptance_length"], 3)
    doc = _bench(capsys, ["glm-5.1", "--recipe", "fp8-block", "--engine", "vllm@0.19", "--device", "h200", "--tp", "8",
                          "--mtp", "3", "--mtp-acceptance", f"{a:.6f}", "--concurrency", str(cfg["num_prompts"]),
                          "--num-prompts", str(cfg["num_prompts"]), "--request-rate", str(cfg["request_rate"]),
                          "--isl", str(cfg["random_input"]), "--osl", str(cfg["random_output"])])
    ratio = doc["output_throughput"] / fig["output_tok_s"]
    assert 1 / WITHIN <= ratio <= WITHIN, f"predicted {doc['output_throughput']:.1f} tok/s, measured {fig['output_tok_s']}"


def _gpu02_rows():
    """GPU-02's main table as pytest params; read at collection only for the concurrencies (the figures are read
    in the test, through shared_dir)."""
    return [1, 4, 8, 16, 32, 64, 128, 256]


#: rows of GPU-02's main table the model does not bring within 1.3x; conc -> why
GPU02_MISSES: dict[int, str] = {
    32: ("predicted 1,113 output tok/s against 1,465 (0.76x, just outside 1/1.3): its mean TPOT is 1.31x measured "
         "and its input tok/s 0.76x, i.e. the 8k-token prefill chunks that stall the 32 decoding requests cost the "
         "model more than the B200 takes; the constants fitted on the rerun table (async, 16k chunks, where conc 32 "
         "is also the worst row, 0.87x) do not move it without a prefill-kernel observation to fit"),
}


@pytest.mark.parametrize("conc", [pytest.param(c, marks=pytest.mark.xfail(strict=True, reason=GPU02_MISSES[c]))
                                  if c in GPU02_MISSES else c for c in _gpu02_rows()])
def test_gpu02_rows_output_throughput(conc, shared_dir, capsys):
    """GLM-5.2-FP8 on 8 x B200, TP8, fp8 KV (plain e4m3 on SM100), vLLM 0.28, gmu 0.92, max_num_batched_tokens
    8192, ISL 8211 / OSL 1024 (crinex/b200_glm_poc; a custom client, so --num-prompts is 4 x concurrency here)."""
    g = _obs(shared_dir, "GPU-02")
    rows = {r[0]: r for r in g["figures"]["rows_conc_TPOTms_interactivity_inTPS_outTPS"]}
    assert set(rows) == set(_gpu02_rows())
    _, tpot, _, in_tps, out_tps = rows[conc]
    cfg = g["config"]
    doc = _bench(capsys, ["glm-5.2", "--recipe", "fp8-block", "--engine", "vllm@0.28", "--device", "b200", "--tp", "8",
                          "--kv-cache-dtype", cfg["kv_cache_dtype"], "--max-model-len", "32768",
                          "--gpu-memory-utilization", str(cfg["gpu_memory_utilization"]),
                          "--max-num-batched-tokens", str(cfg["max_num_batched_tokens"]), "--concurrency", str(conc),
                          "--num-prompts", str(max(4 * conc, 16)), "--isl", "8211", "--osl", "1024"])
    ratio = doc["output_throughput"] / out_tps
    assert 1 / WITHIN <= ratio <= WITHIN, f"conc {conc}: predicted {doc['output_throughput']:.0f}, measured {out_tps}"


def test_gpu02_kv_pool_is_gpu01s_token_count(shared_dir, capsys):
    """The pool bench admits against is memory's: GPU-01's 1,546,112 fp8 tokens at the same launch (within 2 %)."""
    g = _obs(shared_dir, "GPU-01")
    doc = _bench(capsys, ["glm-5.2", "--recipe", "fp8-block", "--engine", "vllm@0.28", "--device", "b200", "--tp", "8",
                          "--kv-cache-dtype", "fp8", "--max-model-len", "32768", "--concurrency", "4",
                          "--num-prompts", "4", "--isl", "1024", "--osl", "16"])
    tokens = doc["instances"][0]["kv_blocks_per_rank"] * 64
    assert tokens == pytest.approx(g["figures"]["gpu_kv_cache_tokens_kv_fp8"], rel=0.02)


PLAN = ["plan", "glm-5.1", "--recipe", "fp8-block", "--engine", "vllm", "--device", "h200", "--dies", "8",
        "--isl", "8000", "--osl", "1024", "--ttft-ms", "20000", "--tpot-ms", "60", "--tp", "8", "--mtp", "0,3",
        "--no-disagg", "--simulate", "1"]


def test_plan_prints_a_vllm_serve_line_bench_reads_back(tmp_path, capsys):
    """The launch plan prints is one pasteable ``vllm serve`` command with vLLM's flags (no Ascend environment,
    no --additional-config, no --quantization for an FP8 checkpoint); ``audit bench --launch`` reads it back as
    the same deployment."""
    assert main([*PLAN, "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    (inst,) = doc["launch"]
    cmd = inst["command"]
    assert inst["env"] == {} and cmd.startswith("vllm serve ")
    words = shlex.split(cmd.replace("\\\n", " "))
    assert words[:2] == ["vllm", "serve"] and "--tensor-parallel-size" in words
    for ascend in ("HCCL", "VLLM_ASCEND", "--additional-config", "--quantization", "deepseek_mtp"):
        assert ascend not in cmd
    if "--speculative-config" in words:
        spec = json.loads(words[words.index("--speculative-config") + 1])
        assert spec["method"] == "mtp"
    # the text report prints the same command, first line 'vllm serve', after the instance's '#' line
    assert main(PLAN) == 0
    text = capsys.readouterr().out
    block = text.split("launch (", 1)[1].splitlines()
    assert block[1].startswith("# ") and block[2].startswith("vllm serve ")
    script = tmp_path / "serve.sh"
    script.write_text(cmd.replace("'<path-to-GLM-5.1-fp8-block>'", "/models/GLM-5.1-FP8") + "\n")
    flags = ["glm-5.1", "--recipe", "fp8-block", "--engine", "vllm", "--device", "h200", "--launch", str(script),
             "--concurrency", "4", "--isl", "2048", "--osl", "64"]
    got = _bench(capsys, flags)
    best = doc["best"][0]
    assert got["instances"][0]["weights_bytes"] == pytest.approx(best["weights_gib"] * 2 ** 30, rel=1e-6)
    assert main(["bench", *flags, "-q"]) == 0
    head = capsys.readouterr().out.splitlines()[0]
    assert (f"TP{best['tp']} DP{best['dp']} EP{best['ep']} MTP{best['mtp']} seqs {best['batch']}" in head), head


@pytest.mark.parametrize("model,device", [("glm-5.2", "b200"), ("deepseek-v3.2", "h200")])
def test_plan_and_bench_run_on_the_other_presets(model, device, capsys):
    """plan searches GPU counts and TP/DP/EP on the CUDA engine and launches with vLLM's flags; bench runs its
    fp8 KV cache (fp8_ds_mla on Hopper, plain e4m3 on Blackwell)."""
    # fp8 KV: DeepSeek-V3.2's attention on v0.28 asserts a quantized cache (tests/test_vllm_cuda_v32_kv.py)
    assert main(["plan", model, "--recipe", "fp8-block", "--engine", "vllm", "--device", device, "--dies", "8",
                 "--isl", "4096", "--osl", "512", "--ttft-ms", "20000", "--tpot-ms", "80", "--no-disagg",
                 "--simulate", "1", "--kv-cache-dtype", "fp8", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["launch"] and all(i["command"].startswith("vllm serve ") and not i["env"] for i in doc["launch"])
    best = doc["best"][0]
    if best["dp"] > 1:
        assert f"--data-parallel-size {best['dp']}" in doc["launch"][0]["command"]
    got = _bench(capsys, [model, "--recipe", "fp8-block", "--engine", "vllm", "--device", device, "--tp", "8",
                          "--max-model-len", "32768", "--kv-cache-dtype", "fp8", "--concurrency", "16", "--isl", "4096",
                          "--osl", "256"])
    assert got["output_throughput"] > 0 and got["completed"] == 4 * 16
