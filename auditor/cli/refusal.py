"""Say loudly when the engine cannot start the deployment asked for (issue 30: DeepSeek-V3.2's
fp8-block recipe got a `vllm serve` line from plan, nothing from perf, and "fits" from memory with
61 "engine refuses to start" errors 40 lines further down).

memory has the materializer's own findings (every error finding is a reason the engine would not
load the checkpoint); perf and plan do not materialize, so they check the one start-up assertion
that depends on the recipe alone: the SFA backend asserts an unquantized kv_b_proj
(``auditor/engines/materialize.py``, ``kv_b``, read from vLLM-Ascend's SFA backend at the commit
the engine profile names).
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


def recipe_refusal(src: Any) -> str | None:
    """Why the engine cannot start this model's recipe (perf, plan), or None. A DSA model whose
    kv_b_proj is quantized (the quant description says so, or fp8-block ships it FP8) is refused."""
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
    return (f"{src.spec.name} with recipe {src.scheme_recipe}: kv_b_proj is {'/'.join(bad)}; the engine's SFA "
            "backend asserts an unquantized kv_b_proj and refuses to start (use a W8A8 / BF16 checkpoint, "
            "e.g. --recipe w8a8)")


def warn_refusal(src: Any) -> str | None:
    """Print the refusal as one ``audit: warning:`` line on stderr; return it."""
    why = recipe_refusal(src)
    if why is not None:
        click.echo(f"audit: warning: {why}", err=True)
    return why
