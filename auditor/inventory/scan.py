"""Scan a model directory: every safetensors header, the index, and the side files.

The result is one TensorTable over all shards (headers only, never tensor data) plus what the
later stages need to know about the directory: the index and how well it agrees with the shards,
config.json and msModelSlim's quant description. Nothing is ever written into the directory.

Which files are inventoried:
* top-level ``*.safetensors`` (what vLLM globs),
* every file an ``*.safetensors.index.json`` weight_map points at,
* msModelSlim's ``optional/*.safetensors`` (QuaRot's ``global_rotation``).

``rot.safetensors`` and ``optional/*`` are inventoried with ``loaded=False``: the engine does not
load them as model parameters (a later rule decides what QuaRot costs).
"""
from __future__ import annotations

import gc
import re
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from operator import countOf
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath, PureWindowsPath

import numpy as np

from ..errors import AuditInputError, read_input_bytes
from .jsonspans import index_columns, parse_index
from .namespans import spans_distinct
from .indexcheck import FastIndex
from .shards import HeaderBatch, read_headers, unique_names
from .progress import ProgressLine, want_progress
from .table import TensorTable

try:
    import orjson as _orjson
except ImportError:  # pragma: no cover
    _orjson = None
import json

INDEX_GLOB = "*.safetensors.index.json"
OPTIONAL_DIR = "optional"
NOT_LOADED_FILES = frozenset({"rot.safetensors"})
QUANT_DESC_NAME = "quant_model_description.json"
MAX_LISTED = 20     # individual findings per kind before they are summarized

Finding = tuple[str, str, str]   # (severity, tensor-or-file, message)


@dataclass
class ScanResult:
    table: TensorTable
    model_dir: Path
    index_path: Path | None = None
    index_findings: list[Finding] = field(default_factory=list)
    config_path: Path | None = None
    quant_desc_path: Path | None = None
    shard_files: list[str] = field(default_factory=list)   # relative to model_dir, table.files order


def scan_model_dir(model_dir: Path, progress: bool | None = None) -> ScanResult:
    """Inventory every tensor of ``model_dir`` from its safetensors headers.

    Raises AuditInputError for anything that would stop the engine from loading the checkpoint
    (malformed header, missing shard, a tensor stored twice, an index escaping the directory).
    Index/shard disagreements that the engine tolerates become ``index_findings``.
    """
    model_dir = Path(model_dir)
    if not model_dir.exists():
        raise AuditInputError(model_dir, "model directory does not exist")
    if not model_dir.is_dir():
        raise AuditInputError(model_dir, "not a directory")
    # Parsing 25 MB of headers allocates millions of short-lived dicts/lists and no cycles; the
    # cyclic GC would re-traverse them over and over (measured: it more than doubles parse time).
    with _gc_paused():
        return _scan(model_dir, progress)


@contextmanager
def _gc_paused():
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


def _scan(model_dir: Path, progress: bool | None) -> ScanResult:
    index_paths = sorted(p for p in model_dir.glob(INDEX_GLOB) if not p.name.startswith("."))
    if len(index_paths) != 1:
        return _scan_in_order(model_dir, progress, index_paths, None)
    # The index (19 MB for GLM-5.1) is read and hashed on the second core while the headers are
    # read here: numpy releases the GIL for the bulk of both. The shards it names are almost
    # always the top-level files; when not, the scan starts over in order.
    with ThreadPoolExecutor(max_workers=1) as pool:
        pending = pool.submit(_fast_index, index_paths[0], model_dir)
        shards = _shard_files(model_dir, set())
        try:
            batch = _read(model_dir, shards, progress, check_unique=False)
        except AuditInputError:
            if pending.result() is None:
                _load_indexes(index_paths, model_dir)     # a broken index is reported first, as in order
            raise
        fast = pending.result()
    if fast is None:                      # an index the fast reader declines: the exact one
        weight_map, findings = _load_indexes(index_paths, model_dir)
        if _shard_files(model_dir, set(weight_map.values())) == shards:
            return _cross_checked(model_dir, index_paths, shards, unique_names(batch), weight_map, findings)
    if fast is None or not set(fast.files) <= set(shards):
        return _scan_in_order(model_dir, progress, index_paths, fast)
    return _checked(model_dir, index_paths, fast, shards, batch)


def _read(model_dir: Path, shards: list[str], progress: bool | None, check_unique: bool) -> HeaderBatch:
    with ProgressLine(len(shards), enabled=want_progress(progress, len(shards))) as bar:
        return read_headers([model_dir / rel for rel in shards], on_file=bar.update, check_unique=check_unique)


def _scan_in_order(model_dir: Path, progress: bool | None, index_paths: list[Path],
                   fast: FastIndex | None) -> ScanResult:
    """Index first (it names the shards), then the headers."""
    if fast is None:
        weight_map, findings = _load_indexes(index_paths, model_dir)
        shards = _shard_files(model_dir, set(weight_map.values()))
    else:
        shards = _shard_files(model_dir, set(fast.files))
    # with a fast index, agreement proves the names distinct: the uniqueness rule waits
    batch = _read(model_dir, shards, progress, check_unique=fast is None)
    if fast is not None:
        return _checked(model_dir, index_paths, fast, shards, batch)
    return _cross_checked(model_dir, index_paths, shards, batch, weight_map, findings)


def _checked(model_dir: Path, index_paths: list[Path], fast: FastIndex, shards: list[str],
             batch: HeaderBatch) -> ScanResult:
    """The table, when the fast index agrees with it; else the exact cross-check's findings."""
    loaded = [_is_loaded(rel) for rel in shards]
    table = batch.to_table(shards, loaded)
    if fast.agrees_with(table, _optional_rows(table)):
        return _result(model_dir, table, index_paths, _optional_notes(table, index_paths[0].name))
    batch = unique_names(batch)
    weight_map, findings = _load_indexes(index_paths, model_dir)   # exact findings/errors
    return _cross_checked(model_dir, index_paths, shards, batch, weight_map, findings)


def _cross_checked(model_dir: Path, index_paths: list[Path], shards: list[str], batch: HeaderBatch,
                   weight_map: dict[str, str], findings: list[Finding]) -> ScanResult:
    loaded = [_is_loaded(rel) for rel in shards]
    table = batch.to_table(shards, loaded)
    # Fast index check: every stored tensor maps to its own shard, and the index has exactly as
    # many entries as were counted => index == shards (names are unique within each shard).
    agrees = bool(index_paths)
    counted = 0
    for i, rel in enumerate(shards):
        if not agrees:
            break
        if not _is_optional(rel):
            names = batch.file_names(i)
            agrees = countOf(map(weight_map.get, names), rel) == len(names)
            counted += len(names)

    if index_paths:
        index_name = index_paths[0].name
        opt_names = _optional_names(table)
        if agrees and counted == len(weight_map) and len(set(opt_names)) == len(opt_names) \
                and not any(n in weight_map for n in opt_names):
            findings.extend(_optional_notes(table, index_name))
        else:
            _check_unique(model_dir, table)
            findings.extend(cross_check_index(table, weight_map, index_name))
    else:
        _check_unique(model_dir, table)

    return _result(model_dir, table, index_paths, findings)


def _result(model_dir: Path, table: TensorTable, index_paths: list[Path], findings: list[Finding]) -> ScanResult:
    config = model_dir / "config.json"
    return ScanResult(
        table=table, model_dir=model_dir,
        index_path=index_paths[0] if index_paths else None,
        index_findings=findings,
        config_path=config if config.is_file() else None,
        quant_desc_path=find_quant_description(model_dir),
        shard_files=list(table.files),
    )


def _load_indexes(index_paths: list[Path], model_dir: Path) -> tuple[dict[str, str], list[Finding]]:
    """One weight_map from all index files (normally exactly one)."""
    if len(index_paths) == 1:
        return load_index(index_paths[0], model_dir), []
    findings: list[Finding] = []
    weight_map: dict[str, str] = {}
    for ip in index_paths:
        for name, rel in load_index(ip, model_dir).items():
            prev = weight_map.setdefault(name, rel)
            if prev != rel:
                findings.append(("warning", name, f"index files disagree: '{prev}' vs '{rel}' ({ip.name})"))
    if index_paths:
        findings.insert(0, ("warning", index_paths[0].name,
                            f"{len(index_paths)} index files found ({', '.join(p.name for p in index_paths)}); "
                            f"their weight maps were merged"))
    return weight_map, findings


def load_index(index_path: Path, model_dir: Path) -> dict[str, str]:
    """weight_map of an index file, with shard paths normalized and confined to ``model_dir``.

    A shard itself may be a symlink resolving anywhere (hub caches point into a blobs dir);
    only the path written in the index must stay inside the directory.
    """
    raw = read_input_bytes(index_path, "index")
    # a 180,000-entry weight_map costs orjson ~0.17 s in string objects; the vectorised parser
    # reads the usual all-strings layout ~4x faster and defers everything else to orjson
    doc = parse_index(raw)
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
        norm[rel] = _normalize_shard_path(index_path, rel, first_tensor)
    missing = [(n, r) for r, n in norm.items() if not (model_dir / n).is_file()]
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


def _normalize_shard_path(index_path: Path, rel, name_of) -> str:
    """Relative POSIX form of an index entry; ``name_of(rel)`` names a tensor for the error only."""
    if not isinstance(rel, str) or not rel:
        raise AuditInputError(index_path, f"weight_map entry for {name_of(rel)!r} is not a file name: {rel!r}")
    win = PureWindowsPath(rel)
    if rel.startswith(("/", "\\")) or win.drive or ".." in _SEP.split(rel):
        raise AuditInputError(index_path, f"weight_map entry for {name_of(rel)!r} points outside the model "
                                          f"directory: '{rel}'")
    return PurePosixPath(rel.replace("\\", "/")).as_posix()


def _fast_index(index_path: Path, model_dir: Path) -> FastIndex | None:
    """The index as columns when it is plain and every shard it names is a file here; None
    sends it through load_index, which also words every error."""
    try:
        raw = index_path.read_bytes()
    except OSError:
        return None
    cols = index_columns(raw)
    coded = cols.file_codes() if cols is not None else None
    if coded is None:
        return None
    codes, files = coded
    try:
        norm = [_normalize_shard_path(index_path, rel, lambda _: "") for rel in files]
    except AuditInputError:
        return None
    if len(set(norm)) != len(norm) or not all((model_dir / n).is_file() for n in norm):
        return None
    return FastIndex(cols, codes, norm).hashed()


def _optional_rows(table: TensorTable) -> np.ndarray:
    idx = [i for i, f in enumerate(table.files) if _is_optional(f)]
    return np.isin(table.file, idx) if idx else np.zeros(len(table), dtype=bool)


def _shard_files(model_dir: Path, index_files: set[str]) -> list[str]:
    """Relative paths of all files to inventory, de-duplicated, in a stable sorted order."""
    rels = {p.name for p in model_dir.glob("*.safetensors")}
    rels.update(index_files)
    opt = model_dir / OPTIONAL_DIR
    if opt.is_dir():
        rels.update(f"{OPTIONAL_DIR}/{p.name}" for p in opt.glob("*.safetensors"))
    return sorted(rels)


def _is_optional(rel: str) -> bool:
    return rel.startswith(OPTIONAL_DIR + "/")


def _is_loaded(rel: str) -> bool:
    return rel not in NOT_LOADED_FILES and not _is_optional(rel)


def _optional_names(table: TensorTable) -> list[str]:
    idx = [i for i, f in enumerate(table.files) if _is_optional(f)]
    return table.name[np.isin(table.file, idx)].tolist() if idx else []


def _optional_note(rel: str, count: int, index_name: str) -> Finding:
    return ("info", rel, f"{count} tensor(s) not listed in {index_name} (msModelSlim keeps "
                         f"optional/ files out of the index)")


def _optional_notes(table: TensorTable, index_name: str) -> list[Finding]:
    counts = np.bincount(table.file, minlength=len(table.files)) if len(table) else []
    return [_optional_note(rel, int(counts[i]), index_name)
            for i, rel in enumerate(table.files) if _is_optional(rel) and counts[i]]


def _check_unique(model_dir: Path, table: TensorTable) -> None:
    """The engine would load a tensor stored twice twice (or fail): refuse it, naming both files."""
    if spans_distinct(table.name_spans):
        return
    names = table.name
    first: dict[str, int] = {}
    for name, f in zip(names, table.file):
        if name in first:
            a, b = table.files[first[name]], table.files[int(f)]
            raise AuditInputError(model_dir / b, f"tensor {name!r} is also stored in "
                                                 f"'{model_dir / a}'")
        first[name] = int(f)


def cross_check_index(table: TensorTable, weight_map: dict[str, str], index_name: str) -> list[Finding]:
    """Index vs shards disagreements, as findings (the engine loads what the shards hold)."""
    files = np.array(table.files, dtype=object)
    actual = dict(zip(table.name.tolist(), files[table.file].tolist())) if len(table) else {}
    out: list[Finding] = []
    # msModelSlim keeps optional/ out of the index by design: note it, then ignore those rows
    opt_idx = [i for i, f in enumerate(table.files) if f.startswith(OPTIONAL_DIR + "/")]
    if opt_idx:
        per_opt: dict[str, int] = {}
        for name in table.name[np.isin(table.file, opt_idx)].tolist():
            if name not in weight_map:
                rel = actual.pop(name)
                per_opt[rel] = per_opt.get(rel, 0) + 1
        out.extend(_optional_note(rel, count, index_name) for rel, count in sorted(per_opt.items()))
    if actual == weight_map:
        return out   # the common case, decided at C speed

    absent: list[Finding] = []
    wrong_shard: list[Finding] = []
    for name, rel in weight_map.items():
        got = actual.get(name)
        if got is None:
            absent.append(("warning", name, f"listed in {index_name} (shard '{rel}') but stored in no shard"))
        elif got != rel:
            wrong_shard.append(("warning", name, f"{index_name} says shard '{rel}' but it is stored in '{got}'"))
    indexed_files = set(weight_map.values())
    unlisted: list[Finding] = []
    per_file: dict[str, int] = {}
    for name, rel in actual.items():
        if name in weight_map:
            continue
        if rel in indexed_files:
            unlisted.append(("warning", name, f"stored in '{rel}' but not listed in {index_name}"))
        else:
            per_file[rel] = per_file.get(rel, 0) + 1
    for group in (absent, wrong_shard, unlisted):
        out.extend(_capped(group))
    out.extend(("warning", rel, f"shard not referenced by {index_name}: its {count} tensor(s) are missing "
                                f"from weight_map (an engine that filters shards by the index skips it)")
               for rel, count in sorted(per_file.items()))
    return out


def _capped(group: list[Finding]) -> list[Finding]:
    """Keep reports readable when a stale index disagrees on thousands of tensors."""
    if len(group) <= MAX_LISTED:
        return group
    rest = len(group) - MAX_LISTED
    sev, _, msg = group[MAX_LISTED]
    return group[:MAX_LISTED] + [(sev, f"({rest} more)", f"{rest} more tensors with the same kind of "
                                                         f"problem, e.g. {group[MAX_LISTED][1]!r}: {msg}")]


def find_quant_description(model_dir: Path) -> Path | None:
    """msModelSlim's description: ``quant_model_description.json`` (older tools add a suffix)."""
    exact = model_dir / QUANT_DESC_NAME
    if exact.is_file():
        return exact
    cands = sorted(p for p in model_dir.glob("quant_model_description*.json") if p.is_file())
    return cands[0] if cands else None
