"""Placement generator vs the real tiny checkpoints (exact) and hand-computed full-size facts."""
from __future__ import annotations

import json
import math
import struct
from pathlib import Path

import pytest

from auditor.errors import AuditInputError
from auditor.model.config import load_spec
from auditor.model.expected import (RECIPES, expected_description, expected_tensors, extra_files,
                                  layout_rows)
from auditor.model.presets import preset_spec

Row = tuple[str, str, tuple[int, ...]]


def read_header(path: Path) -> dict:
    """Minimal safetensors header reader, independent of the code under test."""
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return json.loads(f.read(n))


def header_rows(path: Path) -> set[Row]:
    return {(k, v["dtype"], tuple(v["shape"])) for k, v in read_header(path).items() if k != "__metadata__"}


def test_bf16_matches_transformers_checkpoint(ckpts):
    d = ckpts / "glm5-tiny-bf16"
    real: set[Row] = set()
    for p in sorted(d.glob("model-*.safetensors")):
        real |= header_rows(p)
    gen = expected_tensors(load_spec(d / "config.json"), "bf16")
    assert len(gen) == len(set(gen)) == 149
    assert set(gen) == real
    assert expected_description(load_spec(d / "config.json"), "bf16") is None


def test_w8a8_matches_msmodelslim_checkpoint(ckpts):
    d = ckpts / "glm5-tiny-w8a8"
    spec = load_spec(d / "config.json")
    real = header_rows(d / "quant_model_weights-00001-of-00001.safetensors")
    gen = expected_tensors(spec, "w8a8")
    assert len(gen) == len(set(gen)) == 446
    assert set(gen) == real


def test_w8a8_description_is_identical(ckpts):
    d = ckpts / "glm5-tiny-w8a8"
    real = json.loads((d / "quant_model_description.json").read_text())
    gen = expected_description(load_spec(d / "config.json"), "w8a8")
    assert gen == real
    assert list(gen) == list(real)          # msModelSlim's key order too


def test_w8a8_side_files_and_index(ckpts):
    d = ckpts / "glm5-tiny-w8a8"
    spec = load_spec(d / "config.json")
    extras = extra_files(spec, "w8a8")
    for rel, name, dtype, shape in extras:
        assert header_rows(d / rel) == {(name, dtype, shape)}
    index = json.loads((d / "quant_model_weights.safetensors.index.json").read_text())
    indexed = {n for n, _, _ in expected_tensors(spec, "w8a8")} | {"rot.weight"}
    assert set(index["weight_map"]) == indexed


def test_w4a8_matches_inventory_and_description(ckpts):
    d = ckpts / "glm5-tiny-w4a8-description"
    spec = load_spec(ckpts / "glm5-tiny-w8a8" / "config.json")   # same tiny model
    real: set[Row] = set()
    for line in (d / "inventory.tsv").read_text().splitlines()[1:]:
        name, dtype, shape, _ = line.split("\t")
        real.add((name, dtype, tuple(int(x) for x in shape.split("x"))))
    gen = set(expected_tensors(spec, "w4a8")) | {(n, dt, s) for _, n, dt, s in extra_files(spec, "w4a8")}
    assert gen == real
    desc = json.loads((d / "quant_model_description.json").read_text())
    assert expected_description(spec, "w4a8") == desc


def test_dense_32b_bf16_parameter_count():
    spec = preset_spec("dense-32b")
    rows = expected_tensors(spec, "bf16")
    H, L, V, I, hd, nh, nkv = 5120, 64, 151936, 25600, 128, 64, 8
    per_layer = 2 * H * nh * hd + 2 * H * nkv * hd + 3 * H * I + 2 * H
    expected = L * per_layer + 2 * V * H + H
    numel = sum(math.prod(s) for _, _, s in rows)
    assert numel == expected
    assert len(rows) == 64 * 9 + 3
    assert {dt for _, dt, _ in rows} == {"BF16"}
    assert ("model.layers.0.self_attn.k_proj.weight", "BF16", (1024, 5120)) in rows


def test_fp8_block_scale_inv_shapes_by_hand():
    spec = preset_spec("deepseek-v3.2")
    rows = {n: (dt, s) for n, dt, s in expected_tensors(spec, "fp8-block")}
    p = "model.layers.5.self_attn."
    # q_b_proj: N = 128 heads x 192 = 24576, K = 1536 -> [192, 12]
    assert rows[p + "q_b_proj.weight"] == ("F8_E4M3", (24576, 1536))
    assert rows[p + "q_b_proj.weight_scale_inv"] == ("F32", (192, 12))
    # kv_a_proj_with_mqa: N = 512 + 64 = 576 -> ceil(576/128) = 5, K = 7168 -> 56
    assert rows[p + "kv_a_proj_with_mqa.weight_scale_inv"] == ("F32", (5, 56))
    # kv_b_proj is FP8 in DeepSeek's release: N = 128 x (128 + 128) = 32768, K = 512
    assert rows[p + "kv_b_proj.weight_scale_inv"] == ("F32", (256, 4))
    # expert down_proj: N = 7168, K = 2048 -> [56, 16]
    assert rows["model.layers.5.mlp.experts.255.down_proj.weight_scale_inv"] == ("F32", (56, 16))
    assert rows[p + "indexer.weights_proj.weight"] == ("BF16", (64, 7168))
    assert p + "indexer.weights_proj.weight_scale_inv" not in rows
    assert rows["model.layers.5.mlp.gate.weight"] == ("BF16", (256, 7168))
    assert rows["model.layers.5.mlp.gate.e_score_correction_bias"] == ("F32", (256,))
    # MTP layer 61 is shipped and quantized like the others; eh_proj stays bf16
    assert rows["model.layers.61.mlp.experts.0.gate_proj.weight"] == ("F8_E4M3", (2048, 7168))
    assert rows["model.layers.61.eh_proj.weight"] == ("BF16", (7168, 14336))
    assert "model.layers.62.input_layernorm.weight" not in rows
    assert expected_description(spec, "fp8-block") is None


def test_mtp_switches():
    spec = preset_spec("glm-5.1")
    names = {n for n, _, _ in expected_tensors(spec, "w8a8", include_mtp=False)}
    assert not any(n.startswith("model.layers.78.") for n in names)
    assert "model.layers.77.mlp.experts.255.up_proj.weight" in names
    # transformers never writes MTP; the publisher's release does
    assert not any(".layers.78." in n for n, _, _ in expected_tensors(spec, "bf16"))
    release = {n for n, _, _ in expected_tensors(spec, "bf16", writer="hf-release")}
    assert "model.layers.78.eh_proj.weight" in release


def test_every_recipe_has_unique_names_and_known_schemes():
    spec = preset_spec("glm-5.1")
    for recipe in RECIPES:
        rows = layout_rows(spec, recipe)
        names = [r[0] for r in rows]
        assert len(names) == len(set(names)), recipe
        assert {r[3] for r in rows} <= {"FLOAT", "W8A8", "W8A8_DYNAMIC", "W4A8_DYNAMIC", "FP8"}


def test_bad_recipe_or_writer_is_an_input_error():
    spec = preset_spec("glm-5.1")
    with pytest.raises(AuditInputError, match="unknown recipe"):
        expected_tensors(spec, "int3")
    with pytest.raises(AuditInputError, match="does not produce"):
        expected_tensors(spec, "w8a8", writer="transformers")


def test_mla_without_q_lora_or_indexer_and_tied_embeddings():
    """DeepSeek-V2-Lite shape: q_proj instead of q_a/q_b, no DSA indexer; tying drops lm_head."""
    from auditor.model.config import spec_from_config
    cfg = {"hidden_size": 2048, "num_hidden_layers": 2, "num_attention_heads": 16, "vocab_size": 1000,
           "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128,
           "n_routed_experts": 4, "moe_intermediate_size": 1408, "n_shared_experts": 2,
           "intermediate_size": 10944, "first_k_dense_replace": 1, "tie_word_embeddings": True}
    rows = {n: (dt, s) for n, dt, s in expected_tensors(spec_from_config(cfg), "w8a8")}
    assert rows["model.layers.0.self_attn.q_proj.weight"] == ("I8", (16 * 192, 2048))
    assert not any("q_a_proj" in n or "indexer" in n for n in rows)
    assert rows["model.layers.1.mlp.shared_experts.up_proj.weight"] == ("I8", (2 * 1408, 2048))
    assert "model.layers.1.mlp.gate.e_score_correction_bias" not in rows    # no noaux_tc
    assert "lm_head.weight" not in rows


def test_parameter_counts_match_published_totals():
    """DeepSeek-V3 family: 671B main model, 685B with MTP; GLM-5: 744B main model."""
    def billions(spec, writer):
        return sum(math.prod(s) for _, _, s in expected_tensors(spec, "bf16", writer=writer)) / 1e9
    ds = preset_spec("deepseek-v3.2")
    assert 671 <= billions(ds, "transformers") < 672
    assert 685 <= billions(ds, "hf-release") < 686
    assert 743.5 <= billions(preset_spec("glm-5.1"), "transformers") < 744.5
