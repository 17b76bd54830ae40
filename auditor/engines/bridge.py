"""The bridge's vocabulary: why a rank's resident bytes differ from the naive estimate, and the rule
type an engine writes its materialization in.

Every resident row carries one cause from here (or None when it matches the naive estimate); the
bridge table and PNG list causes in ``BRIDGE_ORDER``. Engines write their per-scheme tensor rules
as ``Rule`` rows (``engines/<family>/rules.py``).
"""
from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Rule:
    tensor: str
    dtype: str
    shape: str
    category: str
    source: str = "stored"          # stored | allocated | created
    from_suffix: str | None = None  # checkpoint suffix a stored tensor comes from
    nz: str = "never"               # never | quant (nz_mode >= 1) | bf16 (nz_mode == 2) | always
    cause: str | None = None        # bridge step for allocated/created tensors
    when: str | None = None         # named condition (see materialize.CONDITIONS)
    note: str = ""


C_QPARAM = "engine-allocated quant params (not in checkpoint)"
C_FP32 = "fp32 / int64 scale copies"
C_ACLNN = "aclnn_input_* expansions (W8A8 static)"
C_KVB = "kv_b_proj -> W_UK_T / W_UV"
C_OPROJ = "o_proj under DSA-CP (pool, copies)"
C_MLAPO = "MLAPO fused copies"
C_MLAPO_DROP = "MLAPO drops the originals (decode node)"
C_NORMBIAS = "RMSNorm biases (norm.bias in description)"
C_BUFFERS = "rotary caches and model buffers"
C_C8 = "indexer C8 rotations"
C_DTYPE = "dtype cast on load (stored -> resident)"
C_SCALES = "scales / offsets kept (stored)"
C_PAD = "layout padding (NZ / vocab)"
C_QB = "DSA-CP: q_b_proj replicated"
C_SHARED = "shared experts replicated"
C_OREP = "o_proj replicated (P node)"
C_LSHARD = "layer sharding (owned layers + 2 windows)"
C_MTPSHARE = "MTP shares embed_tokens / lm_head"
C_REDUNDANT = "redundant experts (EPLB)"
C_MISSING = "modules missing from checkpoint (modelled from config)"

BRIDGE_ORDER = (C_DTYPE, C_SCALES, C_QPARAM, C_FP32, C_ACLNN, C_QB, C_KVB, C_OPROJ, C_OREP,
                C_SHARED, C_MLAPO, C_MLAPO_DROP, C_NORMBIAS, C_PAD, C_BUFFERS, C_C8, C_REDUNDANT, C_LSHARD,
                C_MTPSHARE, C_MISSING)
