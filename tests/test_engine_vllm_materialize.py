"""Upstream vLLM (CUDA) materialization of an FP8 block-scale checkpoint: the ledger of one
DeepSeek-V3.2 layer derived by hand (engine-vllm-cuda.md Part B §2-§3). DeepSeek-V3.2's config is
not among ../shared/data/configs; its dimensions are the HF config the ``deepseek-v3.2`` preset
carries (H 7168, 128 heads, q_lora 1536, kv_lora 512, nope/rope/v 128/64/128, indexer 64 x 128,
256 experts of 2048, one shared), and GLM-5.1-FP8's real config checks the IndexCache-free case."""
from __future__ import annotations

import pytest

from auditor.engines.registry import resolve
from auditor.engines.stored import StoredIndex
from auditor.errors import AuditInputError
from auditor.model.classify import classify
from auditor.parallel import ParallelPlan
from auditor.source import open_model

F8, BF16, F32 = 1, 2, 4
ENGINE = resolve("vllm@0.28")


def cdiv(a, b):
    return -(-a // b)


def fp8_block(N, K):
    """fp8 weight [N, K] + fp32 scales [cdiv(N,128), cdiv(K,128)] (SM90)."""
    return N * K * F8 + cdiv(N, 128) * cdiv(K, 128) * F32


@pytest.fixture(scope="module")
def dsv32():
    src = open_model("deepseek-v3.2", "fp8-block")
    return src, StoredIndex(classify(src.table, src.spec.Lyr, src.desc))


def _layer(dsv32, plan, layer, arch=""):
    src, stored = dsv32
    spec = src.spec
    mat = ENGINE.materializer(spec, plan, ENGINE.placement(spec, plan), stored, src.desc, arch=arch).run()
    return [r for r in mat.rows if r.layer == layer], mat


def dsv32_moe_layer_tp8() -> dict[str, int]:
    H, NH, Qr, Lkv, Dr, Dn, Dv, IH, ID, E, I, tp = 7168, 128, 1536, 512, 64, 128, 128, 64, 128, 256, 2048, 8
    Hl, Ip = NH // tp, I // tp
    return {
        "norms": 2 * H * BF16 + Qr * BF16 + Lkv * BF16,
        "fused_qkv_a (replicated)": fp8_block(Qr + Lkv + Dr, H),            # [2112, 7168], scales [17, 56]
        "q_b": fp8_block(Hl * (Dn + Dr), Qr),
        "kv_b (kept)": fp8_block(Hl * (Dn + Dv), Lkv),
        "W_UK_T+W_UV bf16": Hl * (Dn + Dv) * Lkv * BF16,                     # 4 MiB at TP8
        "o_proj": fp8_block(H, Hl * Dv),
        "indexer wq_b (replicated)": fp8_block(IH * ID, Qr),                 # [8192, 1536]
        "indexer wk_weights_proj bf16": (ID + IH) * H * BF16,                # fp8 wk dequantized at load
        "indexer k_norm": 2 * ID * BF16,
        "router gate bf16 + fp32 bias": E * H * BF16 + E * F32,
        "routed experts (all E, I/TP)": E * (2 * Ip * H + H * Ip) * F8
        + E * (2 * cdiv(Ip, 128) * cdiv(H, 128) + cdiv(H, 128) * cdiv(Ip, 128)) * F32,
        "shared expert": fp8_block(2 * Ip, H) + fp8_block(H, Ip),
    }


def test_one_deepseek_v32_layer_by_hand(dsv32):
    rows, _ = _layer(dsv32, ParallelPlan(tp=8), 5)
    want = dsv32_moe_layer_tp8()
    assert want["W_UK_T+W_UV bf16"] == 4 * 2 ** 20
    assert want["fused_qkv_a (replicated)"] == 2112 * 7168 + 17 * 56 * 4
    assert sum(r.bytes for r in rows) == sum(want.values())
    by = {(r.module, r.tensor): r for r in rows}
    assert by[("self_attn.kv_b_proj", "weight")].dtype == "F8_E4M3"          # not disposed on CUDA
    assert by[("self_attn.kv_b_proj", "W_UK_T+W_UV")].bytes == 4 * 2 ** 20
    assert by[("self_attn.indexer.wk_weights_proj", "weight")].dtype == "BF16"
    assert by[("mlp.gate", "weight")].dtype == "BF16" and by[("mlp.gate", "e_score_correction_bias")].dtype == "F32"


def test_replicated_modules_do_not_shrink_with_tp(dsv32):
    r1, _ = _layer(dsv32, ParallelPlan(tp=1), 5)
    r8, _ = _layer(dsv32, ParallelPlan(tp=8), 5)
    size = lambda rows, m: sum(r.bytes for r in rows if r.module == m)      # noqa: E731
    for m in ("self_attn.fused_qkv_a_proj", "self_attn.indexer.wq_b", "self_attn.indexer.wk_weights_proj", "mlp.gate"):
        assert size(r1, m) == size(r8, m) > 0
    assert size(r1, "self_attn.o_proj") > 7 * size(r8, "self_attn.o_proj")


def test_sm100_scales_are_packed_per_row(dsv32):
    rows, _ = _layer(dsv32, ParallelPlan(tp=8), 5, arch="sm100")
    sc = {r.module: r for r in rows if r.tensor == "weight_scale_inv"}
    # fused_qkv_a [2112, 7168]: N % 64 == 0 and K % 128 == 0 -> int32 [2112, cdiv(7168, 512) = 14]
    assert sc["self_attn.fused_qkv_a_proj"].shape == (2112, 14)
    assert sc["self_attn.fused_qkv_a_proj"].bytes == 2112 * 14 * 4
    # 32x the fp32 128x128 blocks, roughly (Part B §2.2: ~0.78% of the fp8 bytes instead of 1/4096)
    assert sc["self_attn.fused_qkv_a_proj"].bytes / (2112 * 7168) == pytest.approx(1 / 128, rel=0.01)


def test_mtp_drafter_shares_embeddings_and_adds_its_layer(dsv32):
    rows, mat = _layer(dsv32, ParallelPlan(tp=8, mtp=True), 61)
    shared = [r for r in rows if r.module in ("shared_head.head", "embed_tokens")]
    assert shared and all(r.bytes == 0 for r in shared)
    eh = [r for r in rows if r.module == "eh_proj"]
    assert eh[0].bytes == 7168 * 2 * 7168 * BF16                              # replicated bf16 [H, 2H]
    topk = [r for r in mat.rows if r.tensor == "topk_indices_buffer"]
    assert len(topk) == 1 and topk[0].bytes == 8192 * 2048 * 4               # one buffer, 64 MiB


def test_ep_holds_whole_experts(dsv32):
    rows, _ = _layer(dsv32, ParallelPlan(tp=8, ep=8), 5)
    w13 = next(r for r in rows if r.tensor == "w13_weight")
    assert w13.placement == "expert" and w13.shape == (1, 2 * 2048, 7168)


def test_ascend_switches_refused(dsv32):
    src, _ = dsv32
    for plan, opt in ((ParallelPlan(tp=8, sp=True), "--sp"), (ParallelPlan(tp=8, dsa_cp=True), "--dsa-cp"),
                      (ParallelPlan(tp=32), "--tp")):
        with pytest.raises(AuditInputError, match=opt):
            ENGINE.placement(src.spec, plan)


def test_glm51_fp8_real_config_index_cache_off(shared_dir):
    src = open_model(shared_dir / "data" / "configs" / "glm-5.1-fp8")
    stored = StoredIndex(classify(src.table, src.spec.Lyr, src.desc))
    plan = ParallelPlan(tp=8)
    mat = ENGINE.materializer(src.spec, plan, ENGINE.placement(src.spec, plan), stored, src.desc).run()
    # GLM-5.1 keeps an indexer on all 78 layers: wq_b [32*128, 2048] replicated on every one
    wq = [r for r in mat.rows if r.module == "self_attn.indexer.wq_b" and r.tensor == "weight"]
    assert len(wq) == 78 and all(r.bytes == 4096 * 2048 for r in wq)
    # W_UK_T/W_UV at TP8: 8 heads x (192 + 256) x 512 x 2 B
    kvb = [r for r in mat.rows if r.tensor == "W_UK_T+W_UV"]
    assert kvb[0].bytes == 8 * 448 * 512 * 2


def test_glm52_index_cache_drops_shared_layers_indexer(shared_dir):
    src = open_model(shared_dir / "data" / "configs" / "glm-5.2-fp8")
    stored = StoredIndex(classify(src.table, src.spec.Lyr, src.desc))
    plan = ParallelPlan(tp=8, mtp=True)
    mat = ENGINE.materializer(src.spec, plan, ENGINE.placement(src.spec, plan), stored, src.desc).run()
    # indexer_types: 21 "full" of 78 (layers 0-2 and every 4th after), plus the MTP layer's own
    layers = sorted({r.layer for r in mat.rows if r.module == "self_attn.indexer.wq_b" and r.tensor == "weight"})
    assert layers == [0, 1, 2] + list(range(6, 78, 4)) + [78]
