"""Does a modelled workload fit a rank's HBM? Used by ``audit perf`` (one workload), ``audit sweep``
(vectorised over a grid) and ``audit plan`` (every candidate).

The engine a workload implies: ``max_num_seqs`` = the batch per DP rank, ``max_num_batched_tokens``
= the larger of the configured value and the step's tokens, ``max_model_len`` = the longest
request (context + new tokens). It fits when the KV budget is positive and every request of the
batch gets its blocks at full length: ``batch x cdiv(cdiv(len, DCP), bs) <= num_blocks``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ..context import DeploymentContext
from ..parallel import ParallelPlan
from .budget import RuntimeBudget, rank_budget, usable_total
from .weights import plan_weights
from ..units import GiB



@dataclass
class WorkloadFit:
    budget: RuntimeBudget
    batch: int
    request_tokens: int
    kv_needed_bytes: int

    @property
    def fits(self) -> bool:
        return self.budget.kv_available_bytes > 0 and self.kv_needed_bytes <= self.budget.kv_pool_bytes

    def verdict(self) -> str:
        b = self.budget
        if b.weights_bytes > b.total_bytes:
            return (f"weights alone ({b.weights_bytes / GiB:.2f} GiB per rank) exceed the die's usable "
                    f"{b.total_bytes / GiB:.2f} GiB")
        if b.kv_available_bytes <= 0:
            return (f"no KV budget: weights {b.weights_bytes / GiB:.2f} + activation {b.activation_peak_bytes / GiB:.2f}"
                    f" + non-torch {b.non_torch_bytes / GiB:.2f} GiB exceed util x total = "
                    f"{b.requested_bytes / GiB:.2f} GiB")
        if not self.fits:
            return (f"KV for {self.batch} x {self.request_tokens:,} tokens needs {self.kv_needed_bytes / GiB:.2f} GiB, "
                    f"the pool holds {b.kv_pool_bytes / GiB:.2f} GiB ({b.num_blocks:,} blocks)")
        return (f"fits: KV for {self.batch} x {self.request_tokens:,} tokens = {self.kv_needed_bytes / GiB:.2f} GiB "
                f"of {b.kv_pool_bytes / GiB:.2f} GiB")

    def summary(self) -> str:
        b = self.budget
        return (f"HBM per rank ({b.total_bytes / GiB:.2f} GiB usable, util {b.util:g}): weights "
                f"{b.weights_bytes / GiB:.2f} + activation {b.activation_peak_bytes / GiB:.2f} + non-torch "
                f"{b.non_torch_bytes / GiB:.2f} -> KV available {b.kv_available_bytes / GiB:.2f} GiB "
                f"({b.kv.variant}, {b.kv.bytes_per_token():,.0f} B/token); {self.verdict()}")

    def to_json(self) -> dict[str, Any]:
        return {"fits": self.fits, "verdict": self.verdict(), "batch": self.batch,
                "request_tokens": self.request_tokens, "kv_needed_bytes": self.kv_needed_bytes,
                "runtime": self.budget.to_json()}


def workload_fit(dep: DeploymentContext, *, batch: int, request_tokens: int, step_tokens: int, mtp: int = 0, util: float = 0.9,
                 kv_cache_dtype: str = "bf16", dcp: int = 1, hccl_buffsize_mb: int = 200,
                 dsa_cp: bool | None = None) -> WorkloadFit:
    """The budget of ``dep.plan`` configured for this workload, and whether its KV fits."""
    spec, plan, engine, recipe, device = dep.spec, dep.plan, dep.engine, dep.recipe, dep.device
    wplan = plan.with_(mtp=plan.mtp or mtp > 0)
    W = plan_weights(dep.with_plan(wplan))
    T = max(int(plan.max_num_batched_tokens), int(step_tokens))
    b = rank_budget(spec, wplan, engine, weights_bytes=W, device=device, total_bytes=usable_total(device), util=util,
                    max_model_len=max(1, int(request_tokens)), max_num_seqs=max(1, int(batch)),
                    max_num_batched_tokens=T, kv_cache_dtype=kv_cache_dtype, dcp=dcp,
                    hccl_buffsize_mb=hccl_buffsize_mb, mtp=mtp, dsa_cp=dsa_cp, recipe=recipe)
    # the batch as it runs: a decode step has 1 + K tokens of each request in flight
    need = int(batch) * b.kv.steady_bytes_per_request(max(1, int(request_tokens)), 1 + int(mtp))
    return WorkloadFit(b, int(batch), int(request_tokens), need)


def grid_budget(dep: DeploymentContext, *, batch: np.ndarray, request_tokens: np.ndarray, step_tokens: np.ndarray, mtp: np.ndarray,
                util: float = 0.9, kv_cache_dtype: str = "bf16", dsa_cp: bool | None = None,
                hccl_buffsize_mb: int = 200, dcp: int = 1, max_model_len: int | None = None) -> dict[str, Any]:
    """Vectorised budget over many workloads of one plan, with ``rank_budget``'s arithmetic
    (``budget.kv_base``): weights per PP stage come once per plan, each row is charged its own MTP
    drafter (K = 0 rows load no drafter weights and no drafter cache layer), the engine's graph pool
    is deducted where the version does, and the binding stage is the one with fewest blocks.
    Keys: weights (binding stage), kv_available, num_blocks, page_block, block_tokens, kv_tokens (what
    the blocks hold at ``max_model_len``, else at each row's request: ``KVSpec.tokens_held``), kv_free
    (negative: short). A row whose request is longer than ``max_model_len`` (when given) does not
    fit: the engine refuses such a request."""
    from .budget import kv_base
    spec, plan, eng, recipe, device = dep.spec, dep.plan, dep.engine, dep.recipe, dep.device
    dcp = dcp if dcp > 1 else getattr(plan, "dcp", 1)       # the plan's own DCP unless given
    ks = np.asarray(mtp).astype(np.int64)
    rows_mtp = ks > 0
    has_mtp = bool(spec.mtp_layers) and bool(np.any(rows_mtp))
    wplan = plan.with_(mtp=plan.mtp or has_mtp)

    by_k_sized = eng.weights_by_drafter_k(spec)

    def weights_plan(k: int) -> ParallelPlan:
        # a row's own drafter: K = 0 loads none (unless the plan pins it), K > 0 loads it, with its K
        # where the engine sizes buffers by K (Engine.weights_by_drafter_k)
        if k > 0 and spec.mtp_layers:
            return plan.with_(mtp=True, num_speculative_tokens=k if by_k_sized else plan.num_speculative_tokens)
        return plan
    by_k = {int(k): plan_weights(dep.with_plan(weights_plan(int(k)))) for k in np.unique(ks)}
    if dsa_cp is None:                  # the engine's rule over the plan's switches (its placement)
        dsa_cp = eng.placement(spec, plan).dsa_cp
    T = np.maximum(float(plan.max_num_batched_tokens), step_tokens)
    core = kv_base(eng, spec, plan, total_bytes=usable_total(device), util=util, tokens=T, seqs=batch, mtp=mtp,
                   dsa_cp=dsa_cp, hccl_buffsize_mb=hccl_buffsize_mb, dcp=dcp, soc=eng.soc(device), recipe=recipe,
                   max_model_len=max_model_len)
    best = None
    for s in range(plan.pp):
        keys = sorted(by_k)
        per_k = np.array([float(by_k[k][s]) for k in keys])
        W = float(per_k[0]) if len(keys) == 1 else per_k[np.searchsorted(keys, ks)]
        kv = eng.kv_spec(spec, wplan, variant=kv_cache_dtype, dcp=dcp, mtp=has_mtp, stage=s, arch=eng.soc(device))
        page = float(kv.page_block_bytes)
        if has_mtp and not plan.mtp and not bool(np.all(rows_mtp)):
            kv0 = eng.kv_spec(spec, plan, variant=kv_cache_dtype, dcp=dcp, mtp=False, stage=s, arch=eng.soc(device))
            page = np.where(rows_mtp, page, float(kv0.page_block_bytes))
        avail = core["base"] - W
        blocks = np.floor(np.maximum(avail, 0.0) / page)
        per_req = kv.request_blocks(np.asarray(request_tokens))     # the spec's own demand (a pool: its groups)
        free = (blocks - batch * per_req) * page
        free = np.where(avail > 0, free, np.minimum(avail, -1.0))
        if max_model_len is not None:
            free = np.where(np.asarray(request_tokens) <= max_model_len, free, np.minimum(free, -1.0))
        held_at = np.asarray(request_tokens) if max_model_len is None else max_model_len
        stage = {"weights": W, "kv_available": avail, "num_blocks": blocks, "page_block": page,
                 "block_tokens": kv.tokens_per_block, "kv_tokens": kv.tokens_held(blocks, held_at), "kv_free": free}
        if best is None:
            best = stage
        else:
            # the binding stage per row: fewest blocks (then least available memory), as rank_budget
            take = (blocks < best["num_blocks"]) | ((blocks == best["num_blocks"]) & (avail < best["kv_available"]))
            best = {k: (np.where(take, v, best[k]) if k != "block_tokens" else v) for k, v in stage.items()}
    return best


def grid_kv_free(dep: DeploymentContext, **kw: Any) -> tuple[float, np.ndarray]:
    """(worst-rank weights, KV bytes left after each workload's requests; negative when short)."""
    g = grid_budget(dep, **kw)
    return g["weights"], g["kv_free"]


def margin_util(dep: DeploymentContext, *, util: float,
                max_model_len: int, max_num_seqs: int, max_num_batched_tokens: int, mtp: int,
                kv_cache_dtype: str = "bf16", dcp: int = 1, hccl_buffsize_mb: int = 200) -> float:
    """The largest gpu-memory-utilization, at most ``util`` and in steps of 0.01, whose ``(1 - util)``
    margin still holds what the engine allocates outside the KV budget (``RuntimeBudget.headroom_bytes``
    >= 0: sparse-attention prefill transients the profile run skips, late HCCL groups, workspaces).

    Why: a deployment launched above it runs out of memory at its first full-size prefill chunk. The
    engine's own P/D tutorial lowers a prefill node with 32,560-token chunks to 0.82 for this; the
    margin does not depend on the weights, so it is one budget per instance shape."""
    from .budget import rank_budget
    b = rank_budget(dep.spec, dep.plan, dep.engine, weights_bytes=0.0, device=dep.device, util=util, max_model_len=max_model_len,
                    max_num_seqs=max_num_seqs, max_num_batched_tokens=max_num_batched_tokens, mtp=mtp,
                    kv_cache_dtype=kv_cache_dtype, dcp=dcp, hccl_buffsize_mb=hccl_buffsize_mb)
    room = (b.total_bytes - b.others_bytes - b.unbudgeted_bytes) / b.total_bytes
    return min(float(util), np.floor(room * 100 + 1e-9) / 100)
