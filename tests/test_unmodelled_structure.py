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
def test_real_deepseek_v4_configs_are_refused_by_name(shared_dir, tmp_path, repo, capsys):
    src = shared_dir / "data" / "configs" / repo
    snapshot = sorted((p.name, p.stat().st_mtime_ns) for p in src.iterdir())
    out = tmp_path / "report.txt"
    code = main(["memory", str(src), "--output", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and len(err) == 1
    assert err[0].startswith("audit: error: ") and "config.json" in err[0]
    for key in ("compress_ratios", "hc_mult", "o_groups"):
        assert key in err[0]
    assert not out.exists()
    assert sorted((p.name, p.stat().st_mtime_ns) for p in src.iterdir()) == snapshot


@pytest.mark.parametrize("repo", ["glm-5.1", "glm-5.2"])
def test_modelled_configs_still_read(shared_dir, repo):
    cfg = json.loads((shared_dir / "data" / "configs" / repo / "config.json").read_text())
    assert spec_from_config(cfg, repo).dsa


@settings(max_examples=80, deadline=None)
@given(key=st.sampled_from(sorted(UNMODELLED_STRUCTURE)),
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
])
def test_off_values_are_not_structure(extra, refused):
    if refused:
        with pytest.raises(AuditInputError, match="does not model"):
            spec_from_config({**GLM_LIKE, **extra})
    else:
        assert spec_from_config({**GLM_LIKE, **extra}).mla
