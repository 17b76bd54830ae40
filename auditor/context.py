"""DeploymentContext: one deployment resolved once (model, plan, engine, recipe, device), the one
argument every layer below the commands takes for it.

Why one record: the five used to travel positionally through 28 functions in three orders, and a
flag dropped on the way was a silent wrong answer. The record sits just above the engines (it
resolves ``--engine`` text to an Engine) and below memory, runtime, perf, serving and the planner,
which all read it; ``deployment.py`` holds the per-instance records the engines themselves read.
"""
from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any


_NO_NAME = object()


@dataclass(frozen=True)
class DeploymentContext:
    """The model, its parallel plan, the engine object, the recipe the weights use and the device.

    It hashes by the engine's key and the device's name, so caches keyed on it never mix versions or
    devices; ``bare`` drops the device for caches of device-independent results (a layer program, a
    ledger). ``plan`` is None only for the planner's base, before a plan is chosen (``with_plan``)."""

    spec: Any
    plan: Any
    engine: Any                  # an engines.base.Engine (``--engine`` text is resolved here)
    recipe: str
    device: Any = field(default=None, compare=False, hash=False)
    device_name: str = ""

    def __post_init__(self) -> None:
        from .engines.registry import as_engine
        object.__setattr__(self, "engine", as_engine(self.engine))
        # the device's name, else its text: str() only when it has no name (getattr's default argument was
        # evaluated every time, the whole device profile's repr for each of ~1,500 records a plan makes)
        name = getattr(self.device, "name", _NO_NAME)
        object.__setattr__(self, "device_name", "" if self.device is None
                           else str(self.device) if name is _NO_NAME else name)
        if self.plan is not None:
            from .parallel import check_drafter
            check_drafter(self.spec, self.plan)

    def with_plan(self, plan: Any) -> "DeploymentContext":
        """The same model, engine, recipe and device under another parallel plan."""
        return replace(self, plan=plan)

    def with_(self, **changes: Any) -> "DeploymentContext":
        return replace(self, **changes)

    @property
    def bare(self) -> "DeploymentContext":
        """This deployment without its device: the key of what does not depend on the device."""
        return self if self.device is None else replace(self, device=None)

    def placement(self) -> Any:
        return self.engine.placement(self.spec, self.plan)
