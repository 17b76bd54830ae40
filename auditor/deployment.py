"""One instance of a deployment, typed: what a launch command says and what the planner decided.

The planner hands these to the engine's launch writer (``Engine.launch``) and the launch-script
reader produces the same fields, so a plan, a command line and a launch script describe an
instance in one vocabulary. Field names follow vLLM's own flags.
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class InstancePlan:
    """One engine instance (aggregated, prefill or decode) and how many of it run."""

    name: str                          # "aggregated", "prefill", "decode"
    count: int
    tp: int
    dp: int
    ep: int
    sp: bool                           # sequence parallel; with a DSA model, DSA context parallel
    max_num_seqs: int
    max_num_batched_tokens: int
    max_model_len: int
    gpu_memory_utilization: float
    mtp: int = 0                       # speculative tokens K of the MTP drafter
    kv_cache_dtype: str = "bf16"
    kv_role: str | None = None         # kv_producer / kv_consumer / None (no KV transfer)
    hccl_buffsize_mb: int = 200
    pp: int = 1
    dcp: int = 1
    #: vLLM-Ascend additional_config enable_balance_scheduling (a global admission freeze while any DP
    #: rank is full; patch_balance_schedule.py:146-162, :396-403)
    balance_scheduling: bool = False

    @property
    def label(self) -> str:
        return f"{self.name} x{self.count}"
