"""Candidate search: logs synthesized from known configurations must be explained by them.

The expected configurations come from the spec's rules (engine-vllm-ascend.md §0, §3.3-§3.4): a
v0.18 P node replicates o_proj (docs/memory.md's 38.234 GiB), layer sharding leaves the ranks that own
one layer fewer (78 layers over 32 ranks: 14 own 3, 18 own 2) one layer's o_proj + q_b_proj lighter.
"""
from __future__ import annotations

import numpy as np
import pytest

from auditor.align.evidence.logs import parse_log_text
from auditor.align.memory_fit import LedgerCache, fit_memory
from auditor.align.ranks import global_rank, observed_weights, sizes_from_workers
from auditor.align.evidence.workers import split_prefix
from auditor.engines.registry import as_engine
from auditor.memory.audit import run_memory_audit
from auditor.parallel import ParallelPlan
from auditor.source import open_model

GiB = 2 ** 30
BASE = ParallelPlan(tp=16, dp=2, ep=32, sp=True)


@pytest.fixture(scope="module")
def cache():
    return LedgerCache(open_model("glm-5.1"))


def _log(per_rank: list[float], digits: int = 4) -> str:
    return "\n".join(f"(Worker_DP{r // 16}_TP{r % 16}_EP{r} pid={100 + r}) INFO 05-20 09:50:58 "
                     f"[model_runner_v1.py:3150] Loading model weights took {b / GiB:.{digits}f} GB"
                     for r, b in enumerate(per_rank))


def test_global_rank_mapping():
    w, _ = split_prefix("(Worker_DP1_TP3_EP19 pid=1) x")
    assert global_rank(w, BASE) == 1 * 16 + 3
    w, _ = split_prefix("(Worker_TP3_EP19 pid=1) x")        # DP from the EP rank: 19 // 16 = 1
    assert global_rank(w, BASE) == 19
    w, _ = split_prefix("(Worker_PP1_TP3 pid=1) x")
    assert global_rank(w, ParallelPlan(tp=4, pp=2)) == 1 * 4 + 3
    w, _ = split_prefix("(VllmWorker rank=5 pid=1) x")
    assert global_rank(w, ParallelPlan(tp=8)) == 5
    ws = [split_prefix(f"(Worker_DP{d}_TP{t}_EP{d * 4 + t} pid=1) x")[0] for d in range(2) for t in range(4)]
    assert sizes_from_workers(ws) == {"tp": 4, "dp": 2, "ep": 8}


def test_rank_totals_equal_the_ledger(cache):
    for engine, plan in (("vllm-ascend@0.18", BASE.with_(role="prefill", layer_sharding=("q_b_proj", "o_proj"))),
                         ("vllm-ascend@main", BASE.with_(mtp=True, shared_expert_dp=True, role="decode"))):
        assert np.array_equal(cache.totals(plan, engine),
                              run_memory_audit(cache.source, plan, engine).ledger.total)


def test_plans_sharing_a_walk_still_equal_their_own_ledgers():
    """DP, EP and EPLB redundancy (EP on, no layer sharding) and roles with equal placements share one
    walk in the search; each plan's per-rank sum must still be what its own ledger says."""
    cache = LedgerCache(open_model("glm-5.1"))
    plans = [ParallelPlan(tp=16, dp=dp, ep=16 * dp, sp=True, redundant_experts=r, role=role)
             for dp in (1, 2, 4) for r in (0, 16) for role in ("mixed", "prefill")]
    plans.append(ParallelPlan(tp=1, dp=8, ep=8, redundant_experts=8, role="decode"))
    for plan in plans:
        assert np.array_equal(cache.totals(plan, "vllm-ascend@main"),
                              run_memory_audit(cache.source, plan, "vllm-ascend@main").ledger.total), plan
    assert cache.materialized <= 3 < len(plans)


def test_38_2_gb_is_the_v018_p_node(cache):
    """The seed RFC's ~38 GB per rank: a v0.18 P node (docs/memory.md: 38.234 GiB)."""
    obs = observed_weights(parse_log_text(_log([38.2 * GiB] * 32, digits=1)), BASE)
    fit = fit_memory(cache, BASE, obs, {"sp": True, "tp": 16, "dp": 2, "ep": 32})
    best = fit.fits[0]
    assert best.candidate.engine == "vllm-ascend@0.18" and best.candidate.role == "prefill"
    assert best.candidate.plan.layer_sharding == ()
    assert best.max_abs == pytest.approx(0.034 * GiB, abs=0.001 * GiB)
    assert fit.materialized < fit.evaluated      # identical placements are materialized once


def test_layer_sharded_p_node_is_named(cache):
    plan = BASE.with_(role="prefill", layer_sharding=("q_b_proj", "o_proj"))
    tot = cache.totals(plan, "vllm-ascend@0.18")
    # hand check of the pattern: ranks 0-13 own layers r, r+32, r+64 (3 layers), 14-31 own 2 of the 78;
    # the difference is one layer's int8 o_proj [16384, 6144] + q_b_proj [2048, 16384] weights
    one_layer = 16384 * 6144 + 2048 * 16384
    assert tot[0] - tot[31] == one_layer
    assert (tot[:14] == tot[0]).all() and (tot[14:] == tot[31]).all()
    obs = observed_weights(parse_log_text(_log(list(tot))), BASE)
    fit = fit_memory(cache, BASE, obs, {"sp": True})
    best = fit.fits[0]
    assert best.candidate.engine == "vllm-ascend@0.18"
    assert best.candidate.plan.layer_sharding == ("q_b_proj", "o_proj") and best.candidate.role == "prefill"
    assert set(best.residual) == set(range(32))


@pytest.mark.parametrize("engine, opts", [
    ("vllm-ascend@0.23", dict(role="mixed")),
    ("vllm-ascend@main", dict(role="decode", shared_expert_dp=True, mtp=True)),
    ("vllm-ascend@0.18", dict(role="prefill", layer_sharding=("q_b_proj",))),
])
def test_known_configuration_ranks_first(cache, engine, opts):
    plan = BASE.with_(**opts)
    obs = observed_weights(parse_log_text(_log(list(cache.totals(plan, engine)))), BASE)
    best = fit_memory(cache, BASE, obs, {"sp": True}).fits[0]
    named = [(best.candidate.engine, best.candidate.plan)] + [(e.engine, e.plan) for e in best.equivalent]
    assert (as_engine(engine).name, plan) in named
    assert best.max_abs <= 0.00005 * GiB + 1


def test_no_weights_is_an_input_error(cache):
    from auditor.align.ranks import Observed
    from auditor.errors import AuditInputError
    with pytest.raises(AuditInputError, match="no per-worker weights"):
        fit_memory(cache, BASE, Observed({}, {}, {}), {})
