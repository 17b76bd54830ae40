"""The memory report as one plain dict (the JSON schema); text, markdown and CSV render from it."""
from __future__ import annotations

from ..memory.audit import MemoryAudit
from ..model.classify import CATEGORIES
from .findings import group_findings

SCHEMA_VERSION = 1


def observed_hypotheses(audit: MemoryAudit, observed: int) -> dict:
    """Where could the gap to an observed per-rank figure sit? One hypothesis per category
    (the whole gap in that category), plus the bridge steps closest in size to the gap."""
    r = audit.ledger.worst_rank
    modeled = int(round(audit.ledger.total[r]))
    delta = observed - modeled
    cats = []
    for i, c in enumerate(CATEGORIES):
        have = int(round(audit.ledger.by_category[r, i]))
        need = have + delta
        cats.append({"category": c, "modeled_bytes": have, "needed_bytes": need,
                     "factor": (need / have) if have else None})
    steps = sorted(audit.bridge(r), key=lambda cv: abs(abs(cv[1]) - abs(delta)))[:3]
    return {"observed_bytes": observed, "modeled_bytes": modeled, "delta_bytes": delta,
            "relative": delta / observed if observed else None, "by_category": cats,
            "closest_bridge_steps": [{"step": c, "bytes": v} for c, v in steps]}


def memory_report(audit: MemoryAudit, *, by: str = "summary", observed: int | None = None,
                  budget: int | None = None) -> dict:
    L = audit.ledger
    src = audit.source
    ct = audit.classified
    worst = L.worst_rank
    order = [int(x) for x in L.order()]
    inv_loaded = ct.summary(loaded_only=True)
    inv_all = ct.summary(loaded_only=False)
    findings = [f.to_dict() for f in audit.findings]
    out: dict = {
        "schema": SCHEMA_VERSION,
        "tool": "audit memory",
        "model": {"name": src.spec.name, "source": src.kind, "path": src.label, "recipe": src.recipe,
                  "synthesized": src.synthesized, "structure": src.spec.structure_summary()},
        "plan": {"tp": audit.plan.tp, "dp": audit.plan.dp, "ep": audit.plan.ep, "pp": audit.plan.pp,
                 "sp": audit.plan.sp, "role": audit.plan.role, "mtp_drafter": audit.plan.mtp,
                 "dsa_cp": audit.layout.dsa_cp, "world": audit.plan.world, "nz_mode": audit.plan.nz_mode,
                 "layer_sharding": list(audit.layout.layer_sharding)},
        "engine": {"name": audit.profile.name, "label": audit.profile.label},
        "worst_rank": {"rank": worst, "bytes": int(round(L.total[worst]))},
        "best_rank": {"rank": order[-1], "bytes": int(round(L.total[order[-1]]))},
        "imbalance_bytes": int(round(L.total.max() - L.total.min())),
        "naive": {"bytes": int(round(L.naive[worst])), "rank": worst,
                  "definition": "checkpoint weights (float and low-bit, no scales/offsets) at stored dtypes, "
                                "plain TP sharding, experts split over EP, no auxiliary or derived tensors"},
        "bridge": [{"step": "naive estimate", "bytes": int(round(L.naive[worst]))}]
                  + [{"step": c, "bytes": v} for c, v in audit.bridge(worst)]
                  + [{"step": "resident", "bytes": int(round(L.total[worst]))}],
        "ranks": [audit.rank_dict(r) for r in order],
        "inventory": {
            "tensors": int(len(ct)), "bytes": int(ct.table.nbytes.sum()),
            "loaded_tensors": int(ct.table.loaded.sum()), "loaded_bytes": int(ct.table.nbytes[ct.table.loaded].sum()),
            "by_category": inv_all, "loaded_by_category": inv_loaded,
            "files": len(ct.table.files),
        },
        "findings": findings,
        "finding_groups": group_findings(findings),
        "assumptions": list(audit.assumptions),
    }
    if by in ("layer", "all"):
        out["layers"] = audit.layer_rows(worst)
    if by in ("tensor", "all"):
        out["tensors"] = audit.tensor_rows(worst)
    if observed is not None:
        out["observed"] = observed_hypotheses(audit, observed)
    if budget is not None:
        out["budget"] = {"bytes": budget, "exceeded": bool(L.total[worst] > budget),
                         "headroom_bytes": int(budget - round(L.total[worst]))}
    return out
