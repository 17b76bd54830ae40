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

MOE: dict[str, tuple[Rule, ...]] = {
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
