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
from auditor_kernels import kinds as K

from .ops import Op


def kernel_name(op: Op) -> str:
    if op.kind == K.LINEAR:
        return {"BF16": "matmul_bf16", "F32": "matmul_f32", "I8": "matmul_w8a8", "F8": "matmul_fp8",
                "F16": "matmul_bf16"}[op.dtype]
    if op.kind == K.GMM:
        return "grouped_matmul"
    return op.kernel


def op_keys(op: Op, out: np.ndarray, workload: Any) -> list[tuple[float, ...]]:
    """The key(s) of one op (``out`` = its ``op_out`` row); an empty list when the op class has no
    measured kernel."""
    t = float(out[K.OUT_TOKENS])
    p = op.params
    _, q, c = workload.stream_rows()[op.tok.stream]
    if op.kind == K.LINEAR:
        return [(t, p[K.LINEAR_K], p[K.LINEAR_N])]
    if op.kind == K.GMM:
        rows, el = t * p[K.GMM_TOPK], float(op.e_local)
        return [(rows, p[K.GMM_H], 2 * p[K.GMM_I], el), (rows, p[K.GMM_I], p[K.GMM_H], el)]
    if op.kind == K.BMM:
        return [(p[K.BMM_HEADS], t, p[K.BMM_K], p[K.BMM_N])]
    if op.kind == K.VEC:
        return [(t, p[K.VEC_D])]
    if op.kind == K.SFA:
        return [(t, p[K.SFA_HEADS], float(min(c + q, p[K.SFA_CAP])))]
    if op.kind == K.IDX_SCORE:
        return [(t, p[K.IDX_HEADS], float(c + q))]
    if op.kind == K.ATTN:
        return [(t, p[K.ATTN_HEADS], float(c + q))]
    if op.kind == K.IDX_TOPK:
        return [(t, float(c + q))]
    if op.kind == K.ROUTER_TOPK:
        return [(t, p[K.ROUTER_E], p[K.ROUTER_K])]
    if op.kind == K.EMBED:
        return [(t, p[K.EMBED_H])]
    return []
