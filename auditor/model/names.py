"""Tensor name -> module address (layer, block, module path, projection, expert, suffix).

Parsing is template-cached: names differ mostly by layer and expert numbers, so each distinct
template is parsed once and the 180,000 names of a full checkpoint cost one regex match each.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

BLOCKS = ("attention", "indexer", "dense_mlp", "routed_experts", "shared_experts", "router",
          "embedding", "lm_head", "norm", "mtp", "other")
BLOCK_CODE = {b: i for i, b in enumerate(BLOCKS)}

_LAYER_RE = re.compile(r"^(?:model\.)?layers\.(\d+)\.(.*)$")
_EXPERT_RE = re.compile(r"^mlp\.experts\.(\d+)\.(.*)$")

# suffixes that name a quantization or auxiliary tensor of a linear
AUX_SUFFIXES = ("weight_scale_inv", "weight_scale_second", "weight_scale", "weight_offset", "deq_scale",
                "input_scale", "input_offset", "quant_bias", "scale_bias", "weight_packed")
MTP_ONLY = ("enorm", "hnorm", "eh_proj", "shared_head", "embed_tokens")


@dataclass(frozen=True)
class Address:
    block: str
    module: str          # module path relative to the layer (or the model), experts collapsed
    projection: str      # last module component: q_a_proj, wq_b, gate_proj, input_layernorm, ...
    suffix: str          # weight, bias, weight_scale, deq_scale, e_score_correction_bias, ...


def _split_suffix(path: str) -> tuple[str, str]:
    for s in AUX_SUFFIXES:
        if path.endswith("." + s):
            return path[: -len(s) - 1], s
    if "." in path:
        mod, suf = path.rsplit(".", 1)
        return mod, suf
    return "", path


def _block_of(module: str, projection: str, suffix: str) -> str:
    if module.startswith("self_attn.indexer"):
        return "indexer"
    if module.startswith("self_attn"):
        return "attention"
    if module == "mlp.experts":
        return "routed_experts"
    if module.startswith("mlp.shared_experts"):
        return "shared_experts"
    if module == "mlp.gate":
        return "router"
    if module.startswith("mlp."):
        return "dense_mlp"
    if projection.endswith("norm") or projection.endswith("layernorm"):
        return "norm"
    return "other"


def parse_layer_path(rest: str) -> Address:
    """Address of a tensor inside a decoder layer (the part after ``model.layers.N.``)."""
    m = _EXPERT_RE.match(rest)
    if m:
        proj_path, suffix = _split_suffix(m.group(2))
        return Address("routed_experts", "mlp.experts", proj_path, suffix)
    module, suffix = _split_suffix(rest)
    projection = module.rsplit(".", 1)[-1] if module else ""
    return Address(_block_of(module, projection, suffix), module, projection, suffix)


def parse_global_path(name: str) -> Address:
    """Address of a tensor outside the decoder layers."""
    module, suffix = _split_suffix(name)
    projection = module.rsplit(".", 1)[-1] if module else name
    if "embed_tokens" in module:
        block = "embedding"
    elif module in ("lm_head", "model.lm_head", "output"):
        block = "lm_head"
    elif projection.endswith("norm"):
        block = "norm"
    else:
        block = "other"
    return Address(block, module or name, projection, suffix)


@dataclass
class AddressColumns:
    layer: np.ndarray       # int32, -1 outside decoder layers
    expert: np.ndarray      # int32, -1 when not a routed expert
    block: np.ndarray       # int8 code into BLOCKS
    module: np.ndarray      # object: module path (experts collapsed to "mlp.experts")
    projection: np.ndarray  # object
    suffix: np.ndarray      # object


def parse_names(names: np.ndarray, n_main_layers: int | None = None) -> AddressColumns:
    """Vectorised-by-template parse of every tensor name. Layers >= n_main_layers are MTP layers:
    their block becomes ``mtp`` (the projection keeps the detail)."""
    n = len(names)
    layer = np.full(n, -1, dtype=np.int32)
    expert = np.full(n, -1, dtype=np.int32)
    block = np.zeros(n, dtype=np.int8)
    module = np.empty(n, dtype=object)
    projection = np.empty(n, dtype=object)
    suffix = np.empty(n, dtype=object)
    cache: dict[str, Address] = {}
    lmatch = _LAYER_RE.match
    ematch = _EXPERT_RE.match
    for i, name in enumerate(names):
        m = lmatch(name)
        if m is None:
            addr = cache.get(name)
            if addr is None:
                addr = cache[name] = parse_global_path(name)
        else:
            layer[i] = int(m.group(1))
            rest = m.group(2)
            em = ematch(rest)
            if em is not None:
                expert[i] = int(em.group(1))
                key = "E:" + em.group(2)
            else:
                key = rest
            addr = cache.get(key)
            if addr is None:
                addr = cache[key] = parse_layer_path(rest if em is None else "mlp.experts.0." + em.group(2))
        block[i] = BLOCK_CODE[addr.block]
        module[i] = addr.module
        projection[i] = addr.projection
        suffix[i] = addr.suffix
    if n_main_layers is not None:
        block[layer >= n_main_layers] = BLOCK_CODE["mtp"]
    return AddressColumns(layer, expert, block, module, projection, suffix)
