"""The index reader: ``*.safetensors.index.json``'s weight_map, with every shard path it names
normalized and confined to the model directory (the exact reference; ``fast/index.py`` is its
accelerator)."""
from __future__ import annotations

import json
import os
import re
from pathlib import Path, PurePosixPath, PureWindowsPath

from ..errors import AuditInputError
from ..inputs import read_input_bytes
from ..inputs import INDEX_CAP, open_regular
from .fast.jsonspans import parse_index

try:
    import orjson as _orjson
except ImportError:  # pragma: no cover
    _orjson = None


def load_index(index_path: Path, model_dir: Path, raw: bytes | None = None, accelerate: bool = True) -> dict[str, str]:
    """weight_map of an index file, with shard paths normalized and confined to ``model_dir``.

    A shard itself may be a symlink resolving anywhere (hub caches point into a blobs dir);
    only the path written in the index must stay inside the directory.
    """
    if raw is None:
        raw = read_input_bytes(index_path, "index", INDEX_CAP)
    # a 180,000-entry weight_map costs orjson ~0.17 s in string objects; the vectorised parser
    # reads the usual all-strings layout ~4x faster and defers everything else to orjson
    doc = parse_index(raw) if accelerate else None      # (False: its columns were already read)
    try:
        if doc is None:
            doc = _orjson.loads(raw) if _orjson is not None else json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError):
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError:
            raise AuditInputError(index_path, "index is not valid UTF-8") from None
        raise AuditInputError(index_path, "index is not valid JSON") from None
    if not isinstance(doc, dict):
        raise AuditInputError(index_path, "index is not a JSON object")
    wm = doc.get("weight_map")
    if not isinstance(wm, dict):
        what = "has no 'weight_map'" if wm is None else "'weight_map' is not a JSON object"
        raise AuditInputError(index_path, f"index {what}")

    def first_tensor(value) -> str:
        return next(k for k, v in wm.items() if v == value)

    try:
        distinct = set(wm.values())     # a few hundred shard names for 180,000 tensors
    except TypeError:                   # an unhashable value (list/object): name the first one
        name = next(k for k, v in wm.items() if not isinstance(v, str))
        raise AuditInputError(index_path, f"weight_map entry for {name!r} is not a file name: "
                                          f"{wm[name]!r}") from None
    norm: dict[str, str] = {}
    for rel in sorted(distinct, key=str):
        norm[rel] = normalize_shard_path(index_path, rel, first_tensor)
    missing = [(n, r) for r, n in norm.items() if not (model_dir / n).is_file()]
    for n, _ in missing:
        if (model_dir / n).exists():      # a FIFO, device, socket or directory: named by itself
            os.close(open_regular(model_dir / n, "shard")[0])
    if missing:
        n0, r0 = missing[0]
        link = model_dir / n0
        why = "is a broken symlink" if link.is_symlink() and not link.exists() else \
            "is not a file" if link.exists() else "does not exist"
        more = f" (and {len(missing) - 1} more missing shards)" if len(missing) > 1 else ""
        raise AuditInputError(index_path, f"weight_map shard '{n0}' (tensor {first_tensor(r0)!r}) {why}{more}")
    if all(k == v for k, v in norm.items()):
        return wm
    return {name: norm[rel] for name, rel in wm.items()}


_SEP = re.compile(r"[\\/]")


def normalize_shard_path(index_path: Path, rel, name_of) -> str:
    """Relative POSIX form of an index entry; ``name_of(rel)`` names a tensor for the error only."""
    if not isinstance(rel, str) or not rel:
        raise AuditInputError(index_path, f"weight_map entry for {name_of(rel)!r} is not a file name: {rel!r}")
    win = PureWindowsPath(rel)
    if rel.startswith(("/", "\\")) or win.drive or ".." in _SEP.split(rel):
        raise AuditInputError(index_path, f"weight_map entry for {name_of(rel)!r} points outside the model "
                                          f"directory: '{rel}'")
    return PurePosixPath(rel.replace("\\", "/")).as_posix()
