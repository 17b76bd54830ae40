"""Tensor name -> module address (layer, block, module path, projection, expert, suffix).

Parsing is template-cached: names differ mostly by layer and expert numbers, so each distinct
template is parsed once and the 180,000 names of a full checkpoint cost one regex match each.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from ..inventory.fast import names as fast_names
from ..inventory.fast.words import fold_digits, u64_view
from ..inventory.namespans import NameSpans

BLOCKS = ("attention", "indexer", "dense_mlp", "routed_experts", "shared_experts", "router",
          "embedding", "lm_head", "norm", "mtp", "other")
BLOCK_CODE = {b: i for i, b in enumerate(BLOCKS)}

_LAYER_RE = re.compile(r"^(?:model\.)?layers\.(\d+)\.(.*)$")
_EXPERT_RE = re.compile(r"^mlp\.experts\.(\d+)\.(.*)$")

# suffixes that name a quantization or auxiliary tensor of a linear
AUX_SUFFIXES = ("weight_scale_inv", "weight_scale_second", "weight_scale", "weight_offset", "deq_scale",
                "input_scale", "input_offset", "quant_bias", "scale_bias", "weight_packed")


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


# DeepSeek's own checkpoint names (DeepSeek-V4: ``layers.N.attn.wq_a``, ``layers.N.ffn.experts.E.w1``,
# ``mtp.J.*``, ``embed`` / ``head``) read as the engine's loader renames them
# (vllm-ascend ``models/deepseek_v4/model.py:1072-1108``@182b75ea, ``mtp.py:259-330``), so every module
# has one address whichever spelling the checkpoint uses.
_NATIVE_LAYER_PREFIXES = (("attn_norm.", "input_layernorm."), ("ffn_norm.", "post_attention_layernorm."),
                          ("attn.", "self_attn."), ("ffn.", "mlp."))
_NATIVE_PROJ = {"w1": "gate_proj", "w2": "down_proj", "w3": "up_proj"}
_NATIVE_MTP_PREFIXES = (("emb.tok_emb.", "embed_tokens."), ("head.", "shared_head.head."),
                        ("norm.", "shared_head.norm."))
_NATIVE_GLOBALS = {"embed.weight": "model.embed_tokens.weight", "head.weight": "lm_head.weight",
                   "norm.weight": "model.norm.weight"}
_NATIVE_SPELLING = {v: k for k, v in _NATIVE_GLOBALS.items()}


def spellings(name: str) -> tuple[str, ...]:
    """A model-level tensor's name and its DeepSeek-native spelling (``model.embed_tokens.weight``,
    ``embed.weight``): a description may key it either way."""
    native = _NATIVE_SPELLING.get(name)
    return (name, native) if native else (name,)


_MTP_RE = re.compile(r"^mtp\.(\d+)\.(.*)$")


#: DeepSeek-native linears whose block scale is ``<linear>.scale`` (the HF DeepSeek-V4 release): a
#: linear's scale reads as ``weight_scale_inv`` (FP8 block, Fp8LinearMethod's name), a routed expert's
#: as ``weight_scale`` (MXFP4 per-32 scales, Mxfp4MoEMethod's name), as upstream vLLM's loader maps them
#: (``_make_deepseek_v4_weights_mapper``, vllm/models/deepseek_v4/nvidia/model.py@3296c77f)
_NATIVE_MTP_LINEARS = ("e_proj.", "h_proj.")


def _native_scale(rest: str) -> str:
    if not rest.endswith(".scale"):
        return rest
    if rest.startswith("mlp.experts."):
        return rest[:-len("scale")] + "weight_scale"
    return rest[:-len("scale")] + "weight_scale_inv"


def canonical_layer_path(rest: str, mtp: bool = False) -> str:
    """The part of a tensor name after ``layers.N.`` (or ``mtp.J.``) in the HF spelling."""
    if mtp:
        for a, b in _NATIVE_MTP_PREFIXES:
            if rest.startswith(a):
                return b + rest[len(a):]
        if rest.startswith(_NATIVE_MTP_LINEARS):
            return _native_scale(rest)
    for a, b in _NATIVE_LAYER_PREFIXES:
        if rest.startswith(a):
            rest = b + rest[len(a):]
            break
    else:
        return rest
    if rest.startswith(("mlp.experts.", "mlp.shared_experts.")):
        rest = _renamed_proj(rest, _NATIVE_PROJ)
    elif rest == "mlp.gate.bias":
        rest = "mlp.gate.e_score_correction_bias"
    return _native_scale(rest)


_HF_PROJ = {v: k for k, v in _NATIVE_PROJ.items()}


def _renamed_proj(rest: str, table: dict[str, str]) -> str:
    """``mlp.experts.E.P...`` / ``mlp.shared_experts.P...`` with the projection word P renamed by ``table``
    (w1/w2/w3 <-> gate/down/up_proj, one direction per table)."""
    parts = rest.split(".")
    k = 3 if parts[1] == "experts" else 2
    if len(parts) > k and parts[k] in table:
        parts[k] = table[parts[k]]
    return ".".join(parts)


def native_layer_path(rest: str, mtp: bool = False) -> str:
    """The DeepSeek-native spelling of a layer path in the HF spelling (a module or a tensor under
    ``layers.N.`` / ``mtp.J.``): the inverse of ``canonical_layer_path`` on the names a writer emits,
    read from the same tables, so a family writes the names this module reads back."""
    if mtp:
        for a, b in _NATIVE_MTP_PREFIXES:
            if rest.startswith(b):
                return a + rest[len(b):]
    if rest == "mlp.gate.e_score_correction_bias":
        rest = "mlp.gate.bias"
    elif rest.startswith(("mlp.experts.", "mlp.shared_experts.")):
        rest = _renamed_proj(rest, _HF_PROJ)
    for a, b in _NATIVE_LAYER_PREFIXES:
        if rest.startswith(b):
            return a + rest[len(b):]
    return rest


def native_global(name: str) -> str:
    """The DeepSeek-native spelling of a model-level tensor (``model.embed_tokens.weight`` ->
    ``embed.weight``); other names are spelled alike."""
    return _NATIVE_SPELLING.get(name, name)


def parse_global_path(name: str) -> Address:
    """Address of a tensor outside the decoder layers."""
    name = _NATIVE_GLOBALS.get(name, name)
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


def _unique_rows(keys: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """``np.unique(keys, axis=0, return_inverse=True)`` of uint8 rows: the same rows in the same
    (lexicographic) order and the same inverse. Rows of up to 8 bytes are packed big-endian into
    one integer each first: equal rows pack equal and the integer order is the row order, and
    np.unique over integers is ~10x faster than over rows (DeepSeek-V4: 45 groups, ~60 ms)."""
    width = keys.shape[1]
    if width > 8 or not len(keys):
        uniq, inv = np.unique(keys, axis=0, return_inverse=True)
        return uniq, np.asarray(inv).ravel()
    packed = np.zeros(len(keys), dtype=np.uint64)
    for i in range(width):
        packed <<= np.uint64(8)
        packed |= keys[:, i].astype(np.uint64)
    first, inv = np.unique(packed, return_index=True, return_inverse=True)[1:]
    return keys[first], np.asarray(inv).ravel()


def _templates(names: NameSpans) -> tuple[list[bytes], np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Name templates: every dot-separated all-digit component becomes '#' (whole components
    only, so ``w13`` or ``fp8`` keep their digits), with no per-byte Python work.

    Every digit is masked in the names' 8-byte word columns (the ones the index check and the
    description match hash anyway); names that agree after masking differ only in digits at
    fixed positions, so each masked group is parsed once from one representative and its
    numbers are read for all members with numpy fancy indexing. Returns (distinct templates, template index per name, first and second
    numeric component per name (-1 when absent), index of one name per template).
    """
    n = len(names)
    blob = names.buf
    buf = np.frombuffer(blob, dtype=np.uint8)
    starts, length = names.start, names.length
    literal_hash = blob.find(b"#") >= 0   # names are the only free text in the buffer
    grouped = fast_names.mask_groups(names)
    if grouped is None:
        # bytes(): the scanner's buffer is a bytearray, whose slices cannot be dict keys
        lines = [bytes(blob[a:b]).translate(_MASK_DIGITS) for a, b in zip(starts.tolist(), (starts + length).tolist())]
        # code = index of the first line with the same mask, via C-level map (no Python frame per name)
        first_seen: dict[bytes, int] = {}
        raw = np.fromiter(map(first_seen.setdefault, lines, range(n)), dtype=np.int64, count=n)
        group_first, mcode = np.unique(raw, return_inverse=True)
    else:
        mcode, group_first = grouped
    G = len(group_first)
    sizes = np.bincount(mcode, minlength=G)
    members_of = None                     # rows by group, built only if a group must be checked
    g_tid = np.zeros(G, dtype=np.int32)
    g_run = np.full((2, G), -1, dtype=np.int64)     # offset of the first two numbers in the name
    g_len = np.zeros((2, G), dtype=np.int64)
    single: list[int] = []                # rows split off their group: templates of their own
    sub_groups: list[tuple[int, np.ndarray]] = []   # (group, rows) split off by fixed digits
    tids: dict[bytes, int] = {}
    templates: list[bytes] = []
    reps: list[int] = []
    for g, r in enumerate(group_first.tolist()):
        a_r, b_r = int(starts[r]), int(starts[r] + length[r])
        line = bytes(blob[a_r:b_r])
        runs = [(m.start(), m.end()) for m in _WHOLE_RUN.finditer(line)]
        # digits outside whole components must agree across the group (w1 vs w3), else split it
        # ('#' too: a literal '#' and a digit mask alike)
        fixed = [i for i, ch in enumerate(line) if (48 <= ch <= 57 or ch == 35)
                 and not any(a <= i < b for a, b in runs)]
        # and every member needs digits where the representative has its numbers (not a '#')
        run_pos = [i for a, b in runs for i in range(a, b)] if literal_hash else []
        if (fixed or run_pos) and sizes[g] > 1:
            if members_of is None:
                order = np.argsort(mcode, kind="stable")
                bounds = np.concatenate(([0], np.cumsum(sizes)))
                members_of = lambda k: order[bounds[k]:bounds[k + 1]]   # noqa: E731
            members = members_of(g)
            at = starts[members][:, None]
            fx = np.array(fixed, dtype=np.int64)
            keys = buf[at + fx]
            same = (keys == buf[a_r + fx]).all(axis=1)
            digits = np.ones(len(members), dtype=bool)
            if run_pos:
                digits = (buf[at + np.array(run_pos, dtype=np.int64)] - np.uint8(48) <= 9).all(axis=1)
            # members that differ only in those fixed digits (DeepSeek's w1 / w2 / w3 under one mask)
            # form sub-groups of their own, each parsed once: their numbers sit at the same offsets
            other = ~same & digits
            if other.any():
                uniq, inv = _unique_rows(keys[other])
                sub_rows = members[other]
                for u in range(len(uniq)):
                    rows_u = sub_rows[np.asarray(inv).ravel() == u]
                    sub_groups.append((g, rows_u))
            for m in members[~digits].tolist():          # rare: exact per-name templates
                single.append(m)
                _template_id(_template_of(blob[starts[m]:starts[m] + length[m]], _runs(blob[starts[m]:starts[m] + length[m]])),
                             m, tids, templates, reps)
        g_tid[g] = _template_id(_template_of(line, runs), r, tids, templates, reps)
        for k, (a, b) in enumerate(runs[:2]):
            g_run[k, g], g_len[k, g] = a, b - a
    if sub_groups:
        mcode = np.array(mcode, dtype=np.int64, copy=True)
        extra_tid = np.zeros(len(sub_groups), dtype=np.int32)
        for j, (g, rows_u) in enumerate(sub_groups):
            r = int(rows_u[0])
            line = bytes(blob[starts[r]:starts[r] + length[r]])
            extra_tid[j] = _template_id(_template_of(line, _runs(line)), r, tids, templates, reps)
            mcode[rows_u] = G + j
        parent = np.array([g for g, _ in sub_groups], dtype=np.int64)
        g_tid = np.concatenate((g_tid, extra_tid))
        g_run = np.concatenate((g_run, g_run[:, parent]), axis=1)
        g_len = np.concatenate((g_len, g_len[:, parent]), axis=1)
    # every row at once: its group's template, and its two numbers at the group's offsets
    code = g_tid[mcode]
    first = np.full(n, -1, dtype=np.int64)
    second = np.full(n, -1, dtype=np.int64)
    words = u64_view(blob)
    for k, out in ((0, first), (1, second)):
        off, width = g_run[k][mcode], g_len[k][mcode]
        rows = np.flatnonzero((off >= 0) & (width <= 8))   # one 8-byte load and a SWAR fold
        out[rows] = fold_digits(words[starts[rows] + off[rows]], width[rows]).astype(np.int64)
        for i in np.flatnonzero(width > 8).tolist():       # over 8 digits: not a layer or expert id
            out[i] = _number(blob[starts[i] + off[i]:starts[i] + off[i] + width[i]])
    for m in single:
        line = blob[starts[m]:starts[m] + length[m]]
        runs = _runs(line)
        code[m] = tids[_template_of(line, runs)]
        first[m] = _number(line[runs[0][0]:runs[0][1]]) if runs else -1
        second[m] = _number(line[runs[1][0]:runs[1][1]]) if len(runs) > 1 else -1
    return templates, code, first, second, np.array(reps, dtype=np.int64)


def _number(digits: bytes) -> int:
    """A digit run as an id column value; a run too wide for int64 (a 300-digit name part) is no
    layer or expert id (-1), not an overflow."""
    return int(digits) if len(digits) <= 18 else -1


def _runs(line: bytes) -> list[tuple[int, int]]:
    return [(m.start(), m.end()) for m in _WHOLE_RUN.finditer(line)]


def _template_id(tmpl: bytes, row: int, tids: dict[bytes, int], templates: list[bytes], reps: list[int]) -> int:
    """Id of template ``tmpl``, numbered by first appearance (``row`` represents a new one)."""
    tid = tids.get(tmpl)
    if tid is None:
        tid = tids[tmpl] = len(templates)
        templates.append(tmpl)
        reps.append(row)
    return tid


def _template_of(line: bytes, runs: list[tuple[int, int]]) -> bytes:
    """``line`` with each whole-number run as "#" (a literal "#" is kept apart as "\\#")."""
    out, prev = [], 0
    for a, b in runs:
        out.append(bytes(line[prev:a]).replace(b"#", b"\\#"))
        out.append(b"#")
        prev = b
    out.append(bytes(line[prev:]).replace(b"#", b"\\#"))
    return b"".join(out)


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
    t_mtp = np.zeros(T, dtype=bool)         # DeepSeek-native ``mtp.J.``: layer n_main_layers + J
    t_block = np.zeros(T, dtype=np.int8)
    t_mod = np.zeros(T, dtype=np.int32)
    t_suf = np.zeros(T, dtype=np.int32)
    t_module = np.empty(T, dtype=object)
    t_proj = np.empty(T, dtype=object)
    t_suffix = np.empty(T, dtype=object)
    def codes_of(addr: Address, expert_module: bool) -> tuple[int, int]:
        mkey = f"{addr.module}.{addr.projection}" if expert_module else addr.module
        if mkey not in mod_ids:
            mod_ids[mkey] = len(modules)
            modules.append(mkey)
        if addr.suffix not in suf_ids:
            suf_ids[addr.suffix] = len(suffixes)
            suffixes.append(addr.suffix)
        return mod_ids[mkey], suf_ids[addr.suffix]

    per_name: list[int] = []          # templates whose address holds one of the masked numbers
    for t in range(T):
        addr, is_layer, expert_module = _address(names.get(int(rep[t])))
        head = templates[t].split(b".#.", 1)[0]
        t_layer[t] = is_layer and first[rep[t]] >= 0 and head in (b"model.layers", b"layers", b"mtp")
        t_mtp[t] = head == b"mtp"
        t_expert[t] = expert_module
        t_block[t] = BLOCK_CODE[addr.block]
        t_mod[t], t_suf[t] = codes_of(addr, expert_module)
        t_module[t], t_proj[t], t_suffix[t] = addr.module, addr.projection, addr.suffix
        if _digit_dependent(templates[t].decode("utf-8", "replace")):
            per_name.append(t)
    block, module, proj, suffix = t_block[code], t_module[code], t_proj[code], t_suffix[code]
    modcode, sufcode = t_mod[code], t_suf[code]
    for i in np.flatnonzero(np.isin(code, per_name)).tolist() if per_name else []:
        addr, _, expert_module = _address(names.get(i))      # rare: e.g. model.blocks.3.weight
        block[i] = BLOCK_CODE[addr.block]
        module[i], proj[i], suffix[i] = addr.module, addr.projection, addr.suffix
        modcode[i], sufcode[i] = codes_of(addr, expert_module)
    layer = np.where(t_layer[code], first, -1)
    if t_mtp.any():
        layer = np.where(t_mtp[code], first + (n_main_layers or 0), layer)
    layer = layer.astype(np.int32)
    expert = np.where(t_expert[code], second, -1).astype(np.int32)
    if n_main_layers is not None:
        block = np.where(layer >= n_main_layers, BLOCK_CODE["mtp"], block).astype(np.int8)
    return AddressColumns(layer, expert, block, module, proj, suffix, modcode, sufcode, modules, suffixes)


_LAYER_TEMPLATE = re.compile(r"^(?:(?:model\.)?layers|mtp)\.#\.(.*)$")
_EXPERTS_TEMPLATES = ("mlp.experts.#.", "ffn.experts.#.")


def _address(name: str) -> tuple[Address, bool, bool]:
    """(address, inside a decoder layer, a routed expert's tensor) of one name."""
    m = _LAYER_RE.match(name)
    mtp = False
    if m is None:
        m = _MTP_RE.match(name)
        if m is None:
            return parse_global_path(name), False, False
        mtp = True
    rest = canonical_layer_path(m.group(2), mtp)
    return parse_layer_path(rest), True, _EXPERT_RE.match(rest) is not None


def _digit_dependent(template: str) -> bool:
    """Whether names of this template differ in module/projection/suffix, not only in their
    layer and expert numbers (the template's '#' stands for every whole number)."""
    m = _LAYER_TEMPLATE.match(template)
    if m is None:
        return "#" in template
    rest = m.group(1)
    for head in _EXPERTS_TEMPLATES:
        if rest.startswith(head):
            return "#" in rest[len(head):]
    return "#" in rest
