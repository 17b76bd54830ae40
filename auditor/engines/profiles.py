"""Engine profiles: the version-dependent behaviour of vLLM-Ascend, as one data table.

Every row of the spec's version matrix (engine-vllm-ascend.md §0) is a field here; code elsewhere
reads these fields and never tests a version string. Per-scheme tensor rules live in ``rules.py``.
"""
from __future__ import annotations

from dataclasses import dataclass

from ..errors import AuditInputError


@dataclass(frozen=True)
class EngineProfile:
    name: str
    label: str
    # DSA-CP switch: "sp" (index_topk and enable_sp), "flag+sp" (additional_config and enable_sp),
    # "flag" (additional_config only). audit infers the flag from --sp, --dsa-cp overrides.
    dsa_cp_trigger: str
    # o_proj under DSA-CP:
    #   "p_node_replicated": kv_producer gets a full replicated o_proj; every other node is TP + one
    #                        shared full-size gather pool (v0.18-v0.22)
    #   "p_node_replicated_pool_if_no_kv": as above but the pool exists only without kv transfer (v0.23)
    #   "tp_pool_if_no_kv_or_producer": always TP; the pool exists without kv transfer or on a producer
    o_proj_dsa_cp: str
    layer_sharding: bool              # additional_config.layer_sharding exists (v0.13-v0.23)
    gate_dtype: str                   # router gate weight dtype: "pd" or "F32"
    gate_dtype_confirmed: bool
    indexer_fused_wk: bool            # wk + weights_proj fused into wk_weights_proj
    # shared experts replicated when: "sp" (SP/FlashComm1 or SEDP), "sedp" (only --shared-expert-dp)
    shared_experts_replicated: str
    o_proj_gather_input_copy: bool    # unquantized o_proj keeps a per-layer transposed gather input
    notes: tuple[str, ...] = ()


PROFILES: dict[str, EngineProfile] = {
    "vllm-ascend@0.18": EngineProfile(
        name="vllm-ascend@0.18", label="vLLM-Ascend v0.18.0",
        dsa_cp_trigger="sp", o_proj_dsa_cp="p_node_replicated", layer_sharding=True,
        gate_dtype="pd", gate_dtype_confirmed=False, indexer_fused_wk=False,
        shared_experts_replicated="sp", o_proj_gather_input_copy=False,
        notes=("DSA-CP = index_topk and FlashComm1 (VLLM_ASCEND_ENABLE_FLASHCOMM1=1)",),
    ),
    "vllm-ascend@0.23": EngineProfile(
        name="vllm-ascend@0.23", label="vLLM-Ascend v0.23.0",
        dsa_cp_trigger="flag+sp", o_proj_dsa_cp="p_node_replicated_pool_if_no_kv", layer_sharding=True,
        gate_dtype="F32", gate_dtype_confirmed=True, indexer_fused_wk=True,
        shared_experts_replicated="sp", o_proj_gather_input_copy=True,
    ),
    "vllm-ascend@0.26": EngineProfile(
        name="vllm-ascend@0.26", label="vLLM-Ascend v0.26.0rc",
        dsa_cp_trigger="flag+sp", o_proj_dsa_cp="tp_pool_if_no_kv_or_producer", layer_sharding=False,
        gate_dtype="F32", gate_dtype_confirmed=True, indexer_fused_wk=True,
        shared_experts_replicated="sedp", o_proj_gather_input_copy=True,
        notes=("shared experts replicated only with SEDP / enable_sp_by_pass / vLLM disable_tp",),
    ),
    "vllm-ascend@main": EngineProfile(
        name="vllm-ascend@main", label="vLLM-Ascend main @182b75ea",
        dsa_cp_trigger="flag", o_proj_dsa_cp="tp_pool_if_no_kv_or_producer", layer_sharding=False,
        gate_dtype="F32", gate_dtype_confirmed=True, indexer_fused_wk=True,
        shared_experts_replicated="sedp", o_proj_gather_input_copy=True,
    ),
}

ALIASES = {"vllm-ascend@0.18.0": "vllm-ascend@0.18", "vllm-ascend@0.23.0": "vllm-ascend@0.23",
           "vllm-ascend@head": "vllm-ascend@main", "main": "vllm-ascend@main", "0.18": "vllm-ascend@0.18",
           "0.23": "vllm-ascend@0.23", "0.26": "vllm-ascend@0.26", "vllm-ascend@0.26.0rc": "vllm-ascend@0.26"}

DEFAULT_ENGINE = "vllm-ascend@main"


def get_profile(name: str) -> EngineProfile:
    key = ALIASES.get(name.lower(), name.lower())
    if key not in PROFILES:
        raise AuditInputError("--engine", f"unknown engine {name!r} (known: {', '.join(PROFILES)})")
    return PROFILES[key]
