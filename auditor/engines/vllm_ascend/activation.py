"""The activation peak of the engine's profile run (P_act), as named terms of the batched tokens.

The engine measures P_act (torch peak allocation during ``profile_run``); a tool has to estimate
it (engine-vllm-ascend-runtime.md §4.1). The profile run pushes ``T = max_num_batched_tokens``
tokens as ``min(T, S)`` prefill-shaped requests through every layer, MoE routing forced uniform,
then computes logits for ``S`` rows. The peak is what one layer keeps alive at once:

    P_act = residual + mtp_hidden + max(attention, moe_dispatch, logits) + workspace

Terms (bytes, bf16 activations; ``T_x`` = T/TP with SP/FlashComm1 or DSA-CP, else T; ``T_a`` = T,
attention always sees full tokens; ``h`` = NH with DSA-CP (replicated q_b/kv_b), else NH/TP):

* ``residual``     2·T_x·H·2: residual stream and normed hidden state
* ``attention``    T_a·(Qr + Lkv+Dr + h·(Dn+Dr) + h·Lkv [absorbed q] + h·Lkv [SFA out] + h·Dv)·2
                   + T_a·(IH·ID·2 + ID·2 + IH·4) [indexer q, k, weights] + T_x·H·2 [o_proj out]
* ``moe_dispatch`` R·H [int8 dispatch] + R·2I·2 + R·I·2 + R·H·2 + t·K·H·2 [combine], with
                   t = ceil(T/TP) and R = DP·T·K/EP rows received (EP off: R = T·K, I/TP)
* ``logits``       S·V·2 (compute_logits on S rows; no sampler in the Ascend profile run)
* ``mtp_hidden``   T·H·2: the target's hidden states handed to the MTP drafter's dummy run
* ``workspace``    WORKSPACE_BYTES_PER_TOKEN·T: fused-op workspaces (lightning indexer, sparse FA,
                   grouped matmul, dispatch/combine) that Python cannot see. Calibrated so the
                   spec's public A2 point (GLM-5.1 DP2 TP8 EP16, FlashComm1, T=4096, S=8) comes
                   out at its measured 2.0 GiB, and scaled linearly in T (UNCONFIRMED).

Every function accepts numpy arrays for ``tokens`` / ``seqs`` so sweeps evaluate it vectorised.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ...model.spec import ModelSpec

#: fused-op workspace per batched token (see module docstring; UNCONFIRMED calibration)
WORKSPACE_BYTES_PER_TOKEN = 300 * 1024
BF16 = 2

TERM_DOCS = {
    "residual": "2*T_x*H*2 residual + normed hidden",
    "attention": "one attention layer's transients (q, absorbed q, indexer, SFA out, V-up, o_proj out)",
    "moe_dispatch": "R*H int8 + R*2I*2 + R*I*2 + R*H*2 + t*K*H*2 dispatch/combine",
    "logits": "S*V*2 compute_logits",
    "mtp_hidden": "T*H*2 hidden states for the MTP drafter",
    "workspace": f"fused-op workspaces, {WORKSPACE_BYTES_PER_TOKEN // 1024} KiB x T (calibrated, UNCONFIRMED)",
}


def activation_terms(spec: ModelSpec, *, tokens: Any, seqs: Any, mtp: int | Any = 0, tp: int = 1, dp: int = 1,
                     ep: int = 1, sp: bool = False, dsa_cp: bool = False) -> dict[str, Any]:
    """Named activation terms in bytes (floats or numpy arrays, broadcast over tokens/seqs/mtp)."""
    T = np.asarray(tokens, dtype=np.float64)
    S = np.asarray(seqs, dtype=np.float64)
    K = np.asarray(mtp, dtype=np.float64)
    Tx = T / tp if (sp or dsa_cp) and tp > 1 else T
    Ta = T
    h = spec.NH if dsa_cp else spec.NH / tp
    H = spec.H
    if spec.mla:
        per_tok = (spec.Qr + spec.Lkv + spec.Dr + h * (spec.Dn + spec.Dr) + 2 * h * spec.Lkv + h * spec.Dv) * BF16
    else:
        hd = spec.head_dim or H // max(spec.NH, 1)
        kvh = max(1.0, spec.NKV / tp) if spec.NKV else h
        per_tok = (h * hd + 2 * kvh * hd + h * hd) * BF16
    attention = Ta * per_tok + Tx * H * BF16
    if spec.dsa:
        attention = attention + Ta * (spec.IH * spec.ID * BF16 + spec.ID * BF16 + spec.IH * 4)
    if spec.moe:
        t = np.ceil(T / tp)
        k = spec.topk_experts
        R = dp * T * k / ep if ep > 1 else T * k
        il = spec.I if ep > 1 else spec.I / tp
        moe = R * H + R * 2 * il * BF16 + R * il * BF16 + R * H * BF16 + t * k * H * BF16
    else:
        il = spec.Id / tp
        moe = Tx * (2 * il + il) * BF16
    logits = S * spec.V * BF16
    mtp_hidden = np.where(K > 0, T * H * BF16, 0.0) if spec.mtp_layers else T * 0.0
    return {
        "residual": 2 * Tx * H * BF16,
        "attention": attention,
        "moe_dispatch": moe,
        "logits": logits,
        "mtp_hidden": mtp_hidden,
        "workspace": WORKSPACE_BYTES_PER_TOKEN * T,
    }


def activation_peak(terms: dict[str, Any]) -> Any:
    """P_act from the terms: persistent ones add, one layer's transients peak at their maximum."""
    return (terms["residual"] + terms["mtp_hidden"] + terms["workspace"]
            + np.maximum(np.maximum(terms["attention"], terms["moe_dispatch"]), terms["logits"]))


def peak_term(terms: dict[str, Any]) -> str:
    """Which transient term sets the peak (scalar terms only)."""
    return max(("attention", "moe_dispatch", "logits"), key=lambda k: float(terms[k]))
