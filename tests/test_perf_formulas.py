"""FLOPs, bytes and times of individual ops and collectives against hand calculations.

Every expected number is written out from the model dimensions (GLM-5.1: H 6144, NH 64, Qr 2048,
Lkv 512, Dr 64, Dn 192, Dv 256, IH 32, ID 128, E 256, k 8, I 2048, top-k 2048) and the A3 752T
profile (I8 752 TFLOP/s, F32 99.5, HBM 1.6 TiB/s, eta_c 0.7, eta_m 0.6, 5 us / 2 us / 10 us
static, intra-pod 196 GB/s 0.5 us, inter-pod 196 GB/s 5.5 us, comm eta 0.7).
"""
from __future__ import annotations

import math

import pytest

from auditor.context import DeploymentContext
from auditor.devices.profiles import device_from_json
from auditor.model.presets import preset_spec
from auditor.perf.api import Workload, evaluate
from auditor.parallel import ParallelPlan

SPEC = preset_spec("glm-5.1")
# TensorCast's A3 752T die constants (anchor §4), fixed here so a recalibrated shipped profile
# cannot move the expected numbers
A3 = {
    "name": "a3-test", "mma_flops": {"F32": 99.5e12, "BF16": 353.9e12, "F16": 376e12, "I8": 752e12},
    "vector_flops": {"F32": 11e12, "BF16": 22e12, "F16": 22e12},
    "hbm_bytes_per_s": 1.6 * 2 ** 40, "hbm_capacity_bytes": 64 * 2 ** 30,
    "efficiency": {"compute": 0.7, "memory": 0.6, "sfa_kv": 1.0, "indexer_cache": 1.0, "comm": 0.7},
    "static_us": {"mma": 5.0, "gp": 2.0, "comm": 10.0}, "grid": [48, 8, 2],
    "tiers": [{"bytes_per_s": 196e9, "latency_us": 5.5}, {"bytes_per_s": 196e9, "latency_us": 0.5},
              {"bytes_per_s": 224e9, "latency_us": 0.2, "topology": "SIO"}],
}
DEV = device_from_json(A3)
ENGINE = "vllm-ascend@main"
HBM = 1.6 * 2 ** 40          # 1.6 TiB/s
I8, F32, BF16 = 752e12, 99.5e12, 353.9e12
F32_VEC = 11e12
ETA_C, ETA_M = 0.7, 0.6
LINK = 196e9 * 0.7


def w8a8_static_resident(N: int, K: int) -> int:
    """Engine spec §2.1: int8 [K,N] + input_scale bf16 + input_offset int8 + quant_bias i32[N] +
    deq_scale f32[N] + weight_scale/offset bf16[N] + 3 aclnn_input_* bf16[K]."""
    return K * N + 2 + 1 + N * (4 + 4 + 2 + 2) + 3 * K * 2


def roofline_us(mma_flops: float, peak: float, nbytes: float, vec_flops: float = 0.0, static_us: float = 5.0) -> float:
    compute = (mma_flops / peak + vec_flops / 22e12) / ETA_C
    memory = nbytes / (HBM * ETA_M)
    return (max(compute, memory)) * 1e6 + static_us


@pytest.fixture(scope="module")
def prefill() -> dict:
    plan = ParallelPlan(tp=16, dp=2, ep=32, sp=True, dsa_cp=True)
    return evaluate(DeploymentContext(SPEC, plan, ENGINE, "w8a8", DEV), Workload("prefill", 4096)).to_json()


def op(js: dict, name: str, layer: int = 10) -> dict:
    (o,) = [o for o in js["ops"] if o["name"] == name and o["layer"] == layer and o.get("pass") is None]
    return o


def test_q_b_proj(prefill):
    # DSA-CP: the replicated q_b_proj runs on this rank's 4096 / 16 = 256 tokens with all 64 heads
    o = op(prefill, "self_attn.q_b_proj")
    T, Qr, NH, Dq = 256, 2048, 64, 192 + 64
    flops = 2 * T * Qr * (NH * Dq)
    assert o["mma_flops"] == flops == 17_179_869_184
    # W8A8 static: int8 input, the replicated weight as resident (memory ledger rules), bf16 out
    weight = w8a8_static_resident(NH * Dq, Qr)
    nbytes = T * Qr * 1 + weight + T * NH * Dq * 2
    assert o["bytes"] == nbytes
    assert o["dtype"] == "I8"
    assert o["time_us"] == pytest.approx(roofline_us(flops, I8, nbytes))
    # 256 rows against a 16384 x 2048 weight: the weight read outweighs the Cube work
    assert o["bound"] == ("memory" if nbytes / (HBM * ETA_M) > flops / I8 / ETA_C else "compute") == "memory"


def test_o_proj_local_full_weight(prefill):
    o = op(prefill, "self_attn.o_proj")
    flops = 2 * 256 * (64 * 256) * 6144
    assert o["mma_flops"] == flops
    # TP shard resident (6144 x 1024 int8 + W8A8 aux + the per-layer full aclnn copies of §3.3),
    # gathered into the full-size pool: counted as 16 shards read
    shard = w8a8_static_resident(6144, 1024) + 3 * 16384 * 2
    assert o["weight_bytes"] == 16 * shard
    assert o["bytes"] == 256 * 16384 * 1 + 16 * shard + 256 * 6144 * 2


def test_sfa_prefill_causal_topk_capped(prefill):
    o = op(prefill, "self_attn.sfa")
    # query i (1..4096) attends min(i, 2048) latent entries; under DSA-CP this rank owns 256 of the
    # 4096 queries: the model charges it the mean share, 1/16 of the pairs
    pairs_all = sum(min(i, 2048) for i in range(1, 4097))
    assert pairs_all == 2048 * 2049 // 2 + 2048 * 2048
    pairs = pairs_all / 16
    assert o["tokens"] == 256
    assert o["mma_flops"] == pytest.approx(2 * pairs * 64 * (512 + 64) + 2 * pairs * 64 * 512)
    assert o["vector_flops"] == pytest.approx(4 * pairs * 64)
    nbytes = 256 * 64 * 576 * 2 + 256 * 64 * 512 * 2 + 256 * 2048 * 4 + pairs * 576 * 2
    assert o["bytes"] == pytest.approx(nbytes)
    assert o["dtype"] == "BF16"        # SFA inputs are bf16 whatever the linear scheme


def test_indexer_score_local_queries(prefill):
    o = op(prefill, "self_attn.indexer.score")
    keys_all = sum(range(1, 4097))           # causal: query i sees i keys (context 0)
    keys = keys_all / 16                     # this rank owns 256 of the 4096 queries
    assert o["tokens"] == 256
    assert o["mma_flops"] == pytest.approx(2 * keys * 32 * 128)
    # head weight Mul + head-sum Add in fp32 per (row, key, head): 2 element ops, each two bf16 lanes
    # of a peak that counts a lane-cycle as 2 FLOPs -> 8 FLOP-equivalents
    assert o["vector_flops"] == pytest.approx(8 * keys * 32)
    tiles = math.ceil(256 / 8)               # bf16 kernel: key cache read once per 8-query-row tile
    assert o["bytes"] == pytest.approx(256 * 32 * 128 * 2 + 256 * 32 * 4 + tiles * 4096 * 128 * 2)
    topk = op(prefill, "self_attn.indexer.topk")
    sort_ops = 4.36 * keys + 3.32 * 2048 * 256          # report: 4.36 S_k + 3.32 k per query row
    assert topk["vector_sort_ops"] == pytest.approx(sort_ops) and topk["bytes"] == 256 * 2048 * 4
    # fused into the indexer: no launch cost; sort rate default = F32 vector peak / 16
    assert topk["time_us"] == pytest.approx(sort_ops / (F32_VEC / 16) / ETA_C * 1e6)
    assert o["context_dependent"] and topk["context_dependent"] and not op(prefill, "mlp.experts")["context_dependent"]


def test_moe_gate_and_experts(prefill):
    gate = op(prefill, "mlp.gate")
    assert gate["mma_flops"] == 2 * 256 * 6144 * 256 and gate["dtype"] == "F32"
    gate_w = 256 * 6144 * 4 + 256 * 4                 # fp32 router + fp32 correction bias
    assert gate["bytes"] == 256 * 6144 * 2 + gate_w + 256 * 256 * 4
    ex = op(prefill, "mlp.experts")
    rows = 256 * 8
    assert ex["mma_flops"] == 2 * rows * 6144 * (2 * 2048) + 2 * rows * 2048 * 6144
    assert ex["vector_flops"] == 3 * rows * 2048 + 4 * rows * (6144 + 2048)
    # 8 local experts, §2.4: int8 w13/w2, bf16 scales and offsets, fp32 w13 scale copy
    weight = 8 * 3 * 6144 * 2048 + 2 * 8 * (2 * 2048 + 6144) * 2 + 8 * 2 * 2048 * 4
    assert ex["weight_bytes"] == weight
    hit = 1 - (1 - 8 / 256) ** (256 * 32)                          # every local expert is hit
    act = rows * 6144 * 1 + rows * 2 * 2048 * 2 + rows * 2048 * 1 + rows * 6144 * 2
    assert ex["bytes"] == pytest.approx(act + weight * hit)
    assert ex["time_us"] == pytest.approx(roofline_us(ex["mma_flops"], I8, ex["bytes"], ex["vector_flops"]))


def test_w4a8_halves_expert_weight():
    plan = ParallelPlan(tp=16, dp=2, ep=32, sp=True, dsa_cp=True)
    js = evaluate(DeploymentContext(SPEC, plan, ENGINE, "w4a8", DEV), Workload("prefill", 4096)).to_json()
    ex = op(js, "mlp.experts")
    # §2.5: packed int4 w13 [8, 6144, 2048] and w2 [8, 2048, 3072] bytes, int64 scales,
    # fp32 scale_bias and offsets
    el, H, I = 8, 6144, 2048
    weight = el * H * I + el * I * H // 2 + el * (2 * I + H) * 8 + 2 * el * (2 * I + H) * 4
    assert ex["weight_bytes"] == weight
    assert ex["dtype"] == "I8"
    assert op(js, "self_attn.q_b_proj")["dtype"] == "I8"


def test_decode_sfa_paged_kv():
    plan = ParallelPlan(tp=4, dp=8, ep=32)
    js = evaluate(DeploymentContext(SPEC, plan, ENGINE, "w8a8", DEV),
                  Workload("decode", 1, context=2500, batch=9)).to_json()
    o = op(js, "self_attn.sfa")
    pairs = 9 * min(2500 + 1, 2048)
    assert o["shape_in"] == [[9, 16, 576]]             # 64 heads / TP4
    assert o["mma_flops"] == 2 * pairs * 16 * 576 + 2 * pairs * 16 * 512
    kv = 9 * 1 * 2048 * 576 * 2                        # one staged set of 2048 entries per request
    q_out = 9 * 16 * 576 * 2 + 9 * 16 * 512 * 2 + 9 * 2048 * 4
    assert o["bytes"] == kv + q_out
    idx = op(js, "self_attn.indexer.score")
    assert idx["mma_flops"] == 2 * 9 * 2501 * 32 * 128
    assert idx["bytes"] == 9 * 32 * 128 * 2 + 9 * 32 * 4 + 9 * 2501 * 128 * 2


def test_collective_alpha_beta(prefill):
    cs = [c for c in prefill["collectives"] if c["layer"] == 10]
    ag = next(c for c in cs if c["tensor"] == "input_layernorm.out")
    m = 256 * 6144 * 2
    # TP16 = ranks 0..15 -> intra-pod tier (0.5 us); latency term min((n-1)a, log2(n)a)
    expect = (min(15 * 0.5e-6, 4 * 0.5e-6) + 15 * m / LINK + 10e-6) * 1e6
    assert ag["time_us"] == pytest.approx(expect)
    disp = next(c for c in cs if c["tensor"] == "mlp.dispatch")
    sent = 256 * 8 * (6144 * 1 + 4)                    # int8 tokens + fp32 per-token scale
    assert disp["bytes"] == sent and disp["group"] == "ep"
    # EP32 spans two pods -> inter-pod tier (5.5 us)
    expect = (min(31 * 5.5e-6, 5 * 5.5e-6) + sent / LINK + 10e-6) * 1e6
    assert disp["time_us"] == pytest.approx(expect)


def test_totals_are_sum_of_parts(prefill):
    t = sum(o["time_us"] for o in prefill["ops"]) + sum(c["time_us"] for c in prefill["collectives"])
    # + the step's host time (auditor.perf.host; this profile has no serving block: its defaults)
    assert prefill["totals"]["time_ms"] == pytest.approx(t / 1e3 + prefill["totals"]["host_ms"])
    assert prefill["totals"]["flops"] == pytest.approx(sum(o["flops"] for o in prefill["ops"]))
    assert prefill["totals"]["bytes"] == pytest.approx(sum(o["bytes"] for o in prefill["ops"]))


def test_efficiency_read_at_evaluate_time():
    plan = ParallelPlan(tp=16, dp=2, ep=32, sp=True, dsa_cp=True)
    wl = Workload("prefill", 4096)
    base = evaluate(DeploymentContext(SPEC, plan, ENGINE, "w8a8", DEV), wl).to_json()
    # SFA's q/out streams run at 'memory', its KV gathers at 'sfa_kv' (fractions of HBM peak)
    slow = evaluate(DeploymentContext(SPEC, plan, ENGINE, "w8a8", DEV.with_efficiency(memory=0.3, sfa_kv=0.5)),
                    wl).to_json()
    a, b = op(base, "self_attn.sfa"), op(slow, "self_attn.sfa")      # memory bound
    assert (b["time_us"] - 5) == pytest.approx(2 * (a["time_us"] - 5))
    nostatic = evaluate(DeploymentContext(SPEC, plan, ENGINE, "w8a8", DEV.with_static(mma=0.0, gp=0.0)), wl).to_json()
    assert op(nostatic, "self_attn.sfa")["time_us"] == pytest.approx(a["time_us"] - 5)
