"""The KV cache of one worker as the engine's scheduler sees it: spec objects that know their bytes.

Modelled on vLLM's ``kv_cache_interface.py``. Three levels, all engine-independent arithmetic:

* a **layer spec** per cache-layer kind knows its page bytes, the raw tokens one block covers and
  how many blocks a request of ``L`` tokens with ``n`` in flight needs: full attention / an MLA
  latent / indexer keys (``FullAttentionSpec``), a compressed cache (``CompressedSpec``: one row per
  ``ratio`` tokens), a sliding window capped at the window (``SlidingWindowSpec``), fixed-size state
  (``SlidingWindowSpec`` with the state's window);
* a **group** is the layers that share one block table (one block count per request);
* a **pool config** says what one block id costs on this rank and how the engine turns available
  memory into block ids, the part that differs between allocators (vLLM-Ascend's shared-block-id
  layout for DeepSeek-V4 prices a block id over every group's tensor, §4.3 of its spec).

An engine builds them (``Engine.kv_spec``); the budget, the feasibility grid, bench's admission and
the scheduler read blocks and bytes from here. ``KVSpec`` is the one-group form (an MLA latent and
indexer keys sharing a block table, or K/V heads) every GLM-5.x / DeepSeek-V3.2 worker has.
"""
from __future__ import annotations

import math
from dataclasses import dataclass


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


@dataclass(frozen=True)
class KVSpec:
    """KV cache of one worker (one PP stage of one DP engine)."""

    variant: str
    layout: str                 # "split" | "combined" | "gqa"
    block_size: int
    dcp: int
    dcp_formula: str
    mla_bytes: int              # B_mla: main cache bytes per token per layer (before DCP)
    idx_bytes: int              # B_idx: indexer cache bytes per token per layer (0: none)
    main_layers: int            # own decoder layers
    mtp_layers: int             # draft layers with a cache (last stage, when the drafter is loaded)
    idx_layers: int             # layers that hold an indexer cache (incl. MTP)
    tensors_per_layer: int      # raw KV tensors per layer (for the 2 MiB kv-transfer alignment)

    @property
    def cache_layers(self) -> int:
        return self.main_layers + self.mtp_layers

    @property
    def tokens_per_block(self) -> int:
        """Tokens one scheduler block covers (bs * DCP)."""
        return self.block_size * self.dcp

    @property
    def idx_replication(self) -> int:
        return self.dcp if self.dcp_formula == "replicated_indexer" else 1

    def bytes_per_token_layer(self) -> float:
        """Per-rank bytes per (global) token of one layer that has both caches."""
        return (self.mla_bytes + self.idx_replication * self.idx_bytes) / self.dcp

    @property
    def page_block_bytes(self) -> int:
        """Bytes of one block summed over every cache layer of this rank (Σ page_size_bytes)."""
        per_block = self.mla_bytes * self.cache_layers + self.idx_replication * self.idx_bytes * self.idx_layers
        return self.block_size * per_block

    def bytes_per_token(self) -> float:
        """Per-rank bytes per (global) token over every cache layer."""
        return self.page_block_bytes / self.tokens_per_block

    def blocks_per_request(self, length: int) -> int:
        """cdiv(cdiv(L, DCP), bs): blocks one request of ``length`` tokens occupies."""
        return cdiv(cdiv(int(length), self.dcp), self.block_size)

    def bytes_per_request(self, length: int) -> int:
        """max_memory_usage_bytes: what one request of ``length`` tokens needs on this rank."""
        return self.blocks_per_request(length) * self.page_block_bytes

    def steady_bytes_per_request(self, length: int, in_flight: int = 1) -> int:
        """What a running request of ``length`` tokens holds (one block table: the same as above)."""
        return self.bytes_per_request(length)

    @property
    def page_size_bytes(self) -> int:
        """vLLM's name for the bytes of one block over this worker's cache layers."""
        return self.page_block_bytes

    @property
    def main_entry_bytes(self) -> int:
        """Bytes of one cached token of the main (latent or K/V) cache of one layer."""
        return self.mla_bytes

    @property
    def indexer_entry_bytes(self) -> int:
        """Bytes of one cached indexer key (with its scale) of one layer; 0 without an indexer."""
        return self.idx_bytes

    def cache_config(self) -> KVCacheConfig:
        """This worker as cache groups: one group (the latent and the indexer keys share a block
        table), a block id costing ``page_block_bytes``."""
        main = FullAttentionSpec("mla" if self.layout != "gqa" else "kv", self.block_size, self.block_size * self.mla_bytes)
        layers = [(main, self.cache_layers)]
        if self.idx_bytes and self.idx_layers:
            layers.append((FullAttentionSpec("indexer", self.block_size,
                                             self.block_size * self.idx_replication * self.idx_bytes), self.idx_layers))
        group = KVCacheGroup("attention", main, tuple(layers))
        return KVCacheConfig((group,), self.page_block_bytes, self.page_block_bytes, self.dcp)

    @property
    def kv_tensors(self) -> int:
        """Raw KV tensors the engine allocates on this worker (one per cache per layer)."""
        return self.tensors_per_layer * self.cache_layers

    def request_blocks(self, tokens):
        """Blocks of requests of ``tokens`` each (numpy-broadcastable)."""
        import numpy as np
        t = np.asarray(tokens, dtype=np.int64)
        return -(-(-(-t // self.dcp)) // self.block_size)

    def max_length(self, blocks: int, limit: int) -> int:
        """Longest request (<= ``limit``) that ``blocks`` blocks hold."""
        return int(min(max(0, blocks) * self.tokens_per_block, limit))

    def tokens_held(self, num_blocks, length):
        """Tokens ``num_blocks`` blocks hold (numpy-broadcastable): one block table holds
        ``tokens_per_block`` a block whatever the request's length."""
        import numpy as np
        return np.floor(np.asarray(num_blocks, dtype=np.float64) * self.tokens_per_block)

    def affine_blocks(self, in_flight: int = 1) -> tuple[int, int]:
        """(tokens per growing block, fixed blocks per request): one block table grows by one block
        per ``tokens_per_block`` tokens and holds nothing fixed."""
        return self.tokens_per_block, 0

    def to_json(self) -> dict:
        return {"variant": self.variant, "layout": self.layout, "block_size": self.block_size, "dcp": self.dcp,
                "dcp_formula": self.dcp_formula, "mla_bytes_per_token_layer": self.mla_bytes,
                "indexer_bytes_per_token_layer": self.idx_bytes, "cache_layers": self.cache_layers,
                "mtp_layers": self.mtp_layers, "indexer_layers": self.idx_layers,
                "page_block_bytes": self.page_block_bytes, "tokens_per_block": self.tokens_per_block}




# ---------------------------------------------------------------- per-layer-kind specs and groups

@dataclass(frozen=True)
class FullAttentionSpec:
    """A cache that keeps every token: ``block_size`` raw tokens per block (per DCP rank), one
    ``page_size_bytes`` page per block and layer (an MLA latent, indexer keys, K/V heads)."""

    name: str
    block_size: int
    page_size_bytes: int

    def blocks(self, length: int, in_flight: int = 1, dcp: int = 1) -> int:
        return cdiv(cdiv(int(length), dcp), self.block_size)

    def bytes_per_token(self) -> float:
        return self.page_size_bytes / self.block_size


@dataclass(frozen=True)
class CompressedSpec(FullAttentionSpec):
    """A compressed cache: one row per ``compress_ratio`` raw tokens, ``block_size`` raw tokens
    (= rows per page x ratio) per block; the engine may pad the page (``page_size_bytes``)."""

    compress_ratio: int = 1

    @property
    def rows_per_page(self) -> int:
        return self.block_size // self.compress_ratio


@dataclass(frozen=True)
class SlidingWindowSpec:
    """A cache that keeps only the last ``window`` tokens (or a fixed-size state over them): a request
    holds ``cdiv(min(window - 1 + n, L), block_size) + 1`` blocks (upstream SlidingWindowSpec's
    admission), whatever its length."""

    name: str
    block_size: int
    page_size_bytes: int
    window: int

    def blocks(self, length: int, in_flight: int = 1, dcp: int = 1) -> int:
        if dcp != 1:
            raise ValueError("a sliding-window cache is not split by decode context parallel")
        return cdiv(min(self.window - 1 + int(in_flight), int(length)), self.block_size) + 1

    def bytes_per_token(self) -> float:
        return 0.0                      # fixed per request: no growth with context


@dataclass(frozen=True)
class KVCacheGroup:
    """Layers that share one block table: a request's block count is the group's ``kind``'s, once;
    ``layers`` are (spec, count) of every cache layer in the group (bytes per block add up)."""

    name: str
    kind: FullAttentionSpec | SlidingWindowSpec
    layers: tuple[tuple[FullAttentionSpec | SlidingWindowSpec, int], ...]

    def blocks(self, length: int, in_flight: int = 1, dcp: int = 1) -> int:
        return self.kind.blocks(length, in_flight, dcp)

    @property
    def page_bytes(self) -> int:
        """Bytes of one block of this group over its layers."""
        return sum(spec.page_size_bytes * n for spec, n in self.layers)

    @property
    def layer_count(self) -> int:
        return sum(n for _, n in self.layers)


@dataclass(frozen=True)
class KVCacheConfig:
    """The KV pool of one worker: its groups and what a block id costs.

    ``block_bytes``: memory one block id pins on this rank (allocated); ``budget_block_bytes``: the
    divisor the engine turns available memory into block ids with (``num_blocks = A_kv //
    budget_block_bytes``; larger than ``block_bytes`` where the engine declares tensors it never
    allocates). A request needs the sum of its groups' blocks from the one pool."""

    groups: tuple[KVCacheGroup, ...]
    block_bytes: int
    budget_block_bytes: int
    dcp: int = 1
    tensors: int = 0            # raw KV tensors the engine allocates (each gets the kv-transfer alignment)

    def num_blocks(self, available_bytes: int) -> int:
        return max(0, int(available_bytes) // self.budget_block_bytes) if available_bytes > 0 else 0

    def blocks_per_request(self, length: int, in_flight: int = 1) -> int:
        return sum(g.blocks(length, in_flight, self.dcp) for g in self.groups)

    def bytes_per_request(self, length: int, in_flight: int = 1) -> int:
        """Allocated bytes one request of ``length`` tokens holds (its block ids x their cost)."""
        return self.blocks_per_request(length, in_flight) * self.block_bytes

    def naive_bytes_per_token(self) -> float:
        """Context-proportional bytes per token summed over every layer that grows with context."""
        return sum(spec.bytes_per_token() * n for g in self.groups for spec, n in g.layers)

    def group_blocks(self, length: int, in_flight: int = 1) -> dict[str, int]:
        return {g.name: g.blocks(length, in_flight, self.dcp) for g in self.groups}


@dataclass(frozen=True)
class PooledKVSpec:
    """A worker's KV cache as several groups over one block-id pool, with the interface the budget,
    the fit check and the reports read from ``KVSpec``: a block id costs ``config.budget_block_bytes``
    of the budget (``page_block_bytes``), and a request of ``L`` tokens needs the sum of its groups'
    blocks with ``in_flight`` tokens in the step (the engine's capacity check takes
    ``max_num_batched_tokens``: a sliding window holds the window plus the tokens in flight)."""

    variant: str
    config: KVCacheConfig
    block_size: int
    in_flight: int
    main_layers: int
    mtp_layers: int
    dcp: int = 1
    layout: str = "groups"
    #: what the engine logs while laying the pool out (e.g. a block size it replaces)
    engine_lines: tuple[str, ...] = ()
    #: bytes of one cached row by kind ("latent": a window / compressed K=V row, "indexer": a key + scale)
    rows: tuple[tuple[str, int], ...] = ()
    #: the draft layers' drafter, as reports name it ("MTP", or "DSpark": model-deepseek-v4.md §1.6)
    drafter: str = "MTP"

    def row_bytes(self, kind: str) -> int:
        return dict(self.rows)[kind]

    @property
    def cache_layers(self) -> int:
        return self.main_layers + self.mtp_layers

    @property
    def page_block_bytes(self) -> int:
        return self.config.budget_block_bytes

    @property
    def page_size_bytes(self) -> int:
        return self.page_block_bytes

    @property
    def tokens_per_block(self) -> int:
        return self.block_size

    @property
    def kv_tensors(self) -> int:
        return self.config.tensors

    @property
    def hit_alignment_tokens(self) -> int:
        """Tokens a prefix-cache hit is a whole multiple of: the lcm of the groups' block sizes (each a
        group's raw tokens per block, times DCP). The groups share block ids, so a hit must end on a block
        boundary of every group (vllm-ascend ``patch_kv_cache_coordinator.py:367-375``@182b75ea: ``lcm_block_size``
        over the attention groups' effective block sizes; ``:294-298``: the alignment hits are looked up at,
        without Mamba's partial hash hits): 16,384 tokens for DeepSeek-V4 at --block-size 128 (its compress-128
        group's 128 rows), 4,096 at 32."""
        return math.lcm(*(g.kind.block_size for g in self.config.groups)) * self.dcp

    def blocks_per_request(self, length: int, in_flight: int | None = None) -> int:
        return self.config.blocks_per_request(int(length), self.in_flight if in_flight is None else in_flight)

    def bytes_per_request(self, length: int) -> int:
        return self.blocks_per_request(length) * self.page_block_bytes

    def steady_bytes_per_request(self, length: int, in_flight: int = 1) -> int:
        """What a running request holds with ``in_flight`` tokens in its step (a decode step: 1 + K):
        the sliding groups keep the window plus those, not the capacity check's max_num_batched_tokens."""
        return self.blocks_per_request(length, in_flight) * self.page_block_bytes

    def request_blocks(self, tokens):
        """Blocks of requests of ``tokens`` each (numpy-broadcastable; each distinct length once)."""
        import numpy as np
        t = np.asarray(tokens, dtype=np.int64)
        lengths, back = np.unique(np.maximum(t, 1), return_inverse=True)
        per = np.array([self.blocks_per_request(int(x)) for x in lengths.tolist()], dtype=np.int64)
        return per[back].reshape(t.shape)

    def affine_blocks(self, in_flight: int = 1) -> tuple[int, int]:
        """(tokens per growing block id, fixed block ids per request) of a long request with ``in_flight``
        tokens in its step: the groups that keep every (compressed) row grow together (one block id per
        1 / sum(1 / block_size) tokens, rounded down so demand is never under-counted); the windows and
        states hold a fixed count. What a serving model with one block table per request can admit by."""
        rate = sum(1.0 / g.kind.block_size for g in self.config.groups if not isinstance(g.kind, SlidingWindowSpec))
        fixed = sum(g.blocks(1 << 40, in_flight) for g in self.config.groups if isinstance(g.kind, SlidingWindowSpec))
        return (max(1, int(1.0 / rate)) if rate else 1 << 40), int(fixed)

    def tokens_held(self, num_blocks, length):
        """Tokens ``num_blocks`` block ids hold for requests of ``length`` tokens (numpy-broadcastable): the
        pool's concurrency at that length times the length, as the engine's "GPU KV cache size" counts
        them (``RuntimeBudget.kv_tokens``); a block id serves every group at its own rate, so there is no
        one tokens-per-block figure."""
        import numpy as np
        return np.floor(np.asarray(num_blocks, dtype=np.float64) / self.request_blocks(length) * np.asarray(length))

    def max_length(self, blocks: int, limit: int) -> int:
        """Longest request (<= ``limit``) whose blocks fit in ``blocks`` (bisection: demand grows with L)."""
        if blocks <= 0 or self.blocks_per_request(1) > blocks:
            return 0
        lo, hi = 1, int(limit)
        if self.blocks_per_request(hi) <= blocks:
            return hi
        while hi - lo > 1:
            mid = (lo + hi) // 2
            lo, hi = (mid, hi) if self.blocks_per_request(mid) <= blocks else (lo, mid)
        return lo

    def bytes_per_token(self) -> float:
        """Context-proportional bytes per token over every layer (the naive figure; windows and
        states are fixed per request)."""
        return self.config.naive_bytes_per_token()

    def bytes_per_token_layer(self) -> float:
        grow = sum(n for g in self.config.groups for spec, n in g.layers if spec.bytes_per_token())
        return self.bytes_per_token() / max(1, grow)

    @property
    def main_entry_bytes(self) -> int:
        raise NotImplementedError("a pooled KV cache has no single per-token entry")

    def summary(self) -> str:
        names = ", ".join(f"{g.name} {g.layer_count}" for g in self.config.groups)
        return (f"{len(self.config.groups)} cache groups sharing one block-id pool ({names} cache layers); "
                f"block {self.block_size} tokens: a block id costs {self.config.block_bytes:,} B allocated, "
                f"{self.page_block_bytes:,} B of the budget; {self.config.tensors} KV tensors; "
                f"{self.bytes_per_token():,.1f} B/token grow with context")

    def to_json(self) -> dict:
        return {"variant": self.variant, "layout": self.layout, "block_size": self.block_size, "dcp": self.dcp,
                "cache_layers": self.cache_layers, "mtp_layers": self.mtp_layers,
                "page_block_bytes": self.page_block_bytes, "block_id_bytes": self.config.block_bytes,
                "tokens_per_block": self.tokens_per_block, "kv_tensors": self.config.tensors,
                "in_flight_tokens": self.in_flight,
                "groups": [{"name": g.name, "layers": g.layer_count, "block_size": g.kind.block_size,
                            "page_bytes": g.page_bytes} for g in self.config.groups],
                "summary": self.summary(), **({} if self.drafter == "MTP" else {"drafter": self.drafter})}
