"""Flat JSON objects of string pairs as byte spans: the index's weight_map and the quant description.

Why: a 180,000-entry weight_map or description costs orjson ~0.1-0.2 s in string objects, and
all the scanner needs is to compare the keys with the tensor names it already holds as spans.
Machine-written files (``json.dump(indent=...)``) lay every pair out alike, so the positions of
the quotes give every key and value; the few other members are cut out and parsed by orjson.

Contract as in fastheader: a function here returns exactly what orjson would give, or None
(anything unusual, damaged or escaped); the caller then parses the whole file with orjson,
which words any error.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from ..namespans import PAD, decode_spans
from . import accelerator
from .words import LOW_MASK, MAX_WORDS, u64_view, valid_utf8, word8, word_of

try:
    import orjson as _orjson
except ImportError:  # pragma: no cover - orjson is a declared dependency
    _orjson = None

_QUOTE = 0x22


def _strings(buf: bytes, start: np.ndarray, end: np.ndarray) -> list[str] | None:
    """``buf[start:end]`` decoded as UTF-8 for each pair; None if any is not valid UTF-8."""
    try:
        return decode_spans(buf, start, end)
    except UnicodeDecodeError:
        return None


_WS = rb"[ \t\n\r]*"
_OPEN_MAP = re.compile(_WS + rb":" + _WS + rb"\{" + _WS)
_CLOSE_MAP = re.compile(_WS + rb"\}")
_KEY_GAP = re.compile(_WS + rb":" + _WS)
_VALUE_GAP = re.compile(_WS + rb"," + _WS)
_WM0, _WM2 = word8(b"weight_m"), word8(b"ight_map")


@dataclass
class IndexColumns:
    """A weight_map as spans of the index bytes: no per-entry Python objects until asked."""

    doc: dict                    # the rest of the document; its "weight_map" is {}
    buf: bytes                   # the index bytes, padded for 8-byte loads
    key_start: np.ndarray        # int64 byte spans of the keys, in document order
    key_end: np.ndarray
    value_start: np.ndarray
    value_end: np.ndarray

    def __len__(self) -> int:
        return len(self.key_start)

    def file_codes(self) -> tuple[np.ndarray, list[str]] | None:
        """(code per entry, distinct shard names) or None if a name is not valid UTF-8 (shard
        names come in long runs: see span_codes)."""
        codes, files = span_codes(self.buf, self.value_start, self.value_end - self.value_start)
        return None if codes is None else (codes, files)

    def to_dict(self) -> dict[str, str] | None:
        """The weight_map exactly as orjson builds it (duplicate keys: first place, last value)."""
        keys = _strings(self.buf, self.key_start, self.key_end)
        values = _strings(self.buf, self.value_start, self.value_end)
        if keys is None or values is None:
            return None
        return dict(zip(keys, values))


@accelerator
def parse_index(raw: bytes) -> dict | None:
    """The document of a ``*.safetensors.index.json``, or None (see index_columns)."""
    cols = index_columns(raw)
    if cols is None:
        return None
    wm = cols.to_dict()
    if wm is None:
        return None
    cols.doc["weight_map"] = wm
    return cols.doc


def _strings_of(raw: bytes, at_least: int):
    """(padded buffer, its bytes, its 8-byte words, opening and closing quote positions, a scratch
    mask) of a JSON text whose strings hold no backslash, with ``at_least`` strings; else None."""
    if b"\\" in raw or _orjson is None:
        return None
    buf = raw + PAD
    e = np.frombuffer(buf, dtype=np.uint8)
    scratch = np.empty(len(e), dtype=bool)       # reused by the control-byte count: one 20 MB mask
    q = np.flatnonzero(np.equal(e, _QUOTE, out=scratch))
    if len(q) % 2 or len(q) < 2 * at_least:
        return None
    return buf, e, u64_view(buf), q[0::2], q[1::2], scratch


def _controls(e: np.ndarray, a: int, b: int, scratch: np.ndarray) -> int:
    """Raw control bytes (< 0x20) in ``e[a:b]``, counted in the scratch mask."""
    return int(np.count_nonzero(np.less(e[a:b], 0x20, out=scratch[:b - a])))


def index_columns(raw: bytes) -> IndexColumns | None:
    """The weight_map of an index whose entries are all plain strings, as byte spans.

    Any whitespace layout is accepted as long as it is the same between every key and value and
    between every pair (what ``json.dump(indent=...)`` writes); the rest of the document is small
    and parsed by orjson after cutting the weight map out. Returns None for anything else.
    """
    strings = _strings_of(raw, 3)
    if strings is None:
        return None
    buf, e, words, o, c, scratch = strings
    cand = np.flatnonzero(c - o == 11)
    hit = cand[(words[o[cand] + 1] == np.uint64(_WM0)) & (words[o[cand] + 3] == np.uint64(_WM2))]
    if len(hit) != 1:
        return None
    t = int(hit[0])
    opened = _OPEN_MAP.match(raw, int(c[t]) + 1)
    if opened is None or t + 2 >= len(o) or opened.end() != o[t + 1]:
        return None                        # (an empty or last weight_map: no key after it)
    brace = raw.index(b"{", int(c[t]) + 1)
    key_gap = raw[c[t + 1] + 1:o[t + 2]]
    if not _KEY_GAP.fullmatch(key_gap) or len(key_gap) > 16:
        return None
    gap_len = o[1:] - c[:-1] - 1
    after = np.arange(t + 2, len(o) - 1, 2)      # tokens that are values if the map goes on
    if len(after) >= 1:
        value_gap = raw[c[t + 2] + 1:o[t + 3]]
        if _VALUE_GAP.fullmatch(value_gap) and len(value_gap) <= 16:
            same = _same_gaps(words, gap_len, c, after, value_gap)
            pairs = int(np.argmin(same)) + 1 if not same.all() else len(after) + 1
        else:
            pairs = 1
    else:
        pairs = 1
    keys_tok = np.arange(t + 1, t + 1 + 2 * pairs, 2)
    if keys_tok[-1] + 1 >= len(o) or not _same_gaps(words, gap_len, c, keys_tok, key_gap).all():
        return None
    last_close = int(c[keys_tok[-1] + 1])
    closed = _CLOSE_MAP.match(raw, last_close + 1)
    if closed is None:
        return None
    ctrl = _controls(e, int(o[t + 1]), last_close, scratch)
    expected = pairs * _count_ctrl(key_gap) + (pairs - 1) * _count_ctrl(raw[c[t + 2] + 1:o[t + 3]] if pairs > 1 else b"")
    if ctrl != expected:
        return None                        # a raw control character inside a string
    if not valid_utf8(raw):
        return None                        # orjson refuses the whole document
    try:
        doc = _orjson.loads(raw[:brace] + b"{}" + raw[closed.end():])
    except ValueError:
        return None
    if type(doc) is not dict or doc.get("weight_map") != {}:
        return None
    return IndexColumns(doc, buf, o[keys_tok] + 1, c[keys_tok], o[keys_tok + 1] + 1, c[keys_tok + 1])


def _same_gaps(words: np.ndarray, gap_len: np.ndarray, close: np.ndarray, tokens: np.ndarray,
               gap: bytes) -> np.ndarray:
    """For each token, whether the bytes between it and the next string equal ``gap`` (<= 16)."""
    n = len(gap)
    same = gap_len[tokens] == n
    at = close[tokens] + 1
    first = min(n, 8)
    same &= (words[at] & LOW_MASK[first]) == np.uint64(word_of(gap[:first]))
    if n > 8:
        same &= (words[at + (n - 8)]) == np.uint64(word_of(gap[n - 8:]))
    return same


def _count_ctrl(text: bytes) -> int:
    return sum(b < 0x20 for b in text)


# ----------------------------------------------------------------------------- flat objects

_OPEN_OBJECT = re.compile(_WS + rb"\{" + _WS)
_MORE = re.compile(_WS + rb",")
_NEXT_KEY = re.compile(_WS + rb'"')


@dataclass
class PairRun:
    """The ``"key": "value"`` string pairs that open a top-level JSON object, as byte spans of
    ``buf``, plus the rest of the object as a small JSON document of its own."""

    buf: bytes                   # the raw bytes, padded for 8-byte loads
    key_start: np.ndarray        # int64 spans, in document order
    key_length: np.ndarray
    value_start: np.ndarray
    value_length: np.ndarray
    rest: bytes                  # ``{`` + every member after the run + ``}``: for orjson

    def __len__(self) -> int:
        return len(self.key_start)


def leading_pairs(raw: bytes) -> PairRun | None:
    """The opening run of string-to-string members of the object ``raw``, when they are laid
    out alike (the same whitespace around every ``:`` and every ``,``, as ``json.dump(indent=)``
    writes). msModelSlim's quant description is 180,000 such pairs then a few settings.

    None when there is no such run, or a backslash, a raw control character or invalid UTF-8
    anywhere: the caller then parses the whole document with orjson, which words any error.
    """
    strings = _strings_of(raw, 2)
    if strings is None:
        return None
    buf, e, words, o, c, scratch = strings
    opened = _OPEN_OBJECT.match(raw)
    if opened is None or opened.end() != o[0]:
        return None
    key_gap = raw[c[0] + 1:o[1]]
    if not _KEY_GAP.fullmatch(key_gap) or len(key_gap) > 16:
        return None
    gap_len = o[1:] - c[:-1] - 1
    keys = np.arange(0, len(o) - 1, 2)
    ok_key = _same_gaps(words, gap_len, c, keys, key_gap)
    pairs = int(np.argmin(ok_key)) if not ok_key.all() else len(keys)
    value_gap = raw[c[1] + 1:o[2]] if len(o) > 2 else b""
    if pairs > 1:
        if not _VALUE_GAP.fullmatch(value_gap) or len(value_gap) > 16:
            pairs = 1
        else:
            ok_val = _same_gaps(words, gap_len, c, keys[:pairs - 1] + 1, value_gap)
            if not ok_val.all():
                pairs = int(np.argmin(ok_val)) + 1
    if pairs == 0:
        return None
    keys = keys[:pairs]
    last_close = int(c[keys[-1] + 1])
    ctrl = _controls(e, int(o[0]), last_close, scratch)
    if ctrl != pairs * _count_ctrl(key_gap) + (pairs - 1) * _count_ctrl(value_gap):
        return None                        # a raw control character inside a string
    if not valid_utf8(raw):
        return None
    tail = raw[last_close + 1:]
    more = _MORE.match(tail)
    if more is not None:
        tail = tail[more.end():]
        if _NEXT_KEY.match(tail) is None:
            return None                    # `,` then no member
    elif _CLOSE_MAP.match(tail) is None:
        return None                        # neither `,` nor `}` after a value
    rest = b"{" + tail
    return PairRun(buf, o[keys] + 1, c[keys] - o[keys] - 1, o[keys + 1] + 1, c[keys + 1] - o[keys + 1] - 1, rest)


def span_codes(buf: bytes, start: np.ndarray, length: np.ndarray) -> tuple[np.ndarray, list[str]] | tuple[None, None]:
    """(code per span, distinct strings) for spans holding few distinct values in long runs
    (shard names in an index, scheme names in a description): each span is compared with the one
    before it word by word, and only the first of each run is decoded. (None, None) when a span
    is not valid UTF-8 or too long."""
    n = len(start)
    if n == 0:
        return np.zeros(0, dtype=np.int64), []
    k = (int(length.max()) + 7) // 8
    if k > MAX_WORDS:
        return None, None
    words = u64_view(buf)
    last = len(words) - 1
    same = length[1:] == length[:-1]
    for j in range(k):
        w = words[np.minimum(start + 8 * j, last)] & LOW_MASK[np.clip(length - 8 * j, 0, 8)]
        same &= w[1:] == w[:-1]
    heads = np.flatnonzero(np.concatenate(([True], ~same)))
    code_of: dict[str, int] = {}
    head_codes = []
    try:
        for a, m in zip(start[heads].tolist(), length[heads].tolist()):
            head_codes.append(code_of.setdefault(buf[a:a + m].decode("utf-8"), len(code_of)))
    except UnicodeDecodeError:
        return None, None
    code = np.repeat(np.array(head_codes, dtype=np.int64), np.diff(np.append(heads, n)))
    return code, list(code_of)
