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

from ..model.spec import ModelSpec
from ..parallel import ParallelPlan
from ..engines.registry import EngineLike, as_engine
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


def workload_fit(spec: ModelSpec, plan: ParallelPlan, engine: EngineLike, recipe: str, device: Any, *, batch: int,
                 request_tokens: int, step_tokens: int, mtp: int = 0, util: float = 0.9,
                 kv_cache_dtype: str = "bf16", dcp: int = 1, hccl_buffsize_mb: int = 200,
                 dsa_cp: bool | None = None) -> WorkloadFit:
    """The budget of ``plan`` configured for this workload, and whether its KV fits."""
    wplan = plan.with_(mtp=plan.mtp or mtp > 0)
    W = plan_weights(spec, wplan, engine, recipe)
    T = max(int(plan.max_num_batched_tokens), int(step_tokens))
    b = rank_budget(spec, wplan, engine, weights_bytes=W, device=device, total_bytes=usable_total(device), util=util,
                    max_model_len=max(1, int(request_tokens)), max_num_seqs=max(1, int(batch)),
                    max_num_batched_tokens=T, kv_cache_dtype=kv_cache_dtype, dcp=dcp,
                    hccl_buffsize_mb=hccl_buffsize_mb, mtp=mtp, dsa_cp=dsa_cp)
    need = int(batch) * b.kv.bytes_per_request(max(1, int(request_tokens)))
    return WorkloadFit(b, int(batch), int(request_tokens), need)


def grid_budget(spec: ModelSpec, plan: ParallelPlan, engine: EngineLike, recipe: str, device: Any, *,
                batch: np.ndarray, request_tokens: np.ndarray, step_tokens: np.ndarray, mtp: np.ndarray,
                util: float = 0.9, kv_cache_dtype: str = "bf16", dsa_cp: bool | None = None,
                hccl_buffsize_mb: int = 200) -> dict[str, Any]:
    """Vectorised budget over many workloads of one plan. Weights come once per plan; the activation
    peak, A_kv, the block count and the KV left after the batch's requests are array expressions.
    Keys: weights, kv_available, num_blocks, page_block, block_tokens, kv_free (negative: short)."""
    eng = as_engine(engine)
    rows_mtp = np.asarray(mtp) > 0
    has_mtp = bool(spec.mtp_layers) and bool(np.any(rows_mtp))
    wplan = plan.with_(mtp=plan.mtp or has_mtp)
    W = float(max(plan_weights(spec, wplan, engine, recipe)))
    if has_mtp and not plan.mtp and not np.all(rows_mtp):
        # each row is charged its own drafter: K = 0 rows load no MTP weights and no drafter cache layer
        W0 = float(max(plan_weights(spec, plan, engine, recipe)))
        W = np.where(rows_mtp, W, W0)
    if dsa_cp is None:
        dsa_cp = bool(spec.dsa and plan.sp and plan.tp > 1)
    T = np.maximum(float(plan.max_num_batched_tokens), step_tokens)
    soc = eng.soc(device)
    state = {"soc": soc} if soc else {}
    terms = eng.activation_terms(spec, tokens=T, seqs=batch, mtp=mtp, tp=plan.tp, dp=plan.dp, ep=plan.ep, sp=plan.sp,
                                 dsa_cp=dsa_cp, **state)
    p_act = eng.activation_peak(terms)
    # which communicators the profile run touches depends on the comm path at T; for the grid it is
    # taken at the plan's own max_num_batched_tokens (unknown -> ep and mc2 counted)
    n_nt = sum(eng.non_torch_terms(plan, hccl_buffsize_mb=hccl_buffsize_mb).values())
    avail = usable_total(device) * util - W - p_act - n_nt - eng.graph_deducted_bytes()
    kv = eng.kv_spec(spec, wplan, variant=kv_cache_dtype, mtp=has_mtp, dcp=getattr(plan, "dcp", 1))
    page = float(kv.page_block_bytes)
    if has_mtp and not plan.mtp and not np.all(rows_mtp):
        kv0 = eng.kv_spec(spec, plan, variant=kv_cache_dtype, mtp=False, dcp=getattr(plan, "dcp", 1))
        page = np.where(rows_mtp, page, float(kv0.page_block_bytes))
    blocks = np.floor(np.maximum(avail, 0.0) / page)
    per_req = np.ceil(np.ceil(np.asarray(request_tokens) / kv.dcp) / kv.block_size)
    free = (blocks - batch * per_req) * page
    free = np.where(avail > 0, free, np.minimum(avail, -1.0))
    return {"weights": W, "kv_available": avail, "num_blocks": blocks, "page_block": page,
            "block_tokens": kv.tokens_per_block, "kv_free": free}


def grid_kv_free(spec: ModelSpec, plan: ParallelPlan, engine: EngineLike, recipe: str, device: Any, **kw: Any
                 ) -> tuple[float, np.ndarray]:
    """(worst-rank weights, KV bytes left after each workload's requests; negative when short)."""
    g = grid_budget(spec, plan, engine, recipe, device, **kw)
    return g["weights"], g["kv_free"]
