"""MLAPO on a decode node releases the original q-side weights (``sfa_v1.py:822-836``@182b75ea).

Hand figures (GLM-5.1 W8A8, TP4): per layer fused_qkv_a_proj int8 [6144, 2048 + 512 + 64] = 16,121,856 B and
q_b_proj int8 [2048, 64 heads x 256 / 4] = 8,388,608 B, with their F32 deq_scale and I32 quant_bias
(4 + 4 B per output: 2624 and 4096 outputs); 78 decoder layers (the MTP layer runs no MLAPO)."""
from __future__ import annotations

import json

from auditor.cli import main

PER_LAYER = 6144 * 2624 + 2048 * 4096 + 8 * (2624 + 4096)
RELEASED = 78 * PER_LAYER
DECODE = ["memory", "glm-5.1", "--recipe", "w8a8", "--tp", "4", "--dp", "8", "--ep", "on", "--role", "decode",
          "--mtp", "3", "--max-model-len", "8192", "--max-num-seqs", "8", "--format", "json"]


def _w(args, capsys) -> int:
    assert main(args) == 0
    return json.loads(capsys.readouterr().out)["worst_rank"]["bytes"]


def test_released_on_a_decode_node_up_to_mlapos_token_limit(capsys):
    """At max_num_batched_tokens 1024 (MLAPO_MAX_SUPPORTED_TOKENS) the originals go; at 1025 they stay. The
    only other difference is the one-token growth of the T-sized buffers (top-k indices, rope): < 64 KiB."""
    kept = _w(DECODE + ["--max-num-batched-tokens", "1025"], capsys)
    released = _w(DECODE + ["--max-num-batched-tokens", "1024"], capsys)
    assert 0 <= kept - released - RELEASED < 64 * 1024
    mixed = DECODE[:DECODE.index("--role")] + DECODE[DECODE.index("--role") + 2:]
    assert _w(mixed + ["--max-num-batched-tokens", "1024"], capsys) - released > RELEASED - 64 * 1024


def test_ucm_decode_node_kv_tokens(capsys):
    """The 4-node GLM-5.1 P/D report (published README section E; UCM GLM-5.1-A3_4Node_PD_Disaggregation.md
    @bf4c8c16): its decode node (vLLM-Ascend 0.18.0rc1, DP8 TP4 EP32, MTP 3, mnbt 32, mns 8, gmu 0.92,
    FUSED_MC2=1, HCCL_BUFFSIZE 256, mml 202752) logged 235,008 KV tokens: within 2 %."""
    args = ["memory", "glm-5.1", "--recipe", "w8a8", "--engine", "vllm-ascend@0.18.0", "--tp", "4", "--dp", "8",
            "--ep", "on", "--role", "decode", "--fused-mc2", "1", "--max-model-len", "202752",
            "--max-num-batched-tokens", "32", "--max-num-seqs", "8", "--gpu-memory-utilization", "0.92", "--mtp", "3",
            "--hccl-buffsize", "256", "--format", "json"]
    assert main(args) == 0
    rt = json.loads(capsys.readouterr().out)["runtime"]
    assert abs(rt["num_blocks"] * rt["block_size"] / 235_008 - 1) <= 0.02
