"""A config whose structure keys audit does not model is refused by name, never read as a simpler model.

Before this, the real DeepSeek-V4-Flash config was audited as a plain 1-KV-head attention with
head_dim 512 (11.0 GiB of KV for one 131,072-token request where the engine allocates 0.874 GiB).
"""
from __future__ import annotations

import json

import pytest
from hypothesis import given, settings, strategies as st

from auditor.cli import main
from auditor.errors import AuditInputError
from auditor.model.config import UNMODELLED_STRUCTURE, spec_from_config

GLM_LIKE = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 128,
            "intermediate_size": 128, "kv_lora_rank": 16, "q_lora_rank": 32, "qk_nope_head_dim": 8,
            "qk_rope_head_dim": 8, "v_head_dim": 8, "max_position_embeddings": 4096}


@pytest.mark.parametrize("repo", ["deepseek-v4-flash", "deepseek-v4-pro", "deepseek-v4-flash-fp8-sgl"])
def test_real_deepseek_v4_configs_are_read_by_their_family(shared_dir, repo):
    """The real DeepSeek-V4 configs are read with their per-layer kinds, not as a plain attention."""
    cfg = json.loads((shared_dir / "data" / "configs" / repo / "config.json").read_text())
    spec = spec_from_config(cfg, repo)
    assert spec.family == "deepseek_v4" and not spec.mla and spec.residual_mult == cfg["hc_mult"]
    ratios = cfg["compress_ratios"]
    assert [k.compress_ratio for k in spec.layer_kinds] == ratios
    assert len(spec.layer_kinds) == cfg["num_hidden_layers"] + cfg["num_nextn_predict_layers"]


#: a DeepSeek-V4-like config, small: 2 layers + 1 MTP layer
V4_LIKE = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 128,
           "num_key_value_heads": 1, "head_dim": 32, "qk_rope_head_dim": 8, "q_lora_rank": 16,
           "o_groups": 2, "o_lora_rank": 16, "hc_mult": 2, "sliding_window": 16, "compress_ratios": [4, 128, 0],
           "index_n_heads": 2, "index_head_dim": 16, "index_topk": 8, "n_routed_experts": 4,
           "moe_intermediate_size": 32, "num_experts_per_tok": 2, "num_nextn_predict_layers": 1,
           "max_position_embeddings": 4096}


@settings(max_examples=40, deadline=None)
@given(drop=st.sets(st.sampled_from(["compress_ratios", "hc_mult", "o_groups", "o_lora_rank"]), min_size=1,
                    max_size=3))
def test_part_of_the_compressed_structure_is_refused_by_name(drop):
    """Some of the family's structure keys without the others is no model audit knows: refused, naming
    the missing keys, never read as the default family."""
    cfg = {k: v for k, v in V4_LIKE.items() if k not in drop}
    with pytest.raises(AuditInputError, match="does not model") as exc:
        spec_from_config(cfg)
    for key in drop:
        assert key in str(exc.value)


@pytest.mark.parametrize("ratios,bad", [([4, 2, 0], "2"), ([4, 128, 0, 0, 0], "entries"), ([4, "x", 0], "integers")])
def test_compress_ratios_the_engine_lacks_are_refused(ratios, bad):
    with pytest.raises(AuditInputError, match=bad):
        spec_from_config({**V4_LIKE, "compress_ratios": ratios})


def test_dspark_drafter_needs_its_keys_and_stays_refused_outside_the_family():
    """The DeepSeek-V4 family reads the DSpark drafter (tests/test_deepseek_v4_dspark.py), from all its keys;
    any other family still refuses dspark_target_layer_ids by name."""
    with pytest.raises(AuditInputError, match="dspark_markov_rank"):
        spec_from_config({**V4_LIKE, "dspark_target_layer_ids": [1]})
    spec = spec_from_config({**V4_LIKE, "compress_ratios": [4, 128, 0], "dspark_target_layer_ids": [1],
                             "dspark_num_mtp_layers": 1, "dspark_markov_rank": 8})
    assert (spec.drafter, spec.mtp_layers, spec.drafter_targets) == ("dspark", 1, (1,))
    with pytest.raises(AuditInputError, match="dspark_target_layer_ids"):
        spec_from_config({**GLM_LIKE, "dspark_target_layer_ids": [1]})


@pytest.mark.parametrize("repo", ["glm-5.1", "glm-5.2"])
def test_modelled_configs_still_read(shared_dir, repo):
    cfg = json.loads((shared_dir / "data" / "configs" / repo / "config.json").read_text())
    assert spec_from_config(cfg, repo).dsa


@settings(max_examples=80, deadline=None)
@given(key=st.sampled_from(sorted(set(UNMODELLED_STRUCTURE) - {"compress_ratios", "hc_mult", "o_groups", "o_lora_rank"})),
       value=st.one_of(st.integers(1, 10_000), st.lists(st.integers(1, 128), min_size=1, max_size=8),
                       st.text(min_size=1, max_size=8)))
def test_any_unmodelled_key_set_is_refused(key, value):
    with pytest.raises(AuditInputError, match=key):
        spec_from_config({**GLM_LIKE, key: value})


@pytest.mark.parametrize("extra,refused", [
    ({"sliding_window": 4096}, True),
    ({"sliding_window": 4096, "use_sliding_window": False}, False),     # Qwen-style: declared, off
    ({"sliding_window": None}, False),
    ({"layer_types": ["full_attention", "sliding_attention"]}, True),
    ({"layer_types": ["full_attention", "full_attention"]}, False),
    ({"compress_ratios": []}, False),
    ({"hc_mult": 0}, False),
    ({"num_hash_layers": 3}, True),         # hash routing without the family's structure
])
def test_off_values_are_not_structure(extra, refused):
    if refused:
        with pytest.raises(AuditInputError, match="does not model"):
            spec_from_config({**GLM_LIKE, **extra})
    else:
        assert spec_from_config({**GLM_LIKE, **extra}).mla
