"""Sizes of the budget terms upstream vLLM measures in its profile run, which the spec gives no
formula for: every figure here is an estimate, named UNCONFIRMED, with the range the report tests
the verdict at (``Vllm.term_ranges``). The one term the spec derives is the FlashMLA sparse
prefill workspace (Part B §4.5: max_model_len x 5 tokens x 576 x 2 B, about 900 MB at 163,840).
"""
from __future__ import annotations

from typing import Any

from ...units import GiB, MiB

#: FlashMLA sparse prefill workspace: tokens per max_model_len token, head size 576, bf16 (Part B §4.5)
PREFILL_WS_TOKENS_PER_LEN, PREFILL_WS_HEAD, PREFILL_WS_BYTES = 5, 576, 2
#: profile-run activation of the forward at T tokens, per token per hidden unit: FITTED on GPU-01 (GLM-5.2-FP8,
#: 8 x B200, v0.28, bf16 KV, T 8,192, max_model_len 32,768): 796,160 tokens = 12,440 blocks of 5,928,192 B leave
#: 6.745-6.750 GiB for the profiled terms beside the ledger's 88.65 GiB weights; the other terms here take
#: 2.40 GiB, so the forward holds 4.34 GiB = 92.7 B x 8,192 x 6,144. One observation: the split between this
#: term, non-torch and the graph estimate is not measured (UNCONFIRMED)
FORWARD_BYTES_PER_TOKEN_HIDDEN = 92
ACT_LOW, ACT_HIGH = 0.5, 2.0
#: r.non_torch_increase (cuBLAS / DeepGEMM / FlashInfer workspaces; UNCONFIRMED)
NON_TORCH_TERMS = {"non-torch increase (workspaces, UNCONFIRMED)": 512 * MiB}
#: Estimated CUDA graph memory: GPU-04's 1.58 GiB (DeepSeek-V4-Flash TP2, 68 graphs; UNCONFIRMED elsewhere)
CUDA_GRAPH_BYTES = int(1.58 * GiB)
CUDA_GRAPH_RANGE = (GiB // 2, 3 * GiB)
#: CUDA context plus NCCL / custom all-reduce buffers, allocated before the snapshot (UNCONFIRMED)
HELD_BEFORE_SNAPSHOT_BYTES = GiB

#: DeepSeek-V4's bf16 prefill kv-gather workspace the dummy run pre-reserves (PREFILL_CHUNK_SIZE = 4 requests,
#: vllm/models/deepseek_v4/attention.py@e6643eca): max_workspace_area = 4 x (cdiv(max_model_len, ratio) + window +
#: max_num_batched_tokens) rows of head_dim (sparse_swa.py get_prefill_chunk_plan, index id 61399074654), the
#: largest for the smallest ratio; whether v0.25 reserves the same is UNCONFIRMED
DSV4_PREFILL_CHUNK, DSV4_WS_BYTES = 4, 2

#: MTP acceptance of GLM on upstream vLLM: GPU-19 (vllm-project/recipes GLM/GLM5.md @8959cf6, 2026-04-14):
#: GLM-5.1-FP8 on 8 x H200, TP8, MTP 3, vLLM 0.19.0, random 8000/1024 at 10 req/s, 32 prompts, logs an
#: acceptance length of 1.64 tokens per step. One mean at one K and one release: the split over positions
#: is taken geometric (1 + a + a^2 + a^3 = 1.64), and the figure is used for every modelled release
GLM_MTP_CUDA_LENGTH, GLM_MTP_CUDA_K = 1.64, 3
GLM_MTP_CUDA_SOURCE = (f"GLM-5.1-FP8 MTP {GLM_MTP_CUDA_K} on 8 x H200, vLLM 0.19: acceptance length "
                       f"{GLM_MTP_CUDA_LENGTH}, vllm-project/recipes GLM/GLM5.md @8959cf6 (GPU-19); geometric "
                       "split over positions assumed")


TERM_DOCS = {
    "FlashMLA sparse prefill workspace": "max_model_len x 5 x 576 x 2 B (Part B §4.5)",
    "DeepSeek-V4 prefill kv-gather workspace": "4 x (cdiv(max_model_len, 4) + window + T) x head_dim x 2 B "
                                               "(sparse_swa.py get_prefill_chunk_plan)",
    "profile-run forward activations": f"T x H x {FORWARD_BYTES_PER_TOKEN_HIDDEN} B (fitted on GPU-01)",
    "sampler logits (fp32)": "max_num_seqs x (1 + K) x vocab x 4 B (UNCONFIRMED)",
}

ASSUMPTIONS = (
    "budget = gmu x total - weights - peak activation - non-torch - CUDA graph estimate (gpu_worker.py "
    "determine_available_memory; the graph term from v0.21.0)",
    f"activation peak estimated as the FlashMLA sparse prefill workspace + T x H x {FORWARD_BYTES_PER_TOKEN_HIDDEN} B "
    f"(fitted on GPU-01, GLM-5.2-FP8 8 x B200) + fp32 sampler logits; range {ACT_LOW:g}-{ACT_HIGH:g} x (UNCONFIRMED)",
    f"non-torch increase {NON_TORCH_TERMS[next(iter(NON_TORCH_TERMS))] / MiB:.0f} MiB; CUDA graph estimate "
    f"{CUDA_GRAPH_BYTES / GiB:.2f} GiB (GPU-04's figure; UNCONFIRMED for other models and GPUs)",
    f"NCCL / custom all-reduce buffers and the CUDA context ({HELD_BEFORE_SNAPSHOT_BYTES / GiB:.0f} GiB, UNCONFIRMED) "
    "are allocated before the memory snapshot: outside the budget, inside the 1 - gmu headroom",
)


#: the activation line for a compressed-attention model (replaces ASSUMPTIONS[1])
COMPRESSED_ACTIVATION_ASSUMPTION = (
    "activation peak estimated as DeepSeek-V4's prefill kv-gather workspace (4 x (cdiv(max_model_len, 4) + window + "
    f"T) x head_dim x 2 B, sparse_swa.py) + T x H x {FORWARD_BYTES_PER_TOKEN_HIDDEN} B (fitted on GPU-01, GLM-5.2-FP8 "
    f"8 x B200; the hc_mult-wide residual not scaled) + fp32 sampler logits; range {ACT_LOW:g}-{ACT_HIGH:g} x "
    "(UNCONFIRMED)")


def assumptions(spec: Any = None) -> tuple[str, ...]:
    if spec is not None and getattr(spec, "layer_kinds", ()):
        return (ASSUMPTIONS[0], COMPRESSED_ACTIVATION_ASSUMPTION) + ASSUMPTIONS[2:]
    return ASSUMPTIONS


def activation_terms(spec: Any, *, tokens: Any, seqs: Any, mtp: Any = 0, max_model_len: int | None = None) -> dict:
    """Named bytes of the profile run's torch peak increase (numpy-broadcastable over tokens/seqs/mtp)."""
    L = max_model_len if max_model_len is not None else spec.max_position
    out = {}
    if spec.layer_kinds:
        ratios = [k.compress_ratio for k in spec.layer_kinds if k.compress_ratio > 1]
        if ratios:
            rows = DSV4_PREFILL_CHUNK * (-(-L // min(ratios)) + spec.sliding_window + tokens)
            out["DeepSeek-V4 prefill kv-gather workspace"] = rows * spec.head_dim * DSV4_WS_BYTES
    elif spec.dsa:
        out["FlashMLA sparse prefill workspace"] = L * PREFILL_WS_TOKENS_PER_LEN * PREFILL_WS_HEAD * PREFILL_WS_BYTES
    out["profile-run forward activations"] = tokens * spec.H * FORWARD_BYTES_PER_TOKEN_HIDDEN
    out["sampler logits (fp32)"] = seqs * (1 + mtp) * spec.V * 4
    return out
