"""vLLM-Ascend's KV pool for compressed-attention layers (DeepSeek-V4 style): six groups, one block-id pool.

Facts: model-deepseek-v4.md §4.1-§4.4 (main ``182b75ea``, A2/A3). Every layer keeps a bf16 sliding
window of ``W`` raw tokens; a compress-4 layer adds a compressed latent (one 512-wide row per 4
tokens), int8 indexer keys with an fp16 scale, and two fp32 compressor states; a compress-128 layer
adds a compressed latent and one state. The engine groups the specs by block size
(``patch/platform/patch_kv_cache_utils.py:59-90``), splits the sliding-window group into
``cdiv(layers, tuples)`` interleaved sub-groups (``:93-182``, upstream ``_approximate_gcd``) and lays
tensors out by tuple index, so that one block id pins a page of every group's i-th layer
(``_get_kv_cache_config_deepseek_v4``, ``:185-245``): a block id costs the sum over the allocated
tensors, and the pool is sized by ``A_kv // (P_t x NT)``.

Input is the model's per-layer attention kinds (compress ratio per decoder layer, and the MTP
layers' own), so any model with this structure gets the same pool; nothing here names a model.
"""
from __future__ import annotations

from collections import Counter
from typing import Sequence

from ..kv_interface import CompressedSpec, KVCacheConfig, KVCacheGroup, SlidingWindowSpec, cdiv

#: DSV4_BLOCK_SIZES (models/layer/attention/layer.py:34-52@182b75ea), A2/A3:
#: --block-size -> ((mla rows, swa rows, c4 state rows, c128 state rows), (pad_t1, pad_t2))
BLOCK_GEOMETRY = {
    128: ((128, 128, 8, 32), (16640, 131072)),
    64: ((64, 64, 4, 16), (8320, 65536)),
    32: ((32, 32, 2, 8), (4160, 32768)),
}
LATENT_ROW = 512 * 2             # bf16 compressed / window latent row (layer.py:177-199; model.py:589-597)
INDEXER_ROW = 128 + 2            # int8 key + fp16 scale (indexer.py:94-113: scale_dim 1 at head 128)
C4_STATE_ROW = 2 * 2 * 512 * 4   # fp32 attention-compressor state, overlap (compressor.py:57-71)
C4_INDEX_STATE_ROW = 2 * 2 * 128 * 4
C128_STATE_ROW = 2 * 512 * 4
#: compressor state windows: coff x c (8 for compress-4 with overlap, 128 for compress-128)
C4_STATE_WINDOW, C128_STATE_WINDOW = 8, 128


def approximate_gcd(counts: Sequence[int], at_least: int) -> int:
    """The tuple count: the divisor >= ``at_least`` that pads the per-group layer counts least
    (upstream ``_approximate_gcd`` as vllm-ascend calls it; ties: the smaller divisor)."""
    best = None
    for d in range(max(1, at_least), max(counts) + 1):
        pad = sum(cdiv(c, d) * d - c for c in counts)
        if best is None or pad < best[0]:
            best = (pad, d)
    return best[1]


def compressed_cache_config(ratios: Sequence[int], mtp_ratios: Sequence[int], *, window: int = 128,
                            block_size: int = 128) -> KVCacheConfig:
    """The pool of one worker whose decoder layers have ``ratios`` (0: window only, 4, 128) and whose
    MTP layers have ``mtp_ratios`` (each MTP layer gets its own tensors)."""
    if block_size not in BLOCK_GEOMETRY:
        raise ValueError(f"block size {block_size}: the engine's table has {sorted(BLOCK_GEOMETRY)}")
    (mla_rows, swa_rows, c4s_rows, c128s_rows), (pad_t1, pad_t2) = BLOCK_GEOMETRY[block_size]
    bad = sorted({r for r in (*ratios, *mtp_ratios) if r not in (0, 4, 128)})
    if bad:
        raise ValueError(f"compress ratios {bad}: the engine's compressed attention has 4 and 128")
    n4 = sum(1 for r in ratios if r == 4)
    n128 = sum(1 for r in ratios if r == 128)
    n_swa = len(ratios) + len(mtp_ratios)
    c4 = CompressedSpec("c4", 4 * mla_rows, mla_rows * LATENT_ROW, compress_ratio=4)
    c4_idx = CompressedSpec("c4-indexer", 4 * mla_rows, mla_rows * INDEXER_ROW, compress_ratio=4)
    c128 = CompressedSpec("c128", 128 * mla_rows, mla_rows * LATENT_ROW, compress_ratio=128)
    swa = SlidingWindowSpec("swa", swa_rows, swa_rows * LATENT_ROW, window)
    # state pages are padded up to a compress-4 page size (kv_cache_interface.py:182-201: page_size_padded)
    c4_state = SlidingWindowSpec("c4-state", c4s_rows, max(c4s_rows * C4_STATE_ROW, pad_t2), C4_STATE_WINDOW)
    c4_idx_state = SlidingWindowSpec("c4-indexer-state", c4s_rows, max(c4s_rows * C4_INDEX_STATE_ROW, pad_t1),
                                     C4_STATE_WINDOW)
    c128_state = SlidingWindowSpec("c128-state", c128s_rows, max(c128s_rows * C128_STATE_ROW, pad_t2),
                                   C128_STATE_WINDOW)
    if n4 and (c4.page_size_bytes, c4_idx.page_size_bytes) != (pad_t2, pad_t1):
        raise ValueError("compress-4 pages do not match the engine's pad table")
    # sliding groups split into interleaved sub-groups of at most `tuples` layers (tuple counts: the most
    # common page size's layer count of each group)
    tuples = approximate_gcd([c for c in (n4, n128, n_swa, n4, n128) if c], at_least=max(n4, 1))
    swa_parts = cdiv(n_swa, tuples)
    swa_sizes = [n_swa // swa_parts + (1 if i < n_swa % swa_parts else 0) for i in range(swa_parts)]
    groups = []
    if n4:
        groups.append(KVCacheGroup("c4", c4, ((c4, n4), (c4_idx, n4))))
    if n128:
        groups.append(KVCacheGroup("c128", c128, ((c128, n128),)))
    groups += [KVCacheGroup(f"swa#{i}", swa, ((swa, n),)) for i, n in enumerate(swa_sizes)]
    if n4:
        groups.append(KVCacheGroup("c4-states", c4_state, ((c4_state, n4), (c4_idx_state, n4))))
    if n128:
        groups.append(KVCacheGroup("c128-states", c128_state, ((c128_state, n128),)))
    # tensors by tuple index: the i-th layer of each page size in every group shares one tensor; the
    # MTP layers' caches (window only here) get their own
    n_mtp = len(mtp_ratios)
    mtp_pages = Counter()
    for r in mtp_ratios:
        mtp_pages[swa.page_size_bytes] += 1
        if r == 4:
            mtp_pages.update({c4.page_size_bytes: 2, c4_idx.page_size_bytes: 2})
        elif r == 128:
            mtp_pages.update({c128.page_size_bytes: 2})
    per_size: dict[int, int] = {}
    for g in groups:
        counts = Counter()
        for spec, n in g.layers:
            counts[spec.page_size_bytes] += n
        if g.kind is swa:           # the MTP window caches sit in the sliding groups; they have own tensors
            counts[swa.page_size_bytes] -= _mtp_share(g, groups, swa, n_mtp)
        for page, n in counts.items():
            per_size[page] = max(per_size.get(page, 0), n)
    nt = max(per_size.values()) + n_mtp
    p_t = (pad_t2 + pad_t1) if n4 else pad_t2
    allocated = sum(page * n for page, n in per_size.items()) + sum(page * n for page, n in mtp_pages.items())
    # a tensor per (tuple index, page size) that some layer uses, plus each MTP layer's own
    tensors = sum(per_size.values()) + sum(mtp_pages.values())
    return KVCacheConfig(tuple(groups), allocated, p_t * nt, tensors=tensors)


def _mtp_share(group: KVCacheGroup, groups: list[KVCacheGroup], swa: SlidingWindowSpec, n_mtp: int) -> int:
    """MTP window caches in this sliding sub-group: layer j (MTP layers indexed after the main ones,
    ``utils.py:86-99``) goes to sub-group ``j % parts`` in the interleaved split."""
    swa_groups = [g for g in groups if g.kind is swa]
    parts, k = len(swa_groups), swa_groups.index(group)
    n_swa = sum(g.layer_count for g in swa_groups)
    return sum(1 for j in range(n_swa - n_mtp, n_swa) if j % parts == k)
