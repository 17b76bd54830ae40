"""Vectorised parsing of machine-written safetensors JSON: shard headers and index weight maps.

Why: orjson spends most of a 180,000-tensor scan building one Python dict per tensor that we
immediately flatten into numpy columns. Files written by the safetensors library (Rust serde)
or by our synthesizer share one byte-exact layout, so their structure can be read from the
positions of a handful of structural bytes, with no per-tensor Python objects but the names.

Contract: every function here either returns exactly what the orjson path would produce for the
same bytes, or ``None``. ``None`` only means "not the canonical layout" (whitespace, another key
order, escapes, absurd numbers, damage of any kind); the caller then takes the orjson path,
which also produces the precise error message when the bytes really are malformed. Nothing
here raises for bad input and nothing here judges data offsets against each other or the file.

Canonical header entry (tensors in any order, the optional metadata object first)::

    "NAME":{"dtype":"DT","shape":[d0,d1],"data_offsets":[b,e]}
"""
from __future__ import annotations

import re
from dataclasses import dataclass

import numpy as np

from .namespans import LOW_MASK, MAX_WORDS, PAD, NameSpans, decode_spans, span_columns, span_hash, u64_view
from .table import MAXDIM

try:
    import orjson as _orjson
except ImportError:  # pragma: no cover - orjson is a declared dependency
    _orjson = None

METADATA_KEY = "__metadata__"
_PAD = PAD                  # lets 8-byte loads near the end stay inside the buffer; not structural
_MAX_DIGITS = 16            # longer numbers (>= 10 PB offsets) go the orjson way

# Bytes whose positions carry the structure. Control characters and backslashes are included so
# that a string holding one (orjson rejects the first, the second starts an escape) breaks the
# expected token counts and sends the file to the orjson path.
_QUOTE, _COMMA, _LBRACK, _RBRACK = 0x22, 0x2C, 0x5B, 0x5D
_STRUCTURAL = bytes(1 if (b < 0x20 or b in (_QUOTE, _COMMA, _LBRACK, _RBRACK, 0x5C)) else 0
                    for b in range(256))

# `{"__metadata__":{"k":"v",...}` followed by `,` (tensors follow) or `}` (none do)
_META_RE = re.compile(rb'\{"__metadata__":(\{(?:"[^"\\]*":"[^"\\]*"(?:,"[^"\\]*":"[^"\\]*")*)?\})([,}])')


def _word(text: bytes) -> int:
    """The first 8 bytes of ``text`` as the little-endian u64 an unaligned load would give."""
    return int.from_bytes(text[:8].ljust(8, b"\0"), "little")


def _word8(text: bytes) -> int:
    assert len(text) == 8, text
    return _word(text)


# fixed stretches of a canonical entry, checked with overlapping 8-byte loads
_A0, _A4 = _word8(b'":{"dtyp'), _word8(b'dtype":"')                    # after the name
_B0, _B3 = _word8(b'","shape'), _word8(b'shape":[')                    # after the dtype value
_C0, _C8, _C10 = _word8(b'],"data_'), _word8(b'offsets"'), _word8(b'fsets":[')   # after the shape

_ASCII_ZEROS = 0x3030303030303030
_HIGH_NIBBLES = 0xF0F0F0F0F0F0F0F0
# low (8 - L) bytes set to '0': pads an L-digit number on the left once shifted into the top bytes
_ZERO_FILL = np.array([_ASCII_ZEROS & ((1 << (8 * (8 - k))) - 1) for k in range(9)], dtype=np.uint64)


# ----------------------------------------------------------------------------- numbers

def _eight_digits(word: np.ndarray, length: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Values of ``length``-digit (1..8) decimal numbers whose text starts in ``word``'s low byte.

    SWAR: the digits are shifted to the top bytes and left-padded with '0', every byte is checked
    to be a digit, then three multiply-shift rounds fold pairs, quads and octets. Returns
    (value, all bytes were digits).
    """
    shift = ((8 - length) * 8).astype(np.uint64)
    v = (word << shift) | _ZERO_FILL[length]
    ok = ((v & np.uint64(_HIGH_NIBBLES)) == np.uint64(_ASCII_ZEROS)) & \
         (((v + np.uint64(0x0606060606060606)) & np.uint64(_HIGH_NIBBLES)) == np.uint64(_ASCII_ZEROS))
    v = v & np.uint64(0x0F0F0F0F0F0F0F0F)
    v = (v * np.uint64(2561)) >> np.uint64(8)
    v = ((v & np.uint64(0x00FF00FF00FF00FF)) * np.uint64(6553601)) >> np.uint64(16)
    v = ((v & np.uint64(0x0000FFFF0000FFFF)) * np.uint64(42949672960001)) >> np.uint64(32)
    return v, ok


def _parse_numbers(buf: bytes, words: np.ndarray, start: np.ndarray, end: np.ndarray) -> np.ndarray | None:
    """int64 values of the JSON integers at ``buf[start:end]``, or None if any is not one
    (empty, sign, fraction, exponent, leading zero) or has more than 16 digits."""
    length = end - start
    if len(length) == 0:
        return np.zeros(0, dtype=np.int64)
    if int(length.min()) < 1 or int(length.max()) > _MAX_DIGITS:
        return None
    e = np.frombuffer(buf, dtype=np.uint8)
    if ((e[start] == 0x30) & (length > 1)).any():
        return None                      # JSON forbids leading zeros; orjson names the error
    lo_len = np.minimum(length, 8)
    lo, ok = _eight_digits(words[start + (length - lo_len)], lo_len)
    if not ok.all():
        return None
    values = lo.astype(np.int64)
    long = np.flatnonzero(length > 8)
    if len(long):
        hi, ok = _eight_digits(words[start[long]], length[long] - 8)
        if not ok.all():
            return None
        values[long] += hi.astype(np.int64) * 100_000_000
    return values


# ----------------------------------------------------------------------------- headers

def split_header(raw: bytes) -> tuple[int, int, dict[str, str] | None] | None:
    """(start, end) of the tensor entries inside a canonical header, plus its metadata.

    ``raw[start:end]`` is the comma-separated entries without the enclosing braces (empty for
    ``{}``). Trailing space padding (the library pads to 8 bytes) is allowed; anything else
    outside the canonical layout returns None.
    """
    if b"\\" in raw or raw[:1] != b"{":
        return None
    end = len(raw)
    if raw[-1:] == b" ":
        end = len(raw.rstrip(b" "))
    if end < 2 or raw[end - 1] != 0x7D:   # '}'
        return None
    metadata = None
    start = 1
    if raw.startswith(b'{"__metadata__":'):
        m = _META_RE.match(raw)
        if m is None:
            return None
        try:
            metadata = _orjson.loads(m.group(1))
        except ValueError:
            return None
        if len(metadata) != m.group(1).count(b'":"'):
            return None                   # a duplicate key: the orjson path names it
        if m.group(2) == b"}":
            return (m.end(), m.end(), metadata) if m.end() == end else None
        start = m.end()
        if start == end - 1:
            return None                   # `{"__metadata__":{...},}`
    return start, end - 1, metadata


@dataclass
class ParsedEntries:
    """Columns of every entry of the parsed parts, in file order then header order."""

    names: NameSpans             # spans into the concatenated entry bytes
    dtype_code: np.ndarray       # int8 index into the caller's dtype list
    ndim: np.ndarray             # int8
    shape: np.ndarray            # int64 [n, MAXDIM], trailing dims 1
    begin: np.ndarray            # int64, as stored (relative to the data buffer)
    end: np.ndarray              # int64
    counts: np.ndarray           # int64 entries per part


def _dtype_keys(dtypes: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
    keys = np.array([_word(d.encode()) for d in dtypes], dtype=np.uint64)
    order = np.argsort(keys)
    return keys[order], order.astype(np.int8)


def parse_entries(parts: list[bytes], dtypes: tuple[str, ...]) -> ParsedEntries | None:
    """All-or-nothing parse of the entries parts (``raw[start:end]`` from split_header) of many
    headers at once. ``dtypes`` lists the accepted dtype names (<= 8 bytes); codes index it."""
    lens = np.fromiter(map(len, parts), dtype=np.int64, count=len(parts))
    part_end = np.cumsum(lens)
    part_start = part_end - lens
    buf = b"".join(parts) + _PAD
    e = np.frombuffer(buf, dtype=np.uint8)
    pos = np.flatnonzero(np.frombuffer(buf.translate(_STRUCTURAL), dtype=np.bool_))
    kind = e[pos]
    qi = np.flatnonzero(kind == _QUOTE)          # token index of every quote
    if len(qi) % 10:
        return None
    n = len(qi) // 10
    has = lens > 0
    first = np.searchsorted(pos[qi], part_start[has])     # quote index of each part's first byte
    counts = np.zeros(len(parts), dtype=np.int64)
    counts[has] = np.diff(np.append(first, len(qi)))
    if (counts % 10).any() or (counts[has] == 0).any():
        return None
    counts //= 10
    if n == 0:
        none = np.zeros(0, np.int64)
        return ParsedEntries(NameSpans(_PAD, none, none), np.zeros(0, np.int8), np.zeros(0, np.int8),
                             np.ones((0, MAXDIM), np.int64), none, none, counts) if not has.any() else None
    entry_end = np.cumsum(counts)
    last = np.zeros(n, dtype=bool)
    last[entry_end[has] - 1] = True                 # last entry of its part: no ',' after it
    first_entry = entry_end[has] - counts[has]
    # structural tokens between consecutive quotes of each entry: name, :{, dtype, :, DT, ",",
    # shape, [dims], data_offsets, [b,e]
    gaps = (np.append(qi[1:], len(pos)) - qi - 1).reshape(n, 10)
    if (gaps[:, [0, 1, 2, 3, 4, 6, 8]] != 0).any() or (gaps[:, 5] != 1).any() or (gaps[:, 7] < 3).any() \
            or (gaps[:, 9] != np.where(last, 3, 4)).any():
        return None
    q = pos[qi].reshape(n, 10)
    qi = qi.reshape(n, 10)
    if (q[first_entry, 0] != part_start[has]).any():
        return None
    words = u64_view(buf)
    name_close = q[:, 1]
    if (words[name_close] != np.uint64(_A0)).any() or (words[name_close + 4] != np.uint64(_A4)).any():
        return None
    # dtype value: an exact match of its (<= 8) bytes against the known names
    dt_len = q[:, 5] - q[:, 4] - 1
    if int(dt_len.min()) < 1 or int(dt_len.max()) > 8:
        return None
    key = words[q[:, 4] + 1] & LOW_MASK[dt_len]
    known, code_of = _dtype_keys(dtypes)
    slot = np.minimum(np.searchsorted(known, key), len(known) - 1)
    if (known[slot] != key).any():
        return None
    codes = code_of[slot]
    dt_close = q[:, 5]
    if (words[dt_close] != np.uint64(_B0)).any() or (words[dt_close + 3] != np.uint64(_B3)).any():
        return None
    # shape: '[' (token qi7+1), ndim-1 commas, ']' (token rb), ',' then "data_offsets"
    commas = gaps[:, 7] - 3
    rb = qi[:, 7] + 2 + commas
    rpos = pos[rb]
    if (words[rpos] != np.uint64(_C0)).any() or (words[rpos + 8] != np.uint64(_C8)).any() \
            or (words[rpos + 10] != np.uint64(_C10)).any():
        return None
    ndim = np.where(rpos == q[:, 7] + 3, 0, commas + 1)
    if int(ndim.max()) > MAXDIM or ((ndim == 0) & (commas > 0)).any():
        return None
    total = int(ndim.sum())
    run0 = np.cumsum(ndim) - ndim
    tok = np.repeat(qi[:, 7] + 1, ndim) + (np.arange(total) - np.repeat(run0, ndim))   # '[' or ','
    closer = kind[tok + 1]
    is_last_dim = np.zeros(total, dtype=bool)
    is_last_dim[(run0 + ndim - 1)[ndim > 0]] = True
    if (closer != np.where(is_last_dim, _RBRACK, _COMMA)).any():
        return None
    # data_offsets: '[' b ',' e ']' '}' then ',' before the next entry or the end of the part
    t9 = qi[:, 9]
    if (kind[t9 + 2] != _COMMA).any() or (kind[t9 + 3] != _RBRACK).any():
        return None
    off_close = pos[t9 + 3]
    if (e[off_close + 1] != 0x7D).any():
        return None
    nxt = np.append(q[1:, 0], 0)
    if (off_close[~last] + 3 != nxt[~last]).any() or (kind[t9[~last] + 4] != _COMMA).any():
        return None
    if (off_close[last] + 2 != part_end[has]).any():
        return None
    comma = pos[t9 + 2]
    starts = np.concatenate((pos[tok] + 1, q[:, 9] + 3, comma + 1))
    ends = np.concatenate((pos[tok + 1], comma, off_close))
    values = _parse_numbers(buf, words, starts, ends)
    if values is None:
        return None
    begin, end = values[total:total + n], values[total + n:]
    if (begin > end).any():
        return None
    shape = np.ones((n, MAXDIM), dtype=np.int64)
    if total:
        shape[np.repeat(np.arange(n), ndim), tok - np.repeat(qi[:, 7] + 1, ndim)] = values[:total]
    names = NameSpans(buf, q[:, 0] + 1, q[:, 1] - q[:, 0] - 1)
    if not _valid_utf8(buf) or _has_metadata_name(names):
        return None
    return ParsedEntries(names, codes, ndim.astype(np.int8), shape, begin, end, counts)


def _strings(buf: bytes, start: np.ndarray, end: np.ndarray) -> list[str] | None:
    """``buf[start:end]`` decoded as UTF-8 for each pair; None if any is not valid UTF-8."""
    try:
        return decode_spans(buf, start, end)
    except UnicodeDecodeError:
        return None


def _valid_utf8(buf: bytes) -> bool:
    """The whole buffer decodes; then so does every name span (a span is cut at '"', which is
    never part of a multi-byte sequence)."""
    if buf.isascii():
        return True
    try:
        buf.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return True


def _has_metadata_name(names: NameSpans) -> bool:
    """A tensor called __metadata__ outside the first position is for the orjson path to judge."""
    key = METADATA_KEY.encode()
    return any(names.buf[a:a + len(key)] == key
               for a in names.start[names.length == len(key)].tolist())


# ----------------------------------------------------------------------------- index files

_WS = rb"[ \t\n\r]*"
_OPEN_MAP = re.compile(_WS + rb":" + _WS + rb"\{" + _WS)
_CLOSE_MAP = re.compile(_WS + rb"\}")
_KEY_GAP = re.compile(_WS + rb":" + _WS)
_VALUE_GAP = re.compile(_WS + rb"," + _WS)
_WM0, _WM2 = _word8(b"weight_m"), _word8(b"ight_map")


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


def index_columns(raw: bytes) -> IndexColumns | None:
    """The weight_map of an index whose entries are all plain strings, as byte spans.

    Any whitespace layout is accepted as long as it is the same between every key and value and
    between every pair (what ``json.dump(indent=...)`` writes); the rest of the document is small
    and parsed by orjson after cutting the weight map out. Returns None for anything else.
    """
    if b"\\" in raw or _orjson is None:
        return None
    buf = raw + _PAD
    e = np.frombuffer(buf, dtype=np.uint8)
    q = np.flatnonzero(e == _QUOTE)
    if len(q) % 2 or len(q) < 6:
        return None
    o, c = q[0::2], q[1::2]
    words = u64_view(buf)
    cand = np.flatnonzero(c - o == 11)
    hit = cand[(words[o[cand] + 1] == np.uint64(_WM0)) & (words[o[cand] + 3] == np.uint64(_WM2))]
    if len(hit) != 1:
        return None
    t = int(hit[0])
    opened = _OPEN_MAP.match(raw, int(c[t]) + 1)
    if opened is None or opened.end() != o[t + 1] or t + 2 >= len(o):
        return None
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
    ctrl = int(np.count_nonzero(e[o[t + 1]:last_close] < 0x20))
    expected = pairs * _count_ctrl(key_gap) + (pairs - 1) * _count_ctrl(raw[c[t + 2] + 1:o[t + 3]] if pairs > 1 else b"")
    if ctrl != expected:
        return None                        # a raw control character inside a string
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
    same &= (words[at] & LOW_MASK[first]) == np.uint64(_word(gap[:first]))
    if n > 8:
        same &= (words[at + (n - 8)]) == np.uint64(_word(gap[n - 8:]))
    return same


def _count_ctrl(text: bytes) -> int:
    return sum(b < 0x20 for b in text)


def spans_distinct(names: NameSpans) -> bool:
    """True when no two spans hold the same bytes: a hash per span, and an exact set only when
    two hashes tie (or a name is too long to hash as words)."""
    n = len(names)
    if n < 2:
        return True
    k = (int(names.length.max()) + 7) // 8
    if k <= MAX_WORDS:
        h = np.sort(span_hash(span_columns(u64_view(names.buf), names.start, names.length, k), names.length))
        if not (h[1:] == h[:-1]).any():
            return True
    return len(set(names.strings().tolist())) == n


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
    if b"\\" in raw or _orjson is None:
        return None
    buf = raw + _PAD
    e = np.frombuffer(buf, dtype=np.uint8)
    q = np.flatnonzero(e == _QUOTE)
    if len(q) % 2 or len(q) < 4:
        return None
    o, c = q[0::2], q[1::2]
    opened = _OPEN_OBJECT.match(raw)
    if opened is None or opened.end() != o[0]:
        return None
    key_gap = raw[c[0] + 1:o[1]]
    if not _KEY_GAP.fullmatch(key_gap) or len(key_gap) > 16:
        return None
    words = u64_view(buf)
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
    ctrl = int(np.count_nonzero(e[o[0]:last_close] < 0x20))
    if ctrl != pairs * _count_ctrl(key_gap) + (pairs - 1) * _count_ctrl(value_gap):
        return None                        # a raw control character inside a string
    if not _valid_utf8(raw):
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
