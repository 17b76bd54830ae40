"""DeepSeek-V4's op program: every op's FLOPs equal model-deepseek-v4.md §5.4's per-token formulas,
written out here by hand (Flash: H 4096, NH 64, D 512, Qr 1024, G 8, R 1024, IH 64, ID 128, k_top 512,
W 128, E 256, K 6, I 2048), for a window-only, a compress-4 and a compress-128 layer."""
from __future__ import annotations

import json

import pytest

from auditor.cli import main

H, NH, D, Qr, G, R, IH, ID, TOPK, W, E, K, I = 4096, 64, 512, 1024, 8, 1024, 64, 128, 512, 128, 256, 6, 2048
M = 1e6


def _ops(capsys, *flags):
    assert main(["perf", "deepseek-v4-flash", "--ep", "on", "--device", "a3-752t", "--format", "json", *flags]) == 0
    doc = json.loads(capsys.readouterr().out)
    by_layer: dict[int, dict[str, float]] = {}
    for op in doc["ops"]:
        if op["layer"] is not None:
            by_layer.setdefault(op["layer"], {})[op["name"]] = op["mma_flops"]
    return doc, by_layer


def _decode(capsys, tp, context):
    return _ops(capsys, "--tp", str(tp), "--dp", str(16 // tp), "--mtp", "0", "--phase", "decode", "--tokens", "1",
                "--context", str(context), "--batch", "1")


@pytest.mark.parametrize("tp", [4, 1])
def test_decode_flops_per_layer_kind(tp, capsys):
    L = 131072                        # the key position of the one decoding token
    _, ops = _decode(capsys, tp, L - 1)
    c4, c128, window = ops[2], ops[3], ops[0]
    for layer in (c4, c128, window):
        assert layer["self_attn.wq_a"] == 2 * H * Qr
        assert layer["self_attn.wq_b"] == 2 * Qr * NH * D / tp
        assert layer["self_attn.wkv"] == 2 * H * D                     # replicated: every rank
        assert layer["self_attn.wo_a"] == 2 * NH * D * R / tp
        assert layer["self_attn.wo_b"] == 2 * G * R * H / tp
        assert layer["hc_attn.mix"] + layer["hc_ffn.mix"] == 2 * 2 * (4 * H) * 24
        assert layer["mlp.gate"] == 2 * H * E                          # the fp32 router
        # sparse attention: 4 D n(L) NH / TP over the window (and the compressed rows)
        assert layer["self_attn.window_attention"] == 4 * D * W * NH / tp
    assert c4["self_attn.compressor.wkv_wgate"] == 8 * H * D           # coff 2: wkv + wgate [2D, H]
    assert c128["self_attn.compressor.wkv_wgate"] == 4 * H * D
    assert "self_attn.compressor.wkv_wgate" not in window
    assert c4["self_attn.compressed_attention"] == 4 * D * TOPK * NH / tp          # L/4 > k_top: capped
    assert c128["self_attn.compressed_attention"] == pytest.approx(4 * D * (L / 128) * NH / tp)
    # the lightning indexer (compress-4 only) scans every compressed key: 2 IH ID L/4
    assert c4["self_attn.indexer.score"] == pytest.approx(2 * IH * ID * L / 4)
    assert c4["self_attn.indexer.wq_b"] == 2 * Qr * IH * ID
    assert c4["self_attn.indexer.weights_proj"] + c4["self_attn.indexer.compressor.wkv_wgate"] \
        + c4["self_attn.indexer.q_hadamard"] == 2 * H * IH + 8 * H * ID + 2 * IH * ID * ID
    assert "self_attn.indexer.score" not in c128
    # experts: K x 6 H I per token; the shared expert 6 H I over TP
    assert c4["mlp.experts"] == K * 6 * H * I
    assert c4["mlp.shared_experts.gate_up_proj"] + c4["mlp.shared_experts.down_proj"] == 6 * H * I / tp


def test_attention_grows_as_the_formulas_say(capsys):
    """n_c4 saturates at W + k_top once L/4 >= k_top; n_c128 keeps growing by L/128."""
    _, short = _decode(capsys, 4, 1024 - 1)         # L = 1024: L/4 = 256 < k_top
    _, long = _decode(capsys, 4, 1048576 - 1)
    assert short[2]["self_attn.compressed_attention"] == pytest.approx(4 * D * 256 * NH / 4)
    assert long[2]["self_attn.compressed_attention"] == 4 * D * TOPK * NH / 4
    assert long[3]["self_attn.compressed_attention"] == pytest.approx(4 * D * (1048576 / 128) * NH / 4)
    assert long[2]["self_attn.indexer.score"] == pytest.approx(2 * IH * ID * 1048576 / 4)   # 4.29 G at 1M


def test_dsa_cp_splits_the_query_side_only(capsys):
    """DSA-CP (§5.3): q projections, indexer scores and attention on 1/TP of a prefill's tokens with every
    head (the same total); wkv and the compressors on all tokens; the TP weight switch gathers wo."""
    T, tp = 4096, 4
    doc, cp = _ops(capsys, "--tp", str(tp), "--dp", "4", "--dsa-cp", "--mtp", "0", "--phase", "prefill",
                   "--tokens", str(T), "--batch", "1")
    c4 = cp[2]
    assert c4["self_attn.wq_b"] == 2 * Qr * NH * D * (T / tp)
    assert c4["self_attn.wkv"] == 2 * H * D * T
    assert c4["self_attn.compressor.wkv_wgate"] == 8 * H * D * T
    assert c4["self_attn.wo_b"] == 2 * G * R * H * (T / tp)
    names = {c["name"] if "name" in c else c.get("tensor") for c in doc["collectives"]}
    assert any("wo.weight" in str(n) for n in names)
