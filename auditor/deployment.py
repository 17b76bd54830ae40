"""One instance of a deployment, typed: what a launch command says and what the planner decided.

The planner hands these to the engine's launch writer (``Engine.launch``) and the launch-script
reader produces the same fields, so a plan, a command line and a launch script describe an
instance in one vocabulary. Field names follow vLLM's own flags.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar


@dataclass(frozen=True)
class InstancePlan:
    """One engine instance (aggregated, prefill or decode) and how many of it run."""

    name: str                          # "aggregated", "prefill", "decode"
    count: int
    tp: int
    dp: int
    ep: int
    sp: bool                           # sequence parallel (FlashComm1)
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
    #: largest decode step (tokens per DP rank) replayed from a captured ACL graph (max of
    #: cudagraph_capture_sizes; vLLM pads a step to the next captured size and runs a larger one eager;
    #: 0 = always eager; -1 = the launch names none: the engine's default, ``Engine.graph_tokens``)
    graph_tokens: int = -1
    #: VLLM_ASCEND_ENABLE_FUSED_MC2 (1: dispatch_ffn_combine; its workspace is in the activation peak)
    fused_mc2: int = 0
    #: additional_config mega_moe_max_tokens: dispatch_ffn_combine's max_output_size (0: the version's)
    combine_max_tokens: int = 0
    #: additional_config.enable_dsa_cp (None: not set; what it does with ``sp`` is the engine version's rule)
    dsa_cp: bool | None = None
    redundant_experts: int = 0
    nz_mode: int = 1
    shared_expert_dp: bool = False
    layer_sharding: tuple[str, ...] = ()
    #: additional_config finegrained_tp_config as (module, group size) pairs (``auditor.finegrained``)
    finegrained_tp: tuple[tuple[str, int], ...] = ()
    #: vLLM --async-scheduling: the per-step host work overlaps the device step (``perf.host``; bench)
    async_scheduling: bool = False
    #: vLLM --block-size (0: the engine's default)
    block_size: int = 0
    #: speculative_config enforce_eager: the drafter runs eager behind a replayed decode graph (``perf.host``;
    #: bench; ``llm_base_proposer.py:178``@182b75ea)
    draft_eager: bool = False
    #: the drafter's speculative_config method: "mtp" (the checkpoint's MTP layers) or "dspark" (its DSpark
    #: block drafter, ``ModelSpec.drafter``); what a launch writes
    speculative_method: str = "mtp"

    #: instance name -> the parallel plan's role
    ROLES: ClassVar[dict[str, str]] = {"aggregated": "mixed", "prefill": "prefill", "decode": "decode"}

    @classmethod
    def from_plan(cls, name: str, count: int, plan: Any, **runtime: Any) -> "InstancePlan":
        """An instance of ``plan`` (a ParallelPlan): every parallel field carried over, so no flag of the
        plan is lost on the way to bench or a launch. ``runtime``: the remaining InstancePlan fields."""
        from .parallel import carried
        role = {"prefill": "kv_producer", "decode": "kv_consumer"}.get(plan.role)
        return cls(name=name, count=count, **{**carried(plan), "kv_role": role, **runtime})

    def parallel_plan(self) -> Any:
        """The ParallelPlan this instance runs (the inverse of ``from_plan``), validated."""
        from .parallel import ParallelPlan, carried
        return ParallelPlan(**carried(self), role=self.ROLES[self.name], mtp=self.mtp > 0,
                            num_speculative_tokens=self.mtp).validate()

    @property
    def label(self) -> str:
        return f"{self.name} x{self.count}"
