"""The files audit keeps in its own cache: where they live, and one verified format for columns.

Why one module: the remote mirror, the scan cache and the classification cache share a root
(``$AUDIT_CACHE``, else ``$XDG_CACHE_HOME/audit``, else ``~/.cache/audit``), and the two caches
of numpy columns share a format whose every failure mode is "a miss", never an error or an old
answer. Nothing here is ever written into a user's model directory.

An entry file is ``MAGIC``, the JSON meta's length (8 bytes, little-endian), the SHA-1 (20 bytes)
of everything after it, the JSON meta (the caller's fields plus ``key`` and the arrays' layout)
and the arrays, each 8-byte aligned. The digest covers the meta as well as the arrays: a caller's
fields (a factorized column's distinct values, say) are as much the answer as the arrays are.
:func:`read_entry` returns None for a file that is absent, unreadable, over its cap, truncated,
for another key, or whose meta and arrays do not hash to its SHA-1. Writes go to a
temporary file renamed into place, so a reader never sees half an entry.
"""
from __future__ import annotations

import hashlib
import json
import os
import time
import uuid
from pathlib import Path
from typing import Callable, TypeVar

import numpy as np

from .errors import AuditInputError
from .inputs import open_binary

MAGIC = b"AUDIT-CACHE-2\n"
DIGEST = 20                 # SHA-1 bytes
META_CAP = 64 << 20
T = TypeVar("T")
STALE_TMP = 3600.0          # a temporary file this old belongs to a run that died


def cache_root() -> Path:
    env = os.environ.get("AUDIT_CACHE", "").strip()
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME", "").strip()
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "audit"


def switched_off(env: str) -> bool:
    """A cache switch read as vLLM reads its booleans: 0/off/no/false turn it off."""
    return os.environ.get(env, "").strip().lower() in ("0", "off", "no", "false")


def path_key(path: Path) -> str:
    """A file-name-safe digest of a resolved path (one entry per model directory)."""
    return hashlib.sha1(str(Path(path).resolve()).encode("utf-8", "surrogateescape")).hexdigest()[:32]


def source_digest(files: list[Path], salt: bytes) -> bytes:
    """SHA-1 of some source files' names and bytes: the code an entry came from, so an edited or
    upgraded reader is a miss, not an old answer."""
    h = hashlib.sha1(salt)
    for path in files:
        try:
            h.update(path.name.encode() + b"\0" + path.read_bytes())
        except OSError:
            h.update(path.name.encode() + b"\0?")
    return h.digest()


def factorize(values: np.ndarray) -> tuple[list, np.ndarray]:
    """(distinct values in order of first appearance, int32 code per row) of an object column
    (dict-based: an object column's np.unique sorts with Python comparisons)."""
    items = values.tolist()
    distinct = list(dict.fromkeys(items))
    pos = {v: i for i, v in enumerate(distinct)}
    return distinct, np.fromiter(map(pos.__getitem__, items), dtype=np.int32, count=len(items))


# ----------------------------------------------------------------------------- read

def read_entry(path: Path, key: str, cap: int) -> tuple[dict, dict[str, np.ndarray]] | None:
    """(meta, arrays) of the entry at ``path`` when it is whole and for ``key``, else None.
    The arrays are writable views of one buffer (no copy after the read)."""
    try:
        fh, size = open_binary(path, "cache entry")      # the one opener: regular files only
    except AuditInputError:
        return None
    try:
        with fh:
            if size > cap:
                return None
            raw = bytearray(size)
            with memoryview(raw) as view:
                got = 0
                while got < size:
                    n = fh.readinto(view[got:])
                    if not n:
                        return None   # shorter than it was a moment ago
                    got += n
        return _decode(raw, key)
    except (OSError, ValueError, KeyError, TypeError, IndexError, OverflowError, RecursionError):
        return None                   # damaged in a way the checks did not foresee: a miss


def _decode(raw: bytearray, key: str) -> tuple[dict, dict[str, np.ndarray]] | None:
    m0 = len(MAGIC) + 8 + DIGEST
    if not raw.startswith(MAGIC) or len(raw) < m0:
        return None
    n_meta = int.from_bytes(raw[len(MAGIC):len(MAGIC) + 8], "little")
    if not 0 < n_meta <= min(META_CAP, len(raw) - m0):
        return None
    with memoryview(raw) as view:
        if hashlib.sha1(view[m0:]).digest() != bytes(view[m0 - DIGEST:m0]):
            return None
    meta = json.loads(raw[m0:m0 + n_meta])
    if not isinstance(meta, dict) or meta.get("key") != key:
        return None
    data = memoryview(raw)[m0 + n_meta:]
    arrays: dict[str, np.ndarray] = {}
    for name, (dt, shape, off) in meta["arrays"].items():
        dtype = np.dtype(dt)
        if dtype.hasobject or any(not isinstance(d, int) or d < 0 for d in shape):
            return None
        count = int(np.prod(shape, dtype=np.int64)) if shape else 1
        if not isinstance(off, int) or off < 0 or off + count * dtype.itemsize > len(data):
            return None
        arrays[name] = np.frombuffer(data, dtype=dtype, count=count, offset=off).reshape(shape)
    return meta, arrays


def load(path: Path, key: str, cap: int, decode: Callable[[dict, dict[str, np.ndarray]], T | None]) -> T | None:
    """``decode(meta, arrays)`` of the entry at ``path`` for ``key``, or None: an entry whose checks
    pass but whose contents the caller cannot rebuild (a column out of range, a field missing) is a
    miss too, never an error."""
    got = read_entry(path, key, cap)
    if got is None:
        return None
    try:
        return decode(*got)
    except (ValueError, KeyError, TypeError, IndexError, OverflowError):
        return None


# ----------------------------------------------------------------------------- write

def store(path: Path, key: str, columns: Callable[[], tuple[dict, dict[str, np.ndarray]]], max_stems: int) -> bool:
    """Write the entry ``columns()`` builds (meta, arrays) and evict old groups beside it; False (and
    nothing raised) when it cannot be built or written: the cache is an optimisation, a run never
    fails for it."""
    try:
        write_entry(path, key, *columns())
        evict(path.parent, path.name.split(".", 1)[0], max_stems)
        return True
    except (OSError, ValueError, TypeError):
        return False


def write_entry(path: Path, key: str, meta: dict, arrays: dict[str, np.ndarray]) -> None:
    """Write the entry (temporary file, then rename). Raises OSError; callers treat any failure
    as "not cached"."""
    layout, chunks, off = {}, [], 0
    for name, arr in arrays.items():
        arr = np.ascontiguousarray(arr)
        if arr.dtype.hasobject:
            raise TypeError(f"{name}: object columns are factorized first")
        layout[name] = (arr.dtype.str, list(arr.shape), off)
        b = arr.tobytes()
        chunks.append(b)
        off += len(b)
        pad = -off % 8
        chunks.append(b"\0" * pad)
        off += pad
    payload = b"".join(chunks)
    doc = json.dumps({**meta, "key": key, "arrays": layout}).encode()
    digest = hashlib.sha1(doc)
    digest.update(payload)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.{uuid.uuid4().hex}.tmp"
    try:
        with open(tmp, "wb") as f:
            f.write(MAGIC + len(doc).to_bytes(8, "little") + digest.digest() + doc)
            f.write(payload)
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()


def evict(folder: Path, keep: str, max_stems: int) -> None:
    """At most ``max_stems`` entry groups (files sharing a stem: one model directory's entries),
    the least recently written going first; ``keep`` (a stem) always stays. Temporary files of
    runs that died are removed too."""
    newest: dict[str, float] = {}
    files: dict[str, list[Path]] = {}
    now = time.time()
    for p in folder.iterdir():
        try:
            mtime = p.stat().st_mtime
        except OSError:
            continue
        if p.name.startswith(".") and p.name.endswith(".tmp"):
            if now - mtime > STALE_TMP:
                _unlink(p)
            continue
        stem = p.name.split(".", 1)[0]
        files.setdefault(stem, []).append(p)
        newest[stem] = max(newest.get(stem, 0.0), mtime)
    others = sorted((s for s in newest if s != keep), key=newest.__getitem__, reverse=True)
    for stem in others[max_stems - 1:]:
        for p in files[stem]:
            _unlink(p)


def _unlink(p: Path) -> None:
    try:
        p.unlink()
    except OSError:
        pass
