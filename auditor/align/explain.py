"""Which engine version and role explain an observed per-rank figure, for ``audit memory --observed``.

Why: a gap between the modelled and the observed weights is most often another engine release or
node role (a P node replicates o_proj on v0.18-v0.23), not a category that grew by x350. The same
plan is evaluated under every modelled version and role (sharing one classified table, as
``audit align`` does) and the closest configurations are named; a rank-by-rank fit is
``audit align``'s job.
"""
from __future__ import annotations

from ..engines.registry import families
from ..errors import AuditInputError
from ..parallel import ROLES, ParallelPlan
from ..source import ModelSource


def explain_observed(source: ModelSource, plan: ParallelPlan, observed: int, top: int = 3) -> list[dict]:
    """The ``top`` (engine, role) configurations whose worst rank is closest to ``observed``."""
    from .memory_fit import LedgerCache
    cache = LedgerCache(source)
    out = []
    for cls in families().values():
        for key in cls.profiles:
            for role in ROLES:
                cand = plan.with_(role=role)
                try:
                    worst = float(cache.totals(cand, key).max())
                except AuditInputError:
                    continue
                out.append({"engine": key, "role": role, "worst_rank_bytes": int(round(worst)),
                            "relative": (worst - observed) / observed})
    out.sort(key=lambda c: (abs(c["relative"]), c["engine"], c["role"]))
    return out[:top]
