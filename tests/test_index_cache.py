"""IndexCache (issue 16): GLM-5.2's indexer_types / index_topk_freq / index_skip_topk_offset and GLM-5.1's
--hf-overrides, per engine version. Expected values are hand-derived from vllm-ascend
patch_deepseek_v2.py (``_skip_topk = max(layer - offset + 1, 0) % freq != 0``; an Indexer is skipped only
when the top-k is skipped and indexer_types says "shared"; defaults freq 1, offset 2) and the GLM-5.2
public config (freq 4, offset 3, 21 full / 57 shared, full = 0, 1, 2, 6, ..., 74)."""
from __future__ import annotations

import collections

import pytest
from hypothesis import given, settings, strategies as st

from auditor.context import DeploymentContext
from auditor.cli import main
from auditor.engines.registry import as_engine
from auditor.engines.vllm_ascend.kv import kv_spec
from auditor.errors import AuditInputError
from auditor.model.config import apply_hf_overrides, parse_hf_overrides, spec_from_config
from auditor.model.presets import preset_config, preset_spec
from auditor.parallel import ParallelPlan
from auditor.perf.program import build_program

OVERRIDES = {"use_index_cache": True, "index_topk_freq": 4}
FULL_52 = [0, 1, 2] + list(range(6, 78, 4))


def _glm51_ic():
    return spec_from_config(apply_hf_overrides(preset_config("glm-5.1"), OVERRIDES), name="glm-5.1")


def test_glm52_preset_fields():
    s = preset_spec("glm-5.2")
    assert s.max_position == 1048576
    assert [i for i, k in enumerate(s.indexer_kinds) if k == "full"] == FULL_52
    assert len(FULL_52) == 21 and s.indexer_kinds.count("shared") == 57
    assert [i for i in range(78) if not s.topk_shared[i]] == FULL_52


@pytest.mark.parametrize("engine,idx_layers,per_token", [
    # <= v0.22: IndexCache does not exist on SFA: 79 x (1152 + 256) = 111,232
    ("vllm-ascend@0.21", 79, 79 * 1408),
    # v0.23.0rc1 and later: shared layers hold no indexer cache: 79 x 1152 + (21 + 1 MTP) x 256 = 96,640
    ("vllm-ascend@0.23.0rc1", 22, 79 * 1152 + 22 * 256),
    ("vllm-ascend@main", 22, 96_640),
])
def test_glm52_indexer_cache_per_version(engine, idx_layers, per_token):
    kv = kv_spec(preset_spec("glm-5.2"), ParallelPlan(tp=16), as_engine(engine).profile, mtp=True)
    assert kv.idx_layers == idx_layers and kv.bytes_per_token() == per_token


def test_glm51_overrides_keep_weights_and_cache():
    s = _glm51_ic()
    # offset defaults to the engine's 2: full = 0, 1, 5, 9, ..., 77 -> 2 + 19 = 21 layers compute top-k
    assert [i for i in range(78) if not s.topk_shared[i]] == [0, 1] + list(range(5, 78, 4))
    kv = kv_spec(s, ParallelPlan(tp=16), as_engine("main").profile, mtp=True)
    assert kv.idx_layers == 79 and kv.bytes_per_token() == 79 * 1408


def _indexer_ops(spec, engine):
    prog = build_program(DeploymentContext(spec, ParallelPlan(tp=16), engine, "w8a8"), "decode")
    return collections.Counter(o.name for o in prog.ops if "indexer" in o.name)


def test_perf_skips_score_and_topk_on_shared_layers():
    # the MTP layer appears twice in the program (first and later drafts): + 2
    c = _indexer_ops(preset_spec("glm-5.2"), "main")
    assert c["self_attn.indexer.topk"] == 21 + 2 and c["self_attn.indexer.cache_write"] == 21 + 2
    c = _indexer_ops(_glm51_ic(), "main")           # GLM-5.1 + overrides: cache kept, top-k shared
    assert c["self_attn.indexer.cache_write"] == 78 + 2 and c["self_attn.indexer.score"] == 21 + 2
    c = _indexer_ops(_glm51_ic(), "vllm-ascend@0.21")   # overrides ignored before v0.23
    assert c["self_attn.indexer.topk"] == 78 + 2


def test_glm52_shared_layers_hold_no_indexer_weights():
    from auditor.runtime.weights import plan_weights
    plan = ParallelPlan(tp=16, dp=1, ep=16)
    # same positions as GLM-5.1 so that only the indexers differ (rope tables scale with positions)
    s52 = spec_from_config(apply_hf_overrides(preset_config("glm-5.2"), {"max_position_embeddings": 202752}))
    w52 = max(plan_weights(DeploymentContext(s52, plan, "main", "w8a8")))
    w51 = max(plan_weights(DeploymentContext(preset_spec("glm-5.1"), plan, "main", "w8a8")))
    w51_ic = max(plan_weights(DeploymentContext(_glm51_ic(), plan, "main", "w8a8")))
    assert w51_ic == w51                      # GLM-5.1 keeps every Indexer
    assert w52 < w51 and (w51 - w52) % 57 == 0   # 57 identical indexers dropped


def test_apply_hf_overrides_is_a_shallow_update():
    cfg = preset_config("glm-5.1")
    out = apply_hf_overrides(cfg, OVERRIDES)
    assert out["index_topk_freq"] == 4 and "index_topk_freq" not in cfg
    with pytest.raises(AuditInputError):
        apply_hf_overrides(cfg, [1])            # type: ignore[arg-type]
    with pytest.raises(AuditInputError):
        apply_hf_overrides(cfg, {"use_index_cache": "yes"})
    assert parse_hf_overrides(None) == {}
    with pytest.raises(AuditInputError):
        parse_hf_overrides("{not json")


def test_cli_hf_overrides_bad_json_is_one_line(capsys):
    assert main(["memory", "--hf-overrides", "{bad"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("audit: error: --hf-overrides:")


@settings(max_examples=60, deadline=None)
@given(freq=st.integers(1, 8), offset=st.integers(0, 6), layers=st.integers(4, 100))
def test_topk_sharing_formula(freq, offset, layers):
    cfg = dict(preset_config("glm-5.1"), num_hidden_layers=layers, index_topk_freq=freq,
               index_skip_topk_offset=offset, first_k_dense_replace=min(3, layers))
    s = spec_from_config(cfg)
    for i in range(layers):
        assert s.topk_shared[i] == (max(i - offset + 1, 0) % freq != 0)
        assert s.layer_has_indexer(i)          # no indexer_types: every layer keeps its Indexer


@settings(max_examples=40, deadline=None)
@given(kinds=st.lists(st.sampled_from(["full", "shared", "FULL", "Shared", "other"]), min_size=4, max_size=40))
def test_indexer_types_read(kinds):
    cfg = dict(preset_config("glm-5.1"), num_hidden_layers=len(kinds), indexer_types=kinds, index_topk_freq=1,
               first_k_dense_replace=min(3, len(kinds)))
    s = spec_from_config(cfg)
    assert s.indexer_kinds == tuple("shared" if k.lower() == "shared" else "full" for k in kinds)
    # freq 1: no layer skips its top-k, so every layer keeps its Indexer whatever its kind
    assert all(s.layer_has_indexer(i) for i in range(len(kinds)))


def test_indexer_types_of_the_wrong_length_is_an_error():
    cfg = dict(preset_config("glm-5.1"), indexer_types=["full"] * 3)
    with pytest.raises(AuditInputError, match="indexer_types"):
        spec_from_config(cfg)
