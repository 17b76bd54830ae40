"""DeepSeek-V4 declares its modules once: the checkpoint layout a writer emits and the modules the
materializer walks are the same list.

Why: ``layout_rows`` used to be a second hand-written copy of ``layer_modules``. The layout is now read
from the declaration; these tests read every layout tensor back through ``model.names`` (the loader's
canonicalization, the forward direction) and require it to land on exactly one declared module, and
every declared module to be stored, for every recipe. A module added to the walk that the writer cannot
spell, or a tensor the names reader places in no module, fails here. The tiny model's tensor names,
counts and shapes are worked by hand from DeepSeek's layout (model-deepseek-v4.md §1.3-§1.6, §2.1).
"""
from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from auditor.model.config import spec_from_config
from auditor.model.families import deepseek_v4 as F
from auditor.model.names import canonical_layer_path, parse_global_path, parse_layer_path

CONFIGS = Path("/work/shared/data/configs")
#: model-level modules every family has (the materializer's globals_), not in global_modules
COMMON = ("model.embed_tokens", "model.norm", "lm_head")
_LAYER = re.compile(r"^layers\.(\d+)\.(.*)$")
_MTP = re.compile(r"^mtp\.(\d+)\.(.*)$")

# a tiny config: main layers window-only (hash-routed), compress-4 (+ indexer), compress-128; one MTP layer
TINY = {"model_type": "deepseek_v4", "hidden_size": 64, "num_hidden_layers": 3, "num_attention_heads": 4,
        "num_key_value_heads": 1, "head_dim": 32, "qk_rope_head_dim": 16, "q_lora_rank": 48, "o_groups": 2,
        "o_lora_rank": 16, "hc_mult": 2, "sliding_window": 8, "compress_ratios": [0, 4, 128, 0],
        "index_n_heads": 2, "index_head_dim": 16, "index_topk": 4, "n_routed_experts": 2,
        "moe_intermediate_size": 32, "n_shared_experts": 1, "num_experts_per_tok": 1, "num_hash_layers": 1,
        "num_nextn_predict_layers": 1, "vocab_size": 100, "topk_method": "noaux_tc", "expert_dtype": "fp4",
        "torch_dtype": "bfloat16"}


def _address(name: str, n_main: int) -> tuple[int, str, str]:
    """(layer or -1, module, suffix) of a stored tensor as the names reader places it."""
    m = _LAYER.match(name)
    mtp = m is None and _MTP.match(name)
    if m or mtp:
        g = m or mtp
        a = parse_layer_path(canonical_layer_path(g.group(2), bool(mtp)))
        return int(g.group(1)) + (n_main if mtp else 0), a.module, a.suffix
    a = parse_global_path(name)
    return -1, a.module, a.suffix


def _owns(d, module: str, suffix: str) -> bool:
    """Whether declared module ``d`` is the one a tensor at (module, suffix) belongs to."""
    if d.kind == "linear":
        return module in d.stored
    if d.kind == "param":
        return module == d.name and suffix == d.suffix
    if d.kind == "norm":
        return module == d.name and suffix == "weight"
    return module == d.name          # router (weight, bias, tid2eid), experts, vocab


def _check(spec, recipe: str, n_experts: int | None = None) -> None:
    rows = F.layout_rows(spec, recipe, n_experts=n_experts)
    names = [r[0] for r in rows]
    assert len(set(names)) == len(names), "a tensor written twice"
    decls = {layer: F.layer_modules(spec, layer) for layer in range(spec.Lyr + spec.mtp_layers)}
    decls[-1] = F.global_modules(spec)
    hit: dict[tuple[int, int], int] = {}
    common_hit = set()
    for name in names:
        layer, module, suffix = _address(name, spec.Lyr)
        if layer == -1 and module in COMMON:
            common_hit.add(module)
            continue
        owners = [i for i, d in enumerate(decls[layer]) if _owns(d, module, suffix)]
        assert len(owners) == 1, f"{recipe}: {name} -> ({layer}, {module}, {suffix}) belongs to {len(owners)} modules"
        hit[(layer, owners[0])] = hit.get((layer, owners[0]), 0) + 1
    assert common_hit == set(COMMON)
    hf = recipe in F.HF_RECIPES
    for layer, ds in decls.items():
        for i, d in enumerate(ds):
            # the HF release has no MTP embedding or head (the drafter shares the target's)
            if hf and d.kind == "vocab":
                assert (layer, i) not in hit, f"{recipe}: layer {layer} {d.name} is stored"
                continue
            assert (layer, i) in hit, f"{recipe}: layer {layer} {d.kind} {d.name or d.suffix} is not stored"


@pytest.mark.parametrize("model", ["deepseek-v4-flash", "deepseek-v4-pro", "deepseek-v4-flash-fp8-sgl"])
@pytest.mark.parametrize("recipe", list(F.RECIPE_SCHEMES))
def test_every_tensor_has_one_declared_module_and_every_module_is_stored(model, recipe):
    cfg = json.loads((CONFIGS / model / "config.json").read_text())
    _check(spec_from_config(cfg, model), recipe, n_experts=2)


@pytest.mark.parametrize("recipe", list(F.RECIPE_SCHEMES))
def test_tiny_model_maps_both_ways(recipe):
    _check(spec_from_config(TINY, "tiny"), recipe)


def test_a_module_only_the_walk_declares_fails(monkeypatch):
    """The check above can fail: a module the walk declares but the layout cannot place is caught."""
    from auditor.model.blueprint import ModuleDecl
    spec = spec_from_config(TINY, "tiny")
    real = F.layer_modules
    monkeypatch.setattr(F, "layer_modules", lambda s, layer: real(s, layer) + [ModuleDecl("widget", "self_attn.w")])
    with pytest.raises(ValueError, match="widget"):
        F.layout_rows(spec, "bf16")
    # and a layout tensor no declared module owns is caught
    monkeypatch.setattr(F, "layer_modules", real)
    rows = F.layout_rows(spec, "bf16")
    monkeypatch.setattr(F, "layout_rows", lambda *a, **k: rows + [("layers.0.attn.wz.weight", "BF16", (1,), "FLOAT")])
    with pytest.raises(AssertionError, match="wz"):
        _check(spec, "bf16")


# layer 0 of TINY (window-only, hash-routed) as DeepSeek's Block holds it: attn, ffn (gate, experts
# w1 w2 w3, shared w1 w2 w3), attn_norm, ffn_norm, hc_attn / hc_ffn (fn, base, scale)
LAYER0 = [("attn.wq_a.weight", (48, 64)), ("attn.q_norm.weight", (48,)), ("attn.wq_b.weight", (4 * 32, 48)),
          ("attn.wkv.weight", (32, 64)), ("attn.kv_norm.weight", (32,)), ("attn.wo_a.weight", (2 * 16, 4 * 32 // 2)),
          ("attn.wo_b.weight", (64, 2 * 16)), ("attn.attn_sink", (4,)),
          ("ffn.gate.weight", (2, 64)), ("ffn.gate.tid2eid", (100, 1)),
          *[(f"ffn.experts.{e}.{w}.weight", s) for e in (0, 1)
            for w, s in (("w1", (32, 64)), ("w2", (64, 32)), ("w3", (32, 64)))],
          ("ffn.shared_experts.w1.weight", (32, 64)), ("ffn.shared_experts.w2.weight", (64, 32)),
          ("ffn.shared_experts.w3.weight", (32, 64)),
          ("attn_norm.weight", (64,)), ("ffn_norm.weight", (64,)),
          # mix outputs (2 + hc) x hc = 8 over hc x H = 128 inputs; 3 scales
          *[(f"hc_{b}_{t}", s) for b in ("attn", "ffn") for t, s in (("fn", (8, 128)), ("base", (8,)), ("scale", (3,)))]]


def test_tiny_layout_names_order_and_shapes_by_hand():
    rows = F.layout_rows(spec_from_config(TINY, "tiny"), "bf16")
    got = [(n[len("layers.0."):], s) for n, _, s, _ in rows if n.startswith("layers.0.")]
    assert got == LAYER0
    by_name = {n: (d, s) for n, d, s, _ in rows}
    # compress-4: compressor state 2 x D wide over 4 rows (coff 2); the indexer's of head 16
    assert by_name["layers.1.attn.compressor.ape"] == ("F32", (4, 64))
    assert by_name["layers.1.attn.indexer.compressor.wkv.weight"] == ("BF16", (32, 64))
    assert by_name["layers.1.attn.indexer.weights_proj.weight"] == ("BF16", (2, 64))
    assert by_name["layers.1.ffn.gate.bias"] == ("F32", (2,))
    # compress-128: coff 1, 128 rows
    assert by_name["layers.2.attn.compressor.ape"] == ("F32", (128, 32))
    assert "layers.2.attn.indexer.wq_b.weight" not in by_name
    # MTP layer 0 is layer 3: its own projections, norms, vocabulary and head mHC
    assert by_name["mtp.0.e_proj.weight"] == ("BF16", (64, 64))
    assert by_name["mtp.0.emb.tok_emb.weight"] == ("BF16", (100, 64))
    assert by_name["mtp.0.head.weight"] == ("BF16", (100, 64))
    assert by_name["mtp.0.norm.weight"] == ("BF16", (64,))
    assert by_name["mtp.0.hc_head_fn"] == ("F32", (2, 128))
    assert [n for n, *_ in rows[-6:]] == ["embed.weight", "norm.weight", "head.weight",
                                          "hc_head_fn", "hc_head_base", "hc_head_scale"]
    # per layer: 8 attention + 2 router + 6 expert + 3 shared + 2 norm + 6 mHC tensors; compress-4 adds a
    # compressor (4), the indexer's wq_b and weights_proj (2) and its compressor (4), and swaps tid2eid for
    # the bias; compress-128 a compressor; MTP adds e_proj h_proj enorm hnorm norm head emb + 3 head mHC
    assert len(rows) == 27 + 37 + 31 + 37 + 6


def test_tiny_hf_release_by_hand():
    rows = F.layout_rows(spec_from_config(TINY, "tiny"), "fp8-block")
    by_name = {n: (d, s) for n, d, s, _ in rows}
    assert by_name["layers.0.attn.wq_b.weight"] == ("F8_E4M3", (128, 48))
    assert by_name["layers.0.attn.wq_b.scale"] == ("F8_E8M0", (1, 1))          # cdiv(128, 128) x cdiv(48, 128)
    assert by_name["layers.0.ffn.experts.1.w2.weight"] == ("F4", (64, 32))
    assert by_name["layers.0.ffn.experts.1.w2.scale"] == ("F8_E8M0", (64, 1))   # per 32 inputs
    assert by_name["layers.1.attn.compressor.wkv.weight"] == ("BF16", (64, 64))
    assert "layers.1.attn.compressor.wkv.scale" not in by_name
    assert "mtp.0.head.weight" not in by_name and "mtp.0.emb.tok_emb.weight" not in by_name
    # scales: 5 attention linears + 9 expert / shared linears a layer, + the indexer's wq_b at
    # compress-4, + e_proj / h_proj in MTP (compressors and weights_proj stay bf16)
    scales = sum(1 for n in by_name if n.endswith(".scale"))
    assert scales == 14 + 15 + 14 + 16
    assert len(rows) == 138 - 2 + scales


@pytest.mark.parametrize("hf, native, mtp", [
    ("self_attn.wq_a", "attn.wq_a", False),
    ("input_layernorm.weight", "attn_norm.weight", False),
    ("post_attention_layernorm.weight", "ffn_norm.weight", False),
    ("mlp.experts.7.down_proj", "ffn.experts.7.w2", False),
    ("mlp.shared_experts.up_proj", "ffn.shared_experts.w3", False),
    ("mlp.gate.e_score_correction_bias", "ffn.gate.bias", False),
    ("mlp.gate.tid2eid", "ffn.gate.tid2eid", False),
    ("hc_attn_fn", "hc_attn_fn", False),
    ("shared_head.norm.weight", "norm.weight", True),
    ("shared_head.head.weight", "head.weight", True),
    ("embed_tokens.weight", "emb.tok_emb.weight", True),
    ("e_proj", "e_proj", True),
])
def test_native_spelling_is_the_inverse_of_the_loaders(hf, native, mtp):
    from auditor.model.names import native_layer_path
    assert native_layer_path(hf, mtp) == native
    assert canonical_layer_path(native, mtp) == hf
