"""The op program of DeepSeek-V4's DSpark block drafter: one drafter step per engine step, K drafts at once.

Why its own program: DSpark is not K sequential MTP passes. Per step (vLLM-Ascend main ``182b75ea``):

1. **context**: the target layers' hidden states (``dspark_target_layer_ids``, concatenated [T, n H]) of
   every token the step ran go through ``main_proj`` + ``main_norm``, and each draft layer projects them
   to its window cache (``wkv``, ``kv_norm``, RoPE, scatter): ``combine_hidden_states`` and
   ``precompute_and_store_context_kv``, ``models/deepseek_v4/dspark.py:201-202, 239-253``;
2. **query block**: K query tokens per request (``sample_from_anchor``, the default: K, not 1 + K,
   ``spec_decode/dspark_proposer.py:42-46``) run once through the window-only draft layers (their MoE
   included), then ``hc_head`` (``dspark.py:255-279``) and the LM head on all K x requests rows;
3. **Markov head**: K autoregressive rounds on one row per request, each a ``markov_w1`` lookup, the
   ``markov_w2`` [V, rank] head and an argmax (``spec_decode/llm_base_proposer.py:1141-1158``).

The proposer never captures a graph (``dspark_proposer.py:76`` ``use_cuda_graph = False``), so its launches
are host time of every step (``Engine.drafter_eager``). The confidence head runs only with a dynamic
speculation config (``dynamic_spec_config``), which no tutorial or CI config sets; it is left out.

Multiplicity: everything but the Markov rounds runs once per step (``MULT_FIRST_MTP``: once when K >= 1);
a Markov round runs once as ``MULT_FIRST_MTP`` and K - 1 more times as ``MULT_LATER_MTP``, so the K
rounds re-read ``markov_w2`` K times, as the loop does.
"""
from __future__ import annotations

from typing import Any

from auditor_kernels import kinds as K

from . import ops as O
from .quant import FLOAT, scheme
from .tokens import DRAFT_BLOCK, MAIN, MTP_LATER, State, Tok


def dspark_step(b: Any, shard: bool) -> None:  # noqa: ARG001 (shard: the drafter runs on full tokens)
    """Emit the DSpark drafter's ops into builder ``b`` (after the main model's head)."""
    s = b.spec
    first = s.Lyr                       # the draft layers follow the main layers (mtp.0 .. mtp.{n-1})
    n_draft = s.mtp_layers
    b.mult = K.MULT_FIRST_MTP
    # 1. context: every token of the step, on every rank (the hidden states are full-token)
    ctx = Tok(MAIN)
    b.layers = [first]
    b.op(O.linear("dspark.main_proj", ctx, len(s.drafter_targets) * s.H, s.H, FLOAT, b.wb(first, "main_proj"),
                  "main_proj"))
    b.op(O.rms_norm("dspark.main_norm", ctx, s.H))
    latent = float(b.kv.row_bytes("latent"))
    for j in range(n_draft):
        L = first + j
        b.layers = [L]
        sa = scheme(b.recipe, "attn", True)
        b.op(O.linear(f"dspark{j}.context_wkv", ctx, s.H, s.head_dim, sa, b.wb(L, "self_attn.wkv"),
                      "self_attn.wkv"))
        b.op(O.rms_norm(f"dspark{j}.context_kv_norm", ctx, s.head_dim))
        b.op(O.vector(f"dspark{j}.context_kv_rope", "rope", ctx, s.Dr, 2, 4))
        b.op(O.vector(f"dspark{j}.context_swa_write", "cache_write", ctx, s.head_dim,
                      1.0 + latent / (2.0 * s.head_dim), 0))
    # 2. the query block: K queries per request, once through the draft layers
    blk = Tok(DRAFT_BLOCK)
    b.layers = [first]
    st = State(b.embed("dspark.", blk, False), None)
    for j in range(n_draft):
        L = first + j
        b.layers = [L]
        st = b.layer(L, s.layer_kinds[L], st, False, mtp_layer=True)
    # (the model-level ops count once: under a drafter's multiplicity an op runs once per layer it lists)
    b.layers = [first + n_draft - 1]
    b.op(O.vector("dspark.hc_head", "hc_head", st.hidden, s.residual_mult * s.H, 2, 4))
    b.head("dspark.", st, blk, "norm")
    # 3. the Markov head's K rounds, one row per request each
    row = Tok(MTP_LATER)
    vl = s.V_padded // b.tp
    for mode in (K.MULT_FIRST_MTP, K.MULT_LATER_MTP):
        b.mult = mode
        b.op(O.embedding("dspark.markov_w1", row, s.markov_rank, vl, b.wb(first, "markov_w1"), "markov_w1"))
        b.coll("all_reduce", "tp", row, s.markov_rank * 2, "dspark.markov_w1.out")
        b.op(O.linear("dspark.markov_w2", row, s.markov_rank, vl, FLOAT, b.wb(first, "markov_w2"), "markov_w2"))
        b.coll("all_gather", "tp", row, vl * 2, "dspark.markov_w2.out")
        b.op(O.vector("dspark.markov_add_argmax", "add", row, s.V_padded, 2, 2))
    b.layers = []
    b.mult = K.MULT_ALWAYS
