"""Glue between a budget and the report dicts: the ``runtime`` object, ``vllm_log_lines`` and the
budget's assumptions, added to any report (memory, perf)."""
from __future__ import annotations

from typing import Any

from .budget import RuntimeBudget


def attach_runtime(rep: dict, budget: RuntimeBudget, device: Any) -> dict:
    rep["device"] = {"name": getattr(device, "name", str(device)), "label": getattr(device, "label", ""),
                     "hbm_capacity_bytes": getattr(device, "hbm_capacity_bytes", None),
                     "hbm_usable_bytes": budget.total_bytes}
    rep["runtime"] = budget.to_json()
    rep["vllm_log_lines"] = budget.log_lines()
    seen = set(rep.setdefault("assumptions", []))
    rep["assumptions"] += [a for a in budget.assumptions if a not in seen]
    return rep
