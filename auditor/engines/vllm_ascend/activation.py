"""The activation peak of the engine's profile run (P_act), as the engine measures it.

What ``profile_run`` runs (vllm-ascend HEAD 182b75ea84ff; same structure v0.18.0 -> HEAD;
research note runtime-facts.md §1):

* MC2 warm-up: if ``T = max_num_batched_tokens`` exceeds the MC2 capacity ``C`` and the method
  selected at ``C`` is MC2, ``_dummy_run(C, with_prefill=True, is_profile=True)`` runs first
  (``worker/model_runner_v1.py:3460-3474``@182b75ea; v0.18.0 ``:2541-2553``; v0.23.0 ``:3682-3694``).
* Main pass: ``_dummy_run(T, is_profile=True)``, ``min(T, S)`` requests, forced eager, attention
  metadata None (``model_runner_v1.py:3136, 3188-3191, 3209``). The sparse-attention forward then
  returns ``output.fill_(0)`` (``attention/sfa_v1.py:1490-1492``@182b75ea; v0.18.0 ``:1037``,
  v0.23.0 ``:1632``, v0.24.0rc1 ``:1594``): q/kv projections, the indexer, sparse FA, V-up and
  o_proj never run, so P_act holds **no attention transients** (those are reported as an
  unbudgeted item, :func:`attention_transients`).
* MoE on the path the forward context selects at ``T`` (``ascend_forward_context.py:223-258,
  280-330``@182b75ea): no EP -> ALLGATHER; A2: MC2 iff E/EP <= 24 and EP >= 16 and T <= C, else
  ALLGATHER; A3: MC2 iff T <= C, else ALLTOALL, except that ``VLLM_ASCEND_ENABLE_FUSED_MC2=1`` with
  EP <= 32 selects FUSED_MC2 at every T (``:242-258``; v0.18.0 ``:250-272``, v0.23.0 ``:255-282``).
  Routing is forced uniform in profile runs (``ops/fused_moe/routed_experts.py:511``), so an EP rank
  receives the balanced mean.
* The MTP drafter runs inside the pass at ``T`` tokens, its attention skipped too
  (``spec_decode/llm_base_proposer.py:524-690``); then ``compute_logits`` on ``S`` rows and no
  sampler (``_dummy_sampler_run``, ``model_runner_v1.py:3442-3458``).

MC2 capacity (``ascend_forward_context.py:176-202``@182b75ea): ``C = min(ceil(Tm/TP), 512)*TP``
with ``Tm = T`` under ``enable_prefill_mc2``, else the largest graph capture size (default
``min(S*(1+k), 512)``, FULL_DECODE_ONLY).

Terms (bytes; ``T_x`` = T/TP with SP/FlashComm1 or DSA-CP, else T; bf16 activations):

* ``residual``    4*T_x*H*2: embedding out, residual, normed hidden, zero-filled attention out
                  (``ops/mla.py:150-154``)
* ``mtp_hidden``  4*T_x*H*2 with MTP: target hidden, enorm/hnorm, eh_proj (drafter)
* ``moe``         the MoE layer at T on the selected path (runtime-facts.md §1.2-§1.3); with a fused
                  gmm1 (below) the gmm1 output term is absent and a 4-byte per-row scale comes instead:
                  ALLTOALL  R*(H + 2I*2) + R*(I + 2H) + t*K*H*2 + T*H*2, t = T_x (SP) or ceil(T/TP),
                            R = t*K (``token_dispatcher.py:497-600``, ``moe_mlp.py:426-570``)
                  ALLGATHER N_g*H*2*2 + N_g*K*(H + 2I*2 + I + 2H), N_g = EP*T_x (SP) or DP*T
                            (``prepare_finalize.py:349-470``; static init_routing size UNCONFIRMED)
                  MC2       a*(H + 4 + 2I*4 + I + 2H), a = (C/TP)*EP*min(E/EP, K) (expand_x int8 +
                            scale, gmm1 int32, swiglu int8, gmm2 bf16; ``moe_mlp.py:328-336``)
                  plus router logits T_x*E*4; dense models T_x*3*(Id/TP)*2.
                  Fused gmm1: experts whose quant method reports ``QuantType.W8A8`` (W8A8_DYNAMIC,
                  ``quantization/methods/w8a8_dynamic.py:171``) run gate/up, SwiGLU and the re-quant as one
                  ``npu_grouped_matmul_swiglu_quant`` on every path (``ops/fused_moe/moe_mlp.py:48-52,
                  256-270, 465-479``; ``dataclass/moe_mlp.py:79-98``: ``ascend_fusion_config.
                  fusion_ops_gmmswigluquant`` defaults on, ``ascend_config.py:780``, and no dynamic EPLB),
                  so no int32/bf16 gmm1 output [rows, 2I] exists; the same in v0.18.0
                  (``moe_mlp.py:106``, ``moe_runtime_args.py:221``) and v0.23.0 (``moe_mlp.py:115``).
                  W4A8 (``QuantType.W4A8``) and unquantized experts keep the separate gmm1.
                  The MTP drafter runs its own MoE layer inside the same pass at T
                  (``model_runner_v1.py:3419-3430``, ``llm_base_proposer.py:524-690``); under msModelSlim
                  recipes that layer is FLOAT, and an unfused bf16 MoE at T would be ~1.8x the fused main
                  one. It is taken as no larger than the main MoE (UNCONFIRMED): P5's measured rate needs a
                  KV pool at least as large as the fused main MoE leaves.
                  FUSED_MC2 (dispatch_ffn_combine: dispatch + both grouped matmuls + SwiGLU + combine in one
                            op, ``ops/fused_moe/moe_comm_method.py:421-446``@182b75ea) M*H*2 (its ``out``) plus
                            the op's workspace, which ``EXEC_NPU_CMD`` takes from the caching allocator
                            (``at::empty``, ``csrc/aclnn_torch_adapter/op_api_common.h:725``) so the profile
                            peak holds it: 16 MiB + X x (bytes per slot of the kernel the experts' dtype
                            selects: int8 8 + 3H, w4a8, bf16; ``ffn_combine_bytes``) + small, X =
                            ``max_output_size``, the version row's ``ffn_combine_max_tokens`` (additional_config
                            ``mega_moe_max_tokens``): 131072 at HEAD (``ascend_config.py:283``), so ~2.3 GiB on
                            GLM-5.1. The CANN MegaMoe variant (EP <= 64, when the ``cann_ops_transformer``
                            package is installed, ``ascend_config.py:27``) is not modelled: the engine's
                            Dockerfile and requirements do not install it (UNCONFIRMED for a given image).
* ``mc2_warmup``  the warm-up pass at C when it runs (C < T and MC2 or FUSED_MC2 selected at C): residual
                  at C + that MoE at C
* ``logits``      S*V*2 (compute_logits rows)

``P_act = max(residual + mtp_hidden + moe, residual + logits, mc2_warmup)``. The gmm outputs are
counted co-resident (upper bound) and the caching allocator rounds up: the range is
``[ACT_LOW, ACT_HIGH] x P_act`` (UNCONFIRMED, runtime-facts.md §1.3 "alloc_slack 10-25 %").

Every function accepts numpy arrays for ``tokens`` / ``seqs`` / ``mtp`` (sweeps broadcast them).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ...model.spec import ModelSpec

BF16 = 2
#: per-rank MC2 token limit (``ascend_forward_context.py:35``@182b75ea ``_MC2_TOKENS_PER_RANK_LIMIT``)
MC2_TOKENS_PER_RANK = 512
#: the activation peak's uncertainty: gmm1/gmm2 not co-resident (low) .. allocator slack 25 % (high)
ACT_LOW, ACT_HIGH = 0.8, 1.25
#: routed-expert schemes whose MoE method fuses gmm1 + SwiGLU + quant (``QuantType.W8A8``; docstring)
FUSED_GMM1_SCHEMES = frozenset({"W8A8_DYNAMIC"})

ALLGATHER, ALLTOALL, MC2, FUSED_MC2 = 0, 1, 2, 3
PATH_NAMES = {ALLGATHER: "ALLGATHER", ALLTOALL: "ALLTOALL", MC2: "MC2", FUSED_MC2: "FUSED_MC2"}
#: dispatch_ffn_combine is selected up to this EP size (``ascend_forward_context.py:253``@182b75ea)
FUSED_MC2_MAX_EP = 32
#: the op's fixed workspace (``SYSTEM_NEED_WORKSPACE``, ``dispatch_ffn_combine_tiling.cpp:48``)
FFN_COMBINE_SYSTEM_WORKSPACE = 16 * 1024 * 1024

TERM_DOCS = {
    "residual": "4*T_x*H*2 embed/residual/normed hidden/zero attention out (attention skipped in profile)",
    "mtp_hidden": "4*T_x*H*2 MTP drafter hidden, norms, eh_proj",
    "moe": "MoE at T on the selected comm path (ALLTOALL / ALLGATHER / MC2 / FUSED_MC2 with its workspace) + "
           "router logits",
    "mc2_warmup": "MC2 warm-up pass at the MC2 capacity C (when T > C and MC2 or FUSED_MC2 is selected at C)",
    "logits": "S*V*2 compute_logits (no sampler in the profile run)",
}


def soc_of(device: Any) -> str:
    """"a2" or "a3" (the forward context's device generation) from a device profile or its name."""
    name = str(getattr(device, "name", device) or "").lower()
    return "a2" if name.startswith("a2") else "a3"


def mc2_capacity(*, tokens: Any, seqs: Any, mtp: Any, tp: int, prefill_mc2: bool = False) -> Any:
    """``set_mc2_tokens_capacity`` (``ascend_forward_context.py:176-202``@182b75ea)."""
    T = np.asarray(tokens, dtype=np.float64)
    tm = T if prefill_mc2 else np.minimum(np.asarray(seqs, dtype=np.float64) * (1 + np.asarray(mtp)), 512.0)
    return np.minimum(np.ceil(tm / tp), MC2_TOKENS_PER_RANK) * tp


def comm_path(soc: str, tokens: Any, cap: Any, *, ep: int, experts: int, fused_mc2: int = 0) -> Any:
    """``select_moe_comm_method`` (``ascend_forward_context.py:223-258, 280-330``@182b75ea) as a code
    (ALLGATHER / ALLTOALL / MC2 / FUSED_MC2), broadcast over ``tokens``. ``fused_mc2``: the value of
    VLLM_ASCEND_ENABLE_FUSED_MC2 (only 1, dispatch_ffn_combine, is modelled; v0.18.0's 2 is a decode
    kernel that leaves the profile run's paths as they are)."""
    T = np.asarray(tokens, dtype=np.float64)
    if ep <= 1:
        return np.full(np.shape(T), ALLGATHER) if np.ndim(T) else ALLGATHER
    if soc == "a2":
        ok = experts // ep <= 24 and ep >= 16
        return np.where(ok & (T <= cap), MC2, ALLGATHER)
    if fused_mc2 == 1 and ep <= FUSED_MC2_MAX_EP:
        return np.full(np.shape(T), FUSED_MC2) if np.ndim(T) else FUSED_MC2
    return np.where(T <= cap, MC2, ALLTOALL)


def fused_gmm1(expert_scheme: str | None) -> bool:
    """Whether the routed experts of this scheme run gate/up + SwiGLU + quant as one fused kernel."""
    return expert_scheme in FUSED_GMM1_SCHEMES


def _mc2_bytes(spec: ModelSpec, cap: Any, tp: int, ep: int, fused: bool = False) -> Any:
    a = (np.asarray(cap, dtype=np.float64) / tp) * ep * min(spec.E // max(ep, 1), spec.topk_experts)
    gmm1 = 4 if fused else 2 * spec.I * 4          # the swiglu scale, or the int32 gmm1 output
    return a * (spec.H + 4 + gmm1 + spec.I + 2 * spec.H)


def combine_variant(expert_scheme: str | None, gmm1_slots: bool = False) -> str:
    """Which dispatch_ffn_combine kernel the routed experts run (by w1's dtype,
    ``csrc/mc2/dispatch_ffn_combine/dispatch_ffn_combine_torch_adpt.h:38-80``@182b75ea): int8 (W8A8),
    int4 (W4A8) or bf16; ``gmm1_slots``: v0.18.0's int8 workspace layout."""
    if expert_scheme is None or expert_scheme.startswith("W8A8"):
        return "int8-v0.18" if gmm1_slots else "int8"
    return "w4a8" if expert_scheme.startswith("W4A8") else "bf16"


def ffn_combine_bytes(spec: ModelSpec, tokens: Any, ep: int, max_tokens: int, variant: str = "int8") -> Any:
    """What one dispatch_ffn_combine call holds on a rank fed ``tokens`` rows (M): its bf16 output
    [M, H] and its workspace, ``16 MiB + max(coc, init-routing)`` with coc from each kernel's tiling
    at 182b75ea (N = 2I, the gate/up width; the init-routing workspace is the smaller term):

    * int8  ``csrc/mc2/dispatch_ffn_combine/op_host/dispatch_ffn_combine_tiling.cpp:296-308``:
      X*(8 + 2H + H) + EP^2*E_r*8; v0.18.0's (``csrc/dispatch_ffn_combine/op_host/...tiling.cpp:275-288``)
      also X*(2N + N/2) and EP^2*E_r*12
    * w4a8  ``csrc/mc2/dispatch_ffn_combine_w4_a8/op_host/dispatch_ffn_combine_w4_a8_tiling.cpp:250-263``:
      X*(8 + 4*max(N, H) + max(H, N/2)) + EP^2*E_r*8 (N = the int32 storage width x 8, ``:93-96``)
    * bf16  ``csrc/mc2/dispatch_ffn_combine_bf16/op_host/dispatch_ffn_combine_bf16_tiling.cpp:234-249``:
      X*(8 + 2N + 4H + N) + EP^2*E_r*12

    plus ceil(M/256)*256*K*4 and per-rank counters, X = ``max_tokens``."""
    M = np.asarray(tokens, dtype=np.float64)
    H, K, N = spec.H, spec.topk_experts, 2 * spec.I
    er = max(1, spec.E // max(ep, 1))
    slot, pairs = {"int8": (8 + 3 * H, 8), "int8-v0.18": (8 + 2 * N + 3 * H + N // 2, 12),
                   "w4a8": (8 + 4 * max(N, H) + max(H, N // 2), 8), "bf16": (8 + 2 * N + 4 * H + N, 12)}[variant]
    coc = np.ceil(M / 256) * 256 * K * 4 + ep * ep * er * pairs + max_tokens * slot + (ep + er + ep) * 4 * 16
    return M * H * BF16 + FFN_COMBINE_SYSTEM_WORKSPACE + coc


def ffn_combine_window_bytes(spec: ModelSpec, tokens: float) -> int:
    """The HCCL window dispatch_ffn_combine needs for ``tokens`` rows (M): M*topK*H*3 + 10 MiB; the
    kernel's tiling fails when the mc2 group's HCCL_BUFFSIZE is smaller
    (``dispatch_ffn_combine_tiling.cpp:284-290``@182b75ea)."""
    return int(tokens) * spec.topk_experts * spec.H * 3 + 10 * 1024 * 1024


def moe_rows(tokens: Any, tp: int, split: bool) -> Any:
    """Rows a rank feeds to the MoE at ``tokens``: T/TP under SP or DSA-CP, else ceil(T/TP) (the
    MC2/All2All prepare splits the batch over TP, ``prepare_finalize.py:127-170``)."""
    T = np.asarray(tokens, dtype=np.float64)
    return T / tp if split and tp > 1 else np.ceil(T / tp)


def activation_terms(spec: ModelSpec, *, tokens: Any, seqs: Any, mtp: int | Any = 0, tp: int = 1, dp: int = 1,
                     ep: int = 1, sp: bool = False, dsa_cp: bool = False, soc: str = "a3",
                     prefill_mc2: bool = False, fused: bool = False, fused_mc2: int = 0,
                     combine_max_tokens: int = 131072, combine: str = "int8") -> dict[str, Any]:
    """Named activation terms in bytes (floats or numpy arrays, broadcast over tokens/seqs/mtp);
    ``fused``: the experts' gmm1 is fused with SwiGLU and the quant (``fused_gmm1``); ``fused_mc2``:
    VLLM_ASCEND_ENABLE_FUSED_MC2, with the version's dispatch_ffn_combine ``max_output_size`` and the
    kernel ``combine`` (``combine_variant``) that sizes its workspace (``ffn_combine_bytes``)."""
    T = np.asarray(tokens, dtype=np.float64)
    S = np.asarray(seqs, dtype=np.float64)
    k = np.asarray(mtp, dtype=np.float64)
    split = (sp or dsa_cp) and tp > 1
    Tx = T / tp if split else T
    H = spec.H
    # hyper-connections widen the residual stream to hc x H: the stream and its clone are [T, hc, H],
    # the normed input and the zeroed attention output [T, H] (model.py:704-736@182b75ea; co-residency
    # of the four UNCONFIRMED)
    hc = spec.residual_mult
    residual = (4 if hc == 1 else 2 * hc + 2) * Tx * H * BF16
    mtp_hidden = np.where(k > 0, 4 * Tx * H * BF16, 0.0) if spec.mtp_layers else T * 0.0
    warm = T * 0.0
    if spec.moe:
        K, E = spec.topk_experts, spec.E
        cap = mc2_capacity(tokens=T, seqs=S, mtp=k, tp=tp, prefill_mc2=prefill_mc2)
        path = comm_path(soc, T, cap, ep=ep, experts=E, fused_mc2=fused_mc2)
        il = spec.I if ep > 1 else spec.I / tp
        t = moe_rows(T, tp, split)
        R = t * K
        gmm1 = 4 if fused else 2 * il * BF16       # per expanded row: the swiglu scale, or gmm1's output
        a2a = R * (H + gmm1) + R * (il + H * BF16) + t * K * H * BF16 + T * H * BF16
        ng = ep * Tx if (split and ep > 1) else dp * T
        ag = ng * H * BF16 * 2 + ng * K * (H + gmm1 + il + H * BF16)
        mc2 = _mc2_bytes(spec, cap, tp, ep, fused) if ep > 1 else T * 0.0

        def fused_moe(m: Any) -> Any:       # the rank's rows M: t at T, C/TP in the warm-up pass
            return ffn_combine_bytes(spec, m, ep, combine_max_tokens, combine)
        moe = np.where(path == FUSED_MC2, fused_moe(t),
                       np.where(path == MC2, mc2, np.where(path == ALLTOALL, a2a, ag))) + Tx * E * 4
        if ep > 1:
            at_cap = comm_path(soc, cap, cap, ep=ep, experts=E, fused_mc2=fused_mc2)
            runs = (T > cap) & ((at_cap == MC2) | (at_cap == FUSED_MC2))
            warm_moe = np.where(at_cap == FUSED_MC2, fused_moe(cap / tp), mc2)
            warm = np.where(runs, 4 * (cap / tp if split else cap) * H * BF16 + warm_moe, 0.0)
    else:
        il = spec.Id / tp
        moe = Tx * 3 * il * BF16
    return {
        "residual": residual,
        "mtp_hidden": mtp_hidden,
        "moe": moe,
        "mc2_warmup": warm,
        "logits": S * spec.V * BF16,
    }


def activation_peak(terms: dict[str, Any]) -> Any:
    """P_act: the larger of the main pass (residual + drafter + MoE, or residual + logits) and the
    MC2 warm-up pass."""
    main = terms["residual"] + np.maximum(terms["mtp_hidden"] + terms["moe"], terms["logits"])
    return np.maximum(main, terms["mc2_warmup"])


def peak_term(terms: dict[str, Any]) -> str:
    """Which pass/term sets the peak (scalar terms only)."""
    if float(terms["mc2_warmup"]) > float(terms["residual"] + terms["mtp_hidden"] + terms["moe"]):
        return "mc2_warmup"
    return "moe" if float(terms["mtp_hidden"] + terms["moe"]) >= float(terms["logits"]) else "logits"


def attention_transients(spec: ModelSpec, *, tokens: int, tp: int = 1, dsa_cp: bool = False) -> int:
    """One DSA/MLA attention layer's prefill transients at ``tokens`` on a rank, which the profile run
    never allocates (runtime-facts.md §1.4; native path ``attention/sfa_v1.py:1560+``@182b75ea):
    q_c, kv, q, absorbed q (``[T,h,Lkv]``), SFA out, V-up, o_proj out, indexer q/k/weights and the
    int32 top-k. With DSA-CP a rank holds T/TP tokens and all NH heads. Fused-kernel workspaces of the
    lightning indexer and sparse FA are not visible in Python (UNCONFIRMED)."""
    T = float(tokens)
    if dsa_cp and tp > 1:
        T, h = T / tp, spec.NH
    else:
        h = spec.NH / tp
    if spec.o_groups:
        # compressed attention (model-deepseek-v4.md §5.5): q, o_proj_input and the attention output
        # [T, h, D]; the indexer q in bf16 then int8; the int32 top-k
        per = 3 * h * spec.head_dim * BF16 + spec.IH * spec.ID * (BF16 + 1) + spec.topk_tokens * 4
        return int(T * per)
    if spec.mla:
        per = (spec.Qr + spec.Lkv + spec.Dr + h * (spec.Dn + spec.Dr) + 2 * h * spec.Lkv + h * spec.Dv) * BF16
    else:
        hd = spec.head_dim or spec.H // max(spec.NH, 1)
        kvh = max(1.0, spec.NKV / tp) if spec.NKV else h
        per = (2 * h * hd + 2 * kvh * hd) * BF16
    b = T * per + T * spec.H * BF16
    if spec.dsa:
        b += T * (spec.IH * spec.ID * BF16 + spec.ID * BF16 + spec.IH * 4 + spec.topk_tokens * 4)
    return int(b)
