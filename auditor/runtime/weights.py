"""W of the KV budget: the ledger's resident bytes of the worst rank, per PP stage.

``audit memory`` passes its own ledger (``stage_worst``). Perf, sweep and plan work from a recipe
and need W for many plans, so ``plan_weights`` runs the ledger once per (TP, EP on/off, SP, role,
MTP, PP) and derives other DP sizes from it: the routed experts are the only weights whose per-rank
share depends on DP (through EP = DP x TP), at ``per-expert bytes x max experts per EP slot``.
"""
from __future__ import annotations

import functools
from dataclasses import replace

import numpy as np

from ..engines.profiles import get_profile
from ..engines.resolve import resolve_placement
from ..engines.materialize import Materializer
from ..memory.api import synthesized_stored
from ..memory.ledger import build_ledger, experts_per_slot
from ..model.names import BLOCKS
from ..model.spec import ModelSpec
from ..parallel import ParallelPlan

_EXPERTS = BLOCKS.index("routed_experts")


def stage_worst(total: np.ndarray, plan: ParallelPlan) -> list[int]:
    """Worst rank's bytes of every PP stage (ranks are numbered stage-major)."""
    per = np.asarray(total, dtype=np.float64).reshape(plan.pp, plan.ranks_per_stage)
    return [int(round(x)) for x in per.max(axis=1)]


@functools.lru_cache(maxsize=256)
def _reference(spec: ModelSpec, plan: ParallelPlan, engine: str, recipe: str) -> tuple[tuple, tuple, int]:
    """(non-expert worst per stage, per-expert bytes per stage, EP of the reference) of one ledger."""
    prof = get_profile(engine)
    placement = resolve_placement(spec, plan, prof)
    stored, desc = synthesized_stored(spec, recipe)
    mat = Materializer(spec, plan, prof, placement, stored, desc).run()
    led = build_ledger(mat, spec, plan, placement)
    R = plan.ranks_per_stage
    experts = led.by_block[:, _EXPERTS].reshape(plan.pp, R)
    other = (led.total.reshape(plan.pp, R) - experts).max(axis=1)
    if spec.moe and plan.ep > 1:
        n = experts_per_slot(spec.E + plan.redundant_experts, plan.ep)[np.arange(R)]
        per_expert = (experts / n[None, :]).max(axis=1)
    else:
        per_expert = experts.max(axis=1)           # EP off: experts TP-sharded, independent of DP
    return tuple(float(x) for x in other), tuple(float(x) for x in per_expert), plan.ep


def plan_weights(spec: ModelSpec, plan: ParallelPlan, engine: str, recipe: str) -> list[int]:
    """Worst-rank resident bytes per PP stage of ``plan`` for a recipe (synthesized inventory)."""
    ep_on = plan.ep > 1
    ref_dp = 2 if (ep_on and plan.tp == 1) else 1
    ref = replace(plan, dp=ref_dp, ep=plan.tp * ref_dp if ep_on else 1)
    other, per_expert, _ = _reference(spec, ref, engine, recipe)
    if not (spec.moe and ep_on):
        return [int(round(o + e)) for o, e in zip(other, per_expert)]
    n = int(experts_per_slot(spec.E + plan.redundant_experts, plan.ep).max())
    return [int(round(o + e * n)) for o, e in zip(other, per_expert)]
