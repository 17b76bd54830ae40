"""The per-rank ledger against hand calculations written from the engine spec (engine-vllm-ascend.md
§2-§5), not from the code: every term below names the spec rule it comes from."""
from __future__ import annotations

import pytest

from auditor.memory.audit import run_memory_audit
from auditor.plan import ParallelPlan
from auditor.source import open_model

# GLM-5.1 dimensions (engine spec reference table)
H, NH, Qr, Lkv, Dn, Dr, Dv = 6144, 64, 2048, 512, 192, 64, 256
IH, ID, E, I, Id, V, LYR, KD = 32, 128, 256, 2048, 12288, 154880, 78, 3
MAXPOS, TOPK, MNBT = 202752, 2048, 8192
BF16, F32, I8, I32 = 2, 4, 1, 4


def w8a8_static(N: int, K: int) -> int:
    """§2.1: int8 [K,N] + input_scale pd[1] + input_offset int8[1] + quant_bias i32[N] + deq_scale f32[N]
    + weight_scale pd[N] + weight_offset pd[N] + 3 aclnn_input_* pd[K]."""
    return K * N * I8 + BF16 + I8 + N * (I32 + F32 + BF16 + BF16) + 3 * K * BF16


def w8a8_dynamic(N: int, K: int) -> int:
    """§2.2: int8 [K,N] + weight_scale pd[N] + weight_offset pd[N] + weight_scale_fp32 f32[N]."""
    return K * N * I8 + N * (BF16 + BF16 + F32)


def rmsnorm(dim: int) -> int:
    """§5: pd weight, plus a pd bias because the description has '...indexer.k_norm.bias'."""
    return 2 * dim * BF16


def glm51_w8a8_rank(tp: int, ep: int, *, dsa_cp: bool, o_proj: str, shared_replicated: bool,
                    gate_bytes: int) -> int:
    """Resident bytes of one rank (no PP, no MTP drafter). o_proj: 'tp+pool' | 'replicated' | 'tp'."""
    heads = NH if dsa_cp else NH // tp
    attn = (w8a8_static(Qr + Lkv + Dr, H)                       # fused_qkv_a, replicated (§3)
            + rmsnorm(Qr) + rmsnorm(Lkv)
            + w8a8_static(heads * (Dn + Dr), Qr)                 # q_b_proj, replicated under DSA-CP
            + heads * Dn * Lkv * BF16 + heads * Lkv * Dv * BF16  # W_UK_T + W_UV (§3.1), kv_b disposed
            + w8a8_static(IH * ID, Qr)                           # indexer wq_b, replicated
            + (ID + IH) * H * BF16                               # wk_weights_proj, bf16
            + 2 * ID * F32                                       # k_norm fp32 weight + bias
            + 2 * rmsnorm(H))                                    # input/post-attention norms
    if not dsa_cp:
        # §3.2 MLAPO (fused_qkv_a is W8A8 static, a-layernorms have biases, no DSA-CP): wd_qkv int8 +
        # deq_scale_qkv f32 + quant_bias_qkv i32, wu_q int8 + qb_deq_scl f32 + qb_qt_bias i32, 2 pd scalars
        n_qkv = Lkv + Dr + Qr
        attn += n_qkv * H * I8 + n_qkv * (F32 + I32) + heads * (Dn + Dr) * Qr * I8 \
            + heads * (Dn + Dr) * (F32 + I32) + 2 * BF16
    if o_proj == "replicated":
        attn += w8a8_static(H, NH * Dv)
    else:
        attn += w8a8_static(H, NH * Dv // tp)
        if o_proj == "tp+pool":
            attn += 3 * NH * Dv * BF16                           # per-layer full aclnn copies (§3.3)
    dense = w8a8_dynamic(2 * Id // tp, H) + w8a8_dynamic(H, Id // tp)
    el = (E // ep)
    experts = (el * H * 2 * I * I8 + el * I * H * I8                     # w13, w2 int8 (§2.4)
               + 2 * el * 2 * I * BF16 + 2 * el * H * BF16               # scales + offsets pd
               + el * 2 * I * F32)                                       # w13_weight_scale_fp32
    sh = 1 if shared_replicated else tp
    shared = w8a8_dynamic(2 * I // sh, H) + w8a8_dynamic(H, I // sh)
    moe = gate_bytes + E * F32 + experts + shared
    glob = (2 * (V // tp) * H * BF16 + rmsnorm(H)                          # embed, lm_head, final norm
            + MAXPOS * Dr * BF16 * 3                                     # cos_sin_cache + ~2x global copy
            + 2 * MNBT * Dr * BF16                                       # _cos_mla, _sin_mla
            + MNBT * TOPK * I32)                                         # topk_indices_buffer
    if o_proj == "tp+pool":
        glob += NH * Dv * H * I8                                         # one shared gather pool (int8)
    return LYR * attn + KD * dense + (LYR - KD) * moe + glob


@pytest.fixture(scope="module")
def glm51():
    return open_model("glm-5.1", "w8a8")


def test_main_mixed_matches_hand_calculation(glm51):
    a = run_memory_audit(glm51, ParallelPlan(tp=16, dp=2, ep=32, sp=True), "vllm-ascend@main")
    expected = glm51_w8a8_rank(16, 32, dsa_cp=True, o_proj="tp+pool", shared_replicated=False,
                               gate_bytes=E * H * F32)
    assert a.layout.dsa_cp
    assert int(round(a.ledger.total.max())) == expected
    assert int(round(a.ledger.total.min())) == expected     # every rank holds the same


def test_v018_prefill_node_replicates_o_proj_and_shared_experts(glm51):
    a = run_memory_audit(glm51, ParallelPlan(tp=16, dp=2, ep=32, sp=True, role="prefill"), "vllm-ascend@0.18")
    expected = glm51_w8a8_rank(16, 32, dsa_cp=True, o_proj="replicated", shared_replicated=True,
                               gate_bytes=E * H * BF16)
    assert int(round(a.ledger.total.max())) == expected
    # the seed RFC's "~38 GB" observation (GiB, as TensorCast labels it)
    assert 37.5 < expected / 2**30 < 38.5


def test_v018_decode_node_keeps_tp_o_proj_with_pool(glm51):
    a = run_memory_audit(glm51, ParallelPlan(tp=16, dp=2, ep=32, sp=True, role="decode"), "vllm-ascend@0.18")
    # v0.18 pool: one full-size buffer, no per-layer aclnn copies (§3.3 v0.18-v0.22)
    expected = glm51_w8a8_rank(16, 32, dsa_cp=True, o_proj="tp", shared_replicated=True,
                               gate_bytes=E * H * BF16) + NH * Dv * H * I8
    assert int(round(a.ledger.total.max())) == expected
    # the seed RFC's "another real configuration ~31 GB"
    assert 30.5 < expected / 2**30 < 32.0


def test_no_sp_is_plain_tp(glm51):
    a = run_memory_audit(glm51, ParallelPlan(tp=16, dp=2, ep=32), "vllm-ascend@main")
    assert not a.layout.dsa_cp
    expected = glm51_w8a8_rank(16, 32, dsa_cp=False, o_proj="tp", shared_replicated=False,
                               gate_bytes=E * H * F32)
    assert int(round(a.ledger.total.max())) == expected


def test_naive_estimate_is_stored_weights_with_plain_tp(glm51):
    a = run_memory_audit(glm51, ParallelPlan(tp=16, dp=2, ep=32, sp=True), "vllm-ascend@main")
    tp = 16
    # stored dtypes of the msModelSlim W8A8 output: int8 linears, bf16 kv_b/wk/weights_proj/gate/embed,
    # F32 norms, k_norm, router bias and lm_head
    per_layer = ((Qr + Lkv + Dr) * H + NH * (Dn + Dr) * Qr // tp + NH * (Dn + Dv) * Lkv * BF16 // tp
                 + H * NH * Dv // tp + IH * ID * Qr + (ID + IH) * H * BF16 + 2 * ID * F32
                 + (Qr + Lkv + 2 * H) * F32)
    dense = 3 * Id * H // tp
    moe = E * H * BF16 + E * F32 + (E // 32) * 3 * I * H + 3 * I * H // tp
    glob = (V // tp) * H * BF16 + (V // tp) * H * F32 + H * F32
    expected = LYR * per_layer + KD * dense + (LYR - KD) * moe + glob
    assert int(round(a.ledger.naive.max())) == expected
    # the bridge closes exactly: naive + steps = resident
    steps = sum(v for _, v in a.bridge())
    assert abs(a.ledger.naive[0] + steps - a.ledger.total[0]) < 64


def test_pipeline_stages_differ_and_worst_first(glm51):
    a = run_memory_audit(glm51, ParallelPlan(tp=8, dp=1, ep=8, pp=2), "vllm-ascend@main")
    per_stage = {}
    for r in range(a.plan.world):
        per_stage.setdefault(a.plan.rank_coords(r)[0], set()).add(int(a.ledger.total[r]))
    assert len(per_stage[0]) == 1 and len(per_stage[1]) == 1
    assert per_stage[0] != per_stage[1]            # embed vs lm_head stages and 39/39 layer split
    order = a.ledger.order()
    assert a.ledger.total[order[0]] >= a.ledger.total[order[-1]]


def test_uneven_redundant_experts_make_ranks_differ(glm51):
    # 256 + 4 redundant experts over EP 32: EP ranks 0-3 hold 9 experts, the other 28 hold 8
    a = run_memory_audit(glm51, ParallelPlan(tp=16, dp=2, ep=32, redundant_experts=4), "vllm-ascend@main")
    per_expert = (H * 2 * I + I * H + 2 * 2 * I * BF16 + 2 * H * BF16 + 2 * I * F32) * (LYR - KD)
    totals = sorted({int(round(x)) for x in a.ledger.total})
    assert len(totals) == 2
    assert totals[1] - totals[0] == per_expert
    heavy = [r for r in range(32) if int(round(a.ledger.total[r])) == totals[1]]
    assert heavy == [0, 1, 2, 3]
    assert a.ledger.worst_rank in heavy
