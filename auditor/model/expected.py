"""The exact tensor list a checkpoint of a ModelSpec holds, per quantization recipe and writer.

Why this exists: the auditor must be checkable without downloading 750 GB. If we can say, from
config.json alone, which tensors (name, dtype, shape) a real writer emits, then (a) a missing
or extra tensor in a user's checkpoint is a finding, and (b) ``audit synth`` can write a
header-exact stand-in checkpoint made of sparse holes. Every rule below was matched against
the real tiny checkpoints in ``shared/data/checkpoints`` (transformers 5.4 ``save_pretrained``
and msModelSlim 26.1 ``ascendv1_saver``); rules that no real file confirms are marked
ASSUMED in comments.

Three writers exist:

* ``transformers`` -- ``save_pretrained``: everything in the model dtype, router bias F32,
  and no MTP layer (no HF class owns ``model.layers.{Lyr}.*``).
* ``msmodelslim`` -- ``ascendv1_saver``: the MTP layer is written (FLOAT), decoder norms and
  ``lm_head`` are stored F32 as calibrated, plus ``quant_model_description.json`` and the
  QuaRot side files.
* ``hf-release`` -- a model publisher's own HF upload (DeepSeek FP8, GLM bf16): transformers
  naming, but the MTP layer is shipped and, for FP8, quantized like the main layers.
"""
from __future__ import annotations

import functools
from typing import Iterator

from ..errors import AuditInputError
from . import blueprint as B
from .families import declared
from .recipes import RECIPES, check_recipe, linear_scheme
from .spec import ModelSpec

WRITERS = ("transformers", "msmodelslim", "hf-release")
DEFAULT_WRITER = {"bf16": "transformers", "w8a8": "msmodelslim", "w8a8-dynamic": "msmodelslim",
                  "w4a8": "msmodelslim", "fp8-block": "hf-release"}
ALLOWED_WRITERS = {"bf16": WRITERS, "w8a8": ("msmodelslim",), "w8a8-dynamic": ("msmodelslim",),
                   "w4a8": ("msmodelslim",), "fp8-block": ("transformers", "hf-release")}
# msModelSlim's global "model_quant_type" as the real files show it (W4A8 reports W8A8_DYNAMIC).
# w8a8-dynamic (every quantizable linear W8A8_DYNAMIC, MTP FLOAT) is ASSUMED to follow the W4A8
# recipe's layout for its non-expert linears, which the real W4A8 description confirms.
MODEL_QUANT_TYPE = {"w8a8": "W8A8", "w8a8-dynamic": "W8A8_DYNAMIC", "w4a8": "W8A8_DYNAMIC", "bf16": "FLOAT"}
FP8_BLOCK = 128

Row = tuple[str, str, tuple[int, ...]]

# Module kinds. Linears: what the recipes tell apart. Others: how writers store them.
_ATTN = "attn"            # q_a/q_b/kv_a/o_proj, indexer wq_b, q/k/v_proj: quantized by every recipe
_KV_B = "kv_b"            # kept float by msModelSlim (SFA needs it), FP8 in DeepSeek's release
_WK = "wk"                # indexer key proj: float for msModelSlim, FP8 in DeepSeek's release
_WPROJ = "weights_proj"   # indexer head weights: float everywhere
_MLP = "mlp"              # dense MLP and shared experts
_EXPERT = "expert"        # routed experts
_ROUTER = "router"        # mlp.gate: never quantized
_EH = "eh_proj"           # MTP projection: nn.Linear in the engines, never quantized
_LINEAR = frozenset({_ATTN, _KV_B, _WK, _WPROJ, _MLP, _EXPERT, _ROUTER, _EH})
_NORM = "norm"            # decoder norms, indexer k_norm weight+bias, model.norm
_MTP_NORM = "mtp_norm"    # enorm, hnorm, shared_head.norm (outside msModelSlim's QuaRot graph)
_BIAS = "router_bias"     # e_score_correction_bias
_EMBED = "embed"          # model.embed_tokens, MTP embed_tokens
_HEAD = "head"            # lm_head
_MTP_HEAD = "mtp_head"    # MTP shared_head.head


def resolve_writer(recipe: str, writer: str | None) -> str:
    """Check recipe and writer names and that this writer can produce this recipe."""
    if recipe not in RECIPES:
        raise AuditInputError("--recipe", f"unknown recipe {recipe!r} (recipes: {', '.join(RECIPES)})")
    writer = writer or DEFAULT_WRITER[recipe]
    if writer not in ALLOWED_WRITERS[recipe]:
        raise AuditInputError("--writer", f"writer {writer!r} does not produce recipe {recipe!r} "
                                          f"(use {', '.join(ALLOWED_WRITERS[recipe])})")
    return writer


def _attention(spec: ModelSpec, p: str, layer: int) -> Iterator[tuple[str, str, tuple[int, ...]]]:
    H = spec.H
    shape = functools.partial(B.stored_shape, spec)          # linear shapes: declared once (model.blueprint)
    if not spec.mla:
        for name, width in B.GQA_QKV.split(spec):
            yield _ATTN, p + name.rpartition(".")[2], (width, B.GQA_QKV.inp(spec))
        yield _ATTN, p + "o_proj", (B.GQA_O.out(spec), B.GQA_O.inp(spec))
        return
    if spec.Qr:
        yield _ATTN, p + "q_a_proj", shape("self_attn.q_a_proj")
        yield _NORM, p + "q_a_layernorm.weight", (spec.Qr,)
        yield _ATTN, p + "q_b_proj", shape("self_attn.q_b_proj")
    else:
        yield _ATTN, p + "q_proj", (spec.NH * spec.Dq, H)
    yield _ATTN, p + "kv_a_proj_with_mqa", shape("self_attn.kv_a_proj_with_mqa")
    yield _NORM, p + "kv_a_layernorm.weight", (spec.Lkv,)
    yield _KV_B, p + "kv_b_proj", (spec.NH * (spec.Dn + spec.Dv), spec.Lkv)
    yield _ATTN, p + "o_proj", shape("self_attn.o_proj")
    if spec.layer_has_indexer(layer):
        q_in = spec.Qr or H   # ASSUMED: without q LoRA the indexer reads the hidden state
        yield _ATTN, p + "indexer.wq_b", (spec.IH * spec.ID, q_in)
        yield _WK, p + "indexer.wk", shape("self_attn.indexer.wk")
        yield _NORM, p + "indexer.k_norm.weight", (spec.ID,)
        yield _NORM, p + "indexer.k_norm.bias", (spec.ID,)
        yield _WPROJ, p + "indexer.weights_proj", shape("self_attn.indexer.weights_proj")


def _ffn(p: str, inter: int, H: int, kind: str) -> Iterator[tuple[str, str, tuple[int, ...]]]:
    # msModelSlim's order is gate, down, up; order only affects the description's key order.
    yield kind, p + "gate_proj", (inter, H)
    yield kind, p + "down_proj", (H, inter)
    yield kind, p + "up_proj", (inter, H)


def _mlp(spec: ModelSpec, p: str, layer: int) -> Iterator[tuple[str, str, tuple[int, ...]]]:
    H = spec.H
    if not spec.layer_is_moe(layer):
        yield from _ffn(p, spec.Id, H, _MLP)
        return
    yield _ROUTER, p + "gate", (spec.E, H)
    if spec.router_bias:
        yield _BIAS, p + "gate.e_score_correction_bias", (spec.E,)
    for e in range(spec.E):
        yield from _ffn(f"{p}experts.{e}.", spec.I, H, _EXPERT)
    if spec.S:
        yield from _ffn(p + "shared_experts.", spec.I * spec.S, H, _MLP)


def _modules(spec: ModelSpec, with_mtp: bool) -> Iterator[tuple[str, str, tuple[int, ...], bool]]:
    """(kind, name, shape, is_mtp) in msModelSlim's writing order.

    Linears are named by module prefix (no ``.weight``): the recipe decides their sub-tensors.
    """
    H, V = spec.H, spec.V
    n_layers = spec.Lyr + (spec.mtp_layers if with_mtp else 0)
    for layer in range(n_layers):
        mtp = layer >= spec.Lyr
        p = f"model.layers.{layer}."
        for kind, name, shape in _attention(spec, p + "self_attn.", layer):
            yield kind, name, shape, mtp
        for kind, name, shape in _mlp(spec, p + "mlp.", layer):
            yield kind, name, shape, mtp
        yield _NORM, p + "input_layernorm.weight", (H,), mtp
        yield _NORM, p + "post_attention_layernorm.weight", (H,), mtp
        if mtp:
            yield _MTP_NORM, p + "enorm.weight", (H,), mtp
            yield _MTP_NORM, p + "hnorm.weight", (H,), mtp
            yield _MTP_NORM, p + "shared_head.norm.weight", (H,), mtp
            yield _MTP_HEAD, p + "shared_head.head.weight", (V, H), mtp
            yield _EH, p + "eh_proj", (H, 2 * H), mtp
            yield _EMBED, p + "embed_tokens.weight", (V, H), mtp
    yield _EMBED, "model.embed_tokens.weight", (V, H), False
    yield _NORM, "model.norm.weight", (H,), False
    if not spec.tie_embeddings:
        yield _HEAD, "lm_head.weight", (V, H), False


def _scheme(recipe: str, writer: str, kind: str, mtp: bool) -> str:
    """Which scheme a linear gets (FLOAT, W8A8, W8A8_DYNAMIC, W4A8_DYNAMIC or FP8), from the one
    recipe table in ``recipes.py``; kinds outside the attn/mlp/expert classes are FLOAT."""
    if kind in (_ROUTER, _EH, _WPROJ) or recipe == "bf16":
        return "FLOAT"
    if writer == "msmodelslim" and mtp:
        return "FLOAT"        # both GLM recipes exclude model.layers.{Lyr}.*
    if recipe == "fp8-block":
        return "FP8"          # DeepSeek ships kv_b_proj and indexer wk in FP8 as well
    if kind in (_KV_B, _WK):
        return "FLOAT"        # excluded: *kv_b_proj, *wk
    cls = "attn" if kind == _ATTN else ("expert" if kind == _EXPERT else "mlp")
    return linear_scheme(recipe, cls)


def linear_tensors(name: str, scheme: str, shape: tuple[int, ...], pd: str, *, down: bool | None = None) -> list[Row]:
    """The stored tensors of one linear ``name`` [out, in] under ``scheme``; ``down``: a down
    projection (W4A8's scale_bias is [out, 16] there; default: the name ends in down_proj)."""
    n, k = shape
    w = name + ".weight"
    if scheme == "FLOAT":
        return [(w, pd, shape)]
    if scheme == "W8A8":      # static: no weight_scale/offset stored; the engine derives them
        return [(w, "I8", shape), (name + ".quant_bias", "I32", (n,)),
                (name + ".input_scale", "F32", (1,)), (name + ".input_offset", "F32", (1,)),
                (name + ".deq_scale", "F32", (n,))]
    if scheme == "W8A8_DYNAMIC":
        return [(w, "I8", shape), (name + ".weight_scale", "F32", (n, 1)),
                (name + ".weight_offset", "F32", (n, 1))]
    if scheme == "W4A8_DYNAMIC":
        # two int4 per byte along the output dim; down_proj's scale_bias is [out, 16] so that
        # row-parallel TP up to 16 can split it (vllm-ascend w4a8 w2_scale_bias)
        sb = 16 if (name.endswith("down_proj") if down is None else down) else 1
        return [(w, "I8", (n // 2, k)), (name + ".weight_scale", "F32", (n, 1)),
                (name + ".weight_offset", "F32", (n, 1)), (name + ".scale_bias", "F32", (n, sb))]
    if scheme == "FP8":
        return [(w, "F8_E4M3", shape),
                (name + ".weight_scale_inv", "F32", (-(-n // FP8_BLOCK), -(-k // FP8_BLOCK)))]
    raise ValueError(scheme)


def _float_dtype(kind: str, writer: str, pd: str) -> str:
    """Stored dtype of a non-linear tensor. msModelSlim keeps what it calibrated in F32."""
    if kind == _BIAS:
        return "F32"
    if writer == "msmodelslim" and kind in (_NORM, _HEAD):
        return "F32"
    return pd


def layout_rows(spec: ModelSpec, recipe: str, *, include_mtp: bool = True,
                writer: str | None = None) -> list[tuple[str, str, tuple[int, ...], str]]:
    """(name, dtype, shape, scheme) for every tensor of the weight shards, in writing order.

    ``scheme`` is the msModelSlim description value ("FLOAT", "W8A8", ...; "FP8" for fp8-block).
    """
    fam = declared(spec)
    if fam is not None:
        return fam.layout_rows(spec, check_recipe(recipe), include_mtp=include_mtp, writer=writer)
    writer = resolve_writer(recipe, writer)
    with_mtp = include_mtp and writer != "transformers"
    pd = spec.pd
    out: list[tuple[str, str, tuple[int, ...], str]] = []
    append = out.append
    for kind, name, shape, mtp in _modules(spec, with_mtp):
        if kind in _LINEAR:
            scheme = _scheme(recipe, writer, kind, mtp)
            for row in linear_tensors(name, scheme, shape, pd):
                append((row[0], row[1], row[2], scheme))
        else:
            append((name, _float_dtype(kind, writer, pd), shape, "FLOAT"))
    return out


def expected_tensors(spec: ModelSpec, recipe: str, *, include_mtp: bool = True,
                     writer: str | None = None) -> list[Row]:
    """(name, safetensors dtype, shape) of every tensor in the weight shards, in writing order.

    The side files of msModelSlim (rot, quarot) are not included: see ``extra_files``.
    ``include_mtp`` is ignored by the ``transformers`` writer, which never writes MTP tensors.
    """
    return [(n, d, s) for n, d, s, _ in layout_rows(spec, recipe, include_mtp=include_mtp, writer=writer)]


def expected_description(spec: ModelSpec, recipe: str, *, include_mtp: bool = True,
                         writer: str | None = None) -> dict | None:
    """``quant_model_description.json`` as msModelSlim writes it, or None for other writers.

    Every shard tensor maps to its scheme; the QuaRot side files are not listed; the global
    keys follow the per-tensor keys in the order the real files show.
    """
    fam = declared(spec)
    if fam is not None:
        return fam.description(spec, check_recipe(recipe), include_mtp=include_mtp) if recipe != "bf16" else None
    writer = resolve_writer(recipe, writer)
    if writer != "msmodelslim":
        return None
    desc: dict = {name: scheme for name, _, _, scheme in
                  layout_rows(spec, recipe, include_mtp=include_mtp, writer=writer)}
    desc.update({
        "version": "1.0.0",
        "model_quant_type": MODEL_QUANT_TYPE[recipe],
        "metadata": {},
        "group_size": 0,
        "optional": {"quarot": {"rotation_map": {"global_rotation": "optional/quarot.safetensors"}}},
        "is_rot_used": True,
    })
    return desc


def extra_files(spec: ModelSpec, recipe: str, *, writer: str | None = None
                ) -> list[tuple[str, str, str, tuple[int, ...]]]:
    """(relpath, tensor name, dtype, shape) of writer side files outside the weight shards.

    msModelSlim's QuaRot writes ``rot.safetensors`` (listed in the index, loaded by the engine)
    and ``optional/quarot.safetensors`` (listed nowhere, not loaded).
    """
    if declared(spec) is not None or resolve_writer(recipe, writer) != "msmodelslim":
        return []
    H = spec.H
    return [("rot.safetensors", "rot.weight", spec.pd, (H, H)),
            ("optional/quarot.safetensors", "global_rotation", "F32", (H, H))]
