"""A verified cache of directory scans: a second `audit` run over the same checkpoint reads every
header again but parses none of them.

Why: parsing 180,000 header entries and checking them against the index is most of what
`audit memory` does (0.3 s of 0.7 s on GLM-5.1); the bytes themselves are read in 15 ms. So
every run still reads every header and the index through the one opener, exactly as a scan
does, and hashes them; only when the hash (plus the shard listing, each shard's size, the
resolved directory and this module's reader code) equals the one stored with a previous scan
is that scan's table used. Any change to a header, an index, the file list or a size is a
miss. A scan that raised is never stored, so errors are always found and worded afresh.

Layout: ``$AUDIT_CACHE/scan/<digest of the resolved directory>.scan``, one entry per directory
(a new scan of the directory replaces it), at most ``MAX_ENTRIES`` directories (the least
recently written go first), in ``auditor.cachefile``'s format: a file that is damaged in any way
is a miss, never an error. A cache that cannot be written (read-only home, a full disk) is
skipped in silence.

``AUDIT_SCAN_CACHE=0`` turns it off, as does ``AUDIT_EXACT=1`` (the exact readers must run).
"""
from __future__ import annotations

import hashlib
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from .. import cachefile
from .fast import exact_only
from .header import _DTYPE_NAME_ARR
from .namespans import PAD, NameSpans
from .table import MAXDIM, TensorTable

if TYPE_CHECKING:
    from .shards import HeaderBytes

ENV = "AUDIT_SCAN_CACHE"
FORMAT = 2
MAX_ENTRIES = 8                 # directories kept (GLM-5.1 W8A8: ~19 MB each)
ENTRY_CAP = 1 << 30
SUFFIX = ".scan"
_READ_THROUGH = ("inputs.py", "dtypes.py", "errors.py", "cachefile.py")   # outside inventory/, what a scan depends on


def enabled() -> bool:
    """On unless ``AUDIT_SCAN_CACHE`` is 0/off/no/false or the exact readers are forced."""
    return not cachefile.switched_off(ENV) and not exact_only()


def cache_dir() -> Path:
    return cachefile.cache_root() / "scan"


_CODE_DIGEST: bytes | None = None


def code_digest() -> bytes:
    """The reader code (this package's modules and the ones it reads through)."""
    global _CODE_DIGEST
    if _CODE_DIGEST is None:
        here = Path(__file__).resolve().parent
        files = sorted(here.rglob("*.py")) + [here.parent / n for n in _READ_THROUGH]
        _CODE_DIGEST = cachefile.source_digest(files, b"scan %d" % FORMAT)
    return _CODE_DIGEST


def index_digest(index_paths: list[Path], raws: list[bytes]) -> bytes:
    """SHA-1 over the index files' names and bytes (run on the index thread: hashlib releases the GIL)."""
    h = hashlib.sha1()
    for p, raw in zip(index_paths, raws):
        h.update(b"%s\0%d\0" % (p.name.encode("utf-8", "surrogateescape"), len(raw)))
        h.update(raw)
    return h.digest()


def scan_key(model_dir: Path, shards: list[str], hb: "HeaderBytes", index_hash: bytes) -> str:
    """What a scan of ``model_dir`` is a function of, as one hex digest."""
    h = hashlib.sha1(code_digest())
    h.update(str(model_dir.resolve()).encode("utf-8", "surrogateescape") + b"\0")
    for rel, n, size in zip(shards, hb.length, hb.size):
        h.update(b"%s\0%d\0%d\0" % (rel.encode("utf-8", "surrogateescape"), n, size))
    total = sum(hb.length)
    with memoryview(hb.buf) as view:
        h.update(view[:total])
    h.update(index_hash)
    return h.hexdigest()


def _entry_path(model_dir: Path) -> Path:
    return cache_dir() / (cachefile.path_key(model_dir) + SUFFIX)


# ----------------------------------------------------------------------------- load

def load(model_dir: Path, key: str, shards: list[str]) -> tuple[TensorTable, list] | None:
    """(table, index findings) of the scan stored for ``key``, or None."""
    return cachefile.load(_entry_path(model_dir), key, ENTRY_CAP, lambda meta, arrays: _table(meta, arrays, shards))


def _table(meta: dict, arrays: dict[str, np.ndarray], shards: list[str]) -> tuple[TensorTable, list] | None:
    if meta.get("format") != FORMAT or meta.get("files") != shards:
        return None
    n = int(meta["rows"])
    names_buf = bytes(arrays["names"])
    start, length = arrays["name_start"], arrays["name_length"]
    if len(start) != n or len(length) != n or (n and (int(start.min()) < 0 or int(length.min()) < 0 or
                                                      int((start + length).max()) > len(names_buf) - len(PAD))):
        return None
    dims = arrays["shape"]
    if dims.ndim != 2 or dims.shape[0] != n or dims.shape[1] > MAXDIM:
        return None
    shape = np.ones((n, MAXDIM), dtype=np.int64)
    shape[:, :dims.shape[1]] = dims
    dtype_names = meta["dtype_names"]
    codes, file = arrays["dtype_code"], arrays["file"]
    if n and not 0 <= int(codes.min()) <= int(codes.max()) < len(dtype_names):
        return None
    files = meta["files"]
    if n and not 0 <= int(file.min()) <= int(file.max()) < len(files):
        return None
    begin, end = arrays["begin"], arrays["end"]
    if any(len(col) != n for col in (codes, file, begin, end, arrays["ndim"], arrays["loaded"])):
        return None
    table = TensorTable(
        name=NameSpans(names_buf, start, length), file=file.astype(np.int32, copy=False),
        dtype=np.array(dtype_names, dtype=str)[codes] if n else np.array([], dtype=str),
        ndim=arrays["ndim"], shape=shape, nbytes=end - begin, begin=begin, end=end,
        loaded=arrays["loaded"], files=files,
        wide={int(r): tuple(int(d) for d in dims_) for r, dims_ in meta["wide"]},
    )
    findings = [(str(s), None if t is None else str(t), str(msg)) for s, t, msg in meta["findings"]]
    return table, findings


# ----------------------------------------------------------------------------- store

def _compact_names(spans: NameSpans) -> tuple[bytes, np.ndarray, np.ndarray]:
    """The names alone (the scan's spans point into every header's bytes): one gather."""
    length = spans.length
    if not len(spans):
        return PAD, np.zeros(0, np.int64), np.zeros(0, np.int64)
    new_start = np.cumsum(length) - length
    src = np.frombuffer(spans.buf, dtype=np.uint8)
    start = spans.start
    end = start + length
    if int(length.min()) > 0 and (len(start) < 2 or bool(np.all(start[1:] >= end[:-1]))):
        # non-empty spans in buffer order without overlap (a scan's rows): the buffer is runs of
        # gap, name, gap, name, ..., gap, so a byte mask repeated from the run lengths keeps the names
        # in order, at a byte per buffer byte rather than an int64 index per name byte (~90 -> ~35 ms
        # on GLM-5.1)
        n = len(start)
        runs = np.empty(2 * n + 1, dtype=np.int64)
        runs[0], runs[-1] = start[0], len(src) - end[-1]
        runs[2:-1:2] = start[1:] - end[:-1]
        runs[1::2] = length
        is_name = np.zeros(2 * n + 1, dtype=bool)
        is_name[1::2] = True
        return src[np.repeat(is_name, runs)].tobytes() + PAD, new_start, length.copy()
    idx = np.repeat(start - new_start, length) + np.arange(int(length.sum()), dtype=np.int64)
    return src[idx].tobytes() + PAD, new_start, length.copy()


def _dtype_codes(dtype: np.ndarray) -> tuple[list, np.ndarray]:
    """(names, int32 code per row) of the dtype column: a search of the header reader's sorted
    dtype names (~17 ms on GLM-5.1's 177k rows, where a Python factorize takes ~50), checked
    name for name; a table holding any other name is factorized."""
    names = _DTYPE_NAME_ARR
    codes = np.minimum(np.searchsorted(names, dtype), len(names) - 1).astype(np.int32)
    if len(dtype) and np.array_equal(names[codes], dtype):
        return names.tolist(), codes
    return cachefile.factorize(np.asarray(dtype, dtype=object))


def store(model_dir: Path, key: str, table: TensorTable, findings: list) -> None:
    """Keep the scan for the next run; any failure to write is silent (the cache is an optimisation)."""
    cachefile.store(_entry_path(model_dir), key, lambda: _columns(table, findings), MAX_ENTRIES)


def _columns(table: TensorTable, findings: list) -> tuple[dict, dict[str, np.ndarray]]:
    n = len(table)
    names_buf, start, length = _compact_names(table.name_spans)
    width = min(int(table.ndim.max(initial=0)), MAXDIM) if n else 0
    dtype_names, codes = _dtype_codes(table.dtype)
    arrays = {
        "names": np.frombuffer(names_buf, dtype=np.uint8), "name_start": start, "name_length": length,
        "dtype_code": codes, "file": np.asarray(table.file, dtype=np.int32), "ndim": np.asarray(table.ndim),
        "shape": np.ascontiguousarray(table.shape[:, :width]),
        "begin": np.asarray(table.begin, dtype=np.int64), "end": np.asarray(table.end, dtype=np.int64),
        "loaded": np.asarray(table.loaded, dtype=bool),
    }
    meta = {"format": FORMAT, "rows": n, "files": list(table.files), "dtype_names": [str(d) for d in dtype_names],
            "wide": [[int(r), list(d)] for r, d in table.wide.items()], "findings": [list(f) for f in findings]}
    return meta, arrays
