"""The layer blueprint: linear shapes declared once, read by the writer, the materializer and the
memory adapters. Widths are checked by hand against GLM-5.1's config.json (hidden 6144, q_lora 2048,
kv_lora 512, rope 64, nope 192, v 256, 64 heads, index 32 x 128)."""
from __future__ import annotations

from auditor.model import blueprint as B
from auditor.model.expected import expected_tensors
from auditor.model.presets import preset_spec


def test_glm51_shapes_by_hand():
    s = preset_spec("glm-5.1")
    assert B.stored_shape(s, "self_attn.q_a_proj") == (2048, 6144)
    assert B.stored_shape(s, "self_attn.kv_a_proj_with_mqa") == (512 + 64, 6144)
    assert B.stored_shape(s, "self_attn.q_b_proj") == (64 * (192 + 64), 2048)
    assert B.stored_shape(s, "self_attn.o_proj") == (6144, 64 * 256)
    assert B.stored_shape(s, "self_attn.indexer.wk") == (128, 6144)
    assert B.stored_shape(s, "self_attn.indexer.weights_proj") == (32, 6144)
    assert B.QKV_A.out(s) == 2048 + 576 and B.QKV_A.members == ["self_attn.q_a_proj", "self_attn.kv_a_proj_with_mqa"]
    assert B.IDX_WK_WEIGHTS.split(s) == [("self_attn.indexer.wk", 128), ("self_attn.indexer.weights_proj", 32)]


def test_writer_and_blueprint_agree_on_every_stored_linear():
    """The transformers writer's tensors of a dense and a MoE layer carry the blueprint's shapes."""
    s = preset_spec("glm-5.1")
    rows = {name: shape for name, _, shape in expected_tensors(s, "bf16")}
    seen = 0
    for layer in (0, 5):                      # layer 0 is dense (first_k_dense_replace 3), 5 is MoE
        for mod in B.LINEARS:
            if mod in (B.GQA_QKV, B.GQA_O, B.Q, B.EH_PROJ):
                continue                      # other families / the MTP layer
            for name, width in mod.split(s):
                key = f"model.layers.{layer}.{name}.weight"
                if key in rows:
                    assert tuple(rows[key]) == (width, mod.inp(s)), key
                    seen += 1
    assert seen >= 20


def test_dense_gqa_writer_uses_the_gqa_blueprint():
    s = preset_spec("dense-32b")
    rows = {name: shape for name, _, shape in expected_tensors(s, "bf16")}
    for name, width in B.GQA_QKV.split(s):
        assert tuple(rows[f"model.layers.0.{name}.weight"]) == (width, s.H)
    hd = s.head_dim or s.H // s.NH
    assert B.GQA_QKV.split(s)[1][1] == s.NKV * hd
