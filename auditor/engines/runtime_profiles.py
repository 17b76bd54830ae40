"""What each vLLM-Ascend version does at runtime (KV cache, DCP, available-memory formula), as data.

The weight-side behaviour lives in ``profiles.py``; this table is its runtime companion
(engine-vllm-ascend-runtime.md §1.1 "Switches by version", §2.1, §3.4). Code in
``auditor.runtime`` reads these fields and never tests a version string.
"""
from __future__ import annotations

from dataclasses import dataclass

from .profiles import PROFILES, resolve_engine


@dataclass(frozen=True)
class RuntimeProfile:
    name: str
    # KV spec layout of a DSA layer: "combined" (one spec, head_size Lkv+Dr+ID; v0.18-v0.23) or
    # "split" (MLA spec + indexer spec sharing one block table; v0.24+). Byte totals agree.
    kv_layout: str
    # --kv-cache-dtype value -> additional_config switches that select it on this version;
    # a value missing here does not exist on the version.
    kv_switches: dict
    # per-rank bytes per token per layer under DCP:
    #   "replicated_indexer": B_mla/DCP + B_idx  (indexer cache replicated, v0.23.0 and later)
    #   "divided":            (B_mla + B_idx)/DCP (combined spec, no replication; UNCONFIRMED)
    dcp_formula: str
    # the ACL graph pool is deducted from the KV budget (v0.21-v0.22 only); otherwise it must fit
    # in the (1 - util) headroom
    graph_deducted: bool
    # MTP drafter's MLA chunked-prefill workspace exists besides the main one (§4.6, UNCONFIRMED)
    drafter_workspace: bool = True
    # platform._validate_parallel_config: SFA DCP requires DCP == TP (HEAD)
    dcp_must_equal_tp: bool = False
    notes: tuple[str, ...] = ()


RUNTIME_PROFILES: dict[str, RuntimeProfile] = {
    "vllm-ascend@0.18": RuntimeProfile(
        name="vllm-ascend@0.18", kv_layout="combined",
        kv_switches={"bf16": {}, "c8-indexer": {"enable_sparse_c8": True}},
        dcp_formula="divided", graph_deducted=False,
        notes=("v0.18 KV spec: one combined spec per layer (head_size Lkv+Dr+ID); main-cache C8 does "
               "not exist; DCP divides the combined cache (spec arithmetic, UNCONFIRMED)",),
    ),
    "vllm-ascend@0.23": RuntimeProfile(
        name="vllm-ascend@0.23", kv_layout="combined",
        kv_switches={"bf16": {}, "c8-indexer": {"enable_sparse_li_c8": True},
                     "c8": {"enable_sparse_sfa_c8": True, "enable_sparse_li_c8": True}},
        dcp_formula="replicated_indexer", graph_deducted=False,
    ),
    "vllm-ascend@0.26": RuntimeProfile(
        name="vllm-ascend@0.26", kv_layout="split",
        kv_switches={"bf16": {}, "c8-indexer": {"enable_sparse_li_c8": True},
                     "c8": {"enable_sparse_sfa_c8": True, "enable_sparse_li_c8": True}},
        dcp_formula="replicated_indexer", graph_deducted=False,
    ),
    "vllm-ascend@main": RuntimeProfile(
        name="vllm-ascend@main", kv_layout="split",
        kv_switches={"bf16": {}, "c8-indexer": {"enable_sparse_li_c8": True},
                     "c8": {"enable_sparse_sfa_c8": True, "enable_sparse_li_c8": True}},
        dcp_formula="replicated_indexer", graph_deducted=False, dcp_must_equal_tp=True,
    ),
}

assert set(RUNTIME_PROFILES) == set(PROFILES), "every engine profile needs its runtime row"


def get_runtime_profile(name: str) -> RuntimeProfile:
    """The runtime row of the profile an ``--engine`` text resolves to (any version, see
    ``profiles.resolve_engine``)."""
    return RUNTIME_PROFILES[resolve_engine(name)[0]]
