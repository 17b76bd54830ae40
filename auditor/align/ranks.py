"""Observed per-rank figures: which global rank printed each weights line, and the parallel sizes
the worker prefixes imply when the user gave none.

Global ranks follow the ledger: rank = pp_stage * DP * TP + dp * TP + tp (EP rank = dp * TP + tp).
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ..parallel import ParallelPlan
from .evidence.logs import LogEvidence, WeightsLine
from .evidence.workers import Worker


@dataclass
class Observed:
    """Per-rank observed weights (the last line wins when a rank printed several)."""

    bytes_by_rank: dict[int, int]
    resolution_by_rank: dict[int, int]         # half the last printed digit, in bytes
    lines: dict[int, WeightsLine]
    notes: list[str] = field(default_factory=list)


def sizes_from_workers(workers: list[Worker]) -> dict[str, int]:
    """{tp, dp, pp, ep} implied by the highest rank tags (only the sizes some prefix names)."""
    out: dict[str, int] = {}
    for tag in ("tp", "dp", "pp", "ep"):
        vals = [getattr(w, tag) for w in workers if getattr(w, tag) is not None]
        if vals:
            out[tag] = max(vals) + 1
    return out


def sizes_from_config(ev: LogEvidence) -> dict[str, int]:
    """{tp, dp, pp} from the engine-config line and the ``non-default args`` line, when the log has
    them (the latter wins: it is what the user typed); ``ep`` = 1 marks --enable-expert-parallel."""
    keys = {"tensor_parallel_size": "tp", "data_parallel_size": "dp", "pipeline_parallel_size": "pp"}
    out: dict[str, int] = {}
    for c in ev.configs:
        for k, name in keys.items():
            v = c.fields.get(k)
            if v is not None and v.isascii() and v.isdigit() and len(v) <= 6 and int(v) >= 1:
                out[name] = int(v)
    for nd in ev.non_default:
        for k, name in keys.items():
            v = nd.args.get(k)
            if isinstance(v, int) and not isinstance(v, bool) and 1 <= v <= 65_536:
                out[name] = v
        if nd.args.get("enable_expert_parallel") is True:
            out["ep"] = 1
    return out


def global_rank(w: Worker | None, plan: ParallelPlan) -> int | None:
    """The global rank a worker prefix names under ``plan``, or None when it does not say."""
    if w is None:
        return None
    stage = w.pp or 0
    if w.tp is not None:
        if w.dp is not None:
            dp = w.dp
        elif w.ep is not None and plan.ep > 1:
            dp = w.ep // plan.tp
        elif plan.dp == 1:
            dp = 0
        else:
            return None
        return stage * plan.ranks_per_stage + dp * plan.tp + w.tp
    if w.ep is not None and plan.ep > 1:
        return stage * plan.ranks_per_stage + w.ep
    if w.rank is not None and plan.dp == 1:
        return w.rank
    return None


def _resolution(text: str) -> int:
    num = text.split()[0]
    decimals = len(num.split(".")[1]) if "." in num else 0
    return int(0.5 * 10 ** -decimals * (1 << 30))


def observed_weights(ev: LogEvidence, plan: ParallelPlan) -> Observed:
    """Map every weights line to its global rank; lines without ranks are taken in order."""
    by_rank: dict[int, int] = {}
    res: dict[int, int] = {}
    lines: dict[int, WeightsLine] = {}
    notes: list[str] = []
    unranked = []
    for wl in ev.weights:
        r = global_rank(wl.worker, plan)
        if r is None:
            unranked.append(wl)
            continue
        if r >= plan.world:
            notes.append(f"{wl.where}: rank {r} is outside the plan's {plan.world} ranks; ignored")
            continue
        if r in by_rank and by_rank[r] != wl.bytes:
            notes.append(f"rank {r} printed its weights more than once ({lines[r].where}, {wl.where}); last kept")
        by_rank[r], res[r], lines[r] = wl.bytes, _resolution(wl.text), wl
    if unranked:
        free = [r for r in range(plan.world) if r not in by_rank]
        for r, wl in zip(free, unranked):
            by_rank[r], res[r], lines[r] = wl.bytes, _resolution(wl.text), wl
        notes.append(f"{len(unranked)} weights line(s) without rank tags assigned to ranks in order of appearance")
    if any(wl.form != "ascend-v1" for wl in ev.weights) or ev.weights:
        notes.append("engine 'GB' figures are bytes / 2^30 (GiB), as vLLM and vLLM-Ascend compute them")
    return Observed(dict(sorted(by_rank.items())), res, lines, notes)
