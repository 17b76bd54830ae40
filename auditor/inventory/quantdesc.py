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

from ..errors import AuditInputError, read_input_bytes
from .jsonspans import PairRun, leading_pairs, span_codes
from .namespans import MAX_WORDS, NameSpans, decode_spans, span_columns, span_hash, u64_view

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
    """Globals, findings, and the per-tensor schemes: a dict, or (for a large file in the usual
    layout) byte spans that are matched to table rows directly and become a dict only on need."""

    path: Path
    globals: dict = field(default_factory=dict)                  # known global keys, any JSON value
    findings: list[tuple[str, str, str]] = field(default_factory=list)   # (severity, key, message)
    _per_tensor: dict[str, str] | None = field(default=None, repr=False)
    _run: PairRun | None = field(default=None, repr=False)      # per-tensor entries as spans
    _distinct: bool = field(default=False, repr=False)          # the spans' keys proved distinct
    _keys_hashed: tuple | None = field(default=None, repr=False)     # (k, key words, hashes, order)
    _values_coded: tuple | None = field(default=None, repr=False)    # (code per entry, distinct values)

    @property
    def per_tensor(self) -> dict[str, str]:
        """tensor name -> scheme string (built from the spans on first use)."""
        if self._per_tensor is None:
            run = self._run
            keys = decode_spans(run.buf, run.key_start, run.key_start + run.key_length)
            values = decode_spans(run.buf, run.value_start, run.value_start + run.value_length)
            self._per_tensor = dict(zip(keys, values))
        return self._per_tensor

    def __len__(self) -> int:
        if self._per_tensor is None and self._distinct:
            return len(self._run)
        return len(self.per_tensor)

    def __contains__(self, tensor: str) -> bool:
        if self._per_tensor is not None or self._run is None:
            return tensor in self.per_tensor
        run, key = self._run, tensor.encode("utf-8")
        at = run.buf.find(b'"' + key + b'"')
        while at >= 0:
            i = int(np.searchsorted(run.key_start, at + 1))
            if i < len(run) and run.key_start[i] == at + 1 and run.key_length[i] == len(key):
                return True
            at = run.buf.find(b'"' + key + b'"', at + 1)
        return False

    def any_key_contains(self, text: str) -> bool:
        """Whether some per-tensor key contains ``text`` (e.g. msModelSlim's ``norm.bias``)."""
        if self._per_tensor is not None or self._run is None:
            return any(text in k for k in self.per_tensor)
        run, sub = self._run, text.encode("utf-8")
        at = run.buf.find(sub)
        while at >= 0:
            i = int(np.searchsorted(run.key_start, at, side="right")) - 1
            if i >= 0 and at + len(sub) <= run.key_start[i] + run.key_length[i]:
                return True
            at = run.buf.find(sub, at + 1)
        return False

    def scheme(self, tensor: str, default: str | None = None) -> str | None:
        return self.per_tensor.get(tensor, default)

    def scheme_codes(self, names: NameSpans) -> tuple[np.ndarray, list[str], np.ndarray]:
        """Per row of a table with these names: (code into the scheme names, with
        ``len(scheme_names)`` for "not described"; the sorted scheme names; described or not)."""
        fast = self._matched_codes(names) if self._per_tensor is None else None
        if fast is not None:
            return fast
        n = len(names)
        looked = list(map(self.per_tensor.get, names.strings().tolist()))    # C-level map
        scheme_names = sorted(str(v) for v in set(looked) - {None})
        code_of: dict = {v: i for i, v in enumerate(scheme_names)}
        code_of[None] = len(scheme_names)
        scode = np.fromiter(map(code_of.__getitem__, looked), dtype=np.int32, count=n)
        return scode, scheme_names, scode < len(scheme_names)

    def _matched_codes(self, names: NameSpans) -> tuple[np.ndarray, list[str], np.ndarray] | None:
        """The spans matched to rows by hash, when every key is a distinct stored name (else None:
        the dict path words the findings)."""
        run = self._run
        n = len(names)
        if run is None or n == 0 or len(run) == 0:
            return None
        k = (max(int(names.length.max()), int(run.key_length.max())) + 7) // 8
        if k > MAX_WORDS:
            return None
        t_cols, t_hash = names.words_and_hash(k)
        d_cols, d_hash, d_order = self._key_words(k)
        order = names.hash_order(k)
        sorted_hash = t_hash[order]
        if (sorted_hash[1:] == sorted_hash[:-1]).any():
            return None
        queries = d_hash[d_order]         # sorted queries: a cache-friendly search (~10x faster)
        at = np.minimum(np.searchsorted(sorted_hash, queries), n - 1)
        if not np.array_equal(sorted_hash[at], queries):
            return None                   # a described tensor that is not stored
        rows = np.empty(len(d_order), dtype=np.int64)
        rows[d_order] = order[at]         # the row of each description entry
        if not np.array_equal(names.length[rows], run.key_length) or \
                any(not np.array_equal(t_cols[j][rows], d_cols[j]) for j in range(k)):
            return None                   # equal hashes, different names
        described = np.zeros(n, dtype=bool)
        described[rows] = True
        if int(np.count_nonzero(described)) != len(rows):
            return None                   # a key listed twice
        codes, values = self._value_codes()
        if codes is None:
            return None
        scheme_names = sorted(values)
        rank = np.array([scheme_names.index(v) for v in values], dtype=np.int32)
        scode = np.full(n, len(scheme_names), dtype=np.int32)
        scode[rows] = rank[codes]
        self._distinct = True
        return scode, scheme_names, described

    def prepared(self) -> "QuantDescription":
        """Hash the keys and code the values now, so a loader thread can do it while the headers
        are parsed; scheme_codes then only matches."""
        if self._run is not None and len(self._run):
            self._key_words((int(self._run.key_length.max()) + 7) // 8)
            self._value_codes()
        return self

    def _key_words(self, k: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(key words over ``k`` words, key hashes, their argsort), kept for the last ``k``."""
        if self._keys_hashed is None or self._keys_hashed[0] != k:
            run = self._run
            words = span_columns(u64_view(run.buf), run.key_start, run.key_length, k)
            h = span_hash(words, run.key_length)
            self._keys_hashed = (k, words, h, np.argsort(h))
        return self._keys_hashed[1:]

    def _value_codes(self) -> tuple[np.ndarray, list[str]] | tuple[None, None]:
        if self._values_coded is None:
            run = self._run
            self._values_coded = span_codes(run.buf, run.value_start, run.value_length)
        return self._values_coded

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

    @classmethod
    def from_run(cls, run: PairRun, path: Path) -> "QuantDescription | None":
        """From the spans of the leading string pairs plus the parsed rest of the document; None
        when the rest holds any non-global member (the whole-document path keeps a repeated key's
        last value and words non-string entries)."""
        try:
            rest = _orjson.loads(run.rest)
        except ValueError:
            return None
        out = cls.from_dict(rest, path, owned=True)
        if out._per_tensor or out.findings:
            return None                   # per-tensor members after the run: keep dict semantics
        # global keys written as strings sit inside the run: move them out (they are short)
        short = np.flatnonzero(run.key_length <= _LONGEST_GLOBAL)
        keep = np.ones(len(run), dtype=bool)
        early: dict[str, str] = {}
        for i in short.tolist():
            a = int(run.key_start[i])
            key = run.buf[a:a + int(run.key_length[i])].decode("utf-8")
            if key in GLOBAL_KEYS:
                keep[i] = False
                b = int(run.value_start[i])
                early[key] = run.buf[b:b + int(run.value_length[i])].decode("utf-8")
        out.globals = {**early, **out.globals}          # a later duplicate wins, as in a dict
        if not keep.all():
            run = PairRun(run.buf, run.key_start[keep], run.key_length[keep], run.value_start[keep],
                          run.value_length[keep], run.rest)
        out._per_tensor = None
        out._run = run
        return out


def load_quant_description(path: Path) -> QuantDescription:
    """Read and split the description; raises AuditInputError only when the file is unusable."""
    path = Path(path)
    raw = read_input_bytes(path, "quant description")
    run = leading_pairs(raw)
    if run is not None:
        desc = QuantDescription.from_run(run, path)
        if desc is not None:
            return desc
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
    text = json.dumps(value)
    return text if len(text) <= 40 else text[:37] + "..."
