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
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from operator import countOf
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import AuditInputError
from ..inputs import read_input_bytes
from ..inputs import INDEX_CAP
from .fast import index as fast_index
from .fast.index import FastIndex
from .index import load_index
from .namespans import spans_distinct
from .progress import ProgressLine, want_progress
from . import scancache
from .shards import HeaderBatch, HeaderBytes, parse_header_bytes, unique_names
from .table import TensorTable

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
    """The one scan path: index and headers read (and hashed, for the scan cache: a stored scan
    of the same bytes is used as it is), each parsed through its accelerator, else the exact
    reader, then the table, then index vs shards (the accelerator's proof of agreement, else
    the exact cross-check, which words every finding)."""
    index_paths = sorted(p for p in model_dir.glob(INDEX_GLOB) if not p.name.startswith("."))
    cached = scancache.enabled()
    # The index (19 MB for GLM-5.1) is read and parsed on the second core while the headers are
    # read and parsed here (numpy and hashlib release the GIL for the bulk of both). The shards
    # it names are almost always the top-level files; when not, the others are read once it is known.
    with ThreadPoolExecutor(max_workers=1) as pool:
        pending = pool.submit(_read_index_bytes, index_paths, cached)
        shards = _shard_files(model_dir, set())
        try:
            hb = _read(model_dir, shards, progress)
        except AuditInputError:
            index = _index_of(pending.result()[0], index_paths, model_dir)   # a broken index is reported first
            wanted = _shard_files(model_dir, index.files())
            if wanted != shards:
                _read(model_dir, wanted, progress)   # the first damaged file in sorted order
            raise
        raws, index_hash = pending.result()
        key = None
        if index_hash is not None:
            key = scancache.scan_key(model_dir, shards, hb, index_hash)
            hit = scancache.load(model_dir, key, shards)
            if hit is not None:
                hit[0].cache_key, hit[0].cache_dir = key, model_dir
                return _result(model_dir, hit[0], index_paths, hit[1])
        pending = pool.submit(_index_of, raws, index_paths, model_dir)
        batch = parse_header_bytes(hb, check_unique=False)
        index = pending.result()
    wanted = _shard_files(model_dir, index.files())
    if wanted != shards:
        key = None                            # the key covers the listed shards' headers only
        shards, batch = wanted, parse_header_bytes(_read(model_dir, wanted, progress), check_unique=False)
    result = _checked(model_dir, index_paths, index, shards, batch)
    if key is not None:
        scancache.store(model_dir, key, result.table, result.index_findings)
        result.table.cache_key, result.table.cache_dir = key, model_dir
    return result


def _checked(model_dir: Path, index_paths: list[Path], index: "_Index", shards: list[str],
             batch: HeaderBatch) -> ScanResult:
    loaded = [_is_loaded(rel) for rel in shards]
    table = batch.to_table(shards, loaded)
    if index.fast is not None and index.fast.agrees_with(table, _optional_rows(table)):
        # agreement proves the names distinct (each listed once, in its own file)
        return _result(model_dir, table, index_paths, _optional_notes(table, index_paths[0].name))
    checked = unique_names(batch)             # a key twice in one header is an error
    if checked is not batch:
        table = checked.to_table(shards, loaded)
    weight_map, findings = index.exact()
    return _cross_checked(model_dir, index_paths, shards, checked, table, weight_map, findings)


def _read(model_dir: Path, shards: list[str], progress: bool | None) -> HeaderBytes:
    with ProgressLine(len(shards), enabled=want_progress(progress, len(shards))) as bar:
        return HeaderBytes([model_dir / rel for rel in shards], on_file=bar.update)


@dataclass
class _Index:
    """The index files of a directory: read once, as the accelerator's columns or the exact
    weight_map (built from the same bytes on demand)."""

    paths: list[Path]
    model_dir: Path
    raws: list[bytes]
    fast: FastIndex | None = None
    _exact: tuple[dict[str, str], list[Finding]] | None = None

    def exact(self) -> tuple[dict[str, str], list[Finding]]:
        if self._exact is None:
            # after the accelerator's columns disagreed, orjson: parsing to spans again is slower
            self._exact = _load_indexes(self.paths, self.model_dir, self.raws, accelerate=self.fast is None)
        return self._exact

    def files(self) -> set[str]:
        """Normalized shard paths the index names."""
        if self.fast is not None:
            return set(self.fast.files)
        return set(self.exact()[0].values())


def _read_index_bytes(index_paths: list[Path], digest: bool) -> tuple[list[bytes], bytes | None]:
    """The index files' bytes, and their hash when the scan cache is on."""
    raws = [read_input_bytes(p, "index", INDEX_CAP) for p in index_paths]
    return raws, scancache.index_digest(index_paths, raws) if digest else None


def _index_of(raws: list[bytes], index_paths: list[Path], model_dir: Path) -> _Index:
    index = _Index(index_paths, model_dir, raws)
    if len(index_paths) == 1:
        index.fast = fast_index.read_index(raws[0], index_paths[0], model_dir)
    if index.fast is None:
        index.exact()                         # raises for a broken index, on this thread
    return index


def _cross_checked(model_dir: Path, index_paths: list[Path], shards: list[str], batch: HeaderBatch,
                   table: TensorTable, weight_map: dict[str, str], findings: list[Finding]) -> ScanResult:
    # Quick agreement check: every stored tensor maps to its own shard, and the index has exactly
    # as many entries as were counted => index == shards (names are unique within each shard).
    findings = list(findings)
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


def _load_indexes(index_paths: list[Path], model_dir: Path, raws: list[bytes],
                  accelerate: bool = True) -> tuple[dict[str, str], list[Finding]]:
    """One weight_map from all index files (normally exactly one)."""
    if len(index_paths) == 1:
        return load_index(index_paths[0], model_dir, raws[0], accelerate), []
    findings: list[Finding] = []
    weight_map: dict[str, str] = {}
    for ip, raw in zip(index_paths, raws):
        for name, rel in load_index(ip, model_dir, raw).items():
            prev = weight_map.setdefault(name, rel)
            if prev != rel:
                findings.append(("warning", name, f"index files disagree: '{prev}' vs '{rel}' ({ip.name})"))
    if index_paths:
        findings.insert(0, ("warning", index_paths[0].name,
                            f"{len(index_paths)} index files found ({', '.join(p.name for p in index_paths)}); "
                            f"their weight maps were merged"))
    return weight_map, findings


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
    # anything by that name, file or not: the reader refuses a FIFO, device or directory by name
    exact = model_dir / QUANT_DESC_NAME
    if exact.is_symlink() or exact.exists():
        return exact
    cands = sorted(model_dir.glob("quant_model_description*.json"))
    return cands[0] if cands else None
