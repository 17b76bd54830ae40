"""How the engine's context-dependent kernels run, as data: one row per cache variant.

Why a table: the costs of the lightning indexer, its fused top-k and sparse flash attention
depend on the kernel path vLLM-Ascend picks (bf16 caches, LI-C8 indexer cache, SFA-C8 latent
cache), not on the model. Every constant below is read from the engine's code or the operator
report and cited in ``docs/long-context-kernels.md`` (section in brackets); the kernel formulas
that use them are in ``kernels/perf_core.py::op_work``. Choices the public sources do not settle
are marked UNSETTLED here and listed with their alternatives in the doc and the perf notes.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from ...errors import AuditInputError

#: --kv-cache-dtype values (the cache variants of kv.py)
CACHE_VARIANTS = ("bf16", "c8-indexer", "c8")


@dataclass(frozen=True)
class KernelPath:
    """Constants of one cache variant's indexer / top-k / SFA kernels."""

    name: str
    #: LightningIndexer score matmul dtype (Cube): bf16 q.k, or int8 q.k with LI-C8 [§1]
    indexer_dtype: str
    #: query rows per index head group sharing one read of a request's key cache: the bf16
    #: kernel's s1BaseSize = 8 rows; LI-C8 M_BASE_SIZE 256 / index heads [§1 tiling, §4]
    indexer_tile_rows: float
    indexer_tile_rows_per_head: float
    #: vector work after the Cube, in FLOP-equivalents of the device's bf16 vector peak (an fp32
    #: element op takes two bf16 lanes and the peak counts a lane-cycle as 2 FLOPs, so 4 each),
    #: per (query row, key, index head) and per (query row, key). bf16 path: fp32 Mul by the head
    #: weight + Add into the head sum = 2 ops x 4 = 8 per head. LI-C8 ("Mat-Duce") weights and
    #: sums on the Cube, leaving one fp32 k-scale multiply per (row, key) = 4. ReLU is applied by
    #: the Cube's Fixpipe on the way out (free). [§1]
    indexer_vec_per_head: float
    indexer_vec_per_key: float
    #: fused exact top-k on the Vector cores: sort/merge element ops per query row
    #: = per_key x keys scored + per_kept x top-k ("totalCount = 4.36 S_k + 3.32 k") [§2]
    topk_per_key: float
    topk_per_kept: float
    #: SFA gathers every query row's own top-k entries (one Cube tile = one token x its local
    #: heads, no KV reuse across query rows) [§3, §4]: rows sharing one staged gather. The bytes
    #: of a gathered entry and of an indexer key are the KV spec's (``kv.py``: 1152 / 656 latent,
    #: 256 / 130 indexer for GLM-5.1), never a second copy here.
    sfa_tile_rows: float

    def indexer_tile(self, index_heads: int) -> float:
        """Query rows sharing one key-cache read: a fixed row count, or M_BASE_SIZE / heads (>= 1)."""
        if self.indexer_tile_rows_per_head:
            return max(self.indexer_tile_rows_per_head // max(index_heads, 1), 1.0)
        return self.indexer_tile_rows

    def indexer_vec_per_head_total(self, index_heads: int) -> float:
        """Vector FLOP-equivalents per (row, key, head): the per-key work spread over the heads."""
        return self.indexer_vec_per_head + self.indexer_vec_per_key / max(index_heads, 1)


#: UNSETTLED choices (docs/long-context-kernels.md): the sort rate r_sort (device profile), whether
#: the indexer's per-tile score workspace and key re-reads stay in L2 (modelled: key re-reads are
#: HBM reads at the indexer_cache efficiency, the fp32 workspace stays in L2), Cube/Vector overlap
#: inside the indexer (modelled serial, as TensorCast), SFA's gather cost (modelled as bytes at the
#: sfa_kv efficiency) and the prefill top-k path (the report's formula for every row count).
PATHS: dict[str, KernelPath] = {p.name: p for p in (
    KernelPath("bf16", "BF16", 8.0, 0.0, 8.0, 0.0, 4.36, 3.32, 1.0),
    KernelPath("c8-indexer", "I8", 0.0, 256.0, 0.0, 4.0, 4.36, 3.32, 1.0),
    KernelPath("c8", "I8", 0.0, 256.0, 0.0, 4.0, 4.36, 3.32, 1.0),
)}


def kernel_path(cache: str) -> KernelPath:
    """The kernel path of a ``--kv-cache-dtype`` value."""
    try:
        return PATHS[cache]
    except KeyError:
        raise AuditInputError("--kv-cache-dtype", f"unknown cache variant {cache!r} "
                                                  f"(known: {', '.join(CACHE_VARIANTS)})") from None


def with_overrides(path: KernelPath, **kw: float) -> KernelPath:
    """A copy with some constants replaced (sensitivity studies)."""
    return replace(path, **kw)


__all__ = ["CACHE_VARIANTS", "KernelPath", "PATHS", "kernel_path", "with_overrides"]
