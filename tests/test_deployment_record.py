"""One deployment record: no function below the commands takes the model, plan, engine, recipe and
device as separate positional parameters (they travelled in three orders through 28 functions, and a
flag dropped on the way was a silent wrong answer); the record resolves the engine once and keys
device-independent caches without the device."""
from __future__ import annotations

import ast
from pathlib import Path

from auditor.context import DeploymentContext
from auditor.devices.profiles import load_device
from auditor.engines.registry import as_engine
from auditor.model.presets import preset_spec
from auditor.parallel import ParallelPlan

ROOT = Path(__file__).resolve().parents[1] / "auditor"
#: parameter names that mean one part of a deployment (and their short spellings)
PART = {"spec": "spec", "plan": "plan", "base": "plan", "engine": "engine", "eng": "engine",
        "recipe": "recipe", "device": "device", "dev": "device"}


def _positional_tuples() -> list[str]:
    found = []
    for path in sorted(ROOT.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            names = [a.arg for a in node.args.posonlyargs + node.args.args]
            parts = {PART[n] for n in names if n in PART}
            # four of the five parts: the tuple that travelled (a (spec, plan, engine) triple is the
            # engine's own interface, as vLLM's per-layer specs take the model and the parallel config)
            if len(parts) >= 4:
                found.append(f"{path.relative_to(ROOT.parent)}:{node.lineno} {node.name}({', '.join(names)})")
    return found


def test_the_finder_sees_a_positional_tuple(tmp_path, monkeypatch):
    pkg = tmp_path / "auditor"
    pkg.mkdir()
    (pkg / "m.py").write_text("def f(spec, base, eng, dev, x): pass\ndef g(spec, plan, engine): pass\n")
    monkeypatch.setitem(globals(), "ROOT", pkg)
    assert _positional_tuples() == ["auditor/m.py:1 f(spec, base, eng, dev, x)"]


def test_no_function_takes_a_deployment_positionally():
    assert _positional_tuples() == []


def test_record_resolves_the_engine_and_keys_caches_without_the_device():
    from auditor.perf.api import cached_program
    from auditor.runtime.weights import plan_weights
    spec, plan = preset_spec("glm-5.1"), ParallelPlan(tp=16, ep=16)
    a3 = DeploymentContext(spec, plan, "vllm-ascend@main", "w8a8", load_device("a3-752t"))
    a2 = DeploymentContext(spec, plan, as_engine("vllm-ascend@main"), "w8a8", load_device("a2-313t"))
    assert a3.engine is as_engine("vllm-ascend@main")
    assert a3 != a2 and a3.bare == a2.bare and a3.bare.device is None
    # the layer program and the ledger do not depend on the device: one cached object for both
    assert cached_program(a3, "decode", "repetition", True) is cached_program(a2, "decode", "repetition", True)
    assert plan_weights(a3) == plan_weights(a2)
    # another plan is another deployment
    assert a3.with_plan(plan.with_(tp=8, ep=8)) != a3
    assert plan_weights(a3.with_plan(plan.with_(tp=8, ep=8))) != plan_weights(a3)


def test_device_name_is_read_without_formatting_the_device():
    """``device_name`` is the device's ``name``; the device is formatted (``str``) only when it has none:
    ``audit plan`` makes ~1,500 records, and formatting the whole device profile for each was ~0.1 s."""
    from auditor.context import DeploymentContext
    from auditor.model.presets import preset_spec

    class Named:
        name = "a3-752t"

        def __str__(self):
            raise AssertionError("formatted")

    class Unnamed:
        def __str__(self):
            return "unnamed-device"

    spec = preset_spec("glm-5.1")
    assert DeploymentContext(spec, None, "vllm-ascend@main", "w8a8", Named()).device_name == "a3-752t"
    assert DeploymentContext(spec, None, "vllm-ascend@main", "w8a8", Unnamed()).device_name == "unnamed-device"
    assert DeploymentContext(spec, None, "vllm-ascend@main", "w8a8").device_name == ""
    none_named = type("NoneNamed", (), {"name": None})()
    assert DeploymentContext(spec, None, "vllm-ascend@main", "w8a8", none_named).device_name is None
