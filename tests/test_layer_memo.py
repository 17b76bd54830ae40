"""A Materializer walk copies the rows of a decoder layer whose signature (``layer_signature``: stored
modules, MoE, indexer, layer-sharding owner) it has seen (``walk_layers``): the copy must be exactly the
layer walked module by module. Each pass here is compared with the same pass walked with no signature
(every layer visited), row by row, with its findings, assumptions and missing modules."""
from __future__ import annotations

import copy

import pytest

from auditor.engines.materialize import Materializer
from auditor.engines.registry import as_engine
from auditor.memory.api import synthesized_stored
from auditor.model.presets import preset_spec
from auditor.parallel import ParallelPlan

V018, V023, MAIN = "vllm-ascend@0.18", "vllm-ascend@0.23", "vllm-ascend@main"
CASES = [
    ("glm-5.1", "w8a8", MAIN, ParallelPlan(tp=8, dp=4, ep=32, sp=True, dsa_cp=True, mtp=True)),
    ("glm-5.1", "w8a8", MAIN, ParallelPlan(tp=16, dp=1, ep=16, role="decode", max_num_batched_tokens=512)),
    ("glm-5.1", "w8a8", V018, ParallelPlan(tp=16, dp=2, ep=32, sp=True, dsa_cp=True, role="prefill",
                                           layer_sharding=("q_b_proj", "o_proj"))),
    ("glm-5.1", "w8a8", V018, ParallelPlan(tp=16, dp=2, ep=32, sp=True, dsa_cp=True, role="decode",
                                           max_num_batched_tokens=256)),
    ("glm-5.1", "w4a8", V023, ParallelPlan(tp=4, dp=4, ep=16, pp=2, mtp=True)),
    ("glm-5.1", "w8a8", MAIN, ParallelPlan(tp=4, dp=2)),
    # fp8-block on vLLM-Ascend: every layer's kv_b_proj is an error finding named by its layer
    ("glm-5.1", "fp8-block", MAIN, ParallelPlan(tp=16, dp=1, ep=16)),
    ("deepseek-v3.2", "w8a8", MAIN, ParallelPlan(tp=8, dp=2, ep=16, mtp=True)),
    ("deepseek-v3.2", "bf16", MAIN, ParallelPlan(tp=16, dp=1, ep=16, role="decode", max_num_batched_tokens=64)),
    ("deepseek-v3.2", "fp8-block", "vllm@0.19", ParallelPlan(tp=8, dp=1, ep=8)),
    ("glm-5.1", "bf16", "vllm@0.28", ParallelPlan(tp=8, dp=2, ep=16, mtp=True)),
    # DeepSeek-V4 (the declared walk): a DSA-CP P node with the o_proj switch, a decode node, the HF release,
    # a release branch, CUDA
    ("deepseek-v4-flash", "w8a8", MAIN, ParallelPlan(tp=4, dp=4, ep=16, sp=True, dsa_cp=True, role="prefill",
                                                     mtp=True)),
    ("deepseek-v4-flash", "bf16", MAIN, ParallelPlan(tp=4, dp=4, ep=16, sp=True, dsa_cp=True, role="prefill")),
    ("deepseek-v4-pro", "w4a8", MAIN, ParallelPlan(tp=16, dp=2, ep=32, role="decode", mtp=True)),
    ("deepseek-v4-flash", "w8a8", "vllm-ascend@0.25.1rc1", ParallelPlan(tp=8, dp=1, ep=8, mtp=True)),
    ("deepseek-v4-pro", "w4a8", "vllm-ascend@0.26", ParallelPlan(tp=16, dp=1, ep=16, sp=True, dsa_cp=True)),
    ("deepseek-v4-flash", "fp8-block", "vllm@0.28", ParallelPlan(tp=4, dp=2, ep=8, mtp=True)),
]


def _walk(spec, recipe, engine, plan, memo: bool, drop=lambda key: False):
    eng = as_engine(engine)
    stored, desc = synthesized_stored(spec, recipe)
    if drop is not None:
        stored = copy.copy(stored)
        stored.__dict__.pop("_layer_sigs", None)
        stored.modules = {k: v for k, v in stored.modules.items() if not drop(k)}
    m = eng.materializer(spec, plan, eng.placement(spec, plan), stored, desc)      # no shared row cache
    if not memo:
        m.layer_signature = lambda layer: None
    mat = m.run()
    return mat, m


@pytest.mark.parametrize("model,recipe,engine,plan", CASES, ids=[f"{c[0]}-{c[1]}-{c[2]}-{i}" for i, c in enumerate(CASES)])
def test_copied_layers_equal_walked_layers(model, recipe, engine, plan):
    spec = preset_spec(model)
    fast, fm = _walk(spec, recipe, engine, plan, memo=True)
    slow, sm = _walk(spec, recipe, engine, plan, memo=False)
    assert len(fast.rows) == len(slow.rows) > spec.Lyr
    for a, b in zip(fast.rows, slow.rows):
        assert a == b
    assert [f.__dict__ for f in fast.findings] == [f.__dict__ for f in slow.findings]
    assert fast.assumptions == slow.assumptions and fm._missing == sm._missing


def test_layers_of_one_kind_are_copied_not_walked(monkeypatch):
    """GLM-5.1: 3 dense layers and 75 MoE layers; the signatures are few, so the module walk (``attention``)
    runs once per signature, not once per layer."""
    spec = preset_spec("glm-5.1")
    calls = []
    real = Materializer.attention
    monkeypatch.setattr(Materializer, "attention", lambda self, layer, mtp: (calls.append(layer), real(self, layer, mtp)))
    _walk(spec, "w8a8", MAIN, ParallelPlan(tp=8, dp=2, ep=16), memo=True)
    assert 2 <= len(calls) <= 6 < spec.Lyr


@pytest.mark.parametrize("what", ["everywhere", "one-layer"])
def test_missing_modules_are_named_for_every_layer(what):
    """A checkpoint without the indexer's k_norm in every layer (or in layer 5 only): each layer's missing
    module is named with its own index, as the walk of every layer names it."""
    spec = preset_spec("glm-5.1")
    drop = (lambda k: k[1] == "self_attn.indexer.k_norm") if what == "everywhere" else (
        lambda k: k == (5, "self_attn.indexer.k_norm"))
    plan = ParallelPlan(tp=8, dp=2, ep=16)
    fast, fm = _walk(spec, "w8a8", MAIN, plan, memo=True, drop=drop)
    slow, sm = _walk(spec, "w8a8", MAIN, plan, memo=False, drop=drop)
    assert fast.rows == slow.rows
    assert fm._missing == sm._missing and "model.layers.5.self_attn.indexer.k_norm" in fm._missing
    assert [f.__dict__ for f in fast.findings] == [f.__dict__ for f in slow.findings]


def test_declared_layers_of_one_kind_are_copied_not_walked(monkeypatch):
    """DeepSeek-V4-Flash's 43 layers are of a few kinds (window-only, compress-4 with an indexer, compress-128;
    hash- or score-routed): the declared walk visits one layer of each, plus the MTP layer."""
    spec = preset_spec("deepseek-v4-flash")
    walked = set()
    real = Materializer.declared
    monkeypatch.setattr(Materializer, "declared", lambda self, layer, d: (walked.add(layer), real(self, layer, d)))
    _walk(spec, "w8a8", MAIN, ParallelPlan(tp=4, dp=4, ep=16, mtp=True), memo=True)
    kinds = {spec.layer_kind(i) for i in range(spec.Lyr)}
    assert len(walked - {-1}) <= len(kinds) + spec.mtp_layers < spec.Lyr
