"""KV spec, budget and log lines against hand calculations from engine-vllm-ascend-runtime.md."""
from __future__ import annotations

import pytest

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
    """Spec §3.4: A2 DP2 TP8 EP16, FlashComm1 (DSA-CP), T=4096, S=8 measured P_act = 2.0 GiB."""
    t = activation_terms(glm, tokens=4096, seqs=8, mtp=0, tp=8, dp=2, ep=16, sp=True, dsa_cp=True)
    # source-visible: absorbed q and SFA output, 4096 * 64 * 512 * 2 B = 256 MiB each
    assert t["attention"] > 2 * 4096 * 64 * 512 * 2
    assert float(activation_peak(t)) == pytest.approx(2.0 * GiB, rel=0.05)


def test_hccl_matches_spec_a2_point():
    # tp + ep + mc2 + world at 2 x 200 MB each = 1600 MiB; + 0.5 GiB runtime = 2.0625 GiB (measured 2.07)
    terms = non_torch_terms(ParallelPlan(tp=8, dp=2, ep=16))
    assert sum(terms.values()) == 4 * 2 * 200 * 2**20 + GiB // 2
    terms = non_torch_terms(ParallelPlan(tp=8, dp=2, ep=16), hccl_buffsize_mb=512)
    assert sum(terms.values()) == 3 * 2 * 200 * 2**20 + 2 * 512 * 2**20 + GiB // 2


def test_device_usable_total():
    from auditor.devices.profiles import load_device
    from auditor.runtime.budget import usable_total
    assert usable_total(load_device("a3-752t")) == round(61.27 * GiB)
    assert usable_total(load_device("a2-376t")) == round(60.96 * GiB)
    # public torch OOM messages: "total capacity of 139.80 GiB" (issue 16 replaces the 141 GB datasheet figure)
    assert usable_total(load_device("h200")) == int(139.80 * GiB)
