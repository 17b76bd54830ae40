"""Weight bytes per (layer, module) as resident on one rank: the single adapter between the perf
model and the memory ledger.

Why one place: an op's weight traffic must equal what the memory report says the rank holds, so
perf and memory can never disagree; ``auditor.memory.api.module_bytes`` is the only source.
Keys: layer -1 holds "embed_tokens" and "lm_head"; decoder layers (MTP layer = index Lyr) hold
module names relative to the layer ("self_attn.q_b_proj", "mlp.experts", ...);
"self_attn.kv_b_proj" holds the derived W_UK_T + W_UV bytes.
"""
from __future__ import annotations

from ..context import DeploymentContext
from ..memory.api import module_bytes

WeightMap = dict[tuple[int, str], int]


def weight_bytes(dep: DeploymentContext, rank: int = 0) -> tuple[WeightMap, str]:
    """(bytes per (layer, module), source): always the memory ledger's resident bytes, of the pass that keeps
    the q-side originals: on a decode node vLLM-Ascend's MLAPO releases them (``AscendMaterializer.mlapo_drops``)
    and reads its own copies of the same bytes instead, so an op's weight traffic is theirs."""
    from dataclasses import replace
    plan = dep.plan
    keep = replace(plan, max_num_batched_tokens=max(plan.max_num_batched_tokens, 8192))
    return dict(module_bytes(dep.with_plan(keep), rank)), "ledger"
