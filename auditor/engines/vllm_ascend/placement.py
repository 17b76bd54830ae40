"""vLLM-Ascend's placement: a (model structure, parallel plan, version row) triple resolved into
concrete layout decisions.

Memory and perf both read this one object, so the two can never disagree about what is
replicated. Every decision that rests on an UNCONFIRMED spec line is recorded in ``assumptions``.
"""
from __future__ import annotations

from ...errors import AuditInputError
from ...model.spec import ModelSpec
from ...parallel import ParallelPlan
from ..placement import KV_ROLE, Placement
from .compressed import check_supported as check_compressed
from .switches import decide_dsa_cp
from .versions import EngineProfile


def resolve_placement(spec: ModelSpec, plan: ParallelPlan, prof: EngineProfile) -> Placement:
    plan.validate()
    check_compressed(spec, prof)
    if plan.pp > spec.Lyr:
        raise AuditInputError("--pp", f"{plan.pp} pipeline stages for {spec.Lyr} decoder layers (each stage needs "
                                      "at least one layer)")
    notes: list[str] = []
    findings: list[tuple[str, str]] = []
    kv_role = KV_ROLE[plan.role]

    # --- DSA-CP: this version's rule over FlashComm1 (--sp) and enable_dsa_cp (--dsa-cp)
    decision = decide_dsa_cp(prof.dsa_cp_trigger, prof.label, has_indexer=spec.dsa, sp=plan.sp, flag=plan.dsa_cp,
                             tp=plan.tp)
    dsa_cp = decision.on
    notes += decision.notes
    findings += [("warning", w) for w in decision.warnings]
    if dsa_cp and plan.tp == 1:
        notes.append("DSA-CP with TP1 changes nothing: every projection is already full")

    heads_local = spec.NH if dsa_cp else spec.NH // plan.tp
    if not dsa_cp and spec.NH % plan.tp:
        raise AuditInputError("--tp", f"{spec.NH} attention heads do not divide by TP {plan.tp}")

    # --- o_proj under DSA-CP, by version (spec §3.3)
    o_rep = False
    pool = False
    if dsa_cp and spec.o_groups:
        # grouped output projection (DeepSeek-V4): the TP weight switch on P and mixed nodes
        # (enable_dsa_cp_with_o_proj_tp: no kv_transfer_config or kv_producer, utils.py:1332-1345@182b75ea)
        pool = kv_role in ("none", "kv_producer")
        if pool:
            notes.append("wo_a / wo_b TP-sharded plus full-size gather pools shared by all layers (TP weight switch)")
    elif dsa_cp and spec.mla:
        mode = prof.o_proj_dsa_cp
        producer = kv_role == "kv_producer"
        if mode == "p_node_replicated":
            o_rep = producer
            pool = not producer
        elif mode == "p_node_replicated_pool_if_no_kv":
            o_rep = producer
            pool = kv_role == "none"
        else:   # tp_pool_if_no_kv_or_producer
            pool = kv_role in ("none", "kv_producer")
        if o_rep:
            notes.append(f"o_proj fully replicated per layer: {prof.label} P node (kv_producer) under DSA-CP")
        if pool:
            notes.append("o_proj TP-sharded plus one full-size gather buffer shared by all layers "
                         "(TPWeightSwitch pool)")

    # --- layer sharding (v0.13-v0.23, P node under DSA-CP)
    ls: tuple[str, ...] = ()
    if plan.layer_sharding:
        if not prof.layer_sharding:
            findings.append(("warning", f"--layer-sharding is ignored: {prof.label} has no layer_sharding"))
        elif not (dsa_cp and kv_role == "kv_producer"):
            findings.append(("warning", "--layer-sharding takes effect only on a DSA-CP P node "
                                        "(--role prefill with SP)"))
        else:
            ls = tuple(s for s in plan.layer_sharding if s == "q_b_proj" or o_rep)
            if "o_proj" in plan.layer_sharding and not o_rep:
                findings.append(("warning", "o_proj is TP-sharded here; layer sharding applies to q_b_proj only"))

    # --- block size: the SFA / MLA backends keep 128 (refresh_block_size); compressed attention reads it
    if plan.block_size and plan.block_size != 128 and not spec.layer_kinds:
        findings.append(("warning", f"--block-size {plan.block_size} is not what the engine runs: vLLM-Ascend forces "
                                    "128 for this model's attention backend (refresh_block_size)"))

    # --- shared experts
    if prof.shared_experts_replicated == "sp":
        se_rep = plan.shared_expert_dp or plan.sp
        if plan.sp and spec.moe:
            notes.append(f"shared experts replicated: {prof.label} replicates them whenever SP/FlashComm1 is on")
    else:
        se_rep = plan.shared_expert_dp
    if plan.shared_expert_dp and not (plan.ep_on and plan.tp > 1):
        findings.append(("warning", "enable_shared_expert_dp requires EP and TP > 1"))

    # --- IndexCache: a model whose layers share top-k, on a version without it (PR #10441, v0.23.0rc1)
    if spec.dsa and any(spec.topk_shared or ()) and not prof.index_cache:
        findings.append(("warning", f"{prof.label} has no IndexCache (vllm-ascend PR #10441, from v0.23.0rc1): every "
                                    "layer builds its indexer and computes its own top-k, although the config "
                                    "shares top-k between layers (index_topk_freq / indexer_types)"))

    # --- routed experts
    if plan.ep_on:
        moe_tp = 1
        total = spec.E + plan.redundant_experts
        # vLLM's expert map splits unevenly when needed: the first (total % ep) ranks take one more
        e_local = -(-total // plan.ep) if spec.moe else 0
        if spec.moe and total % plan.ep:
            notes.append(f"{total} expert slots over EP {plan.ep}: {total % plan.ep} ranks hold {e_local}, "
                         f"the rest {total // plan.ep}")
        i_p = spec.I
    else:
        moe_tp = plan.tp * plan.dp
        e_local = spec.E + plan.redundant_experts if spec.moe else 0
        i_p = spec.I // moe_tp if spec.moe else 0
        if spec.moe and spec.I % moe_tp:
            raise AuditInputError("--tp", f"moe_intermediate_size {spec.I} does not divide by MoE TP {moe_tp}")
        if spec.moe and moe_tp > 1:
            notes.append(f"EP off: routed experts TP-sharded over DP x TP = {moe_tp} (vLLM flattens DP into MoE TP)")

    if not prof.gate_dtype_confirmed and spec.moe:
        notes.append(f"router gate dtype on {prof.label} is UNCONFIRMED; assumed model dtype")

    return Placement(
        dsa_cp=dsa_cp, heads_local=heads_local, qb_kvb_replicated=dsa_cp,
        o_proj_replicated=o_rep, o_proj_gather_pool=pool, shared_experts_replicated=se_rep,
        moe_tp=moe_tp, experts_local=e_local, I_p=i_p, dense_tp=plan.tp, layer_sharding=ls,
        kv_role=kv_role, assumptions=notes, findings=findings,
    )
