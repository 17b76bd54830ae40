"""Classify every stored tensor: category (float / int8 / scale / offset), a finer kind, its module
address and the scheme the quant description gives it; and report consistency findings.

Category ``derived`` is never given to a stored tensor: only the engine creates those
(see ``auditor.engines``).
"""
from __future__ import annotations

import heapq
from dataclasses import dataclass, field

import numpy as np

from ..inventory.quantdesc import QuantDescription
from ..inventory.table import TensorTable
from .names import BLOCKS, AddressColumns, parse_names

CATEGORIES = ("float", "int8", "scale", "offset", "derived")
CAT_CODE = {c: i for i, c in enumerate(CATEGORIES)}

SCALE_SUFFIXES = {"weight_scale", "deq_scale", "input_scale", "weight_scale_inv", "weight_scale_second"}
OFFSET_SUFFIXES = {"weight_offset", "input_offset", "quant_bias", "scale_bias"}
LOWBIT_DTYPES = {"I8": "int8", "U8": "uint8", "F8_E4M3": "fp8_e4m3", "F8_E5M2": "fp8_e5m2",
                 "F4": "fp4"}
FLOAT_DTYPES = {"F64", "F32", "F16", "BF16"}

MAX_LISTED = 50     # findings of one kind listed by name before the rest are counted

# Sibling tensors each quantized scheme must store next to its weight (msModelSlim ascendv1 format,
# engine spec §1.1; FP8 block checkpoints carry weight_scale_inv).
REQUIRED_SIBLINGS = {
    "W8A8": ("quant_bias", "input_scale", "input_offset", "deq_scale"),
    "W8A8_DYNAMIC": ("weight_scale", "weight_offset"),
    "W4A8_DYNAMIC": ("weight_scale", "weight_offset"),
    "FP8_BLOCK": ("weight_scale_inv",),
    "MXFP4": ("weight_scale",),
}


@dataclass
class Finding:
    severity: str       # error | warning | info
    tensor: str | None
    message: str

    def to_dict(self) -> dict:
        return {"severity": self.severity, "tensor": self.tensor, "message": self.message}


@dataclass
class ClassifiedTable:
    table: TensorTable
    addr: AddressColumns
    category: np.ndarray    # int8 code into CATEGORIES
    kind: np.ndarray        # object
    scheme: np.ndarray      # object: description value, or inferred from dtypes ("" if unknown)
    findings: list[Finding] = field(default_factory=list)
    scheme_code: np.ndarray | None = None   # int32 code into ``scheme_names`` (same information)
    scheme_names: list[str] = field(default_factory=list)
    in_desc: np.ndarray | None = None       # bool: the name has its own description entry

    def __len__(self) -> int:
        return len(self.table)

    def summary(self, loaded_only: bool = False) -> dict[str, dict[str, int]]:
        mask = self.table.loaded if loaded_only else np.ones(len(self), dtype=bool)
        counts = np.bincount(self.category[mask], minlength=len(CATEGORIES))
        nbytes = np.bincount(self.category[mask], weights=self.table.nbytes[mask], minlength=len(CATEGORIES))
        return {c: {"count": int(counts[i]), "bytes": int(nbytes[i])} for i, c in enumerate(CATEGORIES)}

    def by_block(self, loaded_only: bool = True) -> dict[str, int]:
        mask = self.table.loaded if loaded_only else np.ones(len(self), dtype=bool)
        b = np.bincount(self.addr.block[mask], weights=self.table.nbytes[mask], minlength=len(BLOCKS))
        return {blk: int(b[i]) for i, blk in enumerate(BLOCKS) if b[i]}


def _float_kind(block: str, projection: str, suffix: str, name: str) -> str:
    if suffix == "e_score_correction_bias":
        return "router_bias"
    if name in ("rot.weight", "global_rotation") or projection == "rot":
        return "rotation"
    if projection.endswith("norm"):
        return "norm_bias" if suffix == "bias" else "norm"
    if projection == "embed_tokens":
        return "embedding"
    if projection in ("lm_head", "head"):
        return "lm_head"
    if block == "router" or projection == "gate":
        return "router"
    return "bias" if suffix == "bias" else "linear"


def infer_scheme(dtype: str, siblings: set[str]) -> str:
    """Scheme of a linear from its stored dtypes when there is no quant description."""
    if dtype in FLOAT_DTYPES:
        return "FLOAT"
    if dtype.startswith("F8"):
        return "FP8_BLOCK" if "weight_scale_inv" in siblings else "FP8"
    if dtype == "F4":
        # e2m1 with per-32 UE8M0 scales (the DeepSeek-V4 HF release's routed experts, expert_dtype fp4)
        return "MXFP4" if "weight_scale" in siblings else "FP4"
    if dtype in ("I8", "U8"):
        if "deq_scale" in siblings:
            return "W8A8"
        if "scale_bias" in siblings:
            return "W4A8_DYNAMIC"
        if "weight_scale" in siblings:
            return "W8A8_DYNAMIC"
        return "INT8"
    return ""


def classify(table: TensorTable, n_main_layers: int | None, desc: QuantDescription | None) -> ClassifiedTable:
    """Vectorised over templates: every per-tensor attribute is a function of (name template,
    dtype, scheme), so Python work is per distinct template, not per tensor. A scanned table
    whose inputs are unchanged since an earlier run is read from the scan cache (classcache)."""
    from . import classcache
    key = classcache.key_for(table, n_main_layers, desc)
    if key is not None:
        hit = classcache.load(key, table)
        if hit is not None:
            return hit
    ct = _classify(table, n_main_layers, desc)
    if key is not None:
        classcache.store(key, ct)
    return ct


def _classify(table: TensorTable, n_main_layers: int | None, desc: QuantDescription | None) -> ClassifiedTable:
    addr = parse_names(table.name_spans, n_main_layers)
    n = len(table)
    dtypes = table.dtype
    suffix = addr.suffix
    # --- scheme: msModelSlim lists every sub-tensor of a linear with the linear's scheme
    if desc is not None:
        scode, scheme_names, in_desc = desc.scheme_codes(table.name_spans)
    else:
        scode, scheme_names = _infer_schemes(table, addr)
        in_desc = None
    scheme = np.array(scheme_names + [""], dtype=object)[scode] if n else np.zeros(0, object)
    # --- category and kind, per (template-level suffix / kind) and dtype
    category = np.full(n, CAT_CODE["float"], dtype=np.int8)
    kind = np.empty(n, dtype=object)
    suf_scale = np.isin(addr.sufcode, [i for i, x in enumerate(addr.suffixes) if x in SCALE_SUFFIXES])
    suf_offset = np.isin(addr.sufcode, [i for i, x in enumerate(addr.suffixes) if x in OFFSET_SUFFIXES])
    lowbit = np.isin(dtypes, list(LOWBIT_DTYPES)) & ~suf_scale & ~suf_offset
    category[suf_scale] = CAT_CODE["scale"]
    category[suf_offset] = CAT_CODE["offset"]
    category[lowbit] = CAT_CODE["int8"]
    aux = suf_scale | suf_offset
    kind[aux] = suffix[aux]
    if lowbit.any():
        lb = np.flatnonzero(lowbit)
        lb_dtypes = dtypes[lb]
        for dt, name in LOWBIT_DTYPES.items():     # a compare per known dtype: np.unique of
            hit = lb_dtypes == dt                  # 90k strings sorts them (~50 ms)
            if hit.any():
                kind[lb[hit]] = name
        w4 = [i for i, x in enumerate(scheme_names) if x.startswith("W4")]
        if w4:
            kind[lb[np.isin(scode[lb], w4)]] = "int4_packed"
    flt = ~(suf_scale | suf_offset | lowbit)
    if flt.any():
        fk: dict[tuple, str] = {}
        idx = np.flatnonzero(flt)
        keys = list(zip(addr.block[idx].tolist(), addr.projection[idx].tolist(), suffix[idx].tolist()))
        kind[idx] = [fk.get(k) or fk.setdefault(k, _float_kind(BLOCKS[k[0]], k[1], k[2], "")) for k in keys]
        for i in _rows_named(table, idx, ("rot.weight", "global_rotation")):
            kind[i] = "rotation"
    ct = ClassifiedTable(table, addr, category, kind, scheme, [], scode, scheme_names, in_desc)
    ct.findings.extend(check_consistency(ct, desc))
    return ct


def _rows_named(table: TensorTable, rows: np.ndarray, wanted: tuple[str, ...]) -> list[int]:
    """Those of ``rows`` whose name is one of ``wanted`` (only same-length names are decoded)."""
    spans = table.name_spans
    cand = rows[np.isin(spans.length[rows], [len(w.encode()) for w in wanted])]
    return [i for i in cand.tolist() if spans.get(i) in wanted]


def _instance_keys(addr: AddressColumns) -> np.ndarray:
    """One integer per module instance (layer, expert, module)."""
    M = max(len(addr.modules), 1)
    return ((addr.layer.astype(np.int64) + 1) * 100003 + (addr.expert.astype(np.int64) + 1)) * M + addr.modcode


_SIBLING_SUFFIXES = ("deq_scale", "scale_bias", "weight_scale", "weight_scale_inv")


def _infer_schemes(table: TensorTable, addr: AddressColumns) -> tuple[np.ndarray, list[str]]:
    """No description: a linear's scheme follows from its weight dtype and which siblings exist.
    Returns (code per tensor, scheme names in order of first appearance among the weights);
    every tensor of a module instance shares its code. Python work is per distinct
    (dtype, siblings) combination, not per tensor (a 120k-tensor FP8 checkpoint has a handful)."""
    code_of = {s: i for i, s in enumerate(addr.suffixes)}
    n = len(table)
    if "weight" not in code_of or n == 0:
        return np.zeros(n, dtype=np.int32), [""]
    uniq, inst_id = np.unique(_instance_keys(addr), return_inverse=True)
    siblings = np.zeros(len(uniq), dtype=np.int64)          # bit b: the instance stores suffix b
    for bit, suffix in enumerate(_SIBLING_SUFFIXES):
        if suffix in code_of:
            siblings[inst_id[addr.sufcode == code_of[suffix]]] |= 1 << bit
    w = np.flatnonzero(addr.sufcode == code_of["weight"])
    w_dtype = table.dtype[w]
    dtype_names = sorted(set(w_dtype.tolist()))
    combo = np.searchsorted(np.array(dtype_names), w_dtype) * 64 + siblings[inst_id[w]]
    combos, first_row, combo_of_row = np.unique(combo, return_index=True, return_inverse=True)
    names: list[str] = [""]
    ids = {"": 0}
    combo_code = np.zeros(len(combos), dtype=np.int32)
    for c in np.argsort(first_row).tolist():                # in order of first appearance
        dt, bits = divmod(int(combos[c]), 64)
        scheme = infer_scheme(dtype_names[dt], {s for b, s in enumerate(_SIBLING_SUFFIXES) if bits >> b & 1})
        combo_code[c] = ids.setdefault(scheme, len(names))
        if combo_code[c] == len(names):
            names.append(scheme)
    # an instance takes the code of its last weight row (instances normally have exactly one)
    w_inst = inst_id[w]
    _, last_from_end = np.unique(w_inst[::-1], return_index=True)
    last = len(w) - 1 - last_from_end
    inst_code = np.zeros(len(uniq), dtype=np.int32)
    inst_code[w_inst[last]] = combo_code[combo_of_row[last]]
    return inst_code[inst_id], names


def check_consistency(ct: ClassifiedTable, desc: QuantDescription | None) -> list[Finding]:
    """Description vs stored tensors, missing quant siblings, dtype contradictions. Set work happens
    only when something disagrees: the common, consistent checkpoint costs a few numpy passes."""
    out: list[Finding] = []
    t = ct.table
    names = t.name_spans
    loaded = t.loaded
    scode = ct.scheme_code
    snames = ct.scheme_names
    if desc is not None and ct.in_desc is not None:
        # listed one by one up to MAX_LISTED each, then counted: a hostile description with 10^6
        # strangers must not become 10^6 findings (time and memory bound, README)
        if int(ct.in_desc.sum()) != len(desc):        # names are unique, so this is exact
            stored = set(names.strings().tolist())
            n_strangers = len(desc) - int(ct.in_desc.sum())
            for key in heapq.nsmallest(MAX_LISTED, (k for k in desc.per_tensor if k not in stored)):
                out.append(Finding("warning", key, "listed in quant_model_description.json but not stored in any "
                                                   "shard"))
            if n_strangers > MAX_LISTED:
                out.append(Finding("warning", None, f"{n_strangers - MAX_LISTED} more entries of "
                                                    f"quant_model_description.json are not stored in any shard"))
        missing = np.flatnonzero(loaded & ~ct.in_desc)
        if len(missing) and desc.globals:
            # a tensor whose name is also a global key (DeepSeek-V4's ``hc_head_fn``, which the engine
            # reads as the marker of DeepSeek-native names) is described by that key; only names no
            # longer than the longest global key can be one (no Python pass over a hostile 10^6)
            longest = max(len(str(k)) for k in desc.globals)
            short = missing[names.length[missing] <= longest]
            named = {i for i in short.tolist() if names.get(i) in desc.globals}
            if named:
                missing = np.array([i for i in missing.tolist() if i not in named], dtype=np.int64)
        for i in missing[:MAX_LISTED].tolist():
            out.append(Finding("warning", names.get(i), "stored but missing from quant_model_description.json"))
        if len(missing) > MAX_LISTED:
            out.append(Finding("warning", None, f"{len(missing) - MAX_LISTED} more stored tensors are missing from "
                                                f"quant_model_description.json"))
    a = ct.addr
    w_code = a.suffixes.index("weight") if "weight" in a.suffixes else -1
    weight = a.sufcode == w_code

    def has_scheme(pred) -> np.ndarray:
        return np.isin(scode, [i for i, x in enumerate(snames) if pred(x)])

    is_float_dt = np.isin(t.dtype, list(FLOAT_DTYPES))
    says_float = weight & has_scheme(lambda x: x == "FLOAT") & ~is_float_dt
    says_quant = weight & has_scheme(lambda x: x.startswith(("W8", "W4"))) & is_float_dt
    for i in np.flatnonzero(says_float)[:50]:
        out.append(Finding("error", names.get(i), f"description says FLOAT but the stored dtype is {t.dtype[i]}"))
    for i in np.flatnonzero(says_quant)[:50]:
        out.append(Finding("error", names.get(i), f"description says {ct.scheme[i]} but the stored dtype is "
                                                    f"{t.dtype[i]}"))
    inst_id = None                  # dense id per module instance, built on first need
    present: dict[int, np.ndarray] = {}
    for sch, need in REQUIRED_SIBLINGS.items():
        if sch not in snames:
            continue
        rows = np.flatnonzero(weight & loaded & (scode == snames.index(sch)))
        if not len(rows):
            continue
        if inst_id is None:
            _, inst_id = np.unique(_instance_keys(a), return_inverse=True)
            n_inst = int(inst_id.max()) + 1
        missing_by_row: dict[int, list[str]] = {}
        for s in need:
            code = a.suffixes.index(s) if s in a.suffixes else -2
            if code not in present:     # which instances store a tensor with this suffix
                present[code] = np.zeros(n_inst, dtype=bool)
                present[code][inst_id[a.sufcode == code]] = True
            have = present[code][inst_id[rows]]
            for i in rows[~have].tolist():
                missing_by_row.setdefault(i, []).append(s)
        for n_listed, (i, miss) in enumerate(sorted(missing_by_row.items())):
            if n_listed >= 50:
                out.append(Finding("error", None, f"{len(missing_by_row) - 50} more {sch} linears miss siblings"))
                break
            out.append(Finding("error", names.get(i), f"{sch} linear is missing {', '.join(miss)}"))
    return out
