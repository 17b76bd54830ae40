"""msModelSlim's ``quant_model_description.json``: per-tensor scheme strings plus a few globals.

Format (engine spec §1.1): one flat JSON object. Known global keys carry settings of any JSON
type; every other key is a checkpoint tensor name whose value is a scheme string ("FLOAT",
"W8A8", "W8A8_DYNAMIC", "W4A8_DYNAMIC", ...). A file that is not a JSON object cannot be used at
all (AuditInputError); an odd entry inside an otherwise usable file is only a finding, because
the engine itself only looks up ``<module>.weight`` keys and ignores the rest.
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..errors import AuditInputError
from ..inputs import read_input_bytes
from ..inputs import DESCRIPTION_CAP
from .namespans import NameSpans

try:
    import orjson as _orjson
except ImportError:  # pragma: no cover
    _orjson = None

GLOBAL_KEYS = frozenset({
    "version", "model_quant_type", "group_size", "is_rot_used", "optional", "metadata",
    "fa_quant_type", "indexer_quant_type", "kv_cache_type", "ascend_quant_method", "hc_head_fn",
})


_LONGEST_GLOBAL = max(map(len, GLOBAL_KEYS))


@dataclass
class QuantDescription:
    """Globals, findings, and the per-tensor schemes as a dict (``fast.quantdesc`` holds them as
    byte spans of a large file instead, with the same interface)."""

    path: Path
    globals: dict = field(default_factory=dict)                  # known global keys, any JSON value
    findings: list[tuple[str, str, str]] = field(default_factory=list)   # (severity, key, message)
    _per_tensor: dict[str, str] | None = field(default=None, repr=False)

    @property
    def per_tensor(self) -> dict[str, str]:
        """tensor name -> scheme string."""
        return self._per_tensor if self._per_tensor is not None else {}

    def __len__(self) -> int:
        return len(self.per_tensor)

    def __contains__(self, tensor: str) -> bool:
        return tensor in self.per_tensor

    def any_key_contains(self, text: str) -> bool:
        """Whether some per-tensor key contains ``text`` (e.g. msModelSlim's ``norm.bias``)."""
        return any(text in k for k in self.per_tensor)

    def scheme_values(self) -> set[str]:
        """The distinct scheme strings (a few, over up to 10^6 entries)."""
        return set(self.per_tensor.values())

    def prepared(self) -> "QuantDescription":
        """Ready for scheme_codes (the span form hashes its keys here, on a loader thread)."""
        return self

    def scheme(self, tensor: str, default: str | None = None) -> str | None:
        return self.per_tensor.get(tensor, default)

    def scheme_codes(self, names: NameSpans) -> tuple[np.ndarray, list[str], np.ndarray]:
        """Per row of a table with these names: (code into the scheme names, with
        ``len(scheme_names)`` for "not described"; the sorted scheme names; described or not)."""
        n = len(names)
        looked = list(map(self.per_tensor.get, names.strings().tolist()))    # C-level map
        scheme_names = sorted(str(v) for v in set(looked) - {None})
        code_of: dict = {v: i for i, v in enumerate(scheme_names)}
        code_of[None] = len(scheme_names)
        scode = np.fromiter(map(code_of.__getitem__, looked), dtype=np.int32, count=n)
        return scode, scheme_names, scode < len(scheme_names)

    @classmethod
    def from_dict(cls, doc: dict, path: Path | str = "<synthesized>", *, owned: bool = False) -> "QuantDescription":
        """Split a parsed description into globals / per-tensor schemes / findings.

        One rule for files and synthesized descriptions alike: known global keys are globals
        whatever their type; any other key must map to a scheme string. ``owned``: ``doc`` is
        ours to keep and change (a freshly parsed file), so it is not copied.
        """
        out = cls(path=Path(path))
        per_tensor = doc if owned else dict(doc)     # globals are popped out of it
        for key in GLOBAL_KEYS & per_tensor.keys():
            out.globals[key] = per_tensor.pop(key)
        bad: list[tuple[str, object]] = []
        if set(map(type, per_tensor.values())) - {str}:      # rare: find the offenders
            bad = [(k, v) for k, v in per_tensor.items() if not isinstance(v, str)]
            for k, _ in bad:
                del per_tensor[k]
        out._per_tensor = per_tensor
        for key, value in bad[:20]:
            out.findings.append(("warning", key, f"value {_short(value)} is not a scheme string; "
                                                 f"entry ignored"))
        if len(bad) > 20:
            out.findings.append(("warning", f"({len(bad) - 20} more)",
                                 f"{len(bad) - 20} more non-string per-tensor entries ignored"))
        return out


def load_quant_description(path: Path) -> QuantDescription:
    """Read and split the description; raises AuditInputError only when the file is unusable."""
    path = Path(path)
    return description_from_bytes(path, read_input_bytes(path, "quant description", DESCRIPTION_CAP))


def description_from_bytes(path: Path, raw: bytes) -> QuantDescription:
    """load_quant_description of bytes already read from ``path``."""
    from .fast.quantdesc import span_description     # it subclasses QuantDescription
    fast = span_description(raw, path)
    if fast is not None:
        return fast
    try:
        # orjson validates UTF-8 itself: the 10 MB decode only runs to word an error
        doc = _orjson.loads(raw) if _orjson is not None else json.loads(_utf8(path, raw))
    except (ValueError, RecursionError):
        _utf8(path, raw)                  # invalid UTF-8 is named before invalid JSON
        raise AuditInputError(path, "quant description is not valid JSON") from None
    if not isinstance(doc, dict):
        raise AuditInputError(path, "quant description is not a JSON object")

    return QuantDescription.from_dict(doc, path, owned=True)


def _utf8(path: Path, raw: bytes) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise AuditInputError(path, f"quant description is not valid UTF-8 (bad byte at offset {exc.start})") from None


def _short(value) -> str:
    try:
        text = json.dumps(value)
    except (RecursionError, ValueError):      # a value nested deeper than json can print
        return "<deeply nested value>"
    return text if len(text) <= 40 else text[:37] + "..."
