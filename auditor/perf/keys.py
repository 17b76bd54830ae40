"""Numeric shape keys under which an op is looked up in a measured kernel table.

They follow the key functions of ``auditor.perf.measured`` (the profiler importer), so a table
imported from ``kernel_details.csv`` matches our ops:

* linear: ``matmul_bf16`` / ``matmul_w8a8`` (any int8 scheme: QuantBatchMatmulV3) /
  ``matmul_f32`` / ``matmul_fp8``, key (M, K, N)
* grouped_matmul: ``grouped_matmul``, looked up twice, (rows, H, 2I, E_local) for gate_up and
  (rows, I, H, E_local) for down; the op is measured only when both are
* sfa: ``sparse_flash_attention``, key (T, heads, L) with L = min(context + q, top-k)
* indexer_score: ``lightning_indexer``, key (T, index heads, context + q)
* bmm: ``bmm_bf16`` (heads, M, K, N); vector ops: their class name (M, D); router_topk:
  ``moe_gating_topk`` (M, E, k); embedding (M, H); attention: ``flash_attention`` (M, heads, ctx+q)
"""
from __future__ import annotations

from typing import Any

import numpy as np

from . import ops as O


def kernel_name(op: O.Op) -> str:
    if op.kind == O.LINEAR:
        return {"BF16": "matmul_bf16", "F32": "matmul_f32", "I8": "matmul_w8a8", "F8": "matmul_fp8",
                "F16": "matmul_bf16"}[op.dtype]
    if op.kind == O.GMM:
        return "grouped_matmul"
    return op.kernel


def op_keys(op: O.Op, out: np.ndarray, workload: Any) -> list[tuple[float, ...]]:
    """The key(s) of one op; an empty list when the op class has no measured kernel."""
    t = float(out[0])
    p = op.params
    _, q, c = workload.stream_rows()[op.tok.stream]
    if op.kind == O.LINEAR:
        return [(t, p[0], p[1])]
    if op.kind == O.GMM:
        rows, el = t * p[2], float(getattr(op, "e_local", 0))
        return [(rows, p[0], 2 * p[1], el), (rows, p[1], p[0], el)]
    if op.kind == O.BMM:
        return [(p[0], t, p[1], p[2])]
    if op.kind == O.VEC:
        return [(t, p[0])]
    if op.kind == O.SFA:
        return [(t, p[0], float(min(c + q, p[3])))]
    if op.kind in (O.IDX_SCORE, O.ATTN):
        return [(t, p[0], float(c + q))]
    if op.kind == O.IDX_TOPK:
        return [(t, float(c + q))]
    if op.kind == O.ROUTER_TOPK:
        return [(t, p[0], p[1])]
    if op.kind == O.EMBED:
        return [(t, p[0])]
    return []
