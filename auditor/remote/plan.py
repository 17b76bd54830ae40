"""Which files of a repository listing to read, and how, so the local scan sees what it would see
in a full download: the same rules as ``inventory/scan.py``, applied to names instead of a directory.

* whole: ``config.json``, every root ``*.safetensors.index.json`` (not hidden), and the quant
  description ``find_quant_description`` would pick (``quant_model_description.json``, else the
  first ``quant_model_description*.json``). One over its local cap is not fetched: it is mirrored
  as a hole of its listed size, which the local reader refuses by size, in its own words;
* headers only: root ``*.safetensors``, ``optional/*.safetensors`` and every listed file an index's
  weight_map names (msModelSlim writes ``quant_model_weights-*``; nothing is assumed about names).

Names come from the server, so every path written locally is checked first (``safe_path``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from pathlib import PurePosixPath

from ..errors import AuditInputError
from ..inputs import CONFIG_CAP, DESCRIPTION_CAP, INDEX_CAP
from ..inventory.header import MAX_HEADER_SIZE
from ..inventory.scan import INDEX_GLOB, OPTIONAL_DIR, QUANT_DESC_NAME

CONFIG = "config.json"
DESC_GLOB = "quant_model_description*.json"
FIRST_READ = 100_000        # no index to estimate from: Hugging Face's own first read (~97% of headers)
PER_TENSOR = 96             # JSON per header entry besides its name; GLM-5.1's writers use 70-79 bytes
HEADER_SLACK = 4096         # __metadata__, padding
MAX_DEPTH = 32
_BAD_CHARS = set("\\\x00") | {chr(c) for c in range(32)} | {"\x7f"}


@dataclass
class Plan:
    whole: dict[str, int] = field(default_factory=dict)      # path -> listed size (read whole)
    holes: dict[str, int] = field(default_factory=dict)      # path -> size (over the local cap: not read)
    shards: dict[str, int] = field(default_factory=dict)     # path -> size (header only)
    guess: dict[str, int] = field(default_factory=dict)      # shard path -> estimated header length

    @property
    def indexes(self) -> list[str]:
        return sorted(p for p in self.whole if fnmatchcase(p, INDEX_GLOB) and "/" not in p)


def safe_path(path: str) -> str | None:
    """Why a listed ``path`` may not be written under the cache directory, or None."""
    if not path or path.startswith("/") or any(c in _BAD_CHARS for c in path):
        return "not a plain relative path"
    parts = path.split("/")
    if len(parts) > MAX_DEPTH or any(p in ("", ".", "..") or len(p.encode()) > 255 for p in parts):
        return "not a plain relative path"
    return None


def _root(path: str) -> bool:
    return "/" not in path


def small_files(listing: dict[str, int], where: str) -> Plan:
    """The whole-file reads (config, indexes, description); AuditInputError without config.json."""
    if CONFIG not in listing:
        raise AuditInputError(where, "no config.json in the model directory")
    plan = Plan()
    names = [CONFIG] + sorted(p for p in listing if _root(p) and fnmatchcase(p, INDEX_GLOB) and not p.startswith("."))
    descs = sorted(p for p in listing if _root(p) and fnmatchcase(p, DESC_GLOB))
    if descs:
        names.append(QUANT_DESC_NAME if QUANT_DESC_NAME in descs else descs[0])
    for name in names:
        cap = CONFIG_CAP if name == CONFIG else INDEX_CAP if fnmatchcase(name, INDEX_GLOB) else DESCRIPTION_CAP
        size = listing[name]
        (plan.holes if size > cap else plan.whole)[name] = size
    return plan


def index_shards(raw: bytes) -> dict[str, tuple[int, int]] | None:
    """{normalized shard path: (tensors, bytes of their names)} from an index's weight_map; None
    when the index is not a JSON object with a weight_map (the local reader words that later)."""
    try:
        import orjson
        doc = orjson.loads(raw)
    except (ValueError, RecursionError):
        return None
    wm = doc.get("weight_map") if isinstance(doc, dict) else None
    if not isinstance(wm, dict):
        return None
    by_value: dict[str, list[str]] = {}
    try:
        for name, rel in wm.items():                      # 177k entries: one pass, no per-entry paths
            by_value.setdefault(rel, []).append(name)
    except TypeError:                                     # an unhashable value: the local reader names it
        return None
    out: dict[str, tuple[int, int]] = {}
    for rel, names in by_value.items():
        if isinstance(rel, str) and rel:
            norm = PurePosixPath(rel.replace("\\", "/")).as_posix()     # as index.normalize_shard_path
            count, nbytes = out.get(norm, (0, 0))
            out[norm] = (count + len(names), nbytes + len("".join(names).encode("utf-8", "surrogatepass")))
    return out


def add_shards(plan: Plan, listing: dict[str, int], indexed: list[dict[str, tuple[int, int]]]) -> None:
    """Shards to read: root and optional/ ``*.safetensors`` plus every listed file an index names,
    each with a first-read guess from the names the index gives it."""
    rels = {p for p in listing if _root(p) and fnmatchcase(p, "*.safetensors")}
    rels |= {p for p in listing if p.startswith(OPTIONAL_DIR + "/") and _root(p[len(OPTIONAL_DIR) + 1:])
             and fnmatchcase(p, "*.safetensors")}
    named: dict[str, tuple[int, int]] = {}
    for index in indexed:
        for rel, (count, nbytes) in index.items():
            c, b = named.get(rel, (0, 0))
            named[rel] = (c + count, b + nbytes)
    rels |= {rel for rel in named if rel in listing}     # a missing one: the local scan names it
    for rel in sorted(rels):
        plan.shards[rel] = listing[rel]
        count, nbytes = named.get(rel, (0, 0))
        guess = nbytes + PER_TENSOR * count + HEADER_SLACK if count else FIRST_READ
        plan.guess[rel] = min(guess, MAX_HEADER_SIZE)


def check_paths(plan: Plan, where: str) -> None:
    for path in [*plan.whole, *plan.holes, *plan.shards]:
        problem = safe_path(path)
        if problem:
            raise AuditInputError(where, f"the repository lists {path[:200]!r}: {problem}; refused")
