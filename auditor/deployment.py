"""One instance of a deployment, typed: what a launch command says and what the planner decided.

The planner hands these to the engine's launch writer (``Engine.launch``) and the launch-script
reader produces the same fields, so a plan, a command line and a launch script describe an
instance in one vocabulary. Field names follow vLLM's own flags.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


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
    #: largest decode step (tokens per DP rank) replayed from a captured ACL graph (max of
    #: cudagraph_capture_sizes; vLLM pads a step to the next captured size and runs a larger one eager;
    #: 0 = always eager; -1 = the launch names none: the engine's default, ``Engine.graph_tokens``)
    graph_tokens: int = -1
    #: VLLM_ASCEND_ENABLE_FUSED_MC2 (1: dispatch_ffn_combine; its workspace is in the activation peak)
    fused_mc2: int = 0
    #: additional_config mega_moe_max_tokens: dispatch_ffn_combine's max_output_size (0: the version's)
    combine_max_tokens: int = 0
    #: additional_config finegrained_tp_config as (module, group size) pairs (``auditor.finegrained``)
    finegrained_tp: tuple[tuple[str, int], ...] = ()
    #: vLLM --async-scheduling: the per-step host work overlaps the device step (``perf.host``; bench)
    async_scheduling: bool = False

    @property
    def label(self) -> str:
        return f"{self.name} x{self.count}"


@dataclass(frozen=True)
class DeploymentContext:
    """One deployment resolved once: the model, its parallel plan, the engine object, the recipe the
    weights use and the device. A command builds it after parsing and asks it for what it needs,
    instead of passing the five positionally through every layer; it hashes by the engine's key and
    the device's name, so caches keyed on it never mix versions or devices."""

    spec: Any
    plan: Any
    engine: Any                  # an engines.base.Engine
    recipe: str
    device: Any = field(compare=False, hash=False)
    device_name: str = ""

    def __post_init__(self) -> None:
        from .engines.registry import as_engine
        object.__setattr__(self, "engine", as_engine(self.engine))
        object.__setattr__(self, "device_name", getattr(self.device, "name", str(self.device)))

    def with_plan(self, plan: Any) -> "DeploymentContext":
        return DeploymentContext(self.spec, plan, self.engine, self.recipe, self.device)

    def placement(self) -> Any:
        return self.engine.placement(self.spec, self.plan)

    def weights(self) -> list[int]:
        """Worst-rank resident bytes per PP stage (a recipe's synthesized checkpoint)."""
        from .runtime.weights import plan_weights
        return plan_weights(self.spec, self.plan, self.engine, self.recipe)

    def evaluate(self, workload: Any, **kw: Any) -> Any:
        """One phase of the perf model (``perf.api.evaluate_phase``)."""
        from .perf.api import evaluate_phase
        return evaluate_phase(self.spec, self.plan, self.engine, workload, self.device, self.recipe, **kw)

    def fit(self, **kw: Any) -> Any:
        """The HBM budget configured for a workload and whether its KV fits (``runtime.feasibility``)."""
        from .runtime.feasibility import workload_fit
        return workload_fit(self.spec, self.plan, self.engine, self.recipe, self.device, **kw)

    def growth(self, contexts: list[int], tokens: int, batch: int, mtp: int, **kw: Any) -> Any:
        """Step time per op class across contexts (``perf.growth``)."""
        from .perf.growth import context_growth
        return context_growth(self.spec, self.plan, self.engine, self.recipe, self.device, contexts, tokens, batch,
                              mtp, **kw)
