"""DeploymentContext: one deployment resolved once (model, plan, engine, recipe, device), asked by a
command for what it needs. It sits above the engines, the runtime budget and perf (it calls them),
while ``deployment.py`` holds only the records the engines themselves read."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


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
