"""What vLLM-Ascend allocates besides weights, KV, activation and communicators, and where it sits.

engine-vllm-ascend-runtime.md §3.3 and §4.3-§4.6: items outside the KV budget must fit in
``M_total * (1 - util)`` minus what other processes held at start; some versions deduct the ACL
graph pool from the budget instead (``EngineProfile.graph_deducted``).
"""
from __future__ import annotations

from ...model.spec import ModelSpec
from ...parallel import ParallelPlan
from ..kv_interface import KVSpec, cdiv
from . import activation, hccl
from ...units import GiB, MiB

DEFAULT_UTIL = 0.9
DEFAULT_MAX_NUM_SEQS = 256
#: memory other processes hold on the die at start (spec §5 assumption 3, UNCONFIRMED)
OTHERS_AT_START_BYTES = int(0.4 * GiB)
#: ACL graph pool, FULL_DECODE_ONLY (public: 0.44 GiB actual / 0.59 estimated A2 TP8 GLM-5.1 issue #10700,
#: 0.79 GiB issue #13439, 1.97 GiB DSV4 A3; UNCONFIRMED); deducted only on v0.21-v0.22 (runtime-facts.md §4)
GRAPH_POOL_BYTES = GiB // 2
GRAPH_POOL_RANGE = (int(0.44 * GiB), 2 * GiB)
#: ATB tiling pool from _warm_up_atb (vllm-ascend issue #14300, UNCONFIRMED)
ATB_POOL_BYTES = 98 * MiB
#: 2 MiB alignment slack per raw KV tensor with a kv_transfer_config (§1.5)
KV_ALIGN_BYTES = 2 * MiB

ASSUMPTIONS = (
    "activation peak P_act = what the profile run allocates: residual stream, MTP drafter, the MoE layer on the "
    "comm path selected at T (ALLTOALL / ALLGATHER / MC2, or FUSED_MC2 with its dispatch_ffn_combine workspace) "
    "or the MC2 warm-up pass, logits on max_num_seqs rows; "
    "sparse attention is skipped in the profile run (sfa_v1.py:1490-1492), its prefill transients are listed "
    f"outside the budget; range {activation.ACT_LOW:g}-{activation.ACT_HIGH:g} x (co-residency, allocator slack; "
    "UNCONFIRMED)",
    *hccl.ASSUMPTIONS,
    f"memory held by other processes at start {OTHERS_AT_START_BYTES / GiB:.1f} GiB (spec §5, UNCONFIRMED)",
    f"ACL graph pool {GRAPH_POOL_BYTES / GiB:.1f} GiB outside the budget (UNCONFIRMED); ATB pool 98 MiB",
    "GPU KV cache size = int(concurrency x max_model_len) (newer upstream form; equals num_blocks x "
    "block_size x DCP when the block divides max_model_len / DCP) (UNCONFIRMED)",
)
#: said only where an indexer cache can be C8 (the sparse-MLA KV specs)
LI_C8_ASSUMPTION = "LI-C8 applies to every indexer layer (no per-layer filter from the quant description)"


def unbudgeted_items(spec: ModelSpec, plan: ParallelPlan, kv: KVSpec, *, max_model_len: int, max_num_seqs: int,
                     max_num_batched_tokens: int, mtp: int, graph_deducted: bool,
                     drafter_workspace: bool, soc: str = "a3", prefill_mc2: bool = False, fused_mc2: int = 0,
                     dsa_cp: bool = False,
                     hccl_buffsize_mb: int = hccl.DEFAULT_HCCL_BUFFSIZE_MB) -> list[tuple[str, int]]:
    """Allocations outside the KV budget (spec §3.3, §4.3-§4.6; runtime-facts.md §1.4, §2)."""
    L, S, T, dcp = max_model_len, max_num_seqs, max_num_batched_tokens, kv.dcp
    items = [("runner buffers (mc2_mask, MLA cos/sin)", T + 2 * T * max(spec.Dr, 1) * 2)] if not spec.layer_kinds \
        else [("runner buffers (mc2_mask)", T)]
    # the profile run never runs sparse attention (sfa_v1.py:1490-1492@182b75ea): a real prefill of T
    # tokens allocates these on top of the measured peak
    items.append((f"prefill attention transients at T={T:,} (not in the profile run)",
                  activation.attention_transients(spec, tokens=T, tp=plan.tp, dsa_cp=dsa_cp)))
    items += hccl.after_profile_items(plan, hccl_buffsize_mb=hccl_buffsize_mb, dcp=dcp, spec=spec, tokens=T,
                                      seqs=S, mtp=mtp, soc=soc, prefill_mc2=prefill_mc2, fused_mc2=fused_mc2)
    if spec.mla:
        bs = kv.block_size
        ws = max(min(max(8 * L, 4 * S * bs), 131072), S * bs)
        per = int(ws * (1 + (1 / dcp if dcp > 1 else 0)) * (spec.Lkv + spec.Dr) * 2)
        n = 2 if (mtp and drafter_workspace and spec.mtp_layers) else 1
        items.append((f"MLA chunked-prefill workspace x{n}", per * n))
    if dcp > 1:
        dcp_bytes = S * (1 + mtp) * L + (S + 1) * cdiv(L, kv.block_size) * dcp * 4 + T * 4 + spec.topk_tokens * 4
        items.append(("DCP buffers (mtp mask, replicated block table, slot map)", dcp_bytes))
    if plan.role != "mixed":
        items.append(("KV 2 MiB alignment (kv_transfer_config)", kv.kv_tensors * KV_ALIGN_BYTES))
    if not graph_deducted:
        items.append(("ACL graph pool (FULL_DECODE_ONLY)", GRAPH_POOL_BYTES))
    items.append(("ATB tiling pool", ATB_POOL_BYTES))
    items.append(("sampler fp32 logits + sort buffers", S * (1 + mtp) * spec.V * 16))
    return items
