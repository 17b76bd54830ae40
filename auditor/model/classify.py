"""Classify every stored tensor: category (float / int8 / scale / offset), a finer kind, its module
address and the scheme the quant description gives it; and report consistency findings.

Category ``derived`` is never given to a stored tensor: only the engine creates those
(see ``auditor.engines``).
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..inventory.table import TensorTable
from .names import BLOCKS, AddressColumns, parse_names

CATEGORIES = ("float", "int8", "scale", "offset", "derived")
CAT_CODE = {c: i for i, c in enumerate(CATEGORIES)}

SCALE_SUFFIXES = {"weight_scale", "deq_scale", "input_scale", "weight_scale_inv", "weight_scale_second"}
OFFSET_SUFFIXES = {"weight_offset", "input_offset", "quant_bias", "scale_bias"}
LOWBIT_DTYPES = {"I8": "int8", "U8": "uint8", "I4": "int4", "F8_E4M3": "fp8_e4m3", "F8_E5M2": "fp8_e5m2",
                 "F4": "fp4"}
FLOAT_DTYPES = {"F64", "F32", "F16", "BF16"}

# Sibling tensors each quantized scheme must store next to its weight (msModelSlim ascendv1 format,
# engine spec §1.1; FP8 block checkpoints carry weight_scale_inv).
REQUIRED_SIBLINGS = {
    "W8A8": ("quant_bias", "input_scale", "input_offset", "deq_scale"),
    "W8A8_DYNAMIC": ("weight_scale", "weight_offset"),
    "W4A8_DYNAMIC": ("weight_scale", "weight_offset"),
    "FP8_BLOCK": ("weight_scale_inv",),
}
GLOBAL_DESC_KEYS = {"version", "model_quant_type", "group_size", "is_rot_used", "optional", "metadata",
                    "fa_quant_type", "indexer_quant_type", "kv_cache_type", "ascend_quant_method", "hc_head_fn"}


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
    if dtype in ("I8", "U8", "I4"):
        if "deq_scale" in siblings:
            return "W8A8"
        if "scale_bias" in siblings:
            return "W4A8_DYNAMIC"
        if "weight_scale" in siblings:
            return "W8A8_DYNAMIC"
        return "INT8"
    return ""


def classify(table: TensorTable, n_main_layers: int | None, desc: dict[str, str] | None) -> ClassifiedTable:
    """One pass over the table; template-cached so cost is one dict lookup per tensor."""
    addr = parse_names(table.name, n_main_layers)
    n = len(table)
    category = np.zeros(n, dtype=np.int8)
    kind = np.empty(n, dtype=object)
    scheme = np.empty(n, dtype=object)
    names = table.name
    dtypes = table.dtype
    name_set = set(names.tolist())
    per_tensor = desc or {}
    findings: list[Finding] = []

    # scheme lookup: description first, else inferred per module from sibling suffixes
    prefix_of = {}
    for i in range(n):
        suf = addr.suffix[i]
        nm = names[i]
        prefix_of[i] = nm[: len(nm) - len(suf) - 1] if nm.endswith("." + suf) else nm
    sibling_cache: dict[str, set[str]] = {}

    def siblings(prefix: str) -> set[str]:
        s = sibling_cache.get(prefix)
        if s is None:
            s = {x for x in ("deq_scale", "weight_scale", "weight_scale_inv", "scale_bias", "weight_offset",
                             "quant_bias", "input_scale", "input_offset") if f"{prefix}.{x}" in name_set}
            sibling_cache[prefix] = s
        return s

    for i in range(n):
        nm = names[i]
        suf = addr.suffix[i]
        dt = str(dtypes[i])
        blk = BLOCKS[addr.block[i]]
        proj = addr.projection[i]
        prefix = prefix_of[i]
        if desc is not None:
            sch = per_tensor.get(prefix + ".weight") or per_tensor.get(nm, "")
        elif suf == "weight":
            sch = infer_scheme(dt, siblings(prefix))
        else:
            sch = ""
        scheme[i] = sch
        if suf in SCALE_SUFFIXES:
            category[i] = CAT_CODE["scale"]
            kind[i] = suf
        elif suf in OFFSET_SUFFIXES:
            category[i] = CAT_CODE["offset"]
            kind[i] = suf
        elif dt in LOWBIT_DTYPES:
            category[i] = CAT_CODE["int8"]
            kind[i] = "int4_packed" if (sch or "").startswith("W4") else LOWBIT_DTYPES[dt]
        else:
            category[i] = CAT_CODE["float"]
            kind[i] = _float_kind(blk, proj, suf, nm)

    ct = ClassifiedTable(table, addr, category, kind, scheme, findings)
    # module-level schemes for sibling tensors without their own entry (no description)
    if desc is None:
        weight_scheme = {prefix_of[i]: scheme[i] for i in range(n) if addr.suffix[i] == "weight"}
        for i in range(n):
            if not scheme[i]:
                scheme[i] = weight_scheme.get(prefix_of[i], "")
    findings.extend(check_consistency(ct, desc, prefix_of, name_set))
    return ct


def check_consistency(ct: ClassifiedTable, desc: dict[str, str] | None, prefix_of: dict[int, str],
                      name_set: set[str]) -> list[Finding]:
    """Description vs stored tensors, missing quant siblings, dtype contradictions."""
    out: list[Finding] = []
    t = ct.table
    loaded = t.loaded
    names = t.name
    if desc is not None:
        stored_loaded = {str(names[i]) for i in range(len(t)) if loaded[i]}
        for key in desc:
            if key not in stored_loaded and key not in name_set:
                out.append(Finding("warning", key, "listed in quant_model_description.json but not stored "
                                                   "in any shard"))
        for i in range(len(t)):
            if loaded[i] and names[i] not in desc:
                out.append(Finding("warning", str(names[i]), "stored but missing from quant_model_description.json"))
    for i in range(len(t)):
        if ct.addr.suffix[i] != "weight":
            continue
        sch = ct.scheme[i] or ""
        dt = str(t.dtype[i])
        nm = str(names[i])
        if sch == "FLOAT" and dt not in FLOAT_DTYPES:
            out.append(Finding("error", nm, f"description says FLOAT but the stored dtype is {dt}"))
        elif sch.startswith(("W8", "W4")) and dt in FLOAT_DTYPES:
            out.append(Finding("error", nm, f"description says {sch} but the stored dtype is {dt}"))
        need = REQUIRED_SIBLINGS.get(sch)
        if need and loaded[i]:
            missing = [s for s in need if f"{prefix_of[i]}.{s}" not in name_set]
            if missing:
                out.append(Finding("error", nm, f"{sch} linear is missing {', '.join(missing)}"))
    return out
