"""KV as per-layer cache groups: layer specs that know their pages and block demand, groups that
share block ids, and a pool that prices a block id.

Expected figures come from model-deepseek-v4.md §4.5 (a table of the engine's layout worked by the
spec's authors) and from hand arithmetic written out below; none from the code under test.
"""
from __future__ import annotations

import pytest
from hypothesis import given, settings, strategies as st

from auditor.engines.kv_interface import (CompressedSpec, FullAttentionSpec, KVCacheConfig, KVCacheGroup,
                                          SlidingWindowSpec, cdiv)
from auditor.engines.registry import as_engine
from auditor.engines.vllm_ascend.kv_compressed import approximate_gcd, compressed_cache_config
from auditor.model.presets import preset_spec
from auditor.parallel import ParallelPlan

GiB = 2 ** 30
#: compress_ratios of the real configs (../shared/data/configs/deepseek-v4-*/config.json): 43 / 61 decoder
#: layers, then the MTP layer's own entry (0)
FLASH = [0, 0] + [4, 128] * 20 + [4, 0]
PRO = [128, 128] + [4, 128] * 29 + [4, 0]

# model-deepseek-v4.md §4.5: (bs, L) -> C4, C128, SWA (each of 2), C4-states, C128-states, blocks,
# GiB per request, effective B/token, "check" blocks at n = 10240
WORKED = {
    (128, 131_072): (256, 8, 3, 3, 6, 279, 0.874, 7161, 2035),
    (128, 1_048_576): (2048, 64, 3, 3, 6, 2127, 6.664, 6824, 3883),
    (32, 131_072): (1024, 32, 6, 6, 18, 1092, 0.855, 7007, 8128),
    (32, 1_048_576): (8192, 256, 6, 6, 18, 8484, 6.645, 6804, 15520),
}


@pytest.mark.parametrize("bs,length", list(WORKED))
def test_flash_block_demand_is_the_spec_worked_example(bs, length):
    c4, c128, swa, c4s, c128s, blocks, gib, per_token, check = WORKED[(bs, length)]
    cfg = compressed_cache_config(FLASH[:43], FLASH[43:], block_size=bs)
    got = cfg.group_blocks(length, in_flight=2)          # steady decode with MTP k = 1
    assert got == {"c4": c4, "c128": c128, "swa#0": swa, "swa#1": swa, "c4-states": c4s, "c128-states": c128s}
    assert cfg.blocks_per_request(length, 2) == blocks
    assert round(cfg.bytes_per_request(length, 2) / GiB, 3) == gib
    assert abs(cfg.bytes_per_request(length, 2) / length - per_token) < 1      # the spec rounds either way
    assert cfg.blocks_per_request(length, 10240) == check


def test_flash_and_pro_block_id_cost_by_hand():
    """§4.3: a block id pins 21 full (131072 + 16640) tuples, one half tuple and the MTP layer's window
    page (Flash: 44 tensors); the divisor is P_t x NT with NT = 22 + 1 (Pro: 30 full + 1 half + MTP,
    NT = 31 + 1). 1 GiB of A_kv holds 316.05 / 227.16 block ids."""
    p_t = 131072 + 16640
    flash = compressed_cache_config(FLASH[:43], FLASH[43:])
    assert flash.block_bytes == 21 * p_t + 131072 + 131072 == 3_364_096
    assert flash.budget_block_bytes == p_t * 23 == 3_397_376
    assert round(GiB / flash.budget_block_bytes, 2) == 316.05
    pro = compressed_cache_config(PRO[:61], PRO[61:])
    assert pro.block_bytes == 30 * p_t + 131072 + 131072 == 4_693_504
    assert pro.budget_block_bytes == p_t * 32 == 4_726_784
    assert round(GiB / pro.budget_block_bytes, 2) == 227.16
    # Pro at bs 128: 279 blocks = 1.220 GiB at 128k, 2127 = 9.297 GiB at 1M (§4.5)
    assert round(pro.bytes_per_request(131_072, 2) / GiB, 3) == 1.220
    assert round(pro.bytes_per_request(1_048_576, 2) / GiB, 3) == 9.297


def test_six_groups_and_the_sliding_split():
    """§4.3: tuple counts [21, 20, 44, 21, 20] -> divisor 22 -> SWA split in 2 (Pro: 31); six groups."""
    assert approximate_gcd([21, 20, 44, 21, 20], at_least=21) == 22
    assert approximate_gcd([30, 31, 62, 30, 31], at_least=30) == 31
    for ratios, mtp, layers in ((FLASH[:43], FLASH[43:], (42, 20, 22, 22, 42, 20)),
                                (PRO[:61], PRO[61:], (60, 31, 31, 31, 60, 31))):
        cfg = compressed_cache_config(ratios, mtp)
        assert [g.name for g in cfg.groups] == ["c4", "c128", "swa#0", "swa#1", "c4-states", "c128-states"]
        assert tuple(g.layer_count for g in cfg.groups) == layers
        # 168 (Flash) / 244 (Pro) cache layers in all (§4.1)
        assert sum(layers) == (168 if len(ratios) == 43 else 244)


def test_naive_bytes_per_token_is_the_context_proportional_sum():
    """§4.2: C4 layer 256 + 32.5 B/token, C128 8 B/token: Flash 6,218.5, Pro 8,903."""
    assert compressed_cache_config(FLASH[:43], FLASH[43:]).naive_bytes_per_token() == 21 * 288.5 + 20 * 8
    assert compressed_cache_config(PRO[:61], PRO[61:]).naive_bytes_per_token() == 30 * 288.5 + 31 * 8


def test_decode_node_check_demand():
    """§4.5: decode nodes with T = 240 and k = 3: 317 blocks at 128k. By hand: C4 131072/512 = 256,
    C128 131072/16384 = 8, SWA 2 x (cdiv(127 + 240, 128) + 1) = 8, C4-states cdiv(7 + 240, 8) + 1 = 32,
    C128-states cdiv(127 + 240, 32) + 1 = 13."""
    cfg = compressed_cache_config(FLASH[:43], FLASH[43:])
    assert cfg.blocks_per_request(131_072, 240) == 256 + 8 + 8 + 32 + 13 == 317


def test_unknown_ratio_is_refused():
    with pytest.raises(ValueError, match="compress ratios"):
        compressed_cache_config([0, 8], [0])


@settings(max_examples=60, deadline=None)
@given(length=st.integers(1, 4_000_000), n=st.integers(1, 20_000), window=st.integers(1, 4096),
       bs=st.sampled_from([16, 32, 64, 128, 256]))
def test_sliding_window_never_holds_more_than_the_window_needs(length, n, window, bs):
    """A window cache holds cdiv(min(W - 1 + n, L), bs) + 1 blocks: never more than the full cache of the
    same length plus one block, and never more than the window and the tokens in flight span."""
    swa = SlidingWindowSpec("w", bs, bs * 1024, window)
    full = FullAttentionSpec("f", bs, bs * 1024)
    got = swa.blocks(length, n)
    assert got == cdiv(min(window - 1 + n, length), bs) + 1
    assert got <= full.blocks(length) + 1
    assert got <= cdiv(window - 1 + n, bs) + 1


@pytest.mark.parametrize("variant,dcp,pp", [("bf16", 1, 1), ("c8-indexer", 1, 2), ("c8", 16, 1)])
def test_todays_workers_are_one_group_with_the_same_figures(variant, dcp, pp):
    """GLM-5.1's cache (latent + indexer keys sharing one block table) as a group config gives exactly the
    KVSpec figures: blocks per request, bytes per block, bytes per request."""
    spec = preset_spec("glm-5.1")
    plan = ParallelPlan(tp=16, dp=2, ep=32, pp=pp, dcp=dcp)
    kv = as_engine("vllm-ascend@main").kv_spec(spec, plan, variant=variant, dcp=dcp, mtp=True)
    cfg = kv.cache_config()
    assert len(cfg.groups) == 1
    assert cfg.block_bytes == cfg.budget_block_bytes == kv.page_block_bytes
    for length in (1, 127, 128, 129, 131_072, 202_752):
        assert cfg.blocks_per_request(length) == kv.blocks_per_request(length)
        assert cfg.bytes_per_request(length) == kv.bytes_per_request(length)
    assert cfg.num_blocks(10 * GiB) == 10 * GiB // kv.page_block_bytes


def test_a_group_prices_its_layers_once_per_block():
    """Two layer kinds in one group (one block table): a block costs both pages; a request counts the
    group's blocks once. Hand: 3 layers x 4096 + 2 layers x 512 per block; L = 1000, bs 64 -> 16 blocks."""
    a = CompressedSpec("c", 64, 4096, compress_ratio=4)
    b = CompressedSpec("i", 64, 512, compress_ratio=4)
    g = KVCacheGroup("g", a, ((a, 3), (b, 2)))
    cfg = KVCacheConfig((g,), g.page_bytes, g.page_bytes)
    assert g.page_bytes == 3 * 4096 + 2 * 512
    assert cfg.blocks_per_request(1000) == 16
    assert cfg.bytes_per_request(1000) == 16 * (3 * 4096 + 2 * 512)


@pytest.mark.parametrize("repo,ratios", [("deepseek-v4-flash", FLASH), ("deepseek-v4-pro", PRO)])
def test_the_ratio_lists_are_the_real_configs(shared_dir, repo, ratios):
    import json
    cfg = json.loads((shared_dir / "data" / "configs" / repo / "config.json").read_text())
    assert [int(r) for r in cfg["compress_ratios"]] == ratios
    assert len(ratios) == cfg["num_hidden_layers"] + cfg["num_nextn_predict_layers"]
