"""Step-cost coefficients of one deployment instance, precomputed once from the perf kernel.

The simulation (``sim``) asks for thousands of step times; evaluating the layer program each time
would cost ~1 ms per step. So each instance is tabulated once (~10-30 ms):

* ``dec[b, c]``: device time of a uniform decode step of ``b`` requests (1+K tokens each, the K
  drafter passes included) at context ``c`` (linear in ``c`` between grid points);
* ``pre_rest[t]``: context-independent device time of an eager (prefill or mixed) step of ``t``
  tokens (``kernels.perf_core.partial_time(REST_PART)``, batch 1, drafter pass 1 on the prompt);
* ``pre_ctx[t, c]``: the attention-like part of a ``t``-token prompt chunk starting at context
  ``c`` (``CTX_PART``; indexer scores, top-k, SFA gathers); bilinear in (t, c);
* ``dec_ctx[c]``: the attention-like part of one decode request at context ``c`` (mixed steps).

Host time is not one fitted constant per phase: it is derived from what runs (the serving block
of the device profile, ``auditor/devices/*.json`` ``serving``):

* an eager step (any prefill chunk in the DP group: under ``FULL_DECODE_ONLY`` only uniform decode
  batches are captured, and the graph mode is the min over DP ranks, so one eager rank makes all
  eager; research/serving-facts.md §2 "Lockstep", §6 ``graph_mode.md:14-45``) pays
  ``launches x launch_us`` for every kernel and collective of the program, plus
  ``prefill_token_us`` per prefill token (work the roofline misses in eager prefill);
* a graph decode step pays ``step_ms`` (replay, scheduling, sampling) and, on GLM models whose MTP
  drafter is forced eager (``llm_base_proposer.py:178-197``, serving-facts §6), the drafter's
  kernels K times at ``launch_us``;
* every step pays ``decode_token_us`` per decode token (MoE dispatch/combine and per-expert
  grouped-matmul work that grows with routed tokens across EP and that the roofline under-counts).
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from ..deployment import InstancePlan
from ..context import DeploymentContext
from ..parallel import ParallelPlan
from ..perf.host import DEFAULT_HOST, HOST_KEYS, host_model, host_params, launch_counts  # noqa: F401 (re-exported)

ROLE = {"aggregated": 0, "prefill": 1, "decode": 2}
#: context grid of the tables (tokens); extended to the instance's max_model_len
_CTX = (0, 1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072, 262144)
#: P->D KV pull bandwidth per die: the TensorCast A3 CLOS tier (196 GB/s), an assumption; vLLM-Ascend
#: publishes no figure for the Mooncake "ascend" transport (serving-facts §1.8, UNCONFIRMED)
DEFAULT_KV_LINK_BYTES_PER_S = 196e9


@dataclass
class StepCosts:
    inst: InstancePlan
    plan: ParallelPlan
    ctx: np.ndarray          # context grid
    tok: np.ndarray          # prefill-token grid
    dec: np.ndarray          # [max_num_seqs + 1, len(ctx)]
    pre_rest: np.ndarray     # [len(tok)]
    pre_ctx: np.ndarray      # [len(tok), len(ctx)]
    dec_ctx: np.ndarray      # [len(ctx)]
    launches_eager: float    # kernels + collectives of one eager step
    launches_draft: float    # kernels + collectives of the drafter's K passes (an eager drafter), else 0
    num_blocks: int          # KV blocks per rank
    block_tokens: int
    kv_bytes_per_token: float
    weights_gib: float
    kv_gib: float
    token_split: float = 1.0  # ranks a prefill step's tokens are split over (DSA-CP: TP; perf.host)
    weights_bytes: int = 0   # the budget's own figures (what `audit memory` reports for these flags)
    kv_tokens: int = 0
    fixed_blocks: int = 0    # blocks a request holds whatever its length (sliding windows and states of a pool)
    #: tokens a prefix-cache hit is a multiple of on this instance's pool (``PooledKVSpec.hit_alignment_tokens``:
    #: the lcm of its groups' block sizes); 0: one block table, hits in the engine's ``prefix_block_tokens``
    hit_alignment: int = 0


def instance_plan(inst: InstancePlan) -> ParallelPlan:
    return inst.parallel_plan()


def step_costs(base: DeploymentContext, inst: InstancePlan) -> StepCosts:
    """The step-cost tables of one instance: ``base`` gives the model, engine, recipe and device, the
    instance its plan and runtime limits."""
    from auditor_kernels.perf_core import CTX_PART, REST_PART, partial_time, sweep_grid

    from ..perf.api import cached_program
    from ..perf.device import group_table, kernel_vector
    from ..runtime.feasibility import workload_fit
    plan = instance_plan(inst).validate()
    dep = base.with_plan(plan)
    spec, eng, device = dep.spec, dep.engine, dep.device
    k = int(inst.mtp)
    dv = kernel_vector(device)              # host time is auditor.perf.host's, per step
    grp = group_table(device, plan)
    cache = inst.kv_cache_dtype
    from ..perf.program import kernel_path_of
    path = kernel_path_of(eng, cache, device)       # the engine's kernels of this cache on the device's generation
    pre = cached_program(dep, "prefill", "repetition", True, path)
    dec = cached_program(dep, "decode", "repetition", True, path)
    pa, da = pre.arrays(), dec.arrays()
    ctx = np.array(sorted({c for c in _CTX if c < inst.max_model_len} | {inst.max_model_len}), dtype=np.float64)
    S = max(1, inst.max_num_seqs)
    keys = np.column_stack([np.ones(S), np.arange(1, S + 1, dtype=np.float64), np.full(S, float(k))])
    d = sweep_grid(*da, 1, float(plan.tp), keys, ctx, dv, grp)
    dtab = np.vstack([d[:1], d])
    top = inst.max_num_batched_tokens + S * (1 + k)
    # full chunks (the budget) are the most common eager step: a grid point, so they are not interpolated
    tok = np.unique(np.concatenate([[1.0], np.geomspace(1, top, 40).round(), [float(inst.max_num_batched_tokens),
                                                                             float(top)]]))
    rest = np.array([partial_time(*pa, 0, float(plan.tp), t, 0.0, 1.0, float(k), dv, grp, REST_PART) for t in tok])
    pctx = np.array([[partial_time(*pa, 0, float(plan.tp), t, c, 1.0, float(k), dv, grp, CTX_PART) for c in ctx]
                     for t in tok])
    dctx = np.array([partial_time(*da, 1, float(plan.tp), 1.0, c, 1.0, float(k), dv, grp, CTX_PART) for c in ctx])
    # launches (the drafter eager: the launch's enforce_eager or the engine's rule, GLM; serving-facts §6), split
    hm = host_model(spec, pre, dec, k, device, engine=eng, draft_eager=bool(getattr(inst, "draft_eager", False)),
                    async_scheduling=bool(getattr(inst, "async_scheduling", False)))
    # the KV pool of this one instance: the same budget as `audit memory` for these flags (workload_fit ->
    # rank_budget; the grid form approximates the communicators for many plans at once)
    b = workload_fit(dep, batch=S, request_tokens=inst.max_model_len,
                     step_tokens=inst.max_num_batched_tokens, mtp=k, util=inst.gpu_memory_utilization,
                     kv_cache_dtype=cache, dcp=plan.dcp, hccl_buffsize_mb=inst.hccl_buffsize_mb).budget
    blocks = int(b.num_blocks)
    per_block, fixed = b.kv.affine_blocks(1 + k)
    return StepCosts(inst, plan, ctx, tok, dtab, rest, pctx, dctx, hm.launches_eager, hm.launches_draft,
                     blocks, int(per_block), float(b.kv.bytes_per_token()), b.weights_bytes / 2**30,
                     blocks * b.kv.page_block_bytes / 2**30, hm.token_split, int(b.weights_bytes), int(b.kv_tokens),
                     int(fixed), int(getattr(b.kv, "hit_alignment_tokens", 0)))


__all__ = ["StepCosts", "step_costs", "host_params", "launch_counts", "ROLE", "DEFAULT_KV_LINK_BYTES_PER_S",
           "HOST_KEYS", "DEFAULT_HOST", "math"]
