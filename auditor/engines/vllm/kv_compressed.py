"""Upstream vLLM's KV cache on CUDA for compressed-attention layers (DeepSeek-V4 style): the spec of
every cache layer, the groups ``get_kv_cache_groups`` makes of them and the shared-tensor pool.

Read in code (search-index copies; none is pinned to the v0.25 release GPU-04 ran, UNCONFIRMED
there):

* cache layers (``vllm/models/deepseek_v4/attention.py``@e6643eca): a compressed layer (ratio 4 or
  128) holds an ``MLAAttentionSpec(block_size = --block-size (256), compress_ratio = r, alignment
  576 for fp8_ds_mla else 512, model_version "deepseek_v4")``, a window-only layer none; every layer
  (MTP too) a ``DeepseekV4SWACache`` = ``SlidingWindowMLASpec(block_size 64, sliding_window W)``
  (``sparse_swa.py``, index id 61399074654); a ratio-4 layer also indexer keys
  (``DeepseekV4IndexerCache``: ``MLAAttentionSpec(head 128 + 4 B scale, uint8, compress_ratio 4,
  alignment 576 / 512)``) and two compressor states, a ratio-128 layer one
  (``CompressorStateCache``: ``SlidingWindowMLASpec(block_size 4 (c4) / 8 (c128), head_size
  2 x coff x head, fp32, sliding_window coff x c, alignment 576 for fp8_ds_mla)``,
  ``compressor.py``, index id 67328022344);
* page bytes (``kv_cache_interface.py``, index id 55159087810): ``storage_block_size = block_size
  // compress_ratio``; fp8_ds_mla DeepSeek-V4 rows are 584 B (448 fp8 NoPE + 64 x 2 bf16 RoPE + 8 B
  scales), other rows head x dtype; ``_apply_alignment_padding`` rounds the page up to the alignment;
* groups (``kv_cache_utils.py``, index id 55240182351): ``group_and_unify_kv_cache_specs`` puts every
  ``MLAAttentionSpec`` in one group and the ``SlidingWindowMLASpec`` layers in one group per
  (block_size, sliding_window); ``_get_kv_cache_groups_uniform_groups`` takes ``num_layer_tuples =
  _approximate_gcd(tuple counts, lower_bound = the MLA group's)`` (tuple count = the most common
  page size's layer count; ties prefer the larger divisor), splits each sliding group into
  ``cdiv(layers per page size, num_layer_tuples)`` interleaved sub-groups and pads each sliding
  page up to the nearest larger MLA page size;
* pool (``_get_kv_cache_config_deepseek_v4``): ``num_blocks = available // (sum of the MLA page
  sizes x num_layer_tuples)`` with ``num_layer_tuples`` = the longest per-page-size bucket of any
  group; one ``KVCacheTensor(page x num_blocks)`` per (tuple index, MLA page size), every one
  allocated, shared by the i-th layer of that page size in every group: a block id costs the divisor;
* capacity (``_max_memory_usage_bytes_from_groups``, DeepSeek-V4 branch): a request of L tokens
  needs, per group, the most pages any of its specs needs (full: ``cdiv(L, block_size)``; sliding:
  ``cdiv(min(window - 1 + max_num_batched_tokens, L), block_size) + 1``), priced at the divisor, so
  ``Maximum concurrency = num_blocks / sum of the groups' pages``.

Input is the per-layer compress ratios and dimensions; nothing here names a model.
"""
from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Sequence

from ..kv_interface import CompressedSpec, KVCacheConfig, KVCacheGroup, SlidingWindowSpec, cdiv

#: DeepseekSparseSWABackend.get_preferred_block_size (GPU-04: "Setting kv cache block size to 256 for
#: DEEPSEEK_SPARSE_SWA backend.")
BLOCK_SIZE = 256
#: DeepseekV4SWACache.block_size ([256 // 4, head] shares the C4 page)
SWA_BLOCK = 64
#: CompressorStateCache block sizes ([4, 2 x 512 x 2 x 4] and [8, 512 x 2 x 4] share the C4 page)
STATE_BLOCK = {4: 4, 128: 8}
#: fp8_ds_mla DeepSeek-V4 row: 448 fp8 NoPE + 64 x 2 B bf16 RoPE + 7 UE8M0 scales + 1 pad
DS_MLA_V4_ROW = 584
#: the page alignment of every DeepSeek-V4 cache under fp8_ds_mla (FlashMLA's UE8M0 paged layout)
FP8_DS_MLA_ALIGN = 576
#: indexer keys: 128 fp8 + one fp32 scale per 128 (DeepseekV4Indexer: k_cache_head_dim = 128 + 128 // 128 x 4)
INDEXER_SCALE_GROUP = 128
#: compressor state: kv_state + score_state, fp32 (state_dim = 2 x coff x head_dim)
STATE_DTYPE_BYTES = 4

FP8_DS_MLA = "fp8_ds_mla"

#: what the KV figures of this pool rest on
BUDGET_ASSUMPTION = (
    "KV (compressed attention): upstream's DeepSeek-V4 groups (one full-MLA group, sliding groups split to "
    "num_layer_tuples) share one block-id pool; num_blocks = A_kv // (sum of the MLA page sizes x num_layer_tuples); "
    "Maximum concurrency = num_blocks / the groups' pages for one max_model_len request with "
    "max_num_batched_tokens in flight (kv_cache_utils.py, index id 55240182351; UNCONFIRMED at v0.25)")


def coff(ratio: int) -> int:
    return 2 if ratio == 4 else 1


def _page(raw: int, alignment: int | None) -> int:
    return cdiv(raw, alignment) * alignment if alignment else raw


@dataclass(frozen=True)
class LayerPages:
    """The page bytes of one compressed-attention model's cache kinds under one KV layout."""
    c4: int            # ratio-4 compressed latent
    indexer: int       # ratio-4 indexer keys
    c128: int          # ratio-128 compressed latent
    swa: int           # sliding window (every layer)
    c4_state: int      # ratio-4 attention-compressor state
    c4_index_state: int
    c128_state: int


def layer_pages(layout: str, *, head_dim: int, index_dim: int, block_size: int = BLOCK_SIZE) -> LayerPages:
    """Page bytes per cache kind, before the group step pads the sliding ones (module doc).

    Only fp8_ds_mla is modelled (the layout GPU-04 logs, "Using DeepSeek's fp8_ds_mla KV cache format."):
    the bf16 / plain-fp8 FlashInfer rows and their 512 B alignment are read in code, but which backend
    a GPU runs them with is not, so ``kv_spec`` refuses them."""
    if layout != FP8_DS_MLA:
        raise ValueError(f"layout {layout!r}: only fp8_ds_mla is modelled for compressed attention")
    a = FP8_DS_MLA_ALIGN
    idx_row = index_dim + 4 * cdiv(index_dim, INDEXER_SCALE_GROUP)
    return LayerPages(
        c4=_page(block_size // 4 * DS_MLA_V4_ROW, a),
        indexer=_page(block_size // 4 * idx_row, a),
        c128=_page(block_size // 128 * DS_MLA_V4_ROW, a),
        swa=_page(SWA_BLOCK * DS_MLA_V4_ROW, a),
        # compressor states carry no model_version: head x dtype rows (SlidingWindowMLASpec.real_page_size_bytes)
        c4_state=_page(STATE_BLOCK[4] * 2 * coff(4) * head_dim * STATE_DTYPE_BYTES, a),
        c4_index_state=_page(STATE_BLOCK[4] * 2 * coff(4) * index_dim * STATE_DTYPE_BYTES, a),
        c128_state=_page(STATE_BLOCK[128] * 2 * coff(128) * head_dim * STATE_DTYPE_BYTES, a),
    )


def approximate_gcd(values: Sequence[int], lower_bound: int) -> int:
    """Upstream ``_approximate_gcd``: the divisor in [lower_bound, max] with the least upward padding,
    ties preferring the larger one."""
    lo = max(1, lower_bound)
    hi = max(values)
    if lo > hi:
        return lo
    best_d, best_pad = lo, None
    for d in range(lo, hi + 1):
        pad = sum((d - x % d) % d for x in values)
        if best_pad is None or pad < best_pad or (pad == best_pad and d > best_d):
            best_d, best_pad = d, pad
    return best_d


def cache_config(ratios: Sequence[int], mtp_ratios: Sequence[int], *, window: int, head_dim: int, index_dim: int,
                 layout: str = FP8_DS_MLA, block_size: int = BLOCK_SIZE) -> KVCacheConfig:
    """The pool of one worker whose decoder layers have ``ratios`` (0 or 1: window only, 4, 128) and
    whose loaded MTP layers have ``mtp_ratios`` (upstream builds MTP attention with ratio 1: window only)."""
    bad = sorted({r for r in (*ratios, *mtp_ratios) if r not in (0, 1, 4, 128)})
    if bad:
        raise ValueError(f"compress ratios {bad}: the engine's compressed attention has 4 and 128")
    p = layer_pages(layout, head_dim=head_dim, index_dim=index_dim, block_size=block_size)
    n4 = sum(1 for r in ratios if r == 4)
    n128 = sum(1 for r in ratios if r == 128)
    n_swa = len(ratios) + len(mtp_ratios)
    if not (n4 or n128):
        raise ValueError("no compressed layer: upstream's DeepSeek-V4 grouping needs one")
    # the full-MLA group: every MLAAttentionSpec (ratio-4 latent + indexer keys, ratio-128 latent)
    mla_layers = [(CompressedSpec("c4", block_size, p.c4, compress_ratio=4), n4),
                  (CompressedSpec("c4-indexer", block_size, p.indexer, compress_ratio=4), n4),
                  (CompressedSpec("c128", block_size, p.c128, compress_ratio=128), n128)]
    mla_layers = [(s, n) for s, n in mla_layers if n]
    mla_sizes = sorted({s.page_size_bytes for s, _ in mla_layers})
    by_size: Counter = Counter()
    for s, n in mla_layers:
        by_size[s.page_size_bytes] += n
    mla_tuples = max(by_size.values())

    def padded(page: int) -> int:
        return min(x for x in mla_sizes if x >= page)

    # sliding groups by (block_size, sliding_window), in layer registration order: window, c4 states, c128 states
    sliding: list[tuple[str, list[tuple[str, int, int]]]] = [
        ("swa", [("swa", padded(p.swa), n_swa)])]
    if n4:
        sliding.append(("c4-states", [("c4-state", padded(p.c4_state), n4),
                                      ("c4-indexer-state", padded(p.c4_index_state), n4)]))
    if n128:
        sliding.append(("c128-states", [("c128-state", padded(p.c128_state), n128)]))
    windows = {"swa": (SWA_BLOCK, window), "c4-states": (STATE_BLOCK[4], coff(4) * 4),
               "c128-states": (STATE_BLOCK[128], coff(128) * 128)}

    def tuples_of(kinds: list[tuple[str, int, int]]) -> int:
        c: Counter = Counter()
        for _, page, n in kinds:
            c[page] += n
        return max(c.values())

    counts = [mla_tuples] + [tuples_of(k) for _, k in sliding]
    num_tuples = approximate_gcd(counts, lower_bound=mla_tuples)
    groups = [KVCacheGroup("mla", mla_layers[0][0], tuple(mla_layers))]
    buckets: list[dict[int, int]] = [dict(by_size)]
    for name, kinds in sliding:
        per_size = {}
        for _, page, n in kinds:
            per_size[page] = per_size.get(page, 0) + n
        if len(set(per_size.values())) != 1:
            raise ValueError(f"{name}: page sizes with different layer counts (upstream asserts one count)")
        n_layers = next(iter(per_size.values()))
        parts = cdiv(n_layers, num_tuples)
        bs, win = windows[name]
        for i in range(parts):
            share = len(range(i, n_layers, parts))          # layer_tuples[i::parts]
            layers = tuple((SlidingWindowSpec(kind, bs, page, win), share) for kind, page, _ in kinds)
            groups.append(KVCacheGroup(f"{name}#{i}" if parts > 1 else name, layers[0][0], layers))
            buckets.append({page: share for _, page, _ in kinds})
    nt = max(n for b in buckets for n in b.values())
    divisor = sum(mla_sizes) * nt
    tensors = nt * len(mla_sizes)
    # every (tuple index, page size) tensor is allocated, whether or not a layer uses it
    return KVCacheConfig(tuple(groups), divisor, divisor, tensors=tensors)


def group_pages(config: KVCacheConfig, max_model_len: int, max_num_batched_tokens: int) -> dict[str, int]:
    """Pages one request of ``max_model_len`` needs in each group (the DeepSeek-V4 branch of
    ``_max_memory_usage_bytes_from_groups``: a group's most-demanding spec)."""
    out = {}
    for g in config.groups:
        out[g.name] = max(spec.blocks(max_model_len, max_num_batched_tokens) for spec, _ in g.layers)
    return out


def layers_by_kind(config: KVCacheConfig) -> dict[str, int]:
    out: dict[str, int] = defaultdict(int)
    for g in config.groups:
        for spec, n in g.layers:
            out[spec.name] += n
    return dict(out)
