"""The shared Materializer passes (memory/materialized.py) give exactly what a direct pass gives.

``module_bytes`` (perf's weight bytes) and ``plan_weights`` (the runtime budget's W) reuse one pass
for every DP size / EPLB redundancy of an EP-on plan and for roles with equal placements. Each is
checked here against the direct computation: a fresh Materializer pass of the plan itself, its
ledger, and (for module_bytes) the plain per-row fold the perf model has always used.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from auditor.context import DeploymentContext
from auditor.engines.registry import as_engine
from auditor.memory import materialized
from auditor.memory.api import _RENAME, _SKIP_PREFIXES, _SPLITS, module_bytes, synthesized_stored
from auditor.memory.ledger import build_ledger, row_arrays
from auditor.model.presets import preset_spec
from auditor.parallel import ParallelPlan
from auditor.runtime.weights import plan_weights, stage_worst

MAIN, V018 = "vllm-ascend@main", "vllm-ascend@0.18"
RECIPE = "w8a8"


@pytest.fixture(scope="module")
def spec():
    return preset_spec("glm-5.1")


def _direct_pass(spec, plan, engine):
    eng = as_engine(engine)
    pl = eng.placement(spec, plan)
    stored, desc = synthesized_stored(spec, RECIPE)
    return eng.materializer(spec, plan, pl, stored, desc).run(), pl      # no shared row cache


def _direct_module_bytes(spec, plan, engine, rank):
    """The per-row fold of one ledger column, written out as a plain loop."""
    plan = replace(plan, mtp=True)
    mat, pl = _direct_pass(spec, plan, engine)
    col = build_ledger(mat, spec, plan, pl, ranks=np.array([rank])).mult[:, 0]
    out: dict = {}
    for i in np.flatnonzero(col):
        row = mat.rows[i]
        if row.module.startswith(_SKIP_PREFIXES) and row.module != "model.embed_tokens":
            continue
        b = row.bytes * col[i]
        module = _RENAME.get(row.module, row.module)
        if module in _SPLITS:
            parts = _SPLITS[module](spec)
            total = sum(w for _, w in parts)
            for name, w in parts:
                out[(row.layer, name)] = out.get((row.layer, name), 0) + b * w / total
        else:
            out[(row.layer, module)] = out.get((row.layer, module), 0) + b
    return {k: int(round(v)) for k, v in out.items()}


# (engine, plan, ranks to compare): hand-chosen to cover what the shared pass normalises away
CASES = [
    (MAIN, ParallelPlan(tp=8, dp=4, ep=32, sp=True, dsa_cp=True), (0, 31)),
    (MAIN, ParallelPlan(tp=8, dp=4, ep=32, sp=True, dsa_cp=True, role="prefill"), (0,)),           # shares mixed's pass
    (MAIN, ParallelPlan(tp=8, dp=4, ep=32, sp=True, dsa_cp=True, role="decode"), (0,)),            # no gather pool
    # a D node's small batched-token budget: only the (skipped) process buffers change with it
    (MAIN, ParallelPlan(tp=16, dp=1, ep=16, role="decode", max_num_batched_tokens=512), (0, 15)),
    # EPLB: 256 + 16 = 272 slots over EP32: ranks 0-15 hold 9 experts, 16-31 hold 8
    (MAIN, ParallelPlan(tp=8, dp=4, ep=32, sp=True, dsa_cp=True, redundant_experts=16), (0, 15, 16, 31)),
    # PP2 and an uneven EPLB split: ranks 16-31 are stage 1 (layers 39-77 + MTP + lm_head)
    (MAIN, ParallelPlan(tp=4, dp=4, ep=16, pp=2, redundant_experts=3), (0, 2, 3, 16, 18, 19, 31)),
    (MAIN, ParallelPlan(tp=1, dp=8, ep=8), (0, 7)),                                     # TP1: reference DP2
    (MAIN, ParallelPlan(tp=4, dp=2), (0, 7)),                                           # EP off: MoE TP = 8
    # v0.18 P node with layer sharding: owners rotate over the 32 ranks of the stage
    (V018, ParallelPlan(tp=16, dp=2, ep=32, sp=True, dsa_cp=True, role="prefill", layer_sharding=("q_b_proj", "o_proj")),
     (0, 5, 31)),
    (V018, ParallelPlan(tp=16, dp=2, ep=32, sp=True, dsa_cp=True, role="decode"), (0,)),
    # the drafter's K: GLM's resident bytes do not depend on it, so K = 3 shares the K = 0 pass
    (MAIN, ParallelPlan(tp=4, dp=8, ep=32, sp=True, dsa_cp=True, mtp=True, num_speculative_tokens=3), (0, 31)),
    (MAIN, ParallelPlan(tp=2, dp=4, ep=8, role="decode", mtp=True, max_num_batched_tokens=512,
                        num_speculative_tokens=2), (0,)),
]


@pytest.mark.parametrize("engine,plan,ranks", CASES, ids=lambda v: v.describe() if isinstance(v, ParallelPlan) else None)
def test_module_bytes_equals_direct_pass(spec, engine, plan, ranks):
    for r in ranks:
        assert module_bytes(DeploymentContext(spec, plan, engine, RECIPE), r) == _direct_module_bytes(spec, plan,
                            engine, r), r


@pytest.mark.parametrize("engine,plan,ranks", CASES, ids=lambda v: v.describe() if isinstance(v, ParallelPlan) else None)
def test_plan_weights_equals_direct_ledger(spec, engine, plan, ranks):
    for p in (plan, replace(plan, mtp=True)):
        mat, pl = _direct_pass(spec, p, engine)
        assert plan_weights(DeploymentContext(spec, p, engine, RECIPE)) == stage_worst(
            build_ledger(mat, spec, p, pl).total, p)


def test_eplb_rank_difference_is_one_expert_per_moe_layer(spec):
    """Hand check of the derived expert bytes: of 256 + 16 slots over EP32, rank 15 holds 9 experts
    and rank 16 holds 8, so they differ by one expert in every MoE layer (3-77) and the MTP layer."""
    plan = ParallelPlan(tp=8, dp=4, ep=32, sp=True, dsa_cp=True, redundant_experts=16)
    a, b = module_bytes(DeploymentContext(spec, plan, MAIN, RECIPE),
                        15), module_bytes(DeploymentContext(spec, plan, MAIN, RECIPE), 16)
    diff = {L: a[(L, m)] - b[(L, m)] for L, m in a if a[(L, m)] != b[(L, m)]}
    assert {m for (L, m) in a if a[(L, m)] != b[(L, m)]} == {"mlp.experts"}
    assert sorted(diff) == list(range(3, 79))
    H, I = 6144, 2048
    # W8A8_DYNAMIC expert (spec §2.4): w13 int8 [H, 2I] + w2 int8 [I, H] (NZ: already 32/16-aligned),
    # w13 scale + offset bf16 [2I], w2 scale + offset bf16 [H], w13_weight_scale_fp32 [2I]
    w8a8_dynamic = 2 * I * H + I * H + 2 * (2 * I * 2) + 2 * (H * 2) + 2 * I * 4
    assert w8a8_dynamic == 37_806_080
    assert {diff[L] for L in range(3, 78)} == {w8a8_dynamic}
    assert diff[78] == 3 * I * H * 2                  # the MTP layer is FLOAT in this recipe: bf16 w13 + w2


def test_dp_sizes_and_equal_roles_share_one_pass(spec):
    """Four DP sizes, two EPLB settings and the mixed/prefill roles (equal placements on main)
    of TP8 SP MTP cost one Materializer pass; decode (no gather pool) a second one."""
    from auditor.memory import api
    materialized._materialize.cache_clear()
    api._module_bytes.cache_clear()         # a pass is built only where no result is cached yet
    for dp in (1, 2, 4, 8):
        for red in (0, 8):
            for role in ("mixed", "prefill"):
                plan = ParallelPlan(tp=8, dp=dp, ep=8 * dp, sp=True, dsa_cp=True, role=role, redundant_experts=red,
                                    mtp=True)
                module_bytes(DeploymentContext(spec, plan, MAIN, RECIPE))
    assert materialized._materialize.cache_info().currsize == 1
    decode = ParallelPlan(tp=8, dp=2, ep=16, sp=True, dsa_cp=True, role="decode", mtp=True)
    module_bytes(DeploymentContext(spec, decode, MAIN, RECIPE))
    assert materialized._materialize.cache_info().currsize == 2


def test_reference_plan_keeps_dp_where_it_changes_the_pass(spec):
    ep_off = ParallelPlan(tp=4, dp=2)
    assert materialized.reference_plan(ep_off) == ep_off
    ls = ParallelPlan(tp=16, dp=2, ep=32, sp=True, dsa_cp=True, role="prefill", layer_sharding=("q_b_proj",))
    assert materialized.reference_plan(ls).dp == 2
    assert materialized.reference_plan(ParallelPlan(tp=1, dp=8, ep=8)).ep == 2       # EP stays on
    # v0.18: a P node replicates o_proj, a mixed node pools it: different placements, own passes
    p = ParallelPlan(tp=16, dp=2, ep=32, sp=True, dsa_cp=True, role="prefill")
    assert materialized.reference_plan(p, spec, V018).role == "prefill"
    assert materialized.reference_plan(p, spec, MAIN).role == "mixed"


def test_drafter_k_shares_a_pass_only_where_the_bytes_do_not_depend_on_it(spec):
    """GLM: every K of one plan costs one pass and one program pair, and the shared program is the one a
    direct build of the K plan gives. DeepSeek-V4-Flash sizes its RoPE buffers by 1 + K
    (``Engine.weights_by_drafter_k``): K stays in the key and its W differs by K."""
    from auditor.perf.api import _cached_program, cached_program
    from auditor.perf.program import build_program
    from auditor.runtime import weights
    materialized._materialize.cache_clear()
    weights._plan_weights.cache_clear()
    weights._reference.cache_clear()        # a pass is built only where no W is cached yet
    base = ParallelPlan(tp=4, dp=8, ep=32, sp=True, dsa_cp=True, mtp=True)
    for k in (0, 1, 2, 3):
        plan_weights(DeploymentContext(spec, replace(base, num_speculative_tokens=k), MAIN, RECIPE))
    assert materialized._materialize.cache_info().currsize == 1
    _cached_program.cache_clear()
    for k in (0, 3):
        dep = DeploymentContext(spec, replace(base, num_speculative_tokens=k), MAIN, RECIPE)
        for phase in ("prefill", "decode"):
            got = cached_program(dep, phase, "repetition", True).arrays()
            want = build_program(dep, phase, "repetition", True).arrays()
            assert all(np.array_equal(a, b) for a, b in zip(got, want))
    assert _cached_program.cache_info().currsize == 2
    v4 = preset_spec("deepseek-v4-flash")
    plan = ParallelPlan(tp=4, dp=8, ep=32, mtp=True, num_speculative_tokens=1)
    assert materialized.drafter_k_free(v4, plan, MAIN) == plan
    w1, w3 = (plan_weights(DeploymentContext(v4, replace(plan, num_speculative_tokens=k), MAIN, RECIPE)) for k in (1, 3))
    assert w1 != w3
    assert materialized.drafter_k_free(spec, replace(plan, num_speculative_tokens=2), MAIN).num_speculative_tokens == 0


TAIL_CASES = [
    # (model, engine, plan): chunk budgets of P and mixed nodes, a D node inside and outside MLAPO's limit
    ("glm-5.1", MAIN, ParallelPlan(tp=8, dp=1, ep=8, sp=True, dsa_cp=True, role="prefill", mtp=True,
                                   max_num_batched_tokens=4096)),
    ("glm-5.1", MAIN, ParallelPlan(tp=2, dp=1, ep=2, role="mixed", mtp=True, max_num_batched_tokens=32560)),
    ("glm-5.1", MAIN, ParallelPlan(tp=4, dp=1, ep=4, role="decode", mtp=True, max_num_batched_tokens=512)),
    ("glm-5.1", MAIN, ParallelPlan(tp=4, dp=1, ep=4, role="decode", mtp=True, max_num_batched_tokens=2048)),
    ("glm-5.1", V018, ParallelPlan(tp=16, dp=2, ep=32, sp=True, dsa_cp=True, role="prefill",
                                   layer_sharding=("q_b_proj", "o_proj"), max_num_batched_tokens=16384)),
    ("deepseek-v3.2", MAIN, ParallelPlan(tp=16, dp=1, ep=16, sp=True, dsa_cp=True, role="prefill", mtp=True,
                                         max_num_batched_tokens=32560)),
    ("deepseek-v3.2", "vllm@0.28", ParallelPlan(tp=8, dp=1, ep=8, role="mixed", max_num_batched_tokens=2048)),
    ("deepseek-v4-flash", MAIN, ParallelPlan(tp=4, dp=2, ep=8, role="prefill", mtp=True, num_speculative_tokens=1,
                                             max_num_batched_tokens=4096)),
]


@pytest.mark.parametrize("model,engine,plan", TAIL_CASES, ids=lambda v: v.describe() if isinstance(v, ParallelPlan) else v)
def test_shared_layer_walk_gives_the_direct_pass(model, engine, plan):
    """A pass whose layer walk is shared with other max_num_batched_tokens (``tokens_free``; only the tail,
    the model-wide buffers, is the plan's own) has the rows, findings and assumptions of a direct pass, and
    a plan of another budget gets its own buffers."""
    spec = preset_spec(model)
    materialized._materialize.cache_clear()
    materialized._walked.cache_clear()
    other = replace(plan, max_num_batched_tokens=8192)
    passes = [materialized._materialize(DeploymentContext(spec, p, engine, RECIPE)) for p in (other, plan)]
    shared = [mat for mat, _ in passes]
    for p, (mat, arrays) in zip((other, plan), passes):
        eng = as_engine(engine)
        stored, desc = synthesized_stored(spec, RECIPE)
        direct = eng.materializer(spec, p, eng.placement(spec, p), stored, desc).run()
        assert mat.rows == direct.rows
        assert (mat.findings, mat.assumptions, mat.stage_of_layer) == (direct.findings, direct.assumptions,
                                                                       direct.stage_of_layer)
        # the columns joined from the walk's and the tail's are the direct pass's, dtype for dtype
        want = row_arrays(direct)
        assert arrays.layers == want.layers
        for f in ("st_row", "kind", "owner", "nbytes", "nnaive", "cat", "blk", "lay", "cause"):
            a, b = getattr(arrays, f), getattr(want, f)
            assert a.dtype == b.dtype and np.array_equal(a, b), f
    assert shared[0].rows != shared[1].rows          # the budget sizes the buffers: never a stale tail
    shares = materialized.tokens_free(spec, plan, engine) != plan
    assert materialized._walked.cache_info().currsize == (1 if shares else 2)


def test_rank_multipliers_with_cached_kind_masks_equal_a_fresh_computation(spec):
    """``RowArrays.kind_mask`` caches the per-placement masks ``rank_multipliers`` reads: every rank of a
    plan with every placement kind (stage, expert, owner, first, last, all) gets the multipliers the
    same arrays give without the cache (a plain namespace of the same columns), also after ``kind``
    is replaced."""
    import types
    from auditor.memory.ledger import rank_multipliers
    plan = ParallelPlan(tp=16, dp=2, ep=32, sp=True, dsa_cp=True, role="prefill", pp=2,
                        layer_sharding=("q_b_proj", "o_proj"))
    _, arrays = materialized.materialize(DeploymentContext(spec, plan, V018, RECIPE))
    plain = types.SimpleNamespace(**{k: v for k, v in vars(arrays).items() if not k.startswith("_")})
    assert {"stage", "expert", "owner", "first", "last", "all"} <= set(arrays.kind.tolist())
    ranks = np.arange(plan.world)
    for _ in range(2):                      # the second call reads the cached masks
        for a, b in zip(rank_multipliers(arrays, spec, plan, ranks), rank_multipliers(plain, spec, plan, ranks)):
            assert np.array_equal(a, b)
    other = replace(arrays, kind=np.where(arrays.kind == "owner", "stage", arrays.kind).astype(object))
    plain.kind = other.kind
    for a, b in zip(rank_multipliers(other, spec, plan, ranks), rank_multipliers(plain, spec, plan, ranks)):
        assert np.array_equal(a, b)
