"""What upstream vLLM holds on a CUDA rank for each kind of module and scheme, after
``process_weights_after_loading`` (engine-vllm-cuda.md Part B §2), as ``Rule`` rows.

* FP8 block linears (``Fp8LinearMethod``, block mode): fp8 e4m3 ``[N, K]`` row-major plus fp32
  ``weight_scale_inv`` ``[cdiv(N,128), cdiv(K,128)]``. UE8M0 requantization rewrites the payload in
  place (same bytes). On SM100 with DeepGEMM (N % 64 == 0, K % 128 == 0) the scales become packed
  int32 UE8M0, one row per output row: ``[N, cdiv(K, 512)]`` (shape derived from DeepGEMM
  semantics, exact padding UNCONFIRMED, Part B §2.2). The condition names ``fp32_block_scales`` /
  ``ue8m0_packed_scales`` are set per module by ``CudaMaterializer``.
* kv_b_proj is kept (not disposed on CUDA) and W_UK_T / W_UV are views of one bf16 dequantized
  ``[Hl*(Dn+Dv), Lkv]`` tensor (``mla_attention.py`` process_weights_after_loading).
* The router gate (``GateLinear``, no quant_config) is bf16 ``[E, H]``, its correction bias fp32.
* The indexer's k_norm is a LayerNorm in the model dtype, weight and bias.
* DeepSeek-V4 (compressed attention; the HF release): FP8 block linears as above (fused_wqa_wkv
  replicated, wq_b / wo_a column, wo_b row, indexer wq_b replicated, shared experts TP-sharded),
  compressor fused_wkv_wgate and indexer weights_proj bf16 replicated (quant_config=None), MXFP4
  routed experts, the gate bf16 with an fp32 bias or an int32 tid2eid table, the hc_* parameters
  fp32 (``vllm/models/deepseek_v4/attention.py``@e6643eca, ``nvidia/model.py``@3296c77f).
Shape variables as in the generic materializer (``N``/``K`` per rank, ``El``, ``Ip``, ``H``, ``Hl``, ...).
"""
from __future__ import annotations

from ..bridge import C_BUFFERS, C_KVB, Rule

#: per-module conditions (CudaMaterializer.emit)
FP32_SCALES, UE8M0_SCALES = "fp32_block_scales", "ue8m0_packed_scales"

LINEAR: dict[str, tuple[Rule, ...]] = {
    "FLOAT": (Rule("weight", "pd", "N,K", "float", from_suffix="weight"),),
    "FP8_BLOCK": (
        Rule("weight", "stored", "N,K", "int8", from_suffix="weight", note="fp8 e4m3, UE8M0-requantized in place"),
        Rule("weight_scale_inv", "F32", "cdiv(N,128),cdiv(K,128)", "scale", from_suffix="weight_scale_inv",
             when=FP32_SCALES),
        Rule("weight_scale_inv", "I32", "N,cdiv(K,512)", "scale", from_suffix="weight_scale_inv", when=UE8M0_SCALES,
             note="SM100 DeepGEMM: packed UE8M0 per output row (UNCONFIRMED shape)"),
    ),
}

#: MXFP4 routed experts (the DeepSeek-V4 HF release, expert_dtype fp4): FusedMoE + Mxfp4MoEMethod, TP-sharded
#: over the intermediate dimension: w13 uint8 [El, 2*Ip, H/2] + UE8M0 uint8 scales [El, 2*Ip, H/32], w2 uint8
#: [El, H, Ip/2] + [El, H, Ip/32] (the shapes DeepseekV4MegaMoEExperts registers, vllm/models/deepseek_v4/nvidia/
#: model.py@3296c77f; the loader views the F8_E8M0 scales as uint8). Whether the DEEPGEMM_MXFP4 backend GPU-04
#: logs re-lays them out with other bytes is UNCONFIRMED (modelled as the same bytes)
_MXFP4 = (
    Rule("w13_weight", "U8", "El,2*Ip,H//2", "int8", from_suffix="weight", note="fp4 e2m1, 2 per byte"),
    Rule("w2_weight", "U8", "El,H,Ip//2", "int8", from_suffix="weight", note="fp4 e2m1, 2 per byte"),
    Rule("w13_weight_scale", "U8", "El,2*Ip,H//32", "scale", from_suffix="weight_scale", note="UE8M0 per 32"),
    Rule("w2_weight_scale", "U8", "El,H,Ip//32", "scale", from_suffix="weight_scale", note="UE8M0 per 32"),
)

MOE: dict[str, tuple[Rule, ...]] = {
    "MXFP4": _MXFP4,
    "FLOAT": (
        Rule("w13_weight", "pd", "El,2*Ip,H", "float", from_suffix="weight"),
        Rule("w2_weight", "pd", "El,H,Ip", "float", from_suffix="weight"),
    ),
    # Fp8MoEMethod: scales stay fp32 blocks; the FlashInfer/DeepGEMM re-layouts keep the byte count
    # (UNCONFIRMED, Part B §2.4)
    "FP8_BLOCK": (
        Rule("w13_weight", "stored", "El,2*Ip,H", "int8", from_suffix="weight"),
        Rule("w2_weight", "stored", "El,H,Ip", "int8", from_suffix="weight"),
        Rule("w13_weight_scale_inv", "F32", "El,2*cdiv(Ip,128),cdiv(H,128)", "scale", from_suffix="weight_scale_inv"),
        Rule("w2_weight_scale_inv", "F32", "El,cdiv(H,128),cdiv(Ip,128)", "scale", from_suffix="weight_scale_inv"),
    ),
}

KV_B: tuple[Rule, ...] = (
    Rule("W_UK_T+W_UV", "pd", "Hl*(Dn+Dv),Lkv", "derived", source="created", cause=C_KVB,
         note="bf16 dequant of kv_b_proj; W_UK_T [Hl,Dn,Lkv] and W_UV [Hl,Lkv,Dv] are views of it"),
)

NORM: tuple[Rule, ...] = (Rule("weight", "pd", "dim", "float", from_suffix="weight"),)
#: the generic walk's name for the indexer k_norm table; on CUDA it is a model-dtype LayerNorm
LAYERNORM_FP32: tuple[Rule, ...] = (
    Rule("weight", "pd", "dim", "float", from_suffix="weight"),
    Rule("bias", "pd", "dim", "float", from_suffix="bias"),
)
ROUTER: tuple[Rule, ...] = (
    Rule("weight", "pd", "E,H", "float", from_suffix="weight", note="GateLinear, no quant_config"),
    Rule("e_score_correction_bias", "F32", "E", "float", from_suffix="e_score_correction_bias", when="router_bias"),
)
#: hash-routed layers (DeepSeek-V4): ``gate.tid2eid`` int32 [V, K] (int64 only under the MegaMoE backend;
#: int64 in the HF release; DeepseekV4MoE.__init__, vllm/models/deepseek_v4/nvidia/model.py@3296c77f)
HASH_TABLE: tuple[Rule, ...] = (
    Rule("tid2eid", "I32", "V,K", "float", from_suffix="tid2eid", note="token id -> experts (hash routing)"),
)
EMBEDDING: tuple[Rule, ...] = (
    Rule("weight", "pd", "Vp/T,H", "float", from_suffix="weight", note="vocab padded to 64, TP-sharded"),
)
MLAPO: tuple[Rule, ...] = ()
#: model buffers counted with the weights ("Model loading took" is a torch-allocated delta)
BUFFERS: tuple[Rule, ...] = (
    Rule("rotary_emb.cos_sin_cache", "pd", "P,Dr", "derived", source="created", cause=C_BUFFERS, when="mla",
         note="one per rope key, shared (size and dtype UNCONFIRMED)"),
    Rule("topk_indices_buffer", "I32", "T,topk", "derived", source="created", cause=C_BUFFERS, when="dsa",
         note="DeepseekV2Model.__init__, shared with the MTP drafter"),
)
#: model buffers of a compressed-attention model (DeepseekV4Model.__init__, vllm/models/deepseek_v4/nvidia/
#: model.py@3296c77f): the shared top-k buffer, the pre-hc_head residual kept for the MTP draft (always on the
#: last PP rank) and one rotary cache per RoPE base (build_deepseek_v4_rope -> get_rope, cached per key:
#: rope_theta and compress_rope_theta, yarn original_max x factor rows; dtype UNCONFIRMED, the model dtype)
COMPRESSED_BUFFERS: tuple[Rule, ...] = (
    Rule("topk_indices_buffer", "I32", "T,topk", "derived", source="created", cause=C_BUFFERS, when="dsa",
         note="[max_num_batched_tokens, index_topk], shared with the MTP drafter"),
    Rule("_mtp_hidden_buffer", "pd", "T,hcH", "derived", source="created", cause=C_BUFFERS,
         note="[max_num_batched_tokens, hc_mult x H], allocated with or without a drafter"),
    Rule("rotary_emb.cos_sin_cache", "pd", "R,P,Dr", "derived", source="created", cause=C_BUFFERS,
         note="one per RoPE base (size and dtype UNCONFIRMED)"),
)
