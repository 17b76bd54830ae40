"""What the engine holds for each kind of module and scheme, after process_weights_after_loading.

This is the one place where vLLM-Ascend's materialization behaviour is written down
(engine-vllm-ascend.md §2-§5). Each rule is a resident tensor: its dtype, its per-rank shape as
expressions over the module's dimensions, its category, and where it comes from:

* ``stored``    - the checkpoint tensor (``from_suffix``), possibly transposed / cast / NZ;
* ``allocated`` - a parameter ``create_weights`` registers although the checkpoint lacks it;
* ``created``   - a new tensor made after loading (fp32 copies, aclnn expansions, derived weights).

Shape variables: ``N``/``K`` out/in features per rank, ``Nf``/``Kf`` full, ``El`` local experts,
``Ip`` expert intermediate per partition, ``H``, ``Hl`` local heads, ``Lkv``, ``Dn``, ``Dv``, ``Dr``,
``Dq``, ``Qr``, ``ID``, ``IH``, ``E``, ``V``, ``dim``. Dtype ``pd`` is the model dtype, ``deq`` is fp32
for a bf16 model (int64 for fp16), ``stored`` keeps the checkpoint dtype.
"""
from __future__ import annotations

from ..bridge import C_ACLNN, C_C8, C_FP32, C_KVB, C_MLAPO, C_NORMBIAS, C_OPROJ, C_QPARAM, Rule


LINEAR: dict[str, tuple[Rule, ...]] = {
    # §2.3 unquantized linear: not transposed, NZ only with nz_mode 2
    "FLOAT": (
        Rule("weight", "pd", "N,K", "float", from_suffix="weight", nz="bf16"),
    ),
    # §2.1 W8A8 static
    "W8A8": (
        Rule("weight", "I8", "K,N", "int8", from_suffix="weight", nz="quant", note="transposed"),
        Rule("input_scale", "pd", "1", "scale", from_suffix="input_scale"),
        Rule("input_offset", "I8", "1", "offset", from_suffix="input_offset"),
        Rule("quant_bias", "I32", "N", "offset", from_suffix="quant_bias"),
        Rule("deq_scale", "deq", "N", "scale", from_suffix="deq_scale"),
        Rule("weight_scale", "pd", "N", "scale", source="allocated", from_suffix="weight_scale", cause=C_QPARAM),
        Rule("weight_offset", "pd", "N", "offset", source="allocated", from_suffix="weight_offset", cause=C_QPARAM),
        Rule("aclnn_input_scale", "pd", "K", "derived", source="created", cause=C_ACLNN),
        Rule("aclnn_input_scale_reciprocal", "pd", "K", "derived", source="created", cause=C_ACLNN),
        Rule("aclnn_input_offset", "pd", "K", "derived", source="created", cause=C_ACLNN),
    ),
    # §2.2 W8A8 dynamic
    "W8A8_DYNAMIC": (
        Rule("weight", "I8", "K,N", "int8", from_suffix="weight", nz="quant", note="transposed"),
        Rule("weight_scale", "pd", "N", "scale", from_suffix="weight_scale"),
        Rule("weight_offset", "pd", "N", "offset", from_suffix="weight_offset"),
        Rule("weight_scale_fp32", "F32", "N", "derived", source="created", cause=C_FP32),
    ),
    # FP8 block checkpoints: vLLM-Ascend has no FP8 linear method; modelled as stored (see findings)
    "FP8_BLOCK": (
        Rule("weight", "stored", "N,K", "int8", from_suffix="weight"),
        Rule("weight_scale_inv", "F32", "cdiv(N,128),cdiv(K,128)", "scale", from_suffix="weight_scale_inv"),
    ),
}

MOE: dict[str, tuple[Rule, ...]] = {
    # §2.4 W8A8_DYNAMIC fused MoE, per local expert stack
    "W8A8_DYNAMIC": (
        Rule("w13_weight", "I8", "El,H,2*Ip", "int8", from_suffix="weight", nz="always", note="gate+up, transposed"),
        Rule("w2_weight", "I8", "El,Ip,H", "int8", from_suffix="weight", nz="always", note="down, transposed"),
        Rule("w13_weight_scale", "pd", "El,2*Ip", "scale", from_suffix="weight_scale"),
        Rule("w13_weight_offset", "pd", "El,2*Ip", "offset", from_suffix="weight_offset"),
        Rule("w2_weight_scale", "pd", "El,H", "scale", from_suffix="weight_scale"),
        Rule("w2_weight_offset", "pd", "El,H", "offset", from_suffix="weight_offset"),
        Rule("w13_weight_scale_fp32", "F32", "El,2*Ip", "derived", source="created", cause=C_FP32),
        Rule("fused_w1_scale", "I64", "El*2*Ip", "derived", source="created", cause=C_FP32, when="fused_mc2"),
        Rule("fused_w2_scale", "I64", "El*H", "derived", source="created", cause=C_FP32, when="fused_mc2"),
    ),
    # §2.5 W4A8_DYNAMIC (msModelSlim format): packed int4, scales widened to int64
    "W4A8_DYNAMIC": (
        Rule("w13_weight", "I8", "El,H,Ip", "int8", from_suffix="weight", nz="quant",
             note="2 x int4 per byte, viewed as int32 [El,H,Ip/4]"),
        Rule("w2_weight", "I8", "El,Ip,H/2", "int8", from_suffix="weight", nz="quant",
             note="2 x int4 per byte, viewed as int32 [El,Ip,H/8]"),
        Rule("w13_weight_scale", "I64", "El,2*Ip", "scale", from_suffix="weight_scale",
             note="fp32 bits widened to int64"),
        Rule("w2_weight_scale", "I64", "El,1,H", "scale", from_suffix="weight_scale",
             note="fp32 bits widened to int64"),
        Rule("w13_scale_bias", "F32", "El,2*Ip", "offset", from_suffix="scale_bias"),
        Rule("w2_scale_bias", "F32", "El,H", "offset", from_suffix="scale_bias", note="summed over 16/tp_m"),
        Rule("w13_weight_offset", "F32", "El,2*Ip", "offset", from_suffix="weight_offset"),
        Rule("w2_weight_offset", "F32", "El,H", "offset", from_suffix="weight_offset"),
    ),
    # §2.6 unquantized MoE
    "FLOAT": (
        Rule("w13_weight", "pd", "El,H,2*Ip", "float", from_suffix="weight", nz="bf16"),
        Rule("w2_weight", "pd", "El,Ip,H", "float", from_suffix="weight", nz="bf16"),
    ),
    "FP8_BLOCK": (
        Rule("w13_weight", "stored", "El,2*Ip,H", "int8", from_suffix="weight"),
        Rule("w2_weight", "stored", "El,H,Ip", "int8", from_suffix="weight"),
        Rule("w13_weight_scale_inv", "F32", "El,2*cdiv(Ip,128),cdiv(H,128)", "scale", from_suffix="weight_scale_inv"),
        Rule("w2_weight_scale_inv", "F32", "El,cdiv(H,128),cdiv(Ip,128)", "scale", from_suffix="weight_scale_inv"),
    ),
}

# §3.1: kv_b_proj is split into two contiguous pd tensors and then disposed (0 elements)
KV_B: tuple[Rule, ...] = (
    Rule("W_UK_T", "pd", "Hl,Dn,Lkv", "derived", source="created", cause=C_KVB),
    Rule("W_UV", "pd", "Hl,Lkv,Dv", "derived", source="created", cause=C_KVB),
)

# §3.2 MLAPO (fused_qkv_a W8A8 static, both a-layernorms with bias, no DSA-CP/DCP)
MLAPO: tuple[Rule, ...] = (
    Rule("wd_qkv", "I8", "Lkv+Dr+Qr,H", "derived", source="created", nz="always", cause=C_MLAPO),
    Rule("deq_scale_qkv", "deq", "Lkv+Dr+Qr", "derived", source="created", cause=C_MLAPO),
    Rule("quant_bias_qkv", "I32", "Lkv+Dr+Qr", "derived", source="created", cause=C_MLAPO),
    Rule("wu_q", "I8", "Hl*Dq,Qr", "derived", source="created", nz="always", cause=C_MLAPO),
    Rule("qb_deq_scl", "deq", "Hl*Dq", "derived", source="created", cause=C_MLAPO),
    Rule("qb_qt_bias", "I32", "Hl*Dq", "derived", source="created", cause=C_MLAPO),
    Rule("ctkv_scale", "pd", "1", "derived", source="created", cause=C_MLAPO),
    Rule("q_nope_scale", "pd", "1", "derived", source="created", cause=C_MLAPO),
)

NORM: tuple[Rule, ...] = (
    Rule("weight", "pd", "dim", "float", from_suffix="weight"),
    Rule("bias", "pd", "dim", "float", source="allocated", cause=C_NORMBIAS, when="norm_bias",
         note="AscendRMSNorm adds a bias when any description key contains 'norm.bias'"),
)
LAYERNORM_FP32: tuple[Rule, ...] = (
    Rule("weight", "F32", "dim", "float", from_suffix="weight"),
    Rule("bias", "F32", "dim", "float", from_suffix="bias"),
)
ROUTER: tuple[Rule, ...] = (
    Rule("weight", "gate", "E,H", "float", from_suffix="weight", note="AscendGateLinear, never quantized"),
    Rule("e_score_correction_bias", "F32", "E", "float", from_suffix="e_score_correction_bias", when="router_bias"),
)
EMBEDDING: tuple[Rule, ...] = (
    Rule("weight", "pd", "Vp/T,H", "float", from_suffix="weight", note="vocab padded to 64, TP-sharded"),
)

# §3.3 o_proj TP weight switch under DSA-CP
O_PROJ_POOL_QUANT = Rule("o_proj_full_pool", "I8", "Kf,H", "derived", source="created", cause=C_OPROJ,
                         note="one gather buffer shared by all layers")
O_PROJ_POOL_FLOAT = Rule("o_proj_full_pool", "pd", "Kf,H", "derived", source="created", cause=C_OPROJ,
                         note="one gather buffer shared by all layers")
O_PROJ_ACLNN_COPIES: tuple[Rule, ...] = tuple(
    Rule(f"{n}_full", "pd", "Kf", "derived", source="created", cause=C_OPROJ, note="per-layer TP switch copy")
    for n in ("aclnn_input_scale", "aclnn_input_scale_reciprocal", "aclnn_input_offset"))
O_PROJ_GATHER_INPUT = Rule("gather_input", "pd", "K,H", "derived", source="created", cause=C_OPROJ,
                           note="transposed contiguous copy of the TP shard (unquantized o_proj)")

# §3.2 other extras: indexer C8
INDEXER_C8: tuple[Rule, ...] = (
    Rule("q_rot", "F32", "ID,ID", "derived", source="created", cause=C_C8),
    Rule("k_rot", "F32", "ID,ID", "derived", source="created", cause=C_C8),
)

# Compressed-attention models (DeepSeek-V4 family, model-deepseek-v4.md §3.2): the gate is a
# ReplicatedLinear built with precast_fp32_weight=True, so it keeps the model-dtype weight and an fp32
# copy the router's F.linear reads (models/deepseek_v4/model.py:279-282, ops/linear.py:93-96@182b75ea)
ROUTER_PRECAST: tuple[Rule, ...] = (
    Rule("weight", "pd", "E,H", "float", from_suffix="weight", note="ReplicatedLinear, never quantized"),
    Rule("weight_fp32", "F32", "E,H", "derived", source="created", cause=C_FP32,
         note="precast_fp32_weight copy read by the fp32 router"),
    Rule("e_score_correction_bias", "F32", "E", "float", from_suffix="e_score_correction_bias", when="router_bias"),
)
# hash-routed layers: the token-id -> experts table, an int32 parameter (model.py:315-330; int64 in the HF release)
HASH_TABLE: tuple[Rule, ...] = (
    Rule("tid2eid", "I32", "V,K", "float", from_suffix="tid2eid", note="token id -> experts (hash routing)"),
)
