"""One deployment on upstream vLLM (CUDA), every command, one answer: memory, perf and bench report the same
weights, KV blocks per rank and KV tokens for the same flags (the expected figures are memory's: the test
is that no command reads a CUDA deployment, its GPU generation or its cache layout differently)."""
from __future__ import annotations

import pytest

from test_cross_command import _json

S, MML = 8, 16384
DEPLOYMENTS = {
    "h200-tp8": ["--device", "h200", "--tp", "8"],
    "h200-tp8-fp8-kv": ["--device", "h200", "--tp", "8", "--kv-cache-dtype", "fp8"],       # fp8_ds_mla on Hopper
    "b200-tp8-fp8-kv": ["--device", "b200", "--tp", "8", "--kv-cache-dtype", "fp8"],       # plain fp8 on Blackwell
    "b200-dp8-ep": ["--device", "b200", "--tp", "1", "--dp", "8", "--ep", "8"],
    "h200-mtp": ["--device", "h200", "--tp", "8", "--mtp", "1"],
}
BASE = ["glm-5.1", "--recipe", "fp8-block", "--engine", "vllm@0.28"]
RUNTIME = ["--max-num-seqs", str(S), "--max-model-len", str(MML)]




@pytest.mark.parametrize("name", list(DEPLOYMENTS))
def test_memory_perf_and_bench_agree_on_cuda(name, capsys):
    flags = DEPLOYMENTS[name]
    k = int(flags[flags.index("--mtp") + 1]) if "--mtp" in flags else 0
    mem_flags = flags + (["--mtp-drafter"] if k else [])
    mem = _json(["memory", *BASE, "--format", "json", *mem_flags, *RUNTIME], capsys)["runtime"]
    perf = _json(["perf", *BASE, "--format", "json", *flags, "--phase", "decode", "--tokens", "1",
                  "--batch", str(S), "--context", str(MML - 1 - k)], capsys)["hbm"]["runtime"]
    bench = _json(["bench", *BASE, "--format", "json", *flags, *RUNTIME, "--concurrency", "1", "--isl", "64",
                   "--osl", "4", "--num-prompts", "1"], capsys)
    inst = bench["instances"][0]
    assert mem["weights_bytes"] == perf["weights_bytes"] == inst["weights_bytes"]
    assert mem["num_blocks"] == perf["num_blocks"] == inst["kv_blocks_per_rank"]
    assert mem["kv_tokens"] == perf["kv_tokens"] == inst["kv_tokens"]


def test_the_cache_layout_moves_the_figures(capsys):
    """Hopper's fp8_ds_mla (656 B) and Blackwell's plain fp8 (576 B) against bf16 (1152 B): the flags do
    change the pool, so the agreement above proves something."""
    got = {n: _json(["memory", *BASE, "--format", "json", *DEPLOYMENTS[n], *RUNTIME], capsys)["runtime"]
           for n in ("h200-tp8", "h200-tp8-fp8-kv", "b200-tp8-fp8-kv")}
    assert got["h200-tp8"]["kv_tokens"] < got["h200-tp8-fp8-kv"]["kv_tokens"]
    per_tok = {n: r["kv_bytes_per_token"] for n, r in got.items()}
    # one MLA latent + indexer key per layer: 1152 + 132 > 656 + 132 > 576 + 132 (engine-vllm-cuda.md §2)
    assert per_tok["h200-tp8"] > per_tok["h200-tp8-fp8-kv"] > per_tok["b200-tp8-fp8-kv"]
