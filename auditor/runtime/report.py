"""Glue between a budget and the report dicts: the ``runtime`` object, ``vllm_log_lines`` and the
budget's assumptions, added to any report (memory, perf)."""
from __future__ import annotations

from typing import Any

from .budget import RuntimeBudget
from ..units import GiB


def answer_line(b: RuntimeBudget, dp: int = 1) -> str:
    """The one-line answer: weights per rank, the KV pool, and how many requests of max_model_len one
    DP engine holds (x DP for the deployment), or the engine's refusal."""
    head = f"weights {b.weights_bytes / GiB:.2f} GiB/rank"
    if b.startup_error:
        return f"ENGINE CANNOT START: {b.startup_error} (exit 3); otherwise {head}"
    if b.kv_available_bytes <= 0:
        return f"{head}; no KV budget left: the engine refuses to start (exit 3)"
    pool = f"KV pool {b.kv_pool_bytes / GiB:.2f} GiB = {b.kv_tokens:,} tokens"
    if not b.fits:
        return (f"{head}; {pool}; one request of max_model_len {b.max_model_len:,} does NOT fit "
                f"(largest that fits: {b.estimated_max_model_len:,})")
    n = b.max_concurrency
    total = f" (x{dp} DP engines = {n * dp:.2f})" if dp > 1 else ""
    return f"{head}; {pool}; {n:.2f} requests of {b.max_model_len:,} tokens per DP engine{total}"


def attach_runtime(rep: dict, budget: RuntimeBudget, device: Any) -> dict:
    rep["device"] = {"name": getattr(device, "name", str(device)), "label": getattr(device, "label", ""),
                     "hbm_capacity_bytes": getattr(device, "hbm_capacity_bytes", None),
                     "hbm_usable_bytes": budget.total_bytes}
    rep["runtime"] = budget.to_json()
    rep["vllm_log_lines"] = budget.log_lines()
    rep["answer"] = answer_line(budget, rep.get("plan", {}).get("dp", 1))
    seen = set(rep.setdefault("assumptions", []))
    rep["assumptions"] += [a for a in budget.assumptions if a not in seen]
    return rep
