"""vLLM-Ascend versions: what each modelled release does, weights and runtime, one row per version.

Every row of the spec's version matrices (engine-vllm-ascend.md §0 for weights,
engine-vllm-ascend-runtime.md §1.1 "Switches by version", §2.1, §3.4 for the runtime) is a field
here; code elsewhere reads these fields and never tests a version string. Per-scheme tensor rules
live in ``rules.py``; how a version text resolves to a row is generic (``engines/registry.py``).
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class EngineProfile:
    name: str
    label: str
    # the oldest release this profile models ("X.Y.Z" or "X.Y.ZrcN"; "rc" alone = the whole rc series,
    # ordered before rc1); None for the development head. ``resolve_engine`` orders by it.
    version: str | None
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
    # --- runtime (KV cache, DCP, available-memory formula)
    # KV spec layout of a DSA layer: "combined" (one spec, head_size Lkv+Dr+ID; v0.18-v0.23) or
    # "split" (MLA spec + indexer spec sharing one block table; v0.24+). Byte totals agree.
    kv_layout: str = "split"
    # --kv-cache-dtype value -> additional_config switches that select it on this version;
    # a value missing here does not exist on the version.
    kv_switches: dict = field(default_factory=dict)
    # per-rank bytes per token per layer under DCP:
    #   "replicated_indexer": B_mla/DCP + B_idx  (indexer cache replicated, v0.23.0 and later)
    #   "divided":            (B_mla + B_idx)/DCP (combined spec, no replication; UNCONFIRMED)
    dcp_formula: str = "replicated_indexer"
    # the ACL graph pool is deducted from the KV budget (v0.21-v0.22 only); otherwise it must fit
    # in the (1 - util) headroom
    graph_deducted: bool = False
    # MTP drafter's MLA chunked-prefill workspace exists besides the main one (§4.6, UNCONFIRMED)
    drafter_workspace: bool = True
    # platform._validate_parallel_config: SFA DCP requires DCP == TP (HEAD)
    dcp_must_equal_tp: bool = False
    # IndexCache on the SFA path (``patch/worker/patch_deepseek_v2.py:_should_skip_indexer_init`` +
    # ``_skip_topk``, #10441 + #11363, first tag v0.23.0rc1 f4a08bddd0cc): a layer whose config
    # ``indexer_types`` says "shared" holds no indexer weights and no indexer cache; a layer whose
    # top-k is skipped (use_index_cache / index_topk_freq) skips the score + top-k only. False: the
    # overrides are ignored and every layer builds and runs its indexer (<= v0.22.1rc1).
    index_cache: bool = True
    # VLLM_ASCEND_ENABLE_FUSED_MC2=1's dispatch_ffn_combine: its max_output_size (additional_config
    # mega_moe_max_tokens from v0.23.0; the workspace grows with it, activation.ffn_combine_bytes) and
    # whether its workspace slots also hold the gate/up and SwiGLU outputs (v0.18.0's tiling)
    #: which compressed-attention (DeepSeek-V4 family) code the version has: "release" (v0.25.1rc /
    #: v0.26.0rc: single-file model, DSA-CP pools without per-layer copies, the drafter buffer always
    #: allocated), "main", or "" (not read: refused)
    compressed_attention: str = ""
    #: when the MTP drafter runs eager behind the replayed decode graph (its launches then host time of every
    #: decode step): "async" (v0.18: captured only without --async-scheduling and without enforce_eager,
    #: ``spec_decode/eagle_proposer.py:136-142``@v0.18.0), "flag" (v0.19-v0.22: only
    #: speculative_config.enforce_eager, ``llm_base_proposer.py:197``@v0.22.1rc1), "glm" (v0.23.0rc1 on: also
    #: every GLM model, #11327 fbc2dc570a, ``llm_base_proposer.py:225-234``@v0.23.0)
    drafter_graph: str = "glm"
    #: VLLM_ASCEND_ENABLE_FUSED_MC2=1 turns multistream_overlap_shared_expert off (ascend_config.py:179@v0.23.0;
    #: not in v0.22.1rc1 or v0.18.0)
    fused_mc2_drops_shared_expert_overlap: bool = True
    ffn_combine_max_tokens: int = 131072
    ffn_combine_gmm1_slots: bool = False
    notes: tuple[str, ...] = ()
    runtime_notes: tuple[str, ...] = ()

    def __hash__(self) -> int:          # kv_switches is a dict: a row is identified by its name
        return hash(self.name)


PROFILES: dict[str, EngineProfile] = {
    "vllm-ascend@0.18": EngineProfile(
        name="vllm-ascend@0.18", label="vLLM-Ascend v0.18.0", version="0.18.0",
        dsa_cp_trigger="sp", o_proj_dsa_cp="p_node_replicated", layer_sharding=True,
        gate_dtype="pd", gate_dtype_confirmed=False, indexer_fused_wk=False,
        shared_experts_replicated="sp", o_proj_gather_input_copy=False,
        kv_layout="combined", kv_switches={"bf16": {}, "c8-indexer": {"enable_sparse_c8": True}},
        dcp_formula="divided", index_cache=False,
        # moe_comm_method.py:292@v0.18.0 (max_output_size=65536); tiling.cpp:275-288 (slot layout)
        ffn_combine_max_tokens=65536, ffn_combine_gmm1_slots=True, drafter_graph="async",
        fused_mc2_drops_shared_expert_overlap=False,
        notes=("DSA-CP = index_topk and FlashComm1 (VLLM_ASCEND_ENABLE_FLASHCOMM1=1)",),
        runtime_notes=("v0.18 KV spec: one combined spec per layer (head_size Lkv+Dr+ID); main-cache C8 does "
                       "not exist; DCP divides the combined cache (spec arithmetic, UNCONFIRMED)",),
    ),
    "vllm-ascend@0.21": EngineProfile(
        name="vllm-ascend@0.21", label="vLLM-Ascend v0.21.0rc", version="0.21.0rc",
        # enable_dsa_cp = flag and FlashComm1, raising without it (utils.py:1345-1365@v0.21.0rc1); the fp32
        # AscendGateLinear (ops/fused_moe/gate_linear.py:48@v0.21.0rc1) and the fused wk_weights_proj
        # (attention/sfa_v1.py:471@v0.21.0rc1) are in, as the spec's v0.20.2rc column says
        dsa_cp_trigger="flag+sp", o_proj_dsa_cp="p_node_replicated", layer_sharding=True,
        gate_dtype="F32", gate_dtype_confirmed=True, indexer_fused_wk=True,
        shared_experts_replicated="sp", o_proj_gather_input_copy=False,
        kv_layout="combined", kv_switches={"bf16": {}, "c8-indexer": {"enable_sparse_c8": True}},
        dcp_formula="divided", index_cache=False, graph_deducted=True,
        ffn_combine_max_tokens=131072,          # moe_comm_method.py:320@v0.21.0rc1
        drafter_graph="flag", fused_mc2_drops_shared_expert_overlap=False,
        runtime_notes=("v0.21.0rc1 - v0.22.1rc1 deduct the ACL graph estimate from the KV budget when "
                       "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS is on (#9865; v0.22.1rc1 5f6faa0cb883 "
                       "worker.py:506-547), reverted by #11562 before v0.23.0rc1; on by default per the "
                       "engine's own message (UNCONFIRMED per vLLM pin)",),
    ),
    "vllm-ascend@0.23": EngineProfile(
        name="vllm-ascend@0.23", label="vLLM-Ascend v0.23.0", version="0.23.0",
        dsa_cp_trigger="flag+sp", o_proj_dsa_cp="p_node_replicated_pool_if_no_kv", layer_sharding=True,
        gate_dtype="F32", gate_dtype_confirmed=True, indexer_fused_wk=True,
        shared_experts_replicated="sp", o_proj_gather_input_copy=True,
        kv_layout="combined", kv_switches={"bf16": {}, "c8-indexer": {"enable_sparse_li_c8": True},
                     "c8": {"enable_sparse_sfa_c8": True, "enable_sparse_li_c8": True}},
        ffn_combine_max_tokens=65536,           # ascend_config.py:306@f4a08bdd and @v0.23.0 (#11258)
        runtime_notes=("a release candidate has its series' features: v0.23.0rc1 (f4a08bddd0cc) is modelled "
                       "by this row; its release branch carries the SFA/LI-C8 split (ascend_config.py:280-281"
                       "@f4a08bdd) and IndexCache (#11363 929e461de8 is an ancestor)",),
    ),
    "vllm-ascend@0.24": EngineProfile(
        name="vllm-ascend@0.24", label="vLLM-Ascend v0.24.0rc", version="0.24.0rc",
        dsa_cp_trigger="flag+sp", o_proj_dsa_cp="p_node_replicated_pool_if_no_kv", layer_sharding=False,
        gate_dtype="F32", gate_dtype_confirmed=True, indexer_fused_wk=True,
        shared_experts_replicated="sp", o_proj_gather_input_copy=True,
        kv_layout="split", kv_switches={"bf16": {}, "c8": {"enable_sparse_c8": True}},
        compressed_attention="release",
        notes=("layer_sharding removed; o_proj/shared-expert rules as v0.23 (UNCONFIRMED for 0.24/0.25)",
               "compressed attention (DeepSeek-V4) as read on releases/v0.25.1rc a675940f (UNCONFIRMED for v0.24)"),
        runtime_notes=("v0.24.0rc1 (412cda26814f) and v0.25.1rc1 (9bf964cb4b87): enable_sparse_c8 turns on both "
                       "SFA-C8 and LI-C8 (v0.24.0rc1 ascend_config.py:278); there is no LI-only switch",),
    ),
    "vllm-ascend@0.26": EngineProfile(
        name="vllm-ascend@0.26", label="vLLM-Ascend v0.26.0rc", version="0.26.0rc",
        dsa_cp_trigger="flag+sp", o_proj_dsa_cp="tp_pool_if_no_kv_or_producer", layer_sharding=False,
        gate_dtype="F32", gate_dtype_confirmed=True, indexer_fused_wk=True,
        shared_experts_replicated="sedp", o_proj_gather_input_copy=True,
        kv_layout="split", kv_switches={"bf16": {}, "c8-indexer": {"enable_sparse_li_c8": True},
                     "c8": {"enable_sparse_sfa_c8": True, "enable_sparse_li_c8": True}},
        compressed_attention="release",
        notes=("shared experts replicated only with SEDP / enable_sp_by_pass / vLLM disable_tp",),
    ),
    "vllm-ascend@main": EngineProfile(
        name="vllm-ascend@main", label="vLLM-Ascend main @182b75ea", version=None,
        dsa_cp_trigger="flag", o_proj_dsa_cp="tp_pool_if_no_kv_or_producer", layer_sharding=False,
        gate_dtype="F32", gate_dtype_confirmed=True, indexer_fused_wk=True,
        shared_experts_replicated="sedp", o_proj_gather_input_copy=True,
        kv_layout="split", kv_switches={"bf16": {}, "c8-indexer": {"enable_sparse_li_c8": True},
                     "c8": {"enable_sparse_sfa_c8": True, "enable_sparse_li_c8": True}}, dcp_must_equal_tp=True,
        compressed_attention="main",
    ),
}

ALIASES = {"vllm-ascend@head": "vllm-ascend@main", "head": "vllm-ascend@main", "main": "vllm-ascend@main"}
DEFAULT = "vllm-ascend@main"


