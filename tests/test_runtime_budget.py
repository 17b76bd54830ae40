"""KV spec, budget and log lines against hand calculations from engine-vllm-ascend-runtime.md."""
from __future__ import annotations

import pytest

from auditor.context import DeploymentContext
from auditor.engines.registry import as_engine
from auditor.errors import AuditInputError
from auditor.model.presets import preset_spec
from auditor.parallel import ParallelPlan
from auditor.engines.vllm_ascend import loglines
from auditor.engines.vllm_ascend.activation import activation_peak, activation_terms
from auditor.runtime.budget import rank_budget
from auditor.engines.vllm_ascend.hccl import non_torch_terms
from auditor.engines.vllm_ascend.kv import kv_spec

GiB = 1 << 30
MAIN = as_engine("vllm-ascend@main").profile
V018 = as_engine("vllm-ascend@0.18").profile


@pytest.fixture(scope="module")
def glm():
    return preset_spec("glm-5.1")


# GLM-5.1: Lkv=512, Dr=64, ID=128.
# bf16:   B_mla = (512+64)*2 = 1152, B_idx = 128*2 = 256           -> 1408
# LI-C8:  B_idx = 128*1 + 2 (fp16 scale)          = 130            -> 1152+130 = 1282
# c8:     B_mla = 512 + 2*64 + 4*512/128 = 656                     -> 656+130 = 786
@pytest.mark.parametrize("variant,layer", [("bf16", 1408), ("c8-indexer", 1282), ("c8", 786)])
def test_bytes_per_token_per_layer(glm, variant, layer):
    kv = kv_spec(glm, ParallelPlan(tp=16), MAIN, variant=variant)
    assert kv.bytes_per_token_layer() == layer
    assert kv.cache_layers == 78                       # no drafter: main layers only
    assert kv.bytes_per_token() == layer * 78


def test_mtp_adds_its_cache_layer(glm):
    kv = kv_spec(glm, ParallelPlan(tp=16), MAIN, variant="bf16", mtp=True)
    assert kv.cache_layers == 79 and kv.idx_layers == 79
    assert kv.bytes_per_token() == 111_232              # spec table: 1408 * 79
    assert kv.page_block_bytes == 14_237_696            # 128 * 79 * 1408


# HEAD DCP: B_mla/DCP + B_idx (indexer replicated); DCP16: 1152/16 + 256 = 72 + 256 = 328,
# c8: 656/16 + 130 = 41 + 130 = 171
@pytest.mark.parametrize("variant,layer", [("bf16", 328), ("c8", 171)])
def test_dcp_replicates_the_indexer(glm, variant, layer):
    kv = kv_spec(glm, ParallelPlan(tp=16, dp=1), MAIN, variant=variant, dcp=16)
    assert kv.bytes_per_token_layer() == layer
    assert kv.tokens_per_block == 128 * 16
    assert kv.blocks_per_request(131072) == 131072 // 16 // 128


def test_v018_dcp_divides_the_combined_cache(glm):
    # v0.18 combined spec, no replication: (1152 + 256)/16 = 88
    kv = kv_spec(glm, ParallelPlan(tp=16), V018, variant="bf16", dcp=16)
    assert kv.bytes_per_token_layer() == 88


def test_version_switches_are_data(glm):
    with pytest.raises(AuditInputError, match="does not exist"):
        kv_spec(glm, ParallelPlan(tp=16), V018, variant="c8")       # no main-cache C8 on v0.18
    with pytest.raises(AuditInputError, match="DCP == TP"):
        kv_spec(glm, ParallelPlan(tp=16), MAIN, dcp=8)


def test_pp_counts_own_layers(glm):
    # get_pp_indices for 78 layers over PP2: 39 + 39; the MTP layer sits on the last stage
    plan = ParallelPlan(tp=8, pp=2)
    assert kv_spec(glm, plan, MAIN, mtp=True, stage=0).cache_layers == 39
    assert kv_spec(glm, plan, MAIN, mtp=True, stage=1).cache_layers == 40


def test_worked_example_section5(glm):
    """Spec §5: util 0.9 x 61.27 GiB - 31.5 - 2.0 - 2.1 = 19.54 GiB -> 1473 blocks, 188,544 tokens, 1.44x."""
    plan = ParallelPlan(tp=16, dp=2, ep=32, sp=True)
    b = rank_budget(glm, plan, "vllm-ascend@main", weights_bytes=31.5 * GiB, total_bytes=int(61.27 * GiB),
                    util=0.9, max_model_len=131072, max_num_seqs=16, max_num_batched_tokens=4096, mtp=3,
                    activation_bytes=2.0 * GiB, non_torch_bytes=2.1 * GiB)
    requested = int(0.9 * 61.27 * GiB)
    a_kv = requested - int(31.5 * GiB) - int(2.0 * GiB) - int(2.1 * GiB)
    assert abs(b.kv_available_bytes - a_kv) <= 1
    assert round(b.kv_available_bytes / GiB, 2) == 19.54
    assert abs(b.kv_available_bytes - 20_984_136_466) < 2      # the spec's byte figure
    assert b.num_blocks == 20_984_136_466 // 14_237_696 == 1473
    assert b.kv_tokens == 1473 * 128 == 188_544
    assert b.max_concurrency == pytest.approx(1473 / 1024)
    assert b.fits
    lines = b.log_lines()
    assert lines[1:] == ["Available KV cache memory: 19.54 GiB", "GPU KV cache size: 188,544 tokens",
                         "Maximum concurrency for 131,072 tokens per request: 1.44x"]


def test_worked_example_variants(glm):
    # spec §5 variants table, same A_kv: LI-C8 1618 blocks / 207,104; SFA+LI-C8 2640 / 337,920
    plan = ParallelPlan(tp=16, dp=2, ep=32, sp=True)
    for variant, blocks, tokens in (("c8-indexer", 1618, 207_104), ("c8", 2640, 337_920)):
        b = rank_budget(glm, plan, "vllm-ascend@main", weights_bytes=31.5 * GiB, total_bytes=int(61.27 * GiB),
                        max_model_len=131072, max_num_seqs=16, max_num_batched_tokens=4096, mtp=3,
                        kv_cache_dtype=variant, activation_bytes=2.0 * GiB, non_torch_bytes=2.1 * GiB)
        assert (b.num_blocks, b.kv_tokens) == (blocks, tokens)


def test_log_lines_character_for_character():
    assert loglines.available_kv_line(19.543 * GiB) == "Available KV cache memory: 19.54 GiB"
    assert loglines.kv_cache_size_line(1234567) == "GPU KV cache size: 1,234,567 tokens"
    assert loglines.max_concurrency_line(202752, 0.5) == "Maximum concurrency for 202,752 tokens per request: 0.50x"
    assert loglines.max_concurrency_line(4096, 12.345) == "Maximum concurrency for 4,096 tokens per request: 12.35x"
    assert loglines.weights_line(31.466 * GiB) == "Loading model weights took 31.4660 GB"


def test_shortfall_message(glm):
    # 1.0 GiB available, 128k request in bf16 with MTP: 1024 blocks x 14,237,696 B = 13.58 GiB;
    # 1 GiB / 14,237,696 = 75 blocks -> estimated max length 75 * 128 = 9600
    plan = ParallelPlan(tp=16, dp=2, ep=32, sp=True)
    b = rank_budget(glm, plan, "vllm-ascend@main", weights_bytes=0, total_bytes=GiB + int(4.1 * GiB),
                    util=1.0, max_model_len=131072, max_num_seqs=16, max_num_batched_tokens=4096, mtp=3,
                    activation_bytes=2.0 * GiB, non_torch_bytes=2.1 * GiB)
    assert not b.fits and b.estimated_max_model_len == 9600
    assert b.error() == (
        "ValueError: To serve at least one request with the models's max seq len (131072), (13.58 GiB KV cache "
        "is needed, which is larger than the available KV cache memory (1.0 GiB). Based on the available memory, "
        "the estimated maximum model length is 9600. Try increasing `gpu_memory_utilization` or decreasing "
        "`max_model_len` when initializing the engine. See https://docs.vllm.ai/en/latest/configuration/"
        "conserving_memory/ for more details.")


def test_activation_calibration_point(glm):
    """Issue #10700 (spec §3.4): A2 DP2 TP8 EP16, FlashComm1 (DSA-CP), T=4096, S=8 measured P_act = 2.0 GiB.
    Issue 16: the profile run skips sparse attention; A2 with E/EP = 16 <= 24 and EP = 16 selects MC2
    only up to the capacity C = min(ceil(min(8*1, 512)/8), 512)*8 = 8 < T, so the main pass is
    ALLGATHER over EP with SP: N_g = 16 * 4096/8 = 8192 rows.
      MoE  = 8192*6144*2*2 + 8192*8*(6144 + 2*2048*2 + 2048 + 2*6144) + router 512*256*4 = 2,080,899,072
      residual stream 4*512*6144*2 = 25,165,824; logits 8*154880*2 = 2,478,080 (smaller than MoE)"""
    t = activation_terms(glm, tokens=4096, seqs=8, mtp=0, tp=8, dp=2, ep=16, sp=True, dsa_cp=True, soc="a2")
    assert "attention" not in t                      # attention metadata None -> output.fill_(0)
    assert t["moe"] == 2_080_899_072
    assert t["residual"] == 25_165_824
    assert float(activation_peak(t)) == 2_080_899_072 + 25_165_824
    assert float(activation_peak(t)) == pytest.approx(2.0 * GiB, rel=0.05)


def test_w8a8_experts_hold_no_gate_up_output(glm):
    """The calibration point above is W4A8 (30.16 GiB of weights on TP8 EP16): its experts run gate/up
    as a separate grouped matmul, whose [rows, 2I] output is part of the peak. W8A8_DYNAMIC experts
    (QuantType.W8A8) run gate/up + SwiGLU + quant as one npu_grouped_matmul_swiglu_quant (moe_mlp.py
    fusion on by default): per expanded row the int8 SwiGLU output and its fp32 scale instead.
      MoE = 8192*6144*2*2 + 8192*8*(6144 + 4 + 2048 + 2*6144) + router 512*256*4 = 1,544,290,304
    rank_budget picks the fused form from the recipe's expert scheme: w8a8 fused, w4a8 not."""
    t = activation_terms(glm, tokens=4096, seqs=8, mtp=0, tp=8, dp=2, ep=16, sp=True, dsa_cp=True, soc="a2",
                         fused=True)
    assert t["moe"] == 8192 * 6144 * 2 * 2 + 8192 * 8 * (6144 + 4 + 2048 + 2 * 6144) + 512 * 256 * 4 \
        == 1_544_290_304
    plan = ParallelPlan(tp=8, dp=2, ep=16, sp=True, max_num_batched_tokens=4096)
    moe = {r: rank_budget(glm, plan, "vllm-ascend@main", weights_bytes=30 * GiB, device="a2-313t", max_num_seqs=8,
                          max_num_batched_tokens=4096, recipe=r).activation_terms["moe"] for r in ("w8a8", "w4a8")}
    assert moe == {"w8a8": 1_544_290_304, "w4a8": 2_080_899_072}


def test_a3_alltoall_and_mc2_paths(glm):
    # A3 TP16 EP16, T=4096, S=16, k=3: C = min(ceil(64/16), 512)*16 = 64 < T -> ALLTOALL at T, MC2 warm-up at 64.
    # t = ceil(4096/16) = 256, R = 2048: 2048*14336 + 2048*14336 + 256*8*6144*2 + 4096*6144*2 = 134,217,728
    # + router 4096*256*4 = 4,194,304 -> 138,412,032
    t = activation_terms(glm, tokens=4096, seqs=16, mtp=3, tp=16, dp=1, ep=16, soc="a3")
    assert t["moe"] == 138_412_032
    # warm-up: a = 64/16 * 16 * min(16, 8) = 512 rows * (6144 + 4 + 16384 + 2048 + 12288) + 4*64*6144*2
    assert t["mc2_warmup"] == 512 * 36868 + 4 * 64 * 6144 * 2
    # enable_prefill_mc2 (N5): C = min(4096/16, 512)*16 = 4096 = T -> MC2 main pass, a = 256*16*8 = 32768 rows
    t = activation_terms(glm, tokens=4096, seqs=32, mtp=3, tp=16, dp=1, ep=16, soc="a3", prefill_mc2=True)
    assert t["moe"] == 32768 * 36868 + 4096 * 256 * 4 and t["mc2_warmup"] == 0


def test_hccl_counts_only_groups_the_profile_run_touches(glm):
    """Issue 16: HCCL buffers are allocated at first use; the profile run skips attention and runs MoE
    on one path. A2 point: tp + ep (ALLGATHER over EP with SP) + mc2 (warm-up ran) + dp (ALLGATHER,
    DP2, 2 x 50 MB) + ACL runtime; world is first used later."""
    plan = ParallelPlan(tp=8, dp=2, ep=16, sp=True)
    terms = non_torch_terms(plan, spec=glm, tokens=4096, seqs=8, mtp=0, soc="a2")
    hccl_bytes = sum(v for k, v in terms.items() if k.startswith("hccl"))
    assert hccl_bytes == 3 * 2 * 200 * 2**20 + 2 * 50 * 2**20
    assert not any("world" in k for k in terms)
    # HCCL_BUFFSIZE sizes the mc2 group only
    terms = non_torch_terms(plan, spec=glm, tokens=4096, seqs=8, mtp=0, soc="a2", hccl_buffsize_mb=512)
    assert sum(v for k, v in terms.items() if k.startswith("hccl")) == 2 * 2 * 200 * 2**20 + 2 * 512 * 2**20 \
        + 2 * 50 * 2**20
    # A3 prefill-MC2 (T <= C): the main pass is MC2, the ep group is never touched
    terms = non_torch_terms(ParallelPlan(tp=16, ep=16), spec=glm, tokens=4096, seqs=32, mtp=3, soc="a3",
                            prefill_mc2=True)
    assert sorted(k.split()[1] for k in terms if k.startswith("hccl")) == ["mc2", "tp"]


def test_device_usable_total():
    from auditor.devices.profiles import load_device
    from auditor.runtime.budget import usable_total
    assert usable_total(load_device("a3-752t")) == round(61.27 * GiB)
    assert usable_total(load_device("a2-376t")) == round(60.96 * GiB)
    # public torch OOM messages: "total capacity of 139.80 GiB" (issue 16 replaces the 141 GB datasheet figure)
    assert usable_total(load_device("h200")) == int(139.80 * GiB)


@pytest.mark.parametrize("pp,mtp,kv", [(1, 0, "bf16"), (1, 3, "c8"), (2, 3, "bf16")])
def test_grid_budget_is_rank_budget_for_each_row(pp, mtp, kv):
    """One arithmetic for a deployment and a grid: every row of grid_budget has the blocks and the
    available KV rank_budget gives that row's deployment (per-stage weights, drafter, graph pool)."""
    import numpy as np
    from auditor.devices.profiles import load_device
    from auditor.runtime.feasibility import grid_budget
    from auditor.runtime.weights import plan_weights
    spec = preset_spec("glm-5.1")
    plan = ParallelPlan(tp=8, dp=2, ep=16, pp=pp, max_num_batched_tokens=4096)
    dev = load_device("a3-752t")
    batch = np.array([1.0, 8.0, 32.0])
    req = np.array([4096.0, 32768.0, 8192.0])
    step = batch * (1 + mtp)
    g = grid_budget(DeploymentContext(spec, plan, "vllm-ascend@main", "w8a8", dev), batch=batch, request_tokens=req,
                    step_tokens=step, mtp=np.full(3, float(mtp)), util=0.9, kv_cache_dtype=kv)
    wplan = plan.with_(mtp=mtp > 0)
    W = plan_weights(DeploymentContext(spec, wplan, "vllm-ascend@main", "w8a8"))
    for i in range(3):
        b = rank_budget(spec, wplan, "vllm-ascend@main", weights_bytes=W, device=dev, util=0.9,
                        max_model_len=int(req[i]), max_num_seqs=int(batch[i]),
                        max_num_batched_tokens=int(max(4096, step[i])), kv_cache_dtype=kv, mtp=mtp,
                        dsa_cp=False, recipe="w8a8")
        assert int(np.atleast_1d(g["num_blocks"])[i]) == b.num_blocks
        assert abs(float(np.atleast_1d(g["kv_available"])[i]) - b.kv_available_bytes) <= 1
