"""Findings grouped for reading: one row per (severity, message, module template) with the layers.

Why: a per-layer check fires once per layer, so a 61-layer model printed 61 identical "engine
refuses to start" rows. Grouping by the message and the tensor name with its numeric components
masked (``model.layers.#.self_attn.kv_b_proj.weight``) keeps every distinct problem visible once,
with the layers it touches as ranges (``0-60``) and a count. The JSON keeps the raw findings too.
"""
from __future__ import annotations

import re
from typing import Callable


from ..layer_ranges import ranges
from .text_table import tabulate

SEVERITY_ORDER = ("error", "warning", "info")

_LAYER = re.compile(r"(?:^|\.)layers\.([0-9]+)(?=\.|$)")
_NUMERIC_PART = re.compile(r"(?:(?<=\.)|^)[0-9]+(?=\.|$)")


def module_template(tensor: str | None) -> str:
    """Tensor name with every all-digit dotted component masked as '#'; '-' for model-wide findings."""
    if not tensor:
        return "-"
    return _NUMERIC_PART.sub("#", tensor)


def layer_of(tensor: str | None) -> int | None:
    m = _LAYER.search(tensor or "")
    return int(m.group(1)) if m else None


def group_findings(findings: list[dict]) -> list[dict]:
    """Rows ``{severity, message, module, layers, count}``: errors first, then warnings, then info;
    within a severity, groups keep the order of their first finding."""
    groups: dict[tuple[str, str, str], dict] = {}
    for f in findings:
        key = (f["severity"], f["message"], module_template(f.get("tensor")))
        g = groups.get(key)
        if g is None:
            g = groups[key] = {"severity": key[0], "message": key[1], "module": key[2], "_layers": [], "count": 0}
        g["count"] += 1
        layer = layer_of(f.get("tensor"))
        if layer is not None:
            g["_layers"].append(layer)
    rank = {s: i for i, s in enumerate(SEVERITY_ORDER)}
    out = sorted(groups.values(), key=lambda g: rank.get(g["severity"], len(rank)))
    for g in out:
        g["layers"] = ranges(g.pop("_layers"))
    return out


def has_errors(findings: list[dict]) -> bool:
    return any(f["severity"] == "error" for f in findings)


MAX_GROUP_ROWS = 40
FINDINGS_HEADERS = ["severity", "n", "module", "layers", "message"]


def findings_section(rep: dict, heading: Callable[[str], str], tablefmt: str) -> list[str]:
    """Text/markdown lines of a report's findings, grouped (empty when there are none)."""
    findings = rep["findings"]
    if not findings:
        return []
    groups = rep.get("finding_groups") or group_findings(findings)
    n_err = sum(1 for f in findings if f["severity"] == "error")
    title = f"Findings ({len(findings)} in {len(groups)} group{'s' if len(groups) != 1 else ''}, " \
            f"{n_err} error{'s' if n_err != 1 else ''})"
    body = [[g["severity"], g["count"], g["module"], g["layers"], g["message"]] for g in groups[:MAX_GROUP_ROWS]]
    out = [heading(title), tabulate(body, FINDINGS_HEADERS, tablefmt=tablefmt, disable_numparse=True)]
    if len(groups) > MAX_GROUP_ROWS:
        out.append(f"... {len(groups) - MAX_GROUP_ROWS} more groups (see --format json)")
    return out
