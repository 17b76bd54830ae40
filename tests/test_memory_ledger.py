"""The per-rank ledger against hand calculations written from the engine spec (engine-vllm-ascend.md
§2-§5), not from the code: every term below names the spec rule it comes from."""
from __future__ import annotations

import pytest

from auditor.memory.audit import run_memory_audit
from auditor.parallel import ParallelPlan
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
    a = run_memory_audit(glm51, ParallelPlan(tp=16, dp=2, ep=32, sp=True, dsa_cp=True), "vllm-ascend@main")
    expected = glm51_w8a8_rank(16, 32, dsa_cp=True, o_proj="tp+pool", shared_replicated=False,
                               gate_bytes=E * H * F32)
    assert a.layout.dsa_cp
    assert int(round(a.ledger.total.max())) == expected
    assert int(round(a.ledger.total.min())) == expected     # every rank holds the same


def test_v018_prefill_node_replicates_o_proj_and_shared_experts(glm51):
    a = run_memory_audit(glm51, ParallelPlan(tp=16, dp=2, ep=32, sp=True, dsa_cp=True, role="prefill"), "vllm-ascend@0.18")
    expected = glm51_w8a8_rank(16, 32, dsa_cp=True, o_proj="replicated", shared_replicated=True,
                               gate_bytes=E * H * BF16)
    assert int(round(a.ledger.total.max())) == expected
    # the seed RFC's "~38 GB" observation (GiB, as TensorCast labels it)
    assert 37.5 < expected / 2**30 < 38.5


def test_v018_decode_node_keeps_tp_o_proj_with_pool(glm51):
    a = run_memory_audit(glm51, ParallelPlan(tp=16, dp=2, ep=32, sp=True, dsa_cp=True, role="decode"), "vllm-ascend@0.18")
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
    a = run_memory_audit(glm51, ParallelPlan(tp=16, dp=2, ep=32, sp=True, dsa_cp=True), "vllm-ascend@main")
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


def test_layer_sharding_owned_layers_plus_two_windows(glm51):
    """§3.4 (v0.18 P node): q_b_proj.weight of layer i lives on stage rank i % 32; every rank keeps
    2 window buffers; scales/offsets stay everywhere. 78 layers over 32 ranks: ranks 0-13 own 3."""
    plan = ParallelPlan(tp=16, dp=2, ep=32, sp=True, dsa_cp=True, role="prefill")
    base = run_memory_audit(glm51, plan, "vllm-ascend@0.18")
    shard = run_memory_audit(glm51, plan.with_(layer_sharding=("q_b_proj",)), "vllm-ascend@0.18")
    w = NH * (Dn + Dr) * Qr * I8                      # full int8 q_b_proj weight (NZ, aligned)
    for rank, owned in ((0, 3), (13, 3), (14, 2), (31, 2)):
        delta = shard.ledger.total[rank] - base.ledger.total[rank]
        assert int(round(delta)) == (owned + 2 - LYR) * w


def test_mtp_drafter_adds_a_float_layer(glm51):
    """The msModelSlim W8A8 recipe keeps the MTP layer FLOAT (bf16 resident); the drafter shares
    embed_tokens / lm_head, adds enorm/hnorm/shared_head.norm, eh_proj [H, 2H], QuaRot rot [H, H]."""
    plan = ParallelPlan(tp=16, dp=2, ep=32, sp=True, dsa_cp=True)
    base = run_memory_audit(glm51, plan, "vllm-ascend@main")
    mtp = run_memory_audit(glm51, plan.with_(mtp=True), "vllm-ascend@main")
    el = E // 32
    layer = (2 * rmsnorm(H) + (Qr + Lkv + Dr) * H * BF16 + rmsnorm(Qr) + rmsnorm(Lkv)
             + NH * (Dn + Dr) * Qr * BF16                                   # q_b replicated (DSA-CP)
             + NH * Dn * Lkv * BF16 + NH * Lkv * Dv * BF16                 # W_UK_T + W_UV
             + H * (NH * Dv // 16) * BF16 + (NH * Dv // 16) * H * BF16     # o_proj TP + gather-input copy
             + IH * ID * Qr * BF16 + (ID + IH) * H * BF16 + 2 * ID * F32    # indexer
             + E * H * F32 + E * F32                                        # router fp32 + bias
             + el * H * 2 * I * BF16 + el * I * H * BF16                    # 8 local bf16 experts
             + (2 * I // 16) * H * BF16 + H * (I // 16) * BF16)             # shared experts TP
    extras = 3 * rmsnorm(H) + H * 2 * H * BF16 + H * H * BF16
    pool_bf16 = NH * Dv * H * BF16                   # a second gather pool for the bf16 o_proj
    delta = mtp.ledger.total.max() - base.ledger.total.max()
    assert int(round(delta)) == layer + extras + pool_bf16


def test_fp8_block_checkpoint_is_classified(tmp_path):
    from auditor.model.classify import classify
    from auditor.synth import synthesize
    synthesize(tmp_path / "ds", model="deepseek-v3.2", recipe="fp8-block")
    src = open_model(tmp_path / "ds")
    ct = classify(src.table, src.spec.Lyr, None)
    summ = ct.summary()
    # quantized linears per main layer: q_a, q_b, kv_a, kv_b, o_proj, wq_b, wk + 3 per expert/dense/shared MLP
    n_moe, n_dense, n_mtp = 58, 3, 1
    per_attn = 7
    expected_fp8 = (61 + n_mtp) * per_attn + n_dense * 3 + (n_moe + n_mtp) * (256 + 1) * 3
    assert summ["int8"]["count"] == expected_fp8
    assert summ["scale"]["count"] == expected_fp8        # one weight_scale_inv per FP8 weight
    kinds = set(ct.kind[ct.category == 1])
    assert kinds == {"fp8_e4m3"}
    assert set(ct.scheme[ct.addr.suffix == "weight"]) >= {"FP8_BLOCK", "FLOAT"}
