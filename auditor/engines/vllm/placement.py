"""Upstream vLLM's placement on CUDA: what a rank holds replicated or sharded (Part B §3).

Under TP the MLA projections q_b / kv_b / o_proj and W_UK_T/W_UV are sharded by heads; fused_qkv_a,
the indexer (wq_b, wk_weights_proj, k_norm), norms, the router gate and its bias and the top-k
buffer are replicated. Routed experts: without EP every rank holds all E experts with I/TP (DP
flattened into MoE TP, UNCONFIRMED on CUDA), with EP ``(E + redundant) / EP`` whole experts.
``I_local % 128 == 0`` is required by the FP8 block shape (``validate_fp8_block_shape``).
Upstream has no DSA context parallel, no FlashComm1 and no layer sharding: those switches are
refused, not ignored.
"""
from __future__ import annotations

from ...errors import AuditInputError
from ...model.spec import ModelSpec
from ...parallel import ParallelPlan
from ..placement import KV_ROLE, Placement
from .versions import VllmProfile

#: FP8 block size along a TP-split dimension (fp8_utils.validate_fp8_block_shape, index id 36884613)
FP8_BLOCK = 128


def resolve_placement(spec: ModelSpec, plan: ParallelPlan, prof: VllmProfile) -> Placement:
    plan.validate()
    compressed = bool(spec.layer_kinds)
    if compressed and spec.moe and (spec.E + plan.redundant_experts) % plan.tp:
        # DeepseekV4MoE: "n_physical_experts must be divisible by tp_size" (nvidia/model.py@3296c77f)
        raise AuditInputError("--tp", f"{spec.E + plan.redundant_experts} physical experts do not divide by TP "
                                      f"{plan.tp} (DeepseekV4MoE asserts it)")
    if compressed and spec.o_groups % plan.tp:
        raise AuditInputError("--tp", f"{spec.o_groups} output groups do not divide by TP {plan.tp} (wo_a is a "
                                      "batched matmul over n_groups // tp_size groups)")
    if plan.pp > spec.Lyr:
        raise AuditInputError("--pp", f"{plan.pp} pipeline stages for {spec.Lyr} decoder layers")
    block_note = []
    if compressed:
        pass        # the DeepSeek-V4 backend sets its own block size (256; kv_compressed, its log line)
    elif plan.block_size and plan.block_size != 64:
        # the sparse-MLA backends (FlashMLA sparse) page the latent in blocks of 64 (spec §2: block 64)
        block_note.append(("warning", f"--block-size {plan.block_size}: audit models the sparse-MLA block of 64 "
                                      f"tokens {prof.label} runs these models with (UNCONFIRMED for other values)"))
    if plan.dsa_cp:
        raise AuditInputError("--dsa-cp", f"{prof.label} has no DSA context parallel (a vLLM-Ascend feature)")
    if plan.sp:
        raise AuditInputError("--sp", f"{prof.label}: FlashComm1 sequence parallel is a vLLM-Ascend feature; "
                                      "upstream's sequence-parallel MoE is not modelled")
    if plan.layer_sharding:
        raise AuditInputError("--layer-sharding", f"{prof.label} has no layer sharding (a vLLM-Ascend feature)")
    if plan.fused_mc2 or plan.combine_max_tokens:
        raise AuditInputError("--fused-mc2", f"{prof.label}: FUSED_MC2 / mega_moe_max_tokens are vLLM-Ascend switches")
    if plan.shared_expert_dp:
        raise AuditInputError("--shared-expert-dp", f"{prof.label}: enable_shared_expert_dp is a vLLM-Ascend switch")
    if spec.NH % plan.tp:
        raise AuditInputError("--tp", f"{spec.NH} attention heads do not divide by TP {plan.tp}")
    notes: list[str] = []
    if plan.ep_on:
        moe_tp = 1
        total = spec.E + plan.redundant_experts
        e_local = -(-total // plan.ep) if spec.moe else 0
        i_p = spec.I
        if spec.moe and total % plan.ep:
            notes.append(f"{total} expert slots over EP {plan.ep}: some ranks hold {e_local}, the rest "
                         f"{total // plan.ep} (UNCONFIRMED uneven split on CUDA)")
    else:
        moe_tp = plan.tp * plan.dp
        e_local = spec.E + plan.redundant_experts if spec.moe else 0
        i_p = spec.I // moe_tp if spec.moe else 0
        if spec.moe and (spec.I % moe_tp or i_p % FP8_BLOCK):
            raise AuditInputError("--tp", f"moe_intermediate_size {spec.I} over MoE TP {moe_tp} gives {spec.I / moe_tp:g} "
                                          f"per rank, not a multiple of the FP8 block {FP8_BLOCK} "
                                          "(validate_fp8_block_shape); use --ep")
        if spec.moe and plan.dp > 1:
            notes.append(f"EP off: routed experts TP-sharded over DP x TP = {moe_tp} (FusedMoEParallelConfig "
                         "flattening, UNCONFIRMED on CUDA)")
    if compressed:
        notes.append("fused_wqa_wkv, the compressors' fused_wkv_wgate, the indexer (wq_b, weights_proj), router "
                     "gate + fp32 bias / tid2eid, hc_* and topk_indices_buffer replicated on every TP rank; wq_b / "
                     "wo_a by heads / groups, wo_b, shared experts and embed / lm_head TP-sharded "
                     "(vllm/models/deepseek_v4/attention.py@e6643eca, nvidia/model.py@3296c77f)")
    elif spec.dsa:
        notes.append("fused_qkv_a, the indexer (wq_b, wk_weights_proj, k_norm), router gate + fp32 bias and "
                     "topk_indices_buffer replicated on every TP rank (Part B §3)")
    return Placement(
        dsa_cp=False, heads_local=spec.NH // plan.tp, qb_kvb_replicated=False, o_proj_replicated=False,
        o_proj_gather_pool=False, shared_experts_replicated=False, moe_tp=moe_tp, experts_local=e_local,
        I_p=i_p, dense_tp=plan.tp, layer_sharding=(), kv_role=KV_ROLE[plan.role], assumptions=notes, findings=block_note,
    )
