"""Plausibility caps: the one table of how large a config value or an option may be.

Every cap sits far above any real model or deployment (GLM-5.1: 78 layers, 256 experts, vocab
154,880; Kimi K2: 384 experts; Llama 4 Scout: 10M context) and far below what would make a report
absurd or a run take minutes or gigabytes. A value past its cap is refused with one line naming the
key or option, never clamped. The README's bad-input paragraph is this table.
"""
from __future__ import annotations

from dataclasses import dataclass

KiB = 1024
EiB = 1024 ** 6


@dataclass(frozen=True)
class Cap:
    lo: int
    hi: int
    why: str = ""


# config.json integer keys: (smallest, largest) accepted
CONFIG_INT_CAPS: dict[str, Cap] = {
    "hidden_size": Cap(1, 131_072),
    "num_hidden_layers": Cap(1, 1_024),
    "num_attention_heads": Cap(1, 1_024),
    "num_key_value_heads": Cap(1, 1_024),
    "vocab_size": Cap(1, 4_194_304),
    "head_dim": Cap(1, 4_096),
    "q_lora_rank": Cap(0, 131_072),
    "kv_lora_rank": Cap(0, 131_072),
    "qk_nope_head_dim": Cap(1, 4_096),
    "qk_rope_head_dim": Cap(1, 4_096),
    "v_head_dim": Cap(1, 4_096),
    "index_n_heads": Cap(0, 1_024),
    "index_head_dim": Cap(0, 4_096),
    "index_topk": Cap(1, 1_048_576),
    "topk_limit": Cap(1, 1_048_576),
    "index_topk_freq": Cap(1, 1_024),
    "index_skip_topk_offset": Cap(0, 1_024),
    "n_routed_experts": Cap(0, 4_096),
    "num_experts": Cap(0, 4_096),
    "intermediate_size": Cap(0, 1_048_576),
    "moe_intermediate_size": Cap(0, 1_048_576),
    "n_shared_experts": Cap(0, 64),
    "num_experts_per_tok": Cap(0, 4_096),
    "first_k_dense_replace": Cap(0, 1_024),
    "moe_layer_freq": Cap(0, 1_024),
    "num_nextn_predict_layers": Cap(0, 16),
    "max_position_embeddings": Cap(0, 16_777_216),
    "rope_scaling.original_max_position_embeddings": Cap(0, 16_777_216),
    # DeepSeek-V4-style structure (auditor/model/families/deepseek_v4.py)
    "hc_mult": Cap(0, 64),
    "o_groups": Cap(0, 1_024),
    "o_lora_rank": Cap(0, 131_072),
    "sliding_window": Cap(0, 16_777_216),
    "num_hash_layers": Cap(0, 1_024),
    # the DSpark drafter (model-deepseek-v4.md §1.6)
    "dspark_num_mtp_layers": Cap(0, 16),
    "dspark_markov_rank": Cap(0, 131_072),
}

# products that bound the size of a synthesized inventory (tensor rows ~ layers x experts x 3)
MAX_EXPERT_LAYERS = 65_536          # num_hidden_layers x n_routed_experts
MAX_ROPE_FACTOR = 1_024.0           # rope_scaling.factor: a finite number in (0, 1024]

# command-line options: (smallest, largest)
OPTION_CAPS: dict[str, Cap] = {
    "--tp": Cap(1, 65_536),
    "--dp": Cap(1, 65_536),
    "--ep": Cap(1, 65_536),
    "--pp": Cap(1, 1_024),
    "--block-size": Cap(0, 65_536),
    "--redundant-experts": Cap(0, 4_096),
    "--max-num-batched-tokens": Cap(1, 16_777_216),
    "--tokens": Cap(1, 16_777_216),
    "--context": Cap(0, 16_777_216),
    "--contexts": Cap(1, 16_777_216),
    "--batch": Cap(1, 65_536),
    "--mtp": Cap(0, 16),
    "--top": Cap(1, 100_000),
    "--dies": Cap(1, 8_192),
    "--prefill-batched-tokens": Cap(16, 1 << 20),
    "--simulate": Cap(0, 64),
    "--isl": Cap(1, 16_777_216),
    "--osl": Cap(1, 16_777_216),
    "--max-model-len": Cap(1, 16_777_216),
    "--max-num-seqs": Cap(1, 65_536),
    "--dcp": Cap(1, 65_536),
    "--hccl-buffsize": Cap(1, 1_048_576),
    "--mega-moe-max-tokens": Cap(0, 16_777_216),
    "--concurrency": Cap(1, 1_000_000),
    "--num-prompts": Cap(1, 1_000_000),
}

# real-valued options: finite, lo < value <= hi
FLOAT_OPTION_CAPS: dict[str, tuple[float, float]] = {
    "--gpu-memory-utilization": (0.0, 1.0),
    "--mtp-acceptance": (0.0, 1.0),
    "--ttft-ms": (0.0, 1e9),
    "--tpot-ms": (0.0, 1e9),
}
MAX_COMMAND_WORDS = 4_096          # words of one launch command (a shell script, a CI config's server_cmd)
MAX_WORLD = 65_536                  # tp x dp x pp ranks
MAX_SWEEP_CONFIGS = 10_000_000      # grid points of one `audit sweep`
MAX_SWEEP_PLANS = 256               # (tp, dp) plans of one sweep: each builds two programs (~10-20 ms)
MAX_SIZE_BYTES = EiB                # any size option (--observed, --budget, --shard-size)
SYNTH_MAX_FILES = 10_000            # `audit synth` writes more files only with --allow-many-files
