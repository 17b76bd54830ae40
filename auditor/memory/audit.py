"""The memory pipeline: source -> classified table -> engine materialization -> ledger -> report model."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


from ..engines.bridge import BRIDGE_ORDER
from ..engines.materialize import Materialization
from ..engines.placement import Placement
from ..engines.registry import EngineLike, as_engine
from ..engines.stored import StoredIndex
from ..model.classify import CATEGORIES, ClassifiedTable, Finding, classify
from ..model.names import BLOCKS
from ..parallel import ParallelPlan
from ..layer_ranges import ranges
from ..source import ModelSource
from .ledger import Ledger, build_ledger


@dataclass
class MemoryAudit:
    source: ModelSource
    plan: ParallelPlan
    profile: Any
    layout: Placement
    classified: ClassifiedTable
    mat: Materialization
    ledger: Ledger
    findings: list[Finding] = field(default_factory=list)
    assumptions: list[str] = field(default_factory=list)

    # ------------------------------------------------------------ views
    def bridge(self, rank: int | None = None) -> list[tuple[str, int]]:
        """Steps from the naive estimate to the resident figure on ``rank`` (worst by default)."""
        r = self.ledger.worst_rank if rank is None else rank
        steps = [(c, int(round(self.ledger.by_cause[r, i]))) for i, c in enumerate(BRIDGE_ORDER)]
        return [(c, v) for c, v in steps if v != 0]

    def rank_dict(self, r: int) -> dict:
        L = self.ledger
        stage, dp, tp = self.plan.rank_coords(r)
        return {
            "rank": int(r), "pp_stage": stage, "dp_rank": dp, "tp_rank": tp,
            "bytes": int(round(L.total[r])), "naive_bytes": int(round(L.naive[r])),
            "by_category": {c: int(round(L.by_category[r, i])) for i, c in enumerate(CATEGORIES)},
            "by_block": {b: int(round(L.by_block[r, i])) for i, b in enumerate(BLOCKS) if L.by_block[r, i]},
        }

    def tensor_rows(self, rank: int | None = None) -> list[dict]:
        """Resident tensors on one rank, grouped over layers that hold the same tensor identically."""
        r = self.ledger.worst_rank if rank is None else rank
        groups: dict[tuple, dict] = {}
        for i, row in enumerate(self.mat.rows):
            m = self.ledger.mult[i, r]
            nm = self.ledger.naive_mult[i, r]
            if m == 0 and nm == 0:
                continue
            key = (row.block, row.module, row.tensor, row.dtype, row.shape, row.category, row.source,
                   row.cause, row.placement, row.layer < 0, m)
            g = groups.get(key)
            if g is None:
                g = groups[key] = {"block": row.block, "module": row.module, "tensor": row.tensor,
                                   "category": row.category, "dtype": row.dtype,
                                   "shape": _rank_shape(row.shape, row.placement, m),
                                   "source": row.source, "layers": [], "count": 0, "bytes": 0,
                                   "naive_bytes": 0, "cause": row.cause, "note": row.note,
                                   "per_layer_units": m}
            if row.layer >= 0:
                g["layers"].append(row.layer)
            g["count"] += 1
            g["bytes"] += int(row.bytes * m)
            g["naive_bytes"] += int(row.naive * nm)
        out = list(groups.values())
        for g in out:
            g["layers"] = ranges(g["layers"])
        out.sort(key=lambda g: -g["bytes"])
        return out

    def layer_rows(self, rank: int | None = None) -> list[dict]:
        r = self.ledger.worst_rank if rank is None else rank
        L = self.ledger
        out = []
        for i, layer in enumerate(L.layers):
            if L.by_layer[r, i]:
                kind = "mtp" if layer >= self.source.spec.Lyr else (
                    "moe" if self.source.spec.layer_is_moe(layer) else "dense")
                out.append({"layer": layer, "kind": kind, "bytes": int(round(L.by_layer[r, i]))})
        out.append({"layer": None, "kind": "global", "bytes": int(round(L.by_layer[r, -1]))})
        return out


def _rank_shape(shape: tuple[int, ...], placement: str, units: float) -> list[int]:
    """The shape this rank holds. A routed-expert row is modelled per expert (its leading dimension
    is ``El`` = 1, every MoE rule in engines/rules.py starts with ``El``) and the ledger multiplies
    it by the rank's local expert count, so the rank really holds ``E_local x K x N``."""
    if placement == "expert" and shape and units:
        return [int(shape[0] * units), *shape[1:]]
    return list(shape)


def run_memory_audit(source: ModelSource, plan: ParallelPlan, engine: EngineLike,
                     classified: tuple[ClassifiedTable, StoredIndex] | None = None) -> MemoryAudit:
    """``classified``: the (classified table, stored index) of ``source`` when the caller already
    has them (they depend on the source only; ``audit align`` audits many plans of one source)."""
    spec = source.spec
    from ..parallel import check_drafter
    check_drafter(spec, plan)
    eng = as_engine(engine)
    profile = eng.profile
    layout = eng.placement(spec, plan)
    desc = source.desc
    if classified is None:
        ct = classify(source.table, spec.Lyr, desc)
        stored = StoredIndex(ct)
    else:
        ct, stored = classified
    mat = eng.materializer(spec, plan, layout, stored, desc).run()
    ledger = build_ledger(mat, spec, plan, layout)
    findings = list(source.findings) + [Finding(s, None, m) for s, m in layout.findings] + ct.findings + mat.findings
    assumptions = []
    if source.synthesized:
        assumptions.append(source.describe())
    version_note = eng.note
    assumptions += [f"engine {profile.label}"] + ([version_note] if version_note else [])
    assumptions += list(profile.notes) + layout.assumptions + mat.assumptions
    if spec.mtp_layers and not plan.mtp:
        assumptions.append("MTP layer not loaded (no drafter); --mtp-drafter to include it")
    if plan.mtp and spec.mtp_layers and not spec.layer_kinds:
        assumptions.append("MTP drafter shares embed_tokens and lm_head with the target (torch.equal assumed)")
    if source.desc is None and source.kind == "checkpoint":
        assumptions.append("no quant_model_description.json: schemes inferred from stored dtypes")
    return MemoryAudit(source, plan, profile, layout, ct, mat, ledger, findings, _dedupe(assumptions))


def _dedupe(items: list[str]) -> list[str]:
    seen: set[str] = set()
    out = []
    for x in items:
        if x not in seen:
            seen.add(x)
            out.append(x)
    return out


__all__ = ["MemoryAudit", "run_memory_audit"]
