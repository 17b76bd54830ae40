"""Built-in model configs, written from the published facts (engine spec reference table,
TensorCast anchor §2). They are HF-config-shaped dicts so that presets and real checkpoints go
through the same ``spec_from_config`` path."""
from __future__ import annotations

from typing import Any

from ..errors import AuditInputError
from .config import spec_from_config
from .spec import ModelSpec

_GLM5: dict[str, Any] = {
    "architectures": ["GlmMoeDsaForCausalLM"],
    "model_type": "glm_moe_dsa",
    "dtype": "bfloat16",
    "hidden_size": 6144,
    "num_hidden_layers": 78,
    "num_attention_heads": 64,
    "num_key_value_heads": 64,
    "vocab_size": 154880,
    "q_lora_rank": 2048,
    "kv_lora_rank": 512,
    "qk_nope_head_dim": 192,
    "qk_rope_head_dim": 64,
    "v_head_dim": 256,
    "index_n_heads": 32,
    "index_head_dim": 128,
    "index_topk": 2048,
    "indexer_rope_interleave": True,
    "n_routed_experts": 256,
    "n_shared_experts": 1,
    "num_experts_per_tok": 8,
    "moe_intermediate_size": 2048,
    "intermediate_size": 12288,
    "first_k_dense_replace": 3,
    "moe_layer_freq": 1,
    "num_nextn_predict_layers": 1,
    "topk_method": "noaux_tc",
    "scoring_func": "sigmoid",
    "n_group": 1,
    "topk_group": 1,
    "routed_scaling_factor": 2.5,
    "norm_topk_prob": True,
    "max_position_embeddings": 202752,
    "rope_parameters": {"rope_theta": 1000000, "rope_type": "default"},
    "rms_norm_eps": 1e-05,
    "tie_word_embeddings": False,
}

_DSV32: dict[str, Any] = {
    "architectures": ["DeepseekV32ForCausalLM"],
    "model_type": "deepseek_v32",
    "torch_dtype": "bfloat16",
    "hidden_size": 7168,
    "num_hidden_layers": 61,
    "num_attention_heads": 128,
    "num_key_value_heads": 128,
    "vocab_size": 129280,
    "q_lora_rank": 1536,
    "kv_lora_rank": 512,
    "qk_nope_head_dim": 128,
    "qk_rope_head_dim": 64,
    "v_head_dim": 128,
    "index_n_heads": 64,
    "index_head_dim": 128,
    "index_topk": 2048,
    "n_routed_experts": 256,
    "n_shared_experts": 1,
    "num_experts_per_tok": 8,
    "moe_intermediate_size": 2048,
    "intermediate_size": 18432,
    "first_k_dense_replace": 3,
    "moe_layer_freq": 1,
    "num_nextn_predict_layers": 1,
    "topk_method": "noaux_tc",
    "scoring_func": "sigmoid",
    "n_group": 8,
    "topk_group": 4,
    "routed_scaling_factor": 2.5,
    "max_position_embeddings": 163840,
    "rope_scaling": {"type": "yarn", "factor": 40, "original_max_position_embeddings": 4096},
    "rms_norm_eps": 1e-06,
    "tie_word_embeddings": False,
    "quantization_config": {"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128],
                            "activation_scheme": "dynamic", "scale_fmt": "ue8m0"},
}

# DeepSeek-V3 / R1 (HF deepseek-ai/DeepSeek-V3 config.json): DeepSeek-V3.2's structure without the
# lightning indexer (no index_* keys), so MLA attention runs as FusedInferAttentionScore, not SFA.
_DSV3: dict[str, Any] = {
    **{k: v for k, v in _DSV32.items() if not k.startswith("index_")},
    "architectures": ["DeepseekV3ForCausalLM"],
    "model_type": "deepseek_v3",
}

# A dense, non-MLA model: exercises the plain tensor-parallel fallback.
_DENSE_32B: dict[str, Any] = {
    "architectures": ["Qwen3ForCausalLM"],
    "model_type": "qwen3",
    "torch_dtype": "bfloat16",
    "hidden_size": 5120,
    "num_hidden_layers": 64,
    "num_attention_heads": 64,
    "num_key_value_heads": 8,
    "head_dim": 128,
    "intermediate_size": 25600,
    "vocab_size": 151936,
    "max_position_embeddings": 40960,
    "tie_word_embeddings": False,
}

# GLM-5.2 (HF zai-org/GLM-5.2, ModelScope ZhipuAI/GLM-5.2, linked from vllm-ascend
# docs/source/tutorials/models/GLM5.2.md:5,19@182b75ea). The raw config.json was not retrievable; the
# fields below agree across independent public ports (llama.cpp PR #25407 citing config.json#L26
# indexer_types, tt-metal PR #49315, ATOM PR #1260, sglang-jax PR #1384, mlx-lm #1418): the GLM-5.1
# architecture with IndexCache (index_topk_freq 4, index_skip_topk_offset 3: 21 "full" + 57 "shared"
# layers, full = 0, 1, 2, 6, 10, ..., 74), 1M positions, rope_theta 8e6. vocab_size 154880 as the GLM-5.x
# family (UNCONFIRMED for 5.2).
_GLM52: dict[str, Any] = {
    **_GLM5,
    "max_position_embeddings": 1048576,
    "rope_parameters": {"rope_theta": 8000000, "rope_type": "default"},
    "index_topk_freq": 4,
    "index_skip_topk_offset": 3,
    "index_topk_pattern": None,
    "indexer_types": ["full" if i < 3 or (i + 1 - 3) % 4 == 0 else "shared" for i in range(78)],
    "index_share_for_mtp_iteration": True,
    "moe_router_dtype": "float32",
}

# DeepSeek-V4-Flash / -Pro (model-deepseek-v4.md §1.1, §1.2): per-layer compress ratios (0 = window only,
# 4 = compressed + lightning indexer, 128 = compressed), MTP layers after the main ones; hyper-connections
# (hc_mult 4), grouped output projection, hash routing in the first 3 layers. The checkpoints the
# vLLM-Ascend tutorials serve are msModelSlim's W8A8 (Flash) and W4A8 (Pro) (§2.2).
_DSV4_COMMON: dict[str, Any] = {
    "architectures": ["DeepseekV4ForCausalLM"],
    "model_type": "deepseek_v4",
    "torch_dtype": "bfloat16",
    "num_key_value_heads": 1,
    "head_dim": 512,
    "qk_rope_head_dim": 64,
    "o_lora_rank": 1024,
    "sliding_window": 128,
    "index_n_heads": 64,
    "index_head_dim": 128,
    "n_shared_experts": 1,
    "num_experts_per_tok": 6,
    "num_hash_layers": 3,
    "scoring_func": "sqrtsoftplus",
    "topk_method": "noaux_tc",
    "norm_topk_prob": True,
    "swiglu_limit": 10.0,
    "hc_mult": 4,
    "hc_sinkhorn_iters": 20,
    "hc_eps": 1e-06,
    "num_nextn_predict_layers": 1,
    "vocab_size": 129280,
    "rms_norm_eps": 1e-06,
    "rope_theta": 10000,
    "compress_rope_theta": 160000,
    "rope_scaling": {"type": "yarn", "factor": 16, "original_max_position_embeddings": 65536,
                     "beta_fast": 32, "beta_slow": 1},
    "max_position_embeddings": 1048576,
    "tie_word_embeddings": False,
    # the HF release's routed-expert format (both real configs); read only by the fp8-block recipe
    "expert_dtype": "fp4",
}
_DSV4_FLASH: dict[str, Any] = {
    **_DSV4_COMMON,
    "hidden_size": 4096, "num_hidden_layers": 43, "num_attention_heads": 64, "q_lora_rank": 1024,
    "o_groups": 8, "index_topk": 512, "n_routed_experts": 256, "moe_intermediate_size": 2048,
    "routed_scaling_factor": 1.5,
    "compress_ratios": [0, 0] + [4, 128] * 20 + [4, 0],
}
_DSV4_PRO: dict[str, Any] = {
    **_DSV4_COMMON,
    "hidden_size": 7168, "num_hidden_layers": 61, "num_attention_heads": 128, "q_lora_rank": 1536,
    "o_groups": 16, "index_topk": 1024, "n_routed_experts": 384, "moe_intermediate_size": 3072,
    "routed_scaling_factor": 2.5,
    "compress_ratios": [128, 128] + [4, 128] * 29 + [4, 0],
}

# DeepSeek-V4-Flash-0731, the DSpark checkpoint (model-deepseek-v4.md §1.1, §1.6): Flash with 46 compress ratios
# (43 main layers + 3 window-only DSpark draft layers), dspark_target_layer_ids [40, 41, 42] and
# dspark_markov_rank 256 -- from a single third-party copy of its config.json, UNCONFIRMED; dspark_num_mtp_layers
# is the engine's default 3 (models/deepseek_v4/dspark.py:65-200@182b75ea). Its drafter is DSpark, not MTP, so
# num_nextn_predict_layers is left out (UNCONFIRMED whether the real config carries it). The A2 tutorial's
# Flash-DSpark-w4a8-test checkpoint is read as this structure too (UNCONFIRMED).
_DSV4_FLASH_0731: dict[str, Any] = {
    **{k: v for k, v in _DSV4_FLASH.items() if k != "num_nextn_predict_layers"},
    "compress_ratios": [0, 0] + [4, 128] * 20 + [4, 0, 0, 0],
    "dspark_target_layer_ids": [40, 41, 42],
    "dspark_markov_rank": 256,
}

PRESETS: dict[str, dict[str, Any]] = {
    "glm-5.1": {**_GLM5, "transformers_version": "5.4.0"},
    "glm-5": {**_GLM5, "transformers_version": "5.0.2.dev0"},
    "glm-5.2": _GLM52,
    "deepseek-v3.2": _DSV32,
    "deepseek-v3": _DSV3,
    "dense-32b": _DENSE_32B,
    "deepseek-v4-flash": _DSV4_FLASH,
    "deepseek-v4-flash-0731": _DSV4_FLASH_0731,
    "deepseek-v4-pro": _DSV4_PRO,
}



#: where a preset's facts are less than confirmed: said wherever the preset is used (``ModelSource.describe``)
PRESET_NOTES: dict[str, str] = {
    "deepseek-v4-flash-0731": "its DSpark fields and 46 compress ratios come from one third-party copy of the "
                              "config.json (model-deepseek-v4.md §1.1, UNCONFIRMED)",
}


def preset_names() -> list[str]:
    return sorted(PRESETS)


def preset_config(name: str) -> dict[str, Any]:
    key = name.lower()
    if key not in PRESETS:
        raise AuditInputError(name, f"not a model directory and not a built-in preset "
                                    f"(presets: {', '.join(preset_names())})")
    return dict(PRESETS[key])


def preset_spec(name: str) -> ModelSpec:
    return spec_from_config(preset_config(name), name=name.lower(), where=f"preset {name}")
