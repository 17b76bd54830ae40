"""Numeric shape keys under which an op is looked up in a measured kernel table (the key per
op class is listed in ``ops.py``; the measured-table CSV uses the same order)."""
from __future__ import annotations

from typing import Any

import numpy as np

from . import ops as O


def _mean_keys(workload: Any, stream: int) -> tuple[float, float, float]:
    """(queries, mean causal keys per query, mean top-k-capped keys per query) of a stream."""
    n, q, c = workload.stream_rows()[stream]
    keys = q * c + q * (q + 1) / 2
    return n * q, keys / q, c + (q + 1) / 2


def op_key(op: O.Op, out: np.ndarray, workload: Any) -> tuple[float, ...] | None:
    t = float(out[0])
    p = op.params
    if op.kind == O.LINEAR:
        return (t, p[0], p[1])
    if op.kind == O.BMM:
        return (p[0], t, p[1], p[2])
    if op.kind == O.VEC:
        return (t, p[0])
    if op.kind == O.SFA:
        _, _, mean_len = _mean_keys(workload, op.tok.stream)
        return (t, p[0], min(mean_len, p[3]))
    if op.kind == O.IDX_SCORE:
        return (t, p[0], _mean_keys(workload, op.tok.stream)[1])
    if op.kind == O.IDX_TOPK:
        return (t, _mean_keys(workload, op.tok.stream)[1])
    if op.kind == O.ROUTER_TOPK:
        return (t, p[0], p[1])
    if op.kind == O.GMM:
        return (t * p[2], p[0], p[1], float(getattr(op, "e_local", 0)))
    if op.kind == O.EMBED:
        return (t, p[0])
    if op.kind == O.ATTN:
        return (t, p[0], _mean_keys(workload, op.tok.stream)[1])
    return None
