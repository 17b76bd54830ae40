"""The op program of a compressed-attention decoder layer (DeepSeek-V4 family), per its LayerKind.

model-deepseek-v4.md §5.2 (TP path) and §5.3 (DSA-CP), main ``182b75ea``. Per layer: mHC pre (mix the
``hc`` residual copies into one [T, H] input), the Q/KV prolog (wq_a, q_norm, wq_b; wkv, kv_norm, RoPE,
the window cache write), the compressor of a compressed layer (wkv / wgate over the hidden, one row per
``c`` tokens into its cache), the lightning indexer of a compress-4 layer (its own wq_b, Hadamard,
compressor, weights_proj; scores over every compressed key, top-k), sparse attention over the window
plus the top-k compressed rows (compress-4) or every compressed row (compress-128), the grouped output
projection (wo_a per group, wo_b row-parallel + TP all-reduce), mHC post; then the same around the MoE.

FLOPs (§5.4, per token): wq_a 2 H Qr, wq_b 2 Qr NH D / TP, wkv 2 H D, compressor 2 x 2 coff D H, indexer
2 Qr IH ID + 2 H IH + compressor + Hadamard 2 IH ID^2, scores 2 IH ID L / 4, attention 4 D n(L) NH / TP with
n = min(W, L) + min(k_top, L/4) (c4), min(W, L) + L/128 (c128), min(W, L) (window only), wo_a 2 NH D R / TP,
wo_b 2 G R H / TP. DSA-CP (prefill and decode alike) runs the query side (q projections, indexer scores,
attention, wo) on this rank's 1/TP of the tokens with every head and the KV side (wkv, compressors,
indexer keys) on all tokens; prefill gathers wo_a / wo_b whole into the pools (the TP weight switch) and
all-gathers the [t_l, H] output; decode sends the local tokens' heads back by all-to-all to the TP o_proj.
"""
from __future__ import annotations

from typing import Any

from auditor_kernels import kinds as K

from ..model.families.deepseek_v4 import coff, mix_outputs
from . import ops as O
from .quant import FLOAT, scheme
from .tokens import State, Tok

#: Sinkhorn normalisations of the comb mix per hc_pre (config hc_sinkhorn_iters)
SINKHORN_ITERS = 20


def _hc_pre(b: Any, name: str, x: Tok, hc: int, w: float) -> None:
    """mHC pre: [T, hc*H] x fn^T -> 24 mixes (fp32), Sinkhorn on the comb, weighted sum to [T, H]."""
    s = b.spec
    b.op(O.vector(f"{name}.residual_copy", "copy", x, hc * s.H, 2, 0))
    b.op(O.linear(f"{name}.mix", x, hc * s.H, mix_outputs(hc), FLOAT, w, "layer", out_bytes=4.0, dtype="F32"))
    b.op(O.vector(f"{name}.sinkhorn", "sinkhorn", x, hc * hc, 1, 4 * SINKHORN_ITERS))
    b.op(O.vector(f"{name}.reduce", "hc_pre", x, hc * s.H, 1.5, 2))


def _hc_post(b: Any, name: str, x: Tok, hc: int) -> None:
    """mHC post: y = post x + comb . residual over the hc copies -> [T, hc, H]."""
    s = b.spec
    b.op(O.vector(name, "hc_post", x, hc * s.H, 3, 2 * hc))


def _compressor(b: Any, L: int, name: str, x: Tok, ratio: int, d: int, key_bytes: float) -> None:
    """wkv and wgate over the hidden (one [T, coff d] pair), the fused compress op and the cache write of
    the new rows (one per ``ratio`` tokens)."""
    s = b.spec
    w = coff(ratio) * d                       # overlapping windows at compress-4
    b.op(O.linear(f"{name}.wkv_wgate", x, s.H, 2 * w, FLOAT,
                  b.wb(L, f"{name}.wkv") + b.wb(L, f"{name}.wgate"), f"{name}.wkv+wgate"))
    b.op(O.vector(f"{name}.compress", "compressor", x, w, 2, 6))
    b.op(O.vector(f"{name}.cache_write", "cache_write", x, max(1, d // ratio), 1.0 + key_bytes / (2.0 * d), 0))


def compressed_layer(b: Any, L: int, kind: Any, st: State, shard: bool, mtp_layer: bool) -> State:
    """One decoder layer of a compressed-attention model; the residual stream stays full-token
    (main keeps it replicated between layers, §7.1 row 2)."""
    s, lay, tp, plan = b.spec, b.lay, b.tp, b.plan
    hc = s.residual_mult
    x = st.hidden
    sa = scheme(b.recipe, "attn", False)
    hcw = b.wb(L, "layer") / 2            # hc_attn_* and hc_ffn_* parameters, one half each
    _hc_pre(b, "hc_attn", x, hc, hcw)
    b.op(O.rms_norm("input_layernorm", x, s.H))
    D, Dr, NH, G, R = s.head_dim, s.Dr, s.NH, s.o_groups, s.o_lora_rank
    cp = lay.dsa_cp and tp > 1
    q = x.sliced() if cp else x           # DSA-CP: the query side on this rank's share of the tokens
    if cp:
        b.op(O.layout_op("self_attn.token_slice", x, q, (("T", s.H),), (("U", s.H),)))
    hl = NH if cp else NH // tp
    latent, idx_key = float(b.kv.row_bytes("latent")), float(b.kv.row_bytes("indexer"))
    # Q: wq_a (replicated), q_norm, wq_b (TP columns, or whole under DSA-CP)
    b.op(O.linear("self_attn.wq_a", q, s.H, s.Qr, sa, b.wb(L, "self_attn.wq_a"), "self_attn.wq_a"))
    b.op(O.rms_norm("self_attn.q_norm", q, s.Qr))
    b.op(O.linear("self_attn.wq_b", q, s.Qr, hl * D, sa, b.wb(L, "self_attn.wq_b"), "self_attn.wq_b"))
    b.op(O.vector("self_attn.q_rms_rope", "rope", q, hl * D, 2, 6))
    # KV: one latent row per token on every rank (replicated head), into the window cache
    b.op(O.linear("self_attn.wkv", x, s.H, D, sa, b.wb(L, "self_attn.wkv"), "self_attn.wkv"))
    b.op(O.rms_norm("self_attn.kv_norm", x, D))
    b.op(O.vector("self_attn.kv_rope", "rope", x, Dr, 2, 4))
    b.op(O.vector("self_attn.swa_cache_write", "cache_write", x, D, 1.0 + latent / (2.0 * D), 0))
    c = kind.compress_ratio
    hq = b._query_rows(q)
    if kind.indexer:
        IH, ID = s.IH, s.ID
        b.op(O.linear("self_attn.indexer.wq_b", q, s.Qr, IH * ID, sa, b.wb(L, "self_attn.indexer.wq_b"),
                      "self_attn.indexer.wq_b"))
        b.op(O.bmm("self_attn.indexer.q_hadamard", q, IH, ID, ID, 0.0, None))
        _compressor(b, L, "self_attn.indexer.compressor", x, c, ID, idx_key)
        b.op(O.linear("self_attn.indexer.weights_proj", q, s.H, IH, FLOAT, b.wb(L, "self_attn.indexer.weights_proj"),
                      "self_attn.indexer.weights_proj"))
        kp = b.path
        b.op(O.indexer_score("self_attn.indexer.score", hq, IH, ID, idx_key, kp.indexer_tile(IH),
                             kp.indexer_vec_per_head_total(IH), "I8", ratio=c))
        b.op(O.indexer_topk("self_attn.indexer.topk", hq, s.topk_tokens, kp.topk_per_key, kp.topk_per_kept,
                            ratio=c))
    if c:
        _compressor(b, L, "self_attn.compressor", x, c, D, latent)
    # sparse attention: the window (every layer) and the compressed rows (top-k of them at c = 4, all at c = 128),
    # one row = one 512-wide latent serving as K and V
    b.op(O.sfa("self_attn.window_attention", hq, hl, D, 0, float(s.sliding_window), 1.0, latent))
    if c:
        cap = float(s.topk_tokens) if kind.indexer else K.NO_CAP
        b.op(O.sfa("self_attn.compressed_attention", hq, hl, D, 0, cap, 1.0, latent, ratio=c))
    b.op(O.vector("self_attn.o_inverse_rope", "rope", q, hl * Dr, 2, 4))
    a = _output(b, L, x, q, cp, hl)
    _hc_post(b, "hc_attn_post", a, hc)
    # MoE block, between its own mHC pre / post
    _hc_pre(b, "hc_ffn", a, hc, hcw)
    b.op(O.rms_norm("post_attention_layernorm", a, s.H))
    out = b.moe(L, a, mtp_layer)
    _hc_post(b, "hc_ffn_post", out, hc)
    return State(out, None)


def _output(b: Any, L: int, x: Tok, q: Tok, cp: bool, hl: int) -> Tok:  # noqa: ARG001 (hl: the attention's)
    """The grouped low-rank output projection: wo_a per group (batched), wo_b row-parallel."""
    s, tp = b.spec, b.tp
    D, NH, G, R = s.head_dim, s.NH, s.o_groups, s.o_lora_rank
    wa, wb_ = b.wb(L, "self_attn.wo_a"), b.wb(L, "self_attn.wo_b")
    if cp and b.phase == "prefill" and b.lay.o_proj_gather_pool:
        # the TP weight switch: wo_a / wo_b gathered whole, all G groups on the local tokens, then the
        # local [t_l, H] outputs all-gathered (dsa_cp.py:1252-1292, 1368-1505@182b75ea)
        b.coll("all_gather", "tp", q, 0.0, "self_attn.wo.weight", const=wa + wb_)
        b.op(O.bmm("self_attn.wo_a", q, G, NH * D // G, R, wa * tp, "self_attn.wo_a"))
        b.op(O.linear("self_attn.wo_b", q, G * R, s.H, FLOAT, wb_ * tp, "self_attn.wo_b"))
        b.coll("all_gather", "tp", q, s.H * 2, "self_attn.wo_b.out")
        return x
    h = x
    if cp:
        # decode (or no switch): the local tokens' heads go back to all tokens x this rank's heads
        b.coll("all_to_all", "tp", q, NH * D * 2.0 * (tp - 1) / tp, "self_attn.o.in")
    g_l = max(1, G // tp)
    b.op(O.bmm("self_attn.wo_a", h, g_l, NH * D // G, R, wa, "self_attn.wo_a"))
    b.op(O.linear("self_attn.wo_b", h, g_l * R, s.H, FLOAT, wb_, "self_attn.wo_b"))
    if tp > 1:
        b.coll("all_reduce", "tp", h, s.H * 2, "self_attn.wo_b.out")
    return h


def mtp_inputs(b: Any, p: str, tok: Tok, L: int) -> None:
    """The drafter's own input projections: e_proj(enorm(embed)) + h_proj(hnorm(hidden)) (mtp.py:55-104)."""
    s = b.spec
    b.op(O.rms_norm(f"{p}enorm", tok, s.H))
    b.op(O.rms_norm(f"{p}hnorm", tok, s.H))
    b.op(O.linear(f"{p}e_proj", tok, s.H, s.H, FLOAT, b.wb(L, "e_proj"), "e_proj"))
    b.op(O.linear(f"{p}h_proj", tok, s.H, s.H, FLOAT, b.wb(L, "h_proj"), "h_proj"))
