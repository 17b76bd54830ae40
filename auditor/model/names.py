"""Tensor name -> module address (layer, block, module path, projection, expert, suffix).

Parsing is template-cached: names differ mostly by layer and expert numbers, so each distinct
template is parsed once and the 180,000 names of a full checkpoint cost one regex match each.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from ..inventory.namespans import MAX_WORDS, NameSpans, span_columns, span_hash, u64_view

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


_MASK_DIGITS = bytes.maketrans(b"0123456789", b"##########")
_WHOLE_RUN = re.compile(rb"(?:^|(?<=\.))[0-9]+(?=\.|$)")


def _templates(names: NameSpans) -> tuple[list[bytes], np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Name templates: every dot-separated all-digit component becomes '#' (whole components
    only, so ``w13`` or ``fp8`` keep their digits), with no per-byte Python work.

    One C-speed ``bytes.translate`` masks every digit of the buffer holding the names; names
    that agree after masking differ only in digits at fixed positions, so each masked group is
    parsed once from one representative and its numbers are read for all members with numpy
    fancy indexing. Returns (distinct templates, template index per name, first and second
    numeric component per name (-1 when absent), index of one name per template).
    """
    n = len(names)
    blob = names.buf
    masked = blob.translate(_MASK_DIGITS)
    buf = np.frombuffer(blob, dtype=np.uint8)
    starts, length = names.start, names.length
    mcode = _mask_groups(masked, starts, length)
    if mcode is None:
        lines = [masked[a:b] for a, b in zip(starts.tolist(), (starts + length).tolist())]
        # code = index of the first line with the same mask, via C-level map (no Python frame per name)
        first_seen: dict[bytes, int] = {}
        raw = np.fromiter(map(first_seen.setdefault, lines, range(n)), dtype=np.int64, count=n)
        _, mcode = np.unique(raw, return_inverse=True)
    ids = range(int(mcode.max()) + 1 if n else 0)
    order = np.argsort(mcode, kind="stable")
    bounds = np.concatenate(([0], np.cumsum(np.bincount(mcode, minlength=len(ids)))))
    first = np.full(n, -1, dtype=np.int64)
    second = np.full(n, -1, dtype=np.int64)
    code = np.zeros(n, dtype=np.int32)
    tids: dict[bytes, int] = {}
    templates: list[bytes] = []
    reps: list[int] = []
    for g in range(len(ids)):
        members = order[bounds[g]:bounds[g + 1]]
        r = int(members[0])
        a_r, b_r = int(starts[r]), int(starts[r] + length[r])
        line = blob[a_r:b_r]
        runs = [(m.start(), m.end()) for m in _WHOLE_RUN.finditer(line)]
        # digits outside whole components must agree across the group (w1 vs w3), else split it
        fixed = [i for i, ch in enumerate(masked[a_r:b_r]) if ch == 35 and not any(a <= i < b for a, b in runs)]
        if fixed and len(members) > 1:
            same = (buf[starts[members][:, None] + np.array(fixed)] == buf[starts[r] + np.array(fixed)]).all(axis=1)
            if not same.all():
                for m in members[~same].tolist():      # rare: exact per-name templates
                    _assign(blob[starts[m]:starts[m] + length[m]], m, code, first, second, tids, templates,
                            reps)
                members = members[same]
        _assign_group(line, runs, members, starts, buf, code, first, second, tids, templates, reps)
    return templates, code, first, second, np.array(reps, dtype=np.int64)


def _mask_groups(masked: bytes, starts: np.ndarray, length: np.ndarray) -> np.ndarray | None:
    """Group number per name (numbered by first appearance) of equal masked lines, from 8-byte
    word columns and a hash instead of 180,000 bytes objects in a dict; None when a line is too
    long for it or two different lines share a hash (the caller then groups through a dict)."""
    n = len(starts)
    k = (int(length.max()) + 7) // 8 if n else 0
    if k > MAX_WORDS:
        return None
    cols = span_columns(u64_view(masked), starts, length, k)
    _, first, inv = np.unique(span_hash(cols, length), return_index=True, return_inverse=True)
    rep = first[inv]
    if not np.array_equal(length[rep], length) or any(not np.array_equal(c[rep], c) for c in cols):
        return None
    rank = np.empty(len(first), dtype=np.int64)
    rank[np.argsort(first)] = np.arange(len(first))     # groups in order of first appearance
    return rank[inv]


def _template_of(line: bytes, runs: list[tuple[int, int]]) -> bytes:
    out, prev = [], 0
    for a, b in runs:
        out.append(line[prev:a])
        out.append(b"#")
        prev = b
    out.append(line[prev:])
    return b"".join(out)


def _assign_group(line: bytes, runs: list[tuple[int, int]], members: np.ndarray, starts: np.ndarray,
                  buf: np.ndarray, code: np.ndarray, first: np.ndarray, second: np.ndarray,
                  tids: dict[bytes, int], templates: list[bytes], reps: list[int]) -> None:
    """Give every member the group's template id and read its first two whole numbers."""
    tmpl = _template_of(line, runs)
    tid = tids.get(tmpl)
    if tid is None:
        tid = tids[tmpl] = len(templates)
        templates.append(tmpl)
        reps.append(int(members[0]))
    code[members] = tid
    for k, (a, b) in enumerate(runs[:2]):
        vals = np.zeros(len(members), dtype=np.int64)
        for pos in range(a, b):
            vals = vals * 10 + (buf[starts[members] + pos].astype(np.int64) - 48)
        (first if k == 0 else second)[members] = vals


def _assign(line: bytes, m: int, code, first, second, tids, templates, reps) -> None:
    runs = [(x.start(), x.end()) for x in _WHOLE_RUN.finditer(line)]
    tmpl = _template_of(line, runs)
    tid = tids.get(tmpl)
    if tid is None:
        tid = tids[tmpl] = len(templates)
        templates.append(tmpl)
        reps.append(m)
    code[m] = tid
    for k, (a, b) in enumerate(runs[:2]):
        (first if k == 0 else second)[m] = int(line[a:b])


def parse_names(names: NameSpans, n_main_layers: int | None = None) -> AddressColumns:
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
        name = names.get(int(rep[t]))
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
