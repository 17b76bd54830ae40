"""The classification of a scanned checkpoint through the scan cache: a second run over the same
headers and description reads the classified columns instead of deriving them again.

Why: classifying GLM-5.1's 177,000 names (templates, schemes, consistency checks) takes 0.1-0.2 s,
as long as everything after it in `audit memory`. The key is the scan's own key (every header
and index byte, hashed on this run: ``inventory/scancache.py``), the description's digest (its
bytes, hashed on this run), the number of main layers and the classifier's code, so a hit can
only be the classification of exactly these inputs. Same layout, switch and failure rules as the
scan cache (``AUDIT_SCAN_CACHE=0`` or ``AUDIT_EXACT=1``: off; anything damaged: a miss).
"""
from __future__ import annotations

import hashlib
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from .. import cachefile
from ..inventory import scancache
from .names import AddressColumns

if TYPE_CHECKING:
    from ..inventory.quantdesc import QuantDescription
    from ..inventory.table import TensorTable
    from .classify import ClassifiedTable

SUFFIX = ".classified"
FORMAT = 1
ENTRY_CAP = 1 << 30
_OBJECT_COLUMNS = ("module", "projection", "suffix")          # AddressColumns' object columns
_NUMBER_COLUMNS = ("layer", "expert", "block", "modcode", "sufcode")

_CODE_DIGEST: bytes | None = None


def _code_digest() -> bytes:
    """The classifier's code: this package and the readers it builds on (an edit is a miss)."""
    global _CODE_DIGEST
    if _CODE_DIGEST is None:
        here = Path(__file__).resolve().parent
        files = sorted(here.rglob("*.py"))
        _CODE_DIGEST = scancache.code_digest() + cachefile.source_digest(files, b"classify %d" % FORMAT)
    return _CODE_DIGEST


def key_for(table: "TensorTable", n_main_layers: int | None, desc: "QuantDescription | None") -> str | None:
    """The cache key of classify(table, n_main_layers, desc), or None when an input has no
    verified identity (a synthesized table, a description built in memory) or the cache is off."""
    if table.cache_key is None or table.cache_dir is None or not scancache.enabled():
        return None
    desc_digest = "-" if desc is None else getattr(desc, "cache_digest", None)
    if desc_digest is None:
        return None
    h = hashlib.sha1(_code_digest())
    h.update(f"{table.cache_key}\0{desc_digest}\0{n_main_layers}".encode())
    return h.hexdigest()


def _entry_path(table: "TensorTable") -> Path:
    return scancache.cache_dir() / (cachefile.path_key(table.cache_dir) + SUFFIX)


def load(key: str, table: "TensorTable") -> "ClassifiedTable | None":
    return cachefile.load(_entry_path(table), key, ENTRY_CAP, lambda meta, arrays: _classified(meta, arrays, table))


def _decoded(values: list, codes: np.ndarray, n: int) -> np.ndarray:
    if len(codes) != n or (n and not 0 <= int(codes.min()) <= int(codes.max()) < len(values)):
        raise ValueError("codes out of range")
    if not all(v is None or isinstance(v, str) for v in values):
        raise TypeError("not a name")
    col = np.empty(len(values), dtype=object)
    col[:] = values
    return col[codes] if n else np.empty(0, dtype=object)


def _classified(meta: dict, arrays: dict[str, np.ndarray], table: "TensorTable") -> "ClassifiedTable | None":
    from .classify import ClassifiedTable, Finding
    n = len(table)
    if meta.get("format") != FORMAT or meta.get("rows") != n:
        return None
    values = meta["values"]
    for name in (*_NUMBER_COLUMNS, "category", "scheme_code", "in_desc"):
        if name in arrays and len(arrays[name]) != n:
            return None
    modules, suffixes = meta["modules"], meta["suffixes"]
    for name, names in (("modcode", modules), ("sufcode", suffixes)):
        if n and int(arrays[name].max()) >= max(len(names), 1):
            return None
    addr = AddressColumns(
        layer=arrays["layer"], expert=arrays["expert"], block=arrays["block"],
        **{c: _decoded(values[c], arrays[c], n) for c in _OBJECT_COLUMNS},
        modcode=arrays["modcode"], sufcode=arrays["sufcode"], modules=list(modules), suffixes=list(suffixes))
    findings = [Finding(str(s), None if t is None else str(t), str(m)) for s, t, m in meta["findings"]]
    return ClassifiedTable(
        table, addr, arrays["category"], _decoded(values["kind"], arrays["kind"], n),
        _decoded(values["scheme"], arrays["scheme"], n), findings,
        arrays.get("scheme_code"), list(meta["scheme_names"]), arrays.get("in_desc"))


def store(key: str, ct: "ClassifiedTable") -> None:
    """Keep the classification for the next run; any failure to write is silent."""
    cachefile.store(_entry_path(ct.table), key, lambda: _columns(ct), scancache.MAX_ENTRIES)


def _columns(ct: "ClassifiedTable") -> tuple[dict, dict[str, np.ndarray]]:
    addr = ct.addr
    arrays = {c: np.asarray(getattr(addr, c)) for c in _NUMBER_COLUMNS}
    arrays["category"] = np.asarray(ct.category)
    values = {}
    for name, col in [*((c, getattr(addr, c)) for c in _OBJECT_COLUMNS), ("kind", ct.kind), ("scheme", ct.scheme)]:
        values[name], arrays[name] = cachefile.factorize(np.asarray(col, dtype=object))
    if ct.scheme_code is not None:
        arrays["scheme_code"] = np.asarray(ct.scheme_code)
    if ct.in_desc is not None:
        arrays["in_desc"] = np.asarray(ct.in_desc, dtype=bool)
    meta = {"format": FORMAT, "rows": len(ct), "values": values, "modules": list(addr.modules),
            "suffixes": list(addr.suffixes), "scheme_names": list(ct.scheme_names),
            "findings": [[f.severity, f.tensor, f.message] for f in ct.findings]}
    return meta, arrays
