"""DeepSeek-V4-style models: per-layer compressed attention, hyper-connections, grouped output, hash routing.

Recognised from structure keys (``compress_ratios`` with ``hc_mult``, ``o_groups``, ``o_lora_rank``),
never from ``model_type``: any config with these keys is this family (model-deepseek-v4.md §1).

* Layers: ``compress_ratios[i]`` gives layer i's attention kind (``utils.py:109-114``@182b75ea:
  entries past the list are 0): 0 = sliding window only, 4 = window + compress-4 rows picked by a
  lightning indexer, 128 = window + every compress-128 row. MTP layers come after the main ones
  (``utils.py:86-99``). The first ``num_hash_layers`` main layers route by token id (``tid2eid``).
* Residual: ``hc_mult`` copies of H between layers (mHC, §1.3); ``hc_*`` mixing parameters fp32.
* Attention modules (§1.4, §3.2): ``wq_a [Qr,H]``, ``q_norm``, ``wq_b [NH*D, Qr]``, ``wkv [D,H]``,
  ``kv_norm``, ``wo_a [G*R, NH*D/G]``, ``wo_b [H, G*R]``, ``attn_sink [NH]``; a compressor per
  compressed layer (``ape`` fp32 ``[c, coff*D]``, ``wkv``/``wgate`` ``[coff*D, H]``, ``norm [D]``,
  coff = 2 at c = 4); an indexer per compress-4 layer (``wq_b [IH*ID, Qr]``, ``weights_proj
  [IH, H]`` and its own compressor of head ``ID``).
* Checkpoint names are DeepSeek's own (``layers.N.attn.wq_a``, ``layers.N.ffn.experts.E.w1``,
  ``mtp.J.*``, ``embed``/``head``); ``model.names`` reads them as the engine's loader renames them,
  and ``layout_rows`` writes them from ``layer_modules`` through its inverse (one declaration).
* Recipes (msModelSlim, §2.2): ``w8a8`` (Flash: every quantizable linear W8A8_DYNAMIC) and ``w4a8``
  (Pro: routed experts W4A8_DYNAMIC); wo_a / wo_b, compressors, weights_proj, gate, e_proj / h_proj
  stay FLOAT; the MTP layer is quantized like the main layers.
* ``fp8-block`` is the HF release (§2.1): every linear but the compressors' wkv / wgate and the
  indexer's weights_proj (bf16) in FP8 e4m3 with UE8M0 128x128 block scales (``<linear>.scale``,
  F8_E8M0), routed experts in FP4 e2m1 with UE8M0 per-32 scales when ``expert_dtype`` is ``fp4``
  (FP8 block otherwise), ``tid2eid`` int64. It has no MTP embedding or head of its own: GPU-04's
  logged checkpoint size, 148.66 GiB, is this layout's 148.65 GiB (+ headers) without them and
  150.62 GiB with them *(derived)*; upstream vLLM's drafter shares the target's ("Sharing target
  model embedding weights ... lm_head", GPU-04). wo_a / wo_b / e_proj / h_proj are FP8 there: GPU-04's
  "MTP draft model loaded: 39 params" counts e_proj and h_proj with a scale each *(derived)*.
"""
from __future__ import annotations

import math
from typing import Any, Iterator, NamedTuple

from ...errors import AuditInputError
from ..spec import LayerKind, ModelSpec

NAME = "deepseek_v4"
#: structure keys that make a config this family; all are needed
KEYS = ("compress_ratios", "hc_mult", "o_groups", "o_lora_rank")
#: ratios the engine's compressed attention has (``DSV4_BLOCK_SIZES`` pages: c4 and c128)
RATIOS = (0, 4, 128)
#: outputs of the mHC mixing projection: pre (hc) + post (hc) + comb (hc x hc)
def mix_outputs(hc: int) -> int:
    return (2 + hc) * hc


#: HC scale parameters per block (``model.py:692-702``: ``hc_*_scale [3]``)
HC_SCALES = 3
#: recipes this family's checkpoints exist in, and the linear schemes each gives
#: (class ``lowrank``: wo_a / wo_b / e_proj / h_proj, FLOAT in msModelSlim's recipes, FP8 in the HF release)
RECIPE_SCHEMES = {
    "bf16": {"attn": "FLOAT", "mlp": "FLOAT", "expert": "FLOAT", "lowrank": "FLOAT"},
    "w8a8": {"attn": "W8A8_DYNAMIC", "mlp": "W8A8_DYNAMIC", "expert": "W8A8_DYNAMIC", "lowrank": "FLOAT"},
    "w8a8-dynamic": {"attn": "W8A8_DYNAMIC", "mlp": "W8A8_DYNAMIC", "expert": "W8A8_DYNAMIC", "lowrank": "FLOAT"},
    "w4a8": {"attn": "W8A8_DYNAMIC", "mlp": "W8A8_DYNAMIC", "expert": "W4A8_DYNAMIC", "lowrank": "FLOAT"},
    "fp8-block": {"attn": "FP8_BLOCK", "mlp": "FP8_BLOCK", "expert": "MXFP4", "lowrank": "FP8_BLOCK"},
}
#: the HF release's config.json quantization_config (the real deepseek-v4-flash config)
HF_QUANTIZATION_CONFIG = {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                          "scale_fmt": "ue8m0", "weight_block_size": [128, 128]}
#: FP8 block edge and MXFP4 scale group of the HF release (§2.1)
FP8_BLOCK, MX_GROUP = 128, 32


def _off(val: Any) -> bool:
    return val in (None, 0, False, [], "")


def claims(cfg: dict[str, Any]) -> bool:
    return any(not _off(cfg.get(k)) for k in KEYS)


# ---------------------------------------------------------------- config -> spec

def _ratios(cfg: dict, where: str, n_layers: int) -> tuple[int, ...]:
    vals = cfg.get("compress_ratios")
    if not isinstance(vals, list) or not vals:
        raise AuditInputError(where, "key 'compress_ratios' must be a non-empty list of integers")
    out = []
    for v in vals:
        if isinstance(v, float) and math.isfinite(v) and v.is_integer():
            v = int(v)
        if isinstance(v, bool) or not isinstance(v, int):
            raise AuditInputError(where, f"key 'compress_ratios' must hold integers, got {str(v)[:20]!r}")
        out.append(v)
    # msModelSlim's ModelArgs writes 1 for "no compression" (model-deepseek-v4.md §1.1 sources)
    out = [0 if v == 1 else v for v in out]
    bad = sorted({v for v in out if v not in RATIOS})
    if bad:
        raise AuditInputError(where, f"compress_ratios has {bad}: the engine's compressed attention has ratios "
                                     f"4 and 128 (0 = window only)")
    if len(out) > n_layers:
        raise AuditInputError(where, f"compress_ratios has {len(out)} entries for {n_layers} layers "
                                     "(main + MTP)")
    return tuple(out) + (0,) * (n_layers - len(out))


def spec_from_config(cfg: dict[str, Any], name: str = "model", where: str = "config.json") -> ModelSpec:
    """The ModelSpec of a DeepSeek-V4-style config, one LayerKind per main and MTP layer."""
    # the shared readers (lazy: config dispatches here after range-checking every known integer key)
    from .. import config as C
    missing = [k for k in KEYS if _off(cfg.get(k))]
    if missing:
        have = [k for k in KEYS if k not in missing]
        raise AuditInputError(where, f"structure audit does not model: {', '.join(have)} without "
                                     f"{', '.join(missing)}; refused rather than read as a simpler model")
    rest = [u for u in C.unmodelled_structure(cfg) if u.split(" ", 1)[0] not in
            (*KEYS, "num_hash_layers", "sliding_window", *DSPARK_KEYS)]
    if rest:
        raise AuditInputError(where, "structure audit does not model: " + ", ".join(rest)
                              + "; refused rather than read as a simpler model")
    if cfg.get("kv_lora_rank") not in (None, 0):
        raise AuditInputError(where, "compress_ratios with kv_lora_rank: MLA with compressed attention is not "
                                     "a structure audit models")
    H = C._int(cfg, "hidden_size", where, positive=True)
    Lyr = C._int(cfg, "num_hidden_layers", where, positive=True)
    NH = C._int(cfg, "num_attention_heads", where, positive=True)
    V = C._int(cfg, "vocab_size", where, positive=True)
    nkv = C._int(cfg, "num_key_value_heads", where, default=1)
    if nkv != 1:
        raise AuditInputError(where, f"key 'num_key_value_heads' = {nkv}: compressed attention shares one latent "
                                     "head (K = V); audit models 1")
    D = C._int(cfg, "head_dim", where, positive=True)
    Dr = C._int(cfg, "qk_rope_head_dim", where, positive=True)
    Qr = C._int(cfg, "q_lora_rank", where, positive=True)
    G = C._int(cfg, "o_groups", where, positive=True)
    R = C._int(cfg, "o_lora_rank", where, positive=True)
    hc = C._int(cfg, "hc_mult", where, positive=True)
    W = C._int(cfg, "sliding_window", where, positive=True)
    if Dr > D:
        raise AuditInputError(where, f"qk_rope_head_dim {Dr} is larger than head_dim {D}")
    if NH % G or (NH * D) % G:
        raise AuditInputError(where, f"o_groups {G} must divide num_attention_heads {NH}")
    IH = C._int(cfg, "index_n_heads", where, default=0)
    ID = C._int(cfg, "index_head_dim", where, default=0)
    topk = C._int(cfg, "index_topk", where, default=0)
    mtp = C._int(cfg, "num_nextn_predict_layers", where, default=0)
    dspark = _dspark(cfg, where, Lyr)
    notes: list[str] = []
    if dspark is not None:
        n_draft, targets, rank = dspark
        if mtp:
            notes.append(f"num_nextn_predict_layers {mtp} not read: this checkpoint's drafter is DSpark "
                         f"(dspark_num_mtp_layers {n_draft}, model-deepseek-v4.md §1.6)")
        mtp = n_draft
    ratios = _ratios(cfg, where, Lyr + mtp)
    if dspark is not None:
        n_given = len(cfg["compress_ratios"])
        if n_given != Lyr + mtp or any(ratios[Lyr:]):
            raise AuditInputError(where, f"compress_ratios has {n_given} entries ({list(ratios[Lyr:])} past the "
                                         f"main layers) for {Lyr} layers + {mtp} DSpark layers: DSpark's draft "
                                         f"layers are window-only, one 0 each after the main layers")
    if any(r == 4 for r in ratios) and (IH <= 0 or ID <= 0 or topk <= 0):
        raise AuditInputError(where, "compress-4 layers need the indexer keys 'index_n_heads', 'index_head_dim' "
                                     "and 'index_topk'")
    E = C._int(cfg, "n_routed_experts", where, positive=True)
    I = C._int(cfg, "moe_intermediate_size", where, positive=True)
    S = C._int(cfg, "n_shared_experts", where, default=0)
    K = C._int(cfg, "num_experts_per_tok", where, positive=True)
    if K > E:
        raise AuditInputError(where, f"key 'num_experts_per_tok' = {K} is more than the {E} routed experts")
    if (Lyr + mtp) * E > C.MAX_EXPERT_LAYERS:
        raise AuditInputError(where, f"layers x n_routed_experts = {(Lyr + mtp) * E:,} is past the plausible "
                                     f"{C.MAX_EXPERT_LAYERS:,} expert-layers")
    n_hash = C._int(cfg, "num_hash_layers", where, default=0)
    if n_hash > Lyr:
        raise AuditInputError(where, f"num_hash_layers {n_hash} is more than num_hidden_layers {Lyr}")
    dt = str(cfg.get("dtype") or cfg.get("torch_dtype") or "bfloat16")
    pd = C.TORCH_DTYPE_TO_ST.get(dt, "BF16")
    factor, orig = C._rope(cfg, where)
    kinds = []
    for i, r in enumerate(ratios):
        is_mtp = i >= Lyr
        kinds.append(LayerKind(attention="compressed" if r else "window", compress_ratio=r, window=W,
                               indexer=r == 4, moe=True,
                               # a draft layer is never hash-routed (model.py:315-330: is_draft_layer)
                               router="hash" if (i < n_hash and not is_mtp) else "score", mtp=is_mtp))
    main = kinds[:Lyr]
    return ModelSpec(
        name=name, model_type=str(cfg.get("model_type", "unknown")), H=H, NH=NH, Lyr=Lyr, V=V, pd=pd,
        NKV=1, head_dim=D, mla=False, Qr=Qr, Dr=Dr,
        dsa=any(k.indexer for k in kinds), IH=IH, ID=ID, topk_tokens=topk,
        indexer_layers=tuple(k.indexer for k in main),
        Id=0, moe=True, E=E, I=I, S=S, topk_experts=K, moe_layers=tuple(True for _ in main),
        router_bias=str(cfg.get("topk_method", "")) == "noaux_tc",
        mtp_layers=mtp, tie_embeddings=bool(cfg.get("tie_word_embeddings", False)),
        max_position=C._int(cfg, "max_position_embeddings", where, default=0),
        rope_scaling_factor=factor, rope_original_max=orig,
        family=NAME, layer_kinds=tuple(kinds), residual_mult=hc, o_groups=G, o_lora_rank=R, sliding_window=W,
        expert_dtype=str(cfg.get("expert_dtype") or ""),
        drafter="dspark" if dspark is not None else "mtp",
        drafter_targets=dspark[1] if dspark is not None else (), markov_rank=dspark[2] if dspark is not None else 0,
        notes=tuple(notes) + (() if dt in C.TORCH_DTYPE_TO_ST else (f"unknown model dtype {dt!r}; assuming bf16",)),
    )


#: the DSpark drafter's config keys (model-deepseek-v4.md §1.1, §1.6)
DSPARK_KEYS = ("dspark_target_layer_ids", "dspark_num_mtp_layers", "dspark_markov_rank")
#: ``dspark_num_mtp_layers`` when the config does not give it (models/deepseek_v4/dspark.py:65-200@182b75ea)
DSPARK_DEFAULT_LAYERS = 3


def _dspark(cfg: dict, where: str, n_main: int) -> tuple[int, tuple[int, ...], int] | None:
    """(draft layers, target layer ids, Markov rank) of a DSpark config, None without one. The drafter
    reads the hidden states of ``dspark_target_layer_ids`` (``main_proj [H, H x len(ids)]``), so the ids
    must be main layers; ``dspark_markov_rank`` sizes the Markov head."""
    from .. import config as C
    if all(_off(cfg.get(k)) for k in DSPARK_KEYS):
        return None
    ids = cfg.get("dspark_target_layer_ids")
    if not isinstance(ids, list) or not ids or any(isinstance(i, bool) or not isinstance(i, int) for i in ids):
        raise AuditInputError(where, "a DSpark drafter needs 'dspark_target_layer_ids', a non-empty list of layer "
                                     f"indices, got {str(ids)[:40]!r}")
    if len(ids) > n_main or any(not 0 <= i < n_main for i in ids) or len(set(ids)) != len(ids):
        raise AuditInputError(where, f"dspark_target_layer_ids {str(ids)[:60]} must be distinct main layers "
                                     f"(0..{n_main - 1})")
    n = C._int(cfg, "dspark_num_mtp_layers", where, default=DSPARK_DEFAULT_LAYERS)
    if n <= 0:
        raise AuditInputError(where, "key 'dspark_num_mtp_layers' must be positive with dspark_target_layer_ids")
    rank = C._int(cfg, "dspark_markov_rank", where, positive=True)
    return n, tuple(ids), rank


def structure_summary(spec: ModelSpec) -> list[str]:
    main = spec.layer_kinds[:spec.Lyr]
    n4 = sum(1 for k in main if k.compress_ratio == 4)
    n128 = sum(1 for k in main if k.compress_ratio == 128)
    nw = sum(1 for k in main if k.attention == "window")
    n_hash = sum(1 for k in main if k.router == "hash")
    out = [f"compressed attention (head {spec.head_dim}, 1 latent head; {n4} compress-4 + indexer "
           f"{spec.IH}x{spec.ID} top-{spec.topk_tokens}, {n128} compress-128, {nw} window-only; window "
           f"{spec.sliding_window})",
           f"grouped output ({spec.o_groups} groups, rank {spec.o_lora_rank}); hyper-connections x{spec.residual_mult}",
           f"MoE ({spec.E} routed top-{spec.topk_experts}, {spec.S} shared, {spec.Lyr} MoE layers, "
           f"{n_hash} hash-routed)"]
    if spec.mtp_layers and spec.drafter == "dspark":
        out.append(f"DSpark drafter ({spec.mtp_layers} window-only layers, hidden states of layers "
                   f"{', '.join(map(str, spec.drafter_targets))}, Markov rank {spec.markov_rank})")
    elif spec.mtp_layers:
        out.append(f"MTP ({spec.mtp_layers} layer{'s' if spec.mtp_layers > 1 else ''}, window-only)")
    return out


# ---------------------------------------------------------------- modules (declared once: engine walk and checkpoint layout)

def coff(ratio: int) -> int:
    """Compressor window overlap: 2 rows of state per output at compress-4, 1 at compress-128."""
    return 2 if ratio == 4 else 1


def layer_modules(spec: ModelSpec, layer: int) -> list:
    """The modules of ``layer`` (main or MTP), the one declaration both the materializer's walk and
    ``layout_rows`` read: HF-spelled names (``model.names`` gives the checkpoint's tensors these:
    ``attn.`` -> ``self_attn.``, ``ffn.`` -> ``mlp.``, w1/w2/w3 -> gate/down/up_proj), in the
    engine's terms and order (model.py:452-518, 689-702; compressor.py:124-144; indexer.py:270-315;
    mtp.py:55-104)."""
    from ..blueprint import ModuleDecl as M
    s, H, D = spec, spec.H, spec.head_dim
    kind = s.layer_kinds[layer]
    mtp = kind.mtp
    a = "mtp" if mtp else "attention"
    hc = s.residual_mult
    out = [M("norm", "input_layernorm", (H,), "mtp" if mtp else "norm"),
           M("norm", "post_attention_layernorm", (H,), "mtp" if mtp else "norm")]
    for blk in ("attn", "ffn"):
        out += [M("param", "", (mix_outputs(hc), hc * H), "mtp" if mtp else "other", suffix=f"hc_{blk}_fn", dtype="F32"),
                M("param", "", (mix_outputs(hc),), "mtp" if mtp else "other", suffix=f"hc_{blk}_base", dtype="F32"),
                M("param", "", (HC_SCALES,), "mtp" if mtp else "other", suffix=f"hc_{blk}_scale", dtype="F32")]
    out += [M("linear", "self_attn.wq_a", (s.Qr, H), a, recipe_class="attn"),
            M("norm", "self_attn.q_norm", (s.Qr,), a),
            # DSA-CP replicates wq_b (wq_b_cls = ReplicatedLinear, model.py:484-492)
            M("linear", "self_attn.wq_b", (s.NH * D, s.Qr), a, role="column", replicated_by="qb_kvb_replicated",
              recipe_class="attn"),
            M("linear", "self_attn.wkv", (D, H), a, recipe_class="attn"),
            M("norm", "self_attn.kv_norm", (D,), a),
            M("linear", "self_attn.wo_a", (s.o_groups * s.o_lora_rank, s.NH * D // s.o_groups), a, role="column",
              switch=True, recipe_class="lowrank"),
            M("linear", "self_attn.wo_b", (H, s.o_groups * s.o_lora_rank), a, role="row", switch=True,
              recipe_class="lowrank"),
            M("param", "self_attn", (s.NH,), a, role="heads", suffix="attn_sink", dtype="F32")]
    c = kind.compress_ratio
    if c:
        out += _compressor_modules("self_attn.compressor", c, D, H, a)
    if kind.indexer:
        b = "mtp" if mtp else "indexer"
        out += [M("linear", "self_attn.indexer.wq_b", (s.IH * s.ID, s.Qr), b, recipe_class="attn"),
                M("linear", "self_attn.indexer.weights_proj", (s.IH, H), b, float_only=True)]
        out += _compressor_modules("self_attn.indexer.compressor", c, s.ID, H, b)
    f = "mtp" if mtp else None
    out.append(M("router", "mlp.gate", (s.E, H), f or "router", hash=kind.router == "hash"))
    out.append(M("experts", "mlp.experts", (), f or "routed_experts"))
    if s.S:
        sh = f or "shared_experts"
        out += [M("linear", "mlp.shared_experts.gate_up_proj", (2 * s.I * s.S, H), sh, role="column",
                  members=("mlp.shared_experts.gate_proj", "mlp.shared_experts.up_proj"),
                  replicated_by="shared_experts_replicated", recipe_class="mlp"),
                M("linear", "mlp.shared_experts.down_proj", (H, s.I * s.S), sh, role="row",
                  replicated_by="shared_experts_replicated", recipe_class="mlp")]
    if mtp and s.drafter == "dspark":
        if layer == s.Lyr:
            out += dspark_modules(spec)
    elif mtp:
        # e_proj / h_proj take quant_config (model-deepseek-v4.md §1.6; FP8 in the HF release)
        out += [M("linear", "e_proj", (H, H), "mtp", recipe_class="lowrank"),
                M("linear", "h_proj", (H, H), "mtp", recipe_class="lowrank"),
                M("norm", "enorm", (H,), "mtp"), M("norm", "hnorm", (H,), "mtp"),
                M("norm", "shared_head.norm", (H,), "mtp"),
                M("vocab", "shared_head.head", (s.V_padded, H), "mtp", group="lmhead"),
                M("vocab", "embed_tokens", (s.V_padded, H), "mtp", group="embedding")]
        out += _head_hc_modules(spec, "mtp")
    return out


def dspark_modules(spec: ModelSpec) -> list:
    """The DSpark drafter's own modules besides its decoder layers (``DSparkDeepseekV4ForCausalLM``,
    models/deepseek_v4/dspark.py:65-200@182b75ea; model-deepseek-v4.md §1.6): ``main_proj [H, H x
    len(dspark_target_layer_ids)]`` over the target layers' hidden states, ``main_norm``, the final
    ``norm``, a Markov head (``markov_w1`` VocabParallelEmbedding and ``markov_w2`` ParallelLMHead, both
    ``[V, markov_rank]``), the confidence head ``proj [1, H + markov_rank]``, its own ``embed_tokens`` and
    ``lm_head`` and ``hc_head_*``. Declared with the first draft layer, so they are loaded with the drafter.

    ASSUMED (the DSpark checkpoints' tensor names and description were not read, model-deepseek-v4.md
    §2.2, UNCONFIRMED): the drafter-level tensors are stored under ``mtp.0.`` as the MTP layer's are
    (``mtp.0.emb.tok_emb``, ``mtp.0.head``, ``mtp.0.norm``, ``mtp.0.hc_head_*``, then ``mtp.0.main_proj``,
    ``mtp.0.main_norm``, ``mtp.0.markov_w1``, ``mtp.0.markov_w2``, ``mtp.0.proj``); ``main_norm`` is
    ``[H]`` (after the projection); ``main_proj`` is FLOAT in msModelSlim's recipes like e_proj / h_proj
    (in no include list); ``proj`` is built unquantized."""
    from ..blueprint import ModuleDecl as M
    s, H, r = spec, spec.H, spec.markov_rank
    return [M("linear", "main_proj", (H, H * len(s.drafter_targets)), "mtp", recipe_class="lowrank"),
            M("norm", "main_norm", (H,), "mtp"),
            M("norm", "shared_head.norm", (H,), "mtp"),
            M("vocab", "markov_w1", (s.V_padded, r), "mtp", group="embedding"),
            M("vocab", "markov_w2", (s.V_padded, r), "mtp", group="lmhead"),
            M("linear", "proj", (1, H + r), "mtp", float_only=True),
            M("vocab", "shared_head.head", (s.V_padded, H), "mtp", group="lmhead"),
            M("vocab", "embed_tokens", (s.V_padded, H), "mtp", group="embedding"),
            *_head_hc_modules(spec, "mtp")]


def _compressor_modules(p: str, c: int, d: int, H: int, block: str) -> list:
    from ..blueprint import ModuleDecl as M
    w = coff(c) * d
    return [M("param", p, (c, w), block, suffix="ape", dtype="F32"),
            M("linear", p + ".wkv", (w, H), block, float_only=True),
            M("linear", p + ".wgate", (w, H), block, float_only=True),
            M("norm", p + ".norm", (d,), block)]


def _head_hc_modules(spec: ModelSpec, block: str, model_level: bool = False) -> list:
    """The head's mHC reduction parameters; at model level each tensor is its own module (``hc_head_fn``)."""
    from ..blueprint import ModuleDecl as M
    hc, H = spec.residual_mult, spec.H
    return [M("param", n if model_level else "", shape, block, suffix=n, dtype="F32")
            for n, shape in (("hc_head_fn", (hc, hc * H)), ("hc_head_base", (hc,)), ("hc_head_scale", (1,)))]


def global_modules(spec: ModelSpec) -> list:
    """Model-level modules besides the embedding, final norm and LM head every family has."""
    return _head_hc_modules(spec, "other", model_level=True)


# ---------------------------------------------------------------- checkpoint layout (read from the modules above)

class Stored(NamedTuple):
    """One stored linear (``linear``: its module name, the writer adds the recipe's tensors) or one
    stored tensor, under the HF-spelled ``path`` of its declared module (a tuple: a checkpoint has
    ~100k of them)."""

    path: str
    shape: tuple[int, ...]
    dtype: str = "stored"          # stored = the model dtype
    recipe_class: str = ""         # a linear's; "" for a tensor
    linear: bool = False


def stored_of(spec: ModelSpec, d: Any, n_experts: int) -> list[Stored]:
    """What a declared module is made of in the checkpoint: a fused linear's members (equal widths,
    gate / up), a norm's weight, a parameter, the gate's weight with its hash table or score bias,
    each routed expert's w1 / w2 / w3, a vocabulary table of V rows (the engine pads to V_padded)."""
    if d.kind == "linear":
        n = len(d.stored)
        if d.shape[0] % n:
            raise ValueError(f"{d.name}: output {d.shape[0]} does not split over members {d.stored}")
        cls = "float" if d.float_only else d.recipe_class
        if not cls:
            raise ValueError(f"{d.name}: a linear the writer quantizes needs its recipe_class")
        return [Stored(m, (d.shape[0] // n, d.shape[1]), recipe_class=cls, linear=True) for m in d.stored]
    if d.kind == "norm":
        return [Stored(d.name + ".weight", d.shape)]
    if d.kind == "param":
        # a bare tensor: in a layer under module "" (hc_attn_fn), at model level its own module (hc_head_fn)
        path = d.suffix if d.name in ("", d.suffix) else f"{d.name}.{d.suffix}"
        return [Stored(path, d.shape, d.dtype)]
    if d.kind == "router":
        out = [Stored(d.name + ".weight", d.shape)]
        if d.hash:
            out.append(Stored(d.name + ".tid2eid", (spec.V, spec.topk_experts), "I64"))
        elif spec.router_bias:
            out.append(Stored(d.name + ".e_score_correction_bias", (spec.E,), "F32"))
        return out
    if d.kind == "experts":
        H, I = spec.H, spec.I
        return [Stored(f"{d.name}.{e}.{proj}", shape, recipe_class="expert", linear=True)
                for e in range(n_experts)
                for proj, shape in (("gate_proj", (I, H)), ("down_proj", (H, I)), ("up_proj", (I, H)))]
    if d.kind == "vocab":
        return [Stored(d.name + ".weight", (spec.V, d.shape[1]))]
    raise ValueError(f"module kind {d.kind!r}")


#: DeepSeek's MLP holds w1, w2, w3 (gate, down, up) in this order
_MLP_ORDER = {"gate_proj": 0, "down_proj": 1, "up_proj": 2}


def _written_order(rows: list[Stored]) -> list[Stored]:
    """A layer's tensors in the order DeepSeek's checkpoints list them: its Block holds attn, then
    ffn (an MLP's w1, w2, w3), then the norms and mHC parameters, the MTP block's own after them;
    the engine's walk has norms and mHC first and a fused gate_up before down."""
    body, shared, rest = [], [], []
    for r in rows:
        if r.path.startswith("mlp.shared_experts."):
            shared.append(r)
        elif r.path.startswith(("self_attn.", "mlp.")):
            body.append(r)
        else:
            rest.append(r)
    shared.sort(key=lambda r: _MLP_ORDER.get(r.path.rsplit(".", 1)[-1], len(_MLP_ORDER)))
    return body + shared + rest


#: model-level tensors every family has (the materializer's ``globals_``), in the order DeepSeek writes them
_COMMON_GLOBALS = ("model.embed_tokens.weight", "model.norm.weight", "lm_head.weight")


def stored_tensors(spec: ModelSpec, include_mtp: bool = True, n_experts: int | None = None,
                   mtp_vocab: bool = True) -> Iterator[tuple[str, Stored]]:
    """(DeepSeek-native name, what is stored) of every stored linear and tensor, main layers,
    MTP layers, globals, from ``layer_modules`` / ``global_modules``. ``mtp_vocab``: the MTP layers
    store their own embedding and head (msModelSlim; not the HF release)."""
    from ..names import native_global, native_layer_path
    E = spec.E if n_experts is None else n_experts
    layers = [(f"layers.{i}.", i, False) for i in range(spec.Lyr)]
    if include_mtp:
        layers += [(f"mtp.{j}.", spec.Lyr + j, True) for j in range(spec.mtp_layers)]
    # layers of one kind declare equal modules: each kind's stored rows are spelled once
    of_kind: dict[tuple, list[tuple[str, Stored]]] = {}
    for prefix, layer, mtp in layers:
        decls = tuple(d for d in layer_modules(spec, layer) if mtp_vocab or d.kind != "vocab")
        rows = of_kind.get((decls, mtp))
        if rows is None:
            stored = _written_order([r for d in decls for r in stored_of(spec, d, E)])
            rows = of_kind[(decls, mtp)] = [(native_layer_path(r.path, mtp), r) for r in stored]
        for rest, r in rows:
            yield prefix + rest, r
    V, H = spec.V, spec.H
    for name, shape in zip(_COMMON_GLOBALS, ((V, H), (H,), (V, H))):
        yield native_global(name), Stored(name, shape)
    for d in global_modules(spec):
        for r in stored_of(spec, d, E):
            yield native_global(r.path), r


def scheme(recipe: str, cls: str, spec: ModelSpec | None = None) -> str:
    if recipe not in RECIPE_SCHEMES:
        raise AuditInputError("--recipe", f"recipe {recipe!r} (--recipe, or the config's quantization_config): DeepSeek-V4 "
                                          f"checkpoints audit models are {', '.join(RECIPE_SCHEMES)} (msModelSlim W8A8 / "
                                          "W4A8, bf16 and the HF FP8 / FP4 release)")
    if cls == "float":
        return "FLOAT"
    if recipe == "fp8-block" and cls == "expert" and spec is not None and spec.expert_dtype != "fp4":
        return "FP8_BLOCK"          # a repack with FP8 experts (expert_dtype not fp4)
    return RECIPE_SCHEMES[recipe][cls]


#: writers of this family's checkpoints: msModelSlim (W8A8 / W4A8, bf16) and the HF release (fp8-block)
HF_RECIPES = ("fp8-block",)


def _hf_linear(name: str, sch: str, shape: tuple[int, int], pd: str) -> list[tuple[str, str, tuple[int, ...]]]:
    """One linear as the HF release stores it: FP8 e4m3 + UE8M0 [cdiv(N,128), cdiv(K,128)] block scales,
    FP4 e2m1 + UE8M0 [N, K/32] (routed experts), or the model dtype."""
    n, k = shape
    if sch == "FP8_BLOCK":
        return [(name + ".weight", "F8_E4M3", shape), (name + ".scale", "F8_E8M0", (-(-n // FP8_BLOCK), -(-k // FP8_BLOCK)))]
    if sch == "MXFP4":
        return [(name + ".weight", "F4", shape), (name + ".scale", "F8_E8M0", (n, -(-k // MX_GROUP)))]
    return [(name + ".weight", pd, shape)]


def layout_rows(spec: ModelSpec, recipe: str, *, include_mtp: bool = True, writer: str | None = None,
                n_experts: int | None = None) -> list[tuple[str, str, tuple[int, ...], str]]:
    """(name, dtype, shape, scheme) of every stored tensor, as msModelSlim writes this family
    (``fp8-block``: as the HF release stores it, DeepSeek-native names both)."""
    from ..expected import linear_tensors
    hf = recipe in HF_RECIPES
    if hf and writer not in (None, "hf-release"):
        raise AuditInputError("--writer", f"the DeepSeek-V4 {recipe} checkpoint is the HF release's (--writer hf-release)")
    if not hf and writer == "hf-release":
        raise AuditInputError("--writer", f"the DeepSeek-V4 HF release is FP8 / FP4 (--recipe fp8-block), not {recipe}; "
                                          "audit writes msModelSlim's layouts for the other recipes")
    if hf and spec.drafter == "dspark" and include_mtp:
        raise AuditInputError("--recipe", f"the HF release's layout of a DSpark checkpoint ({recipe}) is not known "
                                          "(model-deepseek-v4.md §2.1 reads the MTP checkpoints only); audit writes "
                                          "msModelSlim's (w8a8, w4a8, bf16)")
    out: list[tuple[str, str, tuple[int, ...], str]] = []
    pd = spec.pd
    schemes: dict[str, str] = {}
    for name, (_, shape, dtype, cls, linear) in stored_tensors(spec, include_mtp, n_experts, mtp_vocab=not hf):
        if linear:
            sch = schemes.get(cls)
            if sch is None:
                sch = schemes[cls] = scheme(recipe, cls, spec)
            rows = _hf_linear(name, sch, shape, pd) if hf else \
                linear_tensors(name, sch, shape, pd, down=name.endswith(".w2"))
            out += [(row[0], row[1], row[2], sch) for row in rows]
        else:
            # ASSUMED: norms stored in the model dtype (the description files were not readable, §2.2)
            out.append((name, pd if dtype == "stored" else dtype, shape, "FLOAT"))
    return out


def description(spec: ModelSpec, recipe: str, *, include_mtp: bool = True, n_experts: int | None = None) -> dict | None:
    """``quant_model_description.json``: every tensor's scheme (DeepSeek-native keys, §2.2); the HF
    release has none."""
    if recipe in HF_RECIPES:
        return None
    desc: dict = {name: sch for name, _, _, sch in layout_rows(spec, recipe, include_mtp=include_mtp,
                                                                 n_experts=n_experts)}
    desc.update({"version": "1.0.0", "model_quant_type": "W8A8_DYNAMIC" if recipe != "bf16" else "FLOAT",
                 "metadata": {}, "group_size": 0})
    return desc


def config_from_spec(spec: ModelSpec) -> dict[str, Any]:
    """A config.json ``spec_from_config`` reads back as the same structure (synth of a bare spec)."""
    main = spec.layer_kinds[:spec.Lyr]
    cfg: dict[str, Any] = {
        "model_type": spec.model_type, "torch_dtype": {"BF16": "bfloat16", "F16": "float16"}.get(spec.pd, "bfloat16"),
        "hidden_size": spec.H, "num_hidden_layers": spec.Lyr, "num_attention_heads": spec.NH,
        "num_key_value_heads": 1, "head_dim": spec.head_dim, "qk_rope_head_dim": spec.Dr, "q_lora_rank": spec.Qr,
        "o_groups": spec.o_groups, "o_lora_rank": spec.o_lora_rank, "hc_mult": spec.residual_mult,
        "sliding_window": spec.sliding_window, "compress_ratios": [k.compress_ratio for k in spec.layer_kinds],
        "n_routed_experts": spec.E, "moe_intermediate_size": spec.I, "n_shared_experts": spec.S,
        "num_experts_per_tok": spec.topk_experts, "num_hash_layers": sum(1 for k in main if k.router == "hash"),
        "num_nextn_predict_layers": spec.mtp_layers, "vocab_size": spec.V, "tie_word_embeddings": spec.tie_embeddings,
    }
    if spec.drafter == "dspark":
        del cfg["num_nextn_predict_layers"]
        cfg.update(dspark_target_layer_ids=list(spec.drafter_targets), dspark_num_mtp_layers=spec.mtp_layers,
                   dspark_markov_rank=spec.markov_rank)
    if spec.expert_dtype:
        cfg["expert_dtype"] = spec.expert_dtype
    if spec.dsa:
        cfg.update(index_n_heads=spec.IH, index_head_dim=spec.ID, index_topk=spec.topk_tokens)
    if spec.router_bias:
        cfg["topk_method"] = "noaux_tc"
    if spec.max_position:
        cfg["max_position_embeddings"] = spec.max_position
    if spec.rope_scaling_factor != 1.0 or spec.rope_original_max:
        cfg["rope_scaling"] = {"type": "yarn", "factor": spec.rope_scaling_factor,
                               "original_max_position_embeddings": spec.rope_original_max}
    return cfg
