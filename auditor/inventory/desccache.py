"""The quant description through the scan cache: what every run needs of it (globals, findings,
the scheme values, whether a key names a norm bias) kept beside the scan, the 10 MB per-tensor
part parsed only when something asks for it.

Why: msModelSlim's description of GLM-5.1 is 12.9 MB; parsing and hashing its keys takes
0.12-0.25 s, and on a run whose classification comes from the cache (``model/classcache.py``)
nothing reads a per-tensor entry. The file is still read whole through the opener and hashed
on every run; only a matching hash (with the resolved path and the reader's code) uses the
stored summary, and the per-tensor part is then parsed from those same bytes when asked, so a
lazy answer can never come from a different file.
"""
from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np

from .. import cachefile
from ..inputs import DESCRIPTION_CAP, read_input_bytes
from . import scancache
from .namespans import NameSpans
from .quantdesc import QuantDescription, description_from_bytes

SUFFIX = ".desc"
FORMAT = 1
ENTRY_CAP = 64 << 20
#: the texts any_key_contains is asked by the engines (materialize.py: msModelSlim's norm bias)
ASKED_CONTAINS = ("norm.bias",)
#: the keys every memory run looks up (materialize.globals_: both spellings of the embedding's and
#: lm_head's weight, model.names.spellings; a test keeps the two lists the same)
ASKED_KEYS = ("model.embed_tokens.weight", "embed.weight", "lm_head.weight", "head.weight")


def load_description(path: Path) -> QuantDescription:
    """The description at ``path``, prepared for scheme_codes (on a hit, prepared when asked)."""
    path = Path(path)
    raw = read_input_bytes(path, "quant description", DESCRIPTION_CAP)
    if not scancache.enabled():
        return description_from_bytes(path, raw).prepared()
    h = hashlib.sha1(scancache.code_digest() + b"desc %d\0" % FORMAT)
    h.update(str(path.resolve()).encode("utf-8", "surrogateescape") + b"\0")
    h.update(raw)
    digest = h.hexdigest()
    entry = scancache.cache_dir() / (cachefile.path_key(path.parent) + SUFFIX)
    cached = cachefile.load(entry, digest, ENTRY_CAP, lambda meta, _arrays: _summary(path, raw, digest, meta))
    if cached is not None:
        return cached
    real = description_from_bytes(path, raw).prepared()
    real.cache_digest = digest
    cachefile.store(entry, digest, lambda: ({
        "format": FORMAT, "globals": real.globals, "findings": [list(f) for f in real.findings],
        "scheme_values": sorted(real.scheme_values()),
        "contains": {t: bool(real.any_key_contains(t)) for t in ASKED_CONTAINS},
        "members": {k: k in real for k in ASKED_KEYS}}, {}), scancache.MAX_ENTRIES)
    return real


def _summary(path: Path, raw: bytes, digest: str, meta: dict) -> "CachedDescription | None":
    try:
        if meta.get("format") != FORMAT:
            return None
        findings = [(str(s), None if k is None else str(k), str(m)) for s, k, m in meta["findings"]]
        values = meta["scheme_values"]
        contains, members = meta["contains"], meta["members"]
        if not isinstance(meta["globals"], dict) or not all(isinstance(v, str) for v in values) \
                or not all(isinstance(contains.get(t), bool) for t in ASKED_CONTAINS) \
                or not all(isinstance(members.get(k), bool) for k in ASKED_KEYS):
            return None
    except (KeyError, TypeError, ValueError, AttributeError):
        return None
    out = CachedDescription(path=path, globals=meta["globals"], findings=findings)
    out.cache_digest = digest
    out._raw, out._values, out._real = raw, set(values), None
    out._contains = {t: contains[t] for t in ASKED_CONTAINS}
    out._members = {k: members[k] for k in ASKED_KEYS}
    return out


class CachedDescription(QuantDescription):
    """A description whose summary came from the cache; the per-tensor part is parsed from the
    same bytes the first time it is asked for."""

    def _parsed(self) -> QuantDescription:
        if self._real is None:
            self._real = description_from_bytes(self.path, self._raw).prepared()
        return self._real

    @property
    def per_tensor(self) -> dict[str, str]:
        return self._parsed().per_tensor

    def __len__(self) -> int:
        return len(self._parsed())

    def __contains__(self, tensor: str) -> bool:
        if tensor in self._members:
            return self._members[tensor]
        return tensor in self._parsed()

    def any_key_contains(self, text: str) -> bool:
        if text in self._contains:
            return self._contains[text]
        return self._parsed().any_key_contains(text)

    def scheme_values(self) -> set[str]:
        return set(self._values)

    def prepared(self) -> "QuantDescription":
        return self

    def scheme(self, tensor: str, default: str | None = None) -> str | None:
        return self._parsed().scheme(tensor, default)

    def scheme_codes(self, names: NameSpans) -> tuple[np.ndarray, list[str], np.ndarray]:
        return self._parsed().scheme_codes(names)
