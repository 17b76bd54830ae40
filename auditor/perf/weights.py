"""Weight bytes per (layer, module) as resident on one rank: the single adapter between the perf
model and the memory ledger.

Why one place: an op's weight traffic must equal what the memory report says the rank holds, so
perf and memory can never disagree. ``auditor.memory.api.module_bytes`` is the source; for a
scheme the layout generator has no recipe for (``w8a8-dynamic``) the fallback below computes the
same keys from the scheme: int8 = 1 B/element, W4A8 experts 0.5 B,
bf16 2 B, fp32 router 4 B, plus fp32 per-output-channel scale and offset (8 B per output row) on
quantized linears. Keys: layer -1 holds "embed_tokens" and "lm_head"; decoder layers (MTP layer
= index Lyr) hold module names relative to the layer ("self_attn.q_b_proj", "mlp.experts", ...);
"self_attn.kv_b_proj" holds the derived W_UK_T + W_UV bytes.
"""
from __future__ import annotations

from ..engines.profiles import get_profile
from ..errors import AuditInputError
from ..memory.api import module_bytes
from ..engines.resolve import Layout
from ..model.spec import ModelSpec
from ..plan import ParallelPlan
from .quant import Scheme, scheme

WeightMap = dict[tuple[int, str], int]


def weight_bytes(spec: ModelSpec, plan: ParallelPlan, engine: str, recipe: str, layout: Layout,
                 rank: int = 0) -> tuple[WeightMap, str]:
    """(bytes per (layer, module), source) where source is "ledger" or "scheme"."""
    try:
        got = module_bytes(spec, plan, engine, recipe, rank)
    except AuditInputError:     # a scheme the layout generator has no recipe for (w8a8-dynamic)
        got = None
    if got:
        return dict(got), "ledger"
    return _scheme_bytes(spec, plan, engine, recipe, layout), "scheme"


def _lin(n_out: float, n_in: float, s: Scheme) -> int:
    b = n_out * n_in * s.weight_bytes
    if s.quantized:
        b += n_out * 8
    return int(b)


def _scheme_bytes(spec: ModelSpec, plan: ParallelPlan, engine: str, recipe: str, lay: Layout) -> WeightMap:
    prof = get_profile(engine)
    tp = plan.tp
    out: WeightMap = {}
    pd = 2
    vp = spec.V_padded
    out[(-1, "embed_tokens")] = vp // tp * spec.H * pd
    out[(-1, "lm_head")] = vp // tp * spec.H * pd
    n_layers = spec.Lyr + spec.mtp_layers
    for layer in range(n_layers):
        mtp = layer >= spec.Lyr
        a = scheme(recipe, "attn", mtp)
        m = scheme(recipe, "mlp", mtp)
        e = scheme(recipe, "expert", mtp)
        hl = lay.heads_local
        if spec.mla:
            q_in = spec.Qr or spec.H
            if spec.Qr:
                out[(layer, "self_attn.q_a_proj")] = _lin(spec.Qr, spec.H, a)
            out[(layer, "self_attn.kv_a_proj_with_mqa")] = _lin(spec.Lkv + spec.Dr, spec.H, a)
            out[(layer, "self_attn.q_b_proj")] = _lin(hl * spec.Dq, q_in, a)
            out[(layer, "self_attn.kv_b_proj")] = hl * (spec.Dn + spec.Dv) * spec.Lkv * pd
            o_k = spec.NH * spec.Dv if lay.o_proj_replicated else spec.NH * spec.Dv // tp
            out[(layer, "self_attn.o_proj")] = _lin(spec.H, o_k, a)
            if spec.layer_has_indexer(layer):
                out[(layer, "self_attn.indexer.wq_b")] = _lin(spec.IH * spec.ID, q_in, a)
                out[(layer, "self_attn.indexer.wk")] = spec.ID * spec.H * pd
                out[(layer, "self_attn.indexer.weights_proj")] = spec.IH * spec.H * pd
        else:
            kvh = max(spec.NKV // tp, 1)
            out[(layer, "self_attn.q_proj")] = _lin(spec.NH // tp * spec.head_dim, spec.H, a)
            out[(layer, "self_attn.k_proj")] = _lin(kvh * spec.head_dim, spec.H, a)
            out[(layer, "self_attn.v_proj")] = _lin(kvh * spec.head_dim, spec.H, a)
            out[(layer, "self_attn.o_proj")] = _lin(spec.H, spec.NH * spec.head_dim // tp, a)
        if spec.layer_is_moe(layer):
            gate_b = 4 if prof.gate_dtype == "F32" else pd
            out[(layer, "mlp.gate")] = spec.E * spec.H * gate_b + (spec.E * 4 if spec.router_bias else 0)
            el, ip = lay.experts_local, lay.I_p
            experts = el * 3 * spec.H * ip * e.weight_bytes
            if e.quantized:
                experts += el * (2 * ip + spec.H) * 8
            out[(layer, "mlp.experts")] = int(experts)
            if spec.S:
                si = spec.I * spec.S // (1 if lay.shared_experts_replicated else tp)
                out[(layer, "mlp.shared_experts")] = _lin(2 * si, spec.H, m) + _lin(spec.H, si, m)
        else:
            di = spec.Id // lay.dense_tp
            out[(layer, "mlp")] = _lin(2 * di, spec.H, m) + _lin(spec.H, di, m)
        if mtp:
            out[(layer, "eh_proj")] = spec.H * 2 * spec.H * pd
    return out
