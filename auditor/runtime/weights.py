"""W of the KV budget: the ledger's resident bytes of the worst rank, per PP stage.

``audit memory`` passes its own ledger (``stage_worst``). Perf, sweep and plan work from a recipe
and need W for many plans. With EP on, ``plan_weights`` builds the ledger once per (TP, SP, role, MTP,
PP, ...) and derives other DP sizes from it: the routed experts are the only weights whose per-rank
share depends on DP (through EP = DP x TP), at ``per-expert bytes x max experts per EP slot``.
EP off (experts TP-sharded over DP x TP) and layer sharding (owners among DP x TP ranks) build the
plan's own ledger. Every pass comes from ``memory.materialized`` (shared between plans).
"""
from __future__ import annotations

import functools
import numpy as np

from ..context import DeploymentContext
from ..memory.ledger import experts_per_slot, rank_multipliers
from ..memory.materialized import materialize, reference_plan
from ..parallel import ParallelPlan

def stage_worst(total: np.ndarray, plan: ParallelPlan) -> list[int]:
    """Worst rank's bytes of every PP stage (ranks are numbered stage-major)."""
    per = np.asarray(total, dtype=np.float64).reshape(plan.pp, plan.ranks_per_stage)
    return [int(round(x)) for x in per.max(axis=1)]


@functools.lru_cache(maxsize=256)
def _reference(ref: DeploymentContext) -> tuple[tuple, tuple]:
    """(non-expert worst per stage, per-expert bytes per stage) of one ledger of an EP-on plan."""
    spec, plan = ref.spec, ref.plan
    _, arrays = materialize(ref)
    mult, total = _rank_totals(arrays, spec, plan)
    R = plan.ranks_per_stage
    held = arrays.kind == "expert"                 # routed experts of every MoE layer, the MTP layer's too
    experts = (mult[held] * arrays.nbytes[held, None]).sum(axis=0).reshape(plan.pp, R)
    other = (total.reshape(plan.pp, R) - experts).max(axis=1)
    n = experts_per_slot(spec.E + plan.redundant_experts, plan.ep)[np.arange(R)]
    # EP wider than the experts (8 routed experts on 32 dies): ranks without an expert hold 0, not 0/0 = NaN
    per_expert = np.divide(experts, n[None, :], out=np.zeros_like(experts), where=n[None, :] > 0).max(axis=1)
    return tuple(float(x) for x in other), tuple(float(x) for x in per_expert)


def plan_weights(dep: DeploymentContext) -> list[int]:
    """Worst-rank resident bytes per PP stage of ``dep.plan`` for its recipe (synthesized inventory)."""
    return list(_plan_weights(dep.bare))


@functools.lru_cache(maxsize=1024)
def _plan_weights(dep: DeploymentContext) -> tuple[int, ...]:
    spec, plan = dep.spec, dep.plan
    if spec.moe and plan.ep_on and not plan.layer_sharding:
        other, per_expert = _reference(dep.with_plan(reference_plan(plan, spec, dep.engine)))
        n = int(experts_per_slot(spec.E + plan.redundant_experts, plan.ep).max())
        return tuple(int(round(o + e * n)) for o, e in zip(other, per_expert))
    # EP off (experts TP-sharded over DP x TP), layer sharding (owners by DP x TP), dense: DP counts
    _, arrays = materialize(dep)
    return tuple(stage_worst(_rank_totals(arrays, spec, plan)[1], plan))


def _rank_totals(arrays, spec, plan: ParallelPlan) -> tuple[np.ndarray, np.ndarray]:
    """(multipliers [rows, ranks], resident bytes per rank) of every rank of ``plan``: the ``mult`` and
    ``total`` of ``build_ledger`` with the same operations, without the per-category, block, layer and
    cause tables W never reads (a third of a ledger's cost, paid ~50 times per ``audit plan``)."""
    mult, _ = rank_multipliers(arrays, spec, plan, np.arange(plan.world))
    return mult, (mult * arrays.nbytes[:, None]).sum(axis=0)
