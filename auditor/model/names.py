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
    modcode: np.ndarray     # int32 code into ``modules`` (experts: "mlp.experts.<proj>")
    sufcode: np.ndarray     # int32 code into ``suffixes``
    modules: list[str]
    suffixes: list[str]


def _templates(names: np.ndarray) -> tuple[list[bytes], np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Vectorised over one byte buffer: every dot-separated all-digit component becomes '#'.

    Returns (distinct templates, template index per name, first and second numeric component per
    name (-1 when absent), index of one name per template). Whole components only, so ``w13`` or ``fp8`` keep their digits.
    """
    n = len(names)
    buf = np.frombuffer(("\n".join(names.tolist()) + "\n").encode("utf-8"), dtype=np.uint8)
    nl = np.flatnonzero(buf == 10)
    is_digit = (buf >= 48) & (buf <= 57)
    # digit runs
    edge = np.diff(np.concatenate(([0], is_digit.view(np.int8), [0])))
    run_s = np.flatnonzero(edge == 1)
    run_e = np.flatnonzero(edge == -1)          # exclusive
    before = np.where(run_s > 0, buf[np.maximum(run_s - 1, 0)], 46)
    after = buf[np.minimum(run_e, len(buf) - 1)]
    whole = ((before == 46) | (before == 10) | (run_s == 0)) & ((after == 46) | (after == 10))
    run_s, run_e = run_s[whole], run_e[whole]
    # values of the whole-component runs (at most 18 digits)
    vals = np.zeros(len(run_s), dtype=np.int64)
    for k in range(int((run_e - run_s).max()) if len(run_s) else 0):
        pos = run_s + k
        ok = pos < run_e
        vals[ok] = vals[ok] * 10 + (buf[pos[ok]] - 48)
    line_of_run = np.searchsorted(nl, run_s)
    first = np.full(n, -1, dtype=np.int64)
    second = np.full(n, -1, dtype=np.int64)
    if len(run_s):
        is_first = np.concatenate(([True], line_of_run[1:] != line_of_run[:-1]))
        first[line_of_run[is_first]] = vals[is_first]
        nxt = np.flatnonzero(~is_first)
        is_second = np.zeros(len(run_s), dtype=bool)
        is_second[nxt] = is_first[nxt - 1]
        second[line_of_run[is_second]] = vals[is_second]
    # template bytes: drop every digit of a run but its first, which becomes '#'
    keep = np.ones(len(buf), dtype=bool)
    out = buf.copy()
    if len(run_s):
        cover = np.zeros(len(buf) + 1, dtype=np.int64)
        np.add.at(cover, run_s + 1, 1)
        np.add.at(cover, run_e, -1)
        keep[np.cumsum(cover[:-1]) > 0] = False
        out[run_s] = 35
    tbuf = out[keep]
    tnl = np.flatnonzero(tbuf == 10)
    tstart = np.concatenate(([0], tnl[:-1] + 1))
    # polynomial hash of each template line, wrapping uint64 arithmetic
    pos = np.arange(len(tbuf), dtype=np.int64) - np.repeat(tstart, tnl - tstart + 1)
    pw = np.cumprod(np.full(int(pos.max()) + 1, 1099511628211, dtype=np.uint64), dtype=np.uint64)
    with np.errstate(over="ignore"):
        h = np.add.reduceat(tbuf.astype(np.uint64) * pw[pos], tstart)
    _, rep, code = np.unique(h, return_index=True, return_inverse=True)
    templates = [tbuf[tstart[r]:tnl[r]].tobytes() for r in rep]
    return templates, code.astype(np.int32).reshape(-1), first, second, rep


def parse_names(names: np.ndarray, n_main_layers: int | None = None) -> AddressColumns:
    """Parse every tensor name: a numpy pass finds the templates (numbers replaced), then each
    distinct template (a few dozen in a 180,000-tensor checkpoint) is parsed once in Python."""
    n = len(names)
    modules: list[str] = []
    suffixes: list[str] = []
    mod_ids: dict[str, int] = {}
    suf_ids: dict[str, int] = {}
    if n == 0:
        e = np.zeros(0, dtype=np.int32)
        return AddressColumns(e, e.copy(), np.zeros(0, np.int8), np.zeros(0, object), np.zeros(0, object),
                              np.zeros(0, object), e.copy(), e.copy(), modules, suffixes)
    templates, code, first, second, rep = _templates(names)
    T = len(templates)
    t_layer = np.zeros(T, dtype=bool)
    t_expert = np.zeros(T, dtype=bool)
    t_block = np.zeros(T, dtype=np.int8)
    t_mod = np.zeros(T, dtype=np.int32)
    t_suf = np.zeros(T, dtype=np.int32)
    t_module = np.empty(T, dtype=object)
    t_proj = np.empty(T, dtype=object)
    t_suffix = np.empty(T, dtype=object)
    for t in range(T):
        name = str(names[rep[t]])
        m = _LAYER_RE.match(name)
        expert_module = False
        if m is None:
            addr = parse_global_path(name)
        else:
            t_layer[t] = first[rep[t]] >= 0 and templates[t].split(b".#.", 1)[0] in (b"model.layers", b"layers")
            rest = m.group(2)
            em = _EXPERT_RE.match(rest)
            expert_module = em is not None
            t_expert[t] = expert_module
            addr = parse_layer_path(rest)
        mkey = f"{addr.module}.{addr.projection}" if expert_module else addr.module
        if mkey not in mod_ids:
            mod_ids[mkey] = len(modules)
            modules.append(mkey)
        if addr.suffix not in suf_ids:
            suf_ids[addr.suffix] = len(suffixes)
            suffixes.append(addr.suffix)
        t_block[t] = BLOCK_CODE[addr.block]
        t_mod[t], t_suf[t] = mod_ids[mkey], suf_ids[addr.suffix]
        t_module[t], t_proj[t], t_suffix[t] = addr.module, addr.projection, addr.suffix
    layer = np.where(t_layer[code], first, -1).astype(np.int32)
    expert = np.where(t_expert[code], second, -1).astype(np.int32)
    block = t_block[code]
    if n_main_layers is not None:
        block = np.where(layer >= n_main_layers, BLOCK_CODE["mtp"], block).astype(np.int8)
    return AddressColumns(layer, expert, block, t_module[code], t_proj[code], t_suffix[code],
                          t_mod[code], t_suf[code], modules, suffixes)
