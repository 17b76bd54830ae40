"""The KV cache of one worker as the engine's scheduler sees it: a spec object that knows its bytes.

Modelled on vLLM's ``kv_cache_interface.py``: one definition of bytes per token, page (block)
bytes and memory per request under decode context parallel (DCP), used by the HBM budget, by
perf's cache reads and writes, by plan and by align. An engine builds it (``Engine.kv_spec``)
from the model and its own rules; the arithmetic here is the engine-independent part: a block
holds ``block_size`` tokens per DCP rank, ``block_size * DCP`` tokens of a request.
"""
from __future__ import annotations

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

    def to_json(self) -> dict:
        return {"variant": self.variant, "layout": self.layout, "block_size": self.block_size, "dcp": self.dcp,
                "dcp_formula": self.dcp_formula, "mla_bytes_per_token_layer": self.mla_bytes,
                "indexer_bytes_per_token_layer": self.idx_bytes, "cache_layers": self.cache_layers,
                "mtp_layers": self.mtp_layers, "indexer_layers": self.idx_layers,
                "page_block_bytes": self.page_block_bytes, "tokens_per_block": self.tokens_per_block}


