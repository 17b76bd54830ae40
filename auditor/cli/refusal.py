"""Say loudly when the engine cannot start the deployment asked for (issue 30: DeepSeek-V3.2's
fp8-block recipe got a `vllm serve` line from plan, nothing from perf, and "fits" from memory with
61 "engine refuses to start" errors 40 lines further down).

memory has the materializer's own findings (every error finding is a reason the engine would not
load the checkpoint); perf and plan do not materialize, so they check the one start-up assertion
that depends on the recipe alone, when the engine has one (``Engine.recipe_refusal``: vLLM-Ascend's SFA
backend asserts an unquantized kv_b_proj, ``auditor/engines/materialize.py``, ``kv_b``; upstream vLLM
on CUDA has no such assertion).
"""
from __future__ import annotations

from typing import Any

import click


def first_refusal(findings: list[dict]) -> str | None:
    """The first error group of a memory report, as one phrase (its message and how many tensors)."""
    from ..report.findings import group_findings
    errors = [g for g in group_findings(findings) if g["severity"] == "error"]
    if not errors:
        return None
    g = errors[0]
    more = f"; {len(errors) - 1} more error group(s)" if len(errors) > 1 else ""
    return f"{g['message']} ({g['count']} x {g['module']}{more}; see Findings)"


def lead_answer(rep: dict) -> None:
    """memory: the answer line leads with the refusal when the engine cannot start this checkpoint."""
    why = first_refusal(rep.get("findings", []))
    if why is not None and "answer" in rep:
        rep["answer"] = f"ENGINE CANNOT START: {why}; otherwise {rep['answer']}"


def recipe_refusal(src: Any, engine: Any = None) -> str | None:
    """Why ``engine`` cannot start this model's recipe (perf, plan), or None. The rule is the engine's
    (``Engine.recipe_refusal``: vLLM-Ascend's SFA backend asserts an unquantized kv_b_proj; upstream vLLM
    on CUDA builds W_UK_T / W_UV from an FP8 kv_b_proj); this finds the non-float kv_b_proj schemes (the
    quant description says so, or fp8-block ships it FP8). ``engine`` None: the default engine."""
    if not getattr(src.spec, "dsa", False):
        return None
    desc = src.desc
    if desc is not None and len(desc):
        schemes = {v for k, v in desc.per_tensor.items() if "kv_b_proj" in k}
        bad = sorted(s for s in schemes if s not in ("FLOAT", ""))
    else:
        bad = ["FP8"] if src.scheme_recipe == "fp8-block" else []
    if not bad:
        return None
    from ..engines.registry import as_engine
    why = as_engine(engine).recipe_refusal(src.spec, bad)
    return None if why is None else f"{src.spec.name} with recipe {src.scheme_recipe}: {why}"


def refuse_kv(spec: Any, engine: Any, kv_cache_dtype: str | None) -> None:
    """perf, bench, plan, sweep: stop with the engine's own error when it would not build the model with
    this KV cache (``Engine.kv_refusal``: upstream vLLM's DeepSeek-V3.2 attention asserts an fp8 cache);
    memory shows the same error as its start-up verdict instead."""
    from ..engines.registry import as_engine
    from ..errors import AuditInputError
    eng = as_engine(engine)
    why = eng.kv_refusal(spec, kv_cache_dtype or "bf16")
    if why is not None:
        raise AuditInputError("--kv-cache-dtype", f"{eng.label} cannot start {spec.name} with a "
                                                  f"{kv_cache_dtype or 'bf16'} KV cache: {why}")


def warn_device(engine: Any, device: Any) -> str | None:
    """One ``audit: warning:`` line when the engine does not run on the device's vendor
    (``Engine.device_mismatch``: vLLM-Ascend on an H200, upstream vLLM on an A3); return it."""
    from ..engines.registry import as_engine
    why = as_engine(engine).device_mismatch(device)
    if why is not None:
        click.echo(f"audit: warning: {why}", err=True)
    return why


def warn_refusal(src: Any, engine: Any = None) -> str | None:
    """Print the refusal as one ``audit: warning:`` line on stderr; return it."""
    why = recipe_refusal(src, engine)
    if why is not None:
        click.echo(f"audit: warning: {why}", err=True)
    return why
