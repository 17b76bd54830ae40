"""The description accelerator: msModelSlim's 180,000 ``"tensor": "SCHEME"`` pairs kept as byte
spans of the file and matched to table rows by word hashes; a dict is built only if asked."""
from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ..namespans import NameSpans, decode_spans
from ..quantdesc import _LONGEST_GLOBAL, GLOBAL_KEYS, QuantDescription
from . import accelerator
from .jsonspans import PairRun, leading_pairs, span_codes
from .words import MAX_WORDS, span_columns, span_hash, u64_view

try:
    import orjson as _orjson
except ImportError:  # pragma: no cover
    _orjson = None


@accelerator
def span_description(raw: bytes, path: Path) -> "SpanDescription | None":
    """The description ``raw`` as spans, when it opens with the usual run of string pairs and
    nothing per-tensor follows it; None otherwise (the exact reader parses it)."""
    run = leading_pairs(raw)
    return SpanDescription.from_run(run, path) if run is not None else None


@dataclass
class SpanDescription(QuantDescription):
    """A QuantDescription whose per-tensor entries are spans of the file's bytes."""

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

    def scheme_values(self) -> set[str]:
        if self._per_tensor is None:
            codes, values = self._value_codes()
            if codes is not None:
                return set(values)        # the run's distinct values, coded once (prepared)
        return super().scheme_values()

    def scheme_codes(self, names: NameSpans) -> tuple[np.ndarray, list[str], np.ndarray]:
        fast = self._matched_codes(names) if self._per_tensor is None else None
        return fast if fast is not None else super().scheme_codes(names)

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
    def from_run(cls, run: PairRun, path: Path) -> "SpanDescription | None":
        """From the spans of the leading string pairs plus the parsed rest of the document; None
        when the rest holds any non-global member (the whole-document path keeps a repeated key's
        last value and words non-string entries)."""
        try:
            rest = _orjson.loads(run.rest)
        except ValueError:
            return None
        exact = QuantDescription.from_dict(rest, path, owned=True)
        out = cls(path=exact.path, globals=exact.globals, findings=exact.findings, _per_tensor=exact._per_tensor)
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
