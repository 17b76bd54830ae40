"""KV figures: what the log says about the KV pool (available memory, tokens, concurrency, the
shortfall error, OOMs, the warm-up breakdown), next to what the runtime model predicts.

``predicted_kv`` is the ONE hook to the runtime model of issue 9 (``auditor/runtime``, e.g.
``runtime.budget.rank_budget``). That module is not on main yet, so the hook returns None and every
predicted KV figure is reported as "not modelled".
"""
from __future__ import annotations

from typing import Any

from .evidence.logs import LogEvidence
from .ranks import global_rank


def predicted_kv(source: Any, plan: Any, engine: str, weights_bytes: int | None) -> dict | None:
    """Predicted {available_kv_bytes, kv_tokens, concurrency} for one rank, or None (not modelled).

    Hook for ``auditor.runtime`` (issue 9); replace the body with a call to its rank budget once
    it is on main."""
    return None


def observed_kv(ev: LogEvidence, plan: Any) -> dict:
    """The KV-related lines of the log, in the ticket's JSON shape (bytes, tokens, factors)."""
    def where(x):
        return str(x.where)

    def rank_of(w):
        return global_rank(w, plan)

    conc, seen = [], set()
    for c in ev.concurrency:      # the engine may print the same line twice
        key = (c.tokens_per_request, c.factor, c.worker.identity() if c.worker else None)
        if key not in seen:
            seen.add(key)
            conc.append({"tokens_per_request": c.tokens_per_request, "factor": c.factor, "where": where(c)})
    return {
        "available_kv": [{"rank": rank_of(k.worker), "worker": k.worker.label() if k.worker else None,
                          "bytes": k.bytes, "total_bytes": k.total_bytes, "form": k.form, "where": where(k)}
                         for k in ev.kv_available],
        "kv_tokens": [{"tokens": k.tokens, "where": where(k)} for k in ev.kv_tokens],
        "concurrency": conc,
        "shortfall": [{"max_seq_len": s.max_seq_len, "needed_bytes": s.needed_bytes,
                       "available_bytes": s.available_bytes, "estimated_max_len": s.estimated_max_len,
                       "where": where(s)} for s in ev.shortfalls],
        "oom": [{"rank": rank_of(o.worker), "tried_bytes": o.tried_bytes, "device": o.device,
                 "total_bytes": o.total_bytes, "allocated_bytes": o.allocated_bytes, "free_bytes": o.free_bytes,
                 "reserved_bytes": o.reserved_bytes, "where": where(o)} for o in ev.ooms],
        "breakdown": [{"rank": rank_of(b.worker), "free_bytes": b.free_bytes, "total_bytes": b.total_bytes,
                       "utilization": b.utilization, "weights_bytes": b.weights_bytes,
                       "activation_bytes": b.activation_bytes, "non_torch_bytes": b.non_torch_bytes,
                       "graph_bytes": b.graph_bytes, "kv_bytes": b.kv_bytes, "where": where(b)}
                      for b in ev.breakdowns],
        "npu_smi": [{"npu": r.npu, "chip": r.chip, "pid": r.pid, "name": r.name, "memory_bytes": r.memory_bytes,
                     "where": where(r)} for r in ev.npu_smi],
    }
