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

_QUOTE, _COMMA, _RBRACK = 0x22, 0x2C, 0x5D

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
# low (8 - L) bytes set to '0': pads an L-digit number on the left once shifted into the top bytes
_ZERO_FILL = np.array([_ASCII_ZEROS & ((1 << (8 * (8 - k))) - 1) for k in range(9)], dtype=np.uint64)


# ----------------------------------------------------------------------------- headers

def split_header(raw: bytes) -> tuple[int, int, dict[str, str] | None] | None:
    """(start, end) of the tensor entries inside a canonical header, plus its metadata.

    ``raw[start:end]`` is the comma-separated entries without the enclosing braces (empty for
    ``{}``). Trailing space padding (the library pads to 8 bytes) is allowed; anything else
    outside the canonical layout returns None.
    """
    return split_header_at(raw, 0, len(raw))


def split_header_at(buf: bytes | bytearray, a: int, b: int) -> tuple[int, int, dict[str, str] | None] | None:
    """split_header of the header ``buf[a:b]``, in positions of ``buf`` (no copy of the header)."""
    if b <= a or buf[a] != 0x7B or buf.find(b"\\", a, b) >= 0:
        return None
    end = b
    while end > a and buf[end - 1] == 0x20:
        end -= 1
    if end - a < 2 or buf[end - 1] != 0x7D:   # '}'
        return None
    metadata = None
    start = a + 1
    if buf.startswith(b'{"__metadata__":', a):
        m = _META_RE.match(buf, a, end)
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
    return parse_entry_buffer(b"".join([*parts, _PAD]), part_end - lens, part_end, dtypes)


def parse_entry_buffer(buf: bytes | bytearray, part_start: np.ndarray, part_end: np.ndarray,
                       dtypes: tuple[str, ...]) -> ParsedEntries | None:
    """parse_entries over parts already in one buffer: ``buf[part_start[i]:part_end[i]]`` are the
    parts in order, every other byte is a space, and ``buf`` ends with _PAD. Names are spans of
    ``buf``, which must not change afterwards.

    Two byte passes find the anchors every entry has exactly once or twice, ``{`` (opens the
    entry's object) and ``]`` (closes shape and data_offsets); everything else is read at fixed
    offsets from them with 8-byte loads and checked against the canonical text. The only free
    text left is the names, and the quote count proves they hold no quote (so a '{' in a name,
    never preceded by '":', is told from an entry's). A ']' in a name sends the file to orjson.
    """
    part_start = np.asarray(part_start, dtype=np.int64)
    part_end = np.asarray(part_end, dtype=np.int64)
    lens = part_end - part_start
    size = len(buf) - len(_PAD)
    e = np.frombuffer(buf, dtype=np.uint8)
    text = e[:size]
    brace = np.flatnonzero(text == 0x7B)              # '{' after '":' opens each entry's object
    if len(brace) and ((e[brace - 1] != 0x3A) | (e[brace - 2] != _QUOTE)).any():
        brace = brace[(e[brace - 1] == 0x3A) & (e[brace - 2] == _QUOTE)]     # '{' inside names
    n = len(brace)
    has = lens > 0
    first = np.searchsorted(brace, part_start)
    counts = np.diff(np.append(first, n)).astype(np.int64)
    if (counts[has] == 0).any() or (counts[~has] != 0).any():
        return None
    if n == 0:
        none = np.zeros(0, np.int64)
        return ParsedEntries(NameSpans(_PAD, none, none), np.zeros(0, np.int8), np.zeros(0, np.int8),
                             np.ones((0, MAXDIM), np.int64), none, none, counts)
    closers = np.flatnonzero(text == _RBRACK)         # ']': closes shape, then data_offsets
    if len(closers) != 2 * n or b"\\" in buf or int(text.min()) < 0x20 \
            or int(np.count_nonzero(text == _QUOTE)) != 10 * n:
        return None                                   # a quote, escape or control byte in a name
    closers = closers.reshape(n, 2)
    shape_close, off_close = closers[:, 0], closers[:, 1]
    words = u64_view(buf)
    # "NAME":{"dtype":"
    if (words[brace - 2] != np.uint64(_A0)).any() or (words[brace + 2] != np.uint64(_A4)).any():
        return None
    # entry boundaries: a part opens with '"'; entries are joined by `]},"`; a part ends `]}`
    is_first = np.zeros(n, dtype=bool)
    is_first[first[has]] = True
    is_last = np.zeros(n, dtype=bool)
    is_last[(first + counts - 1)[has]] = True
    if (e[part_start[has]] != _QUOTE).any():
        return None
    if (off_close[is_last] + 2 != part_end[has]).any() or (e[off_close[is_last] + 1] != 0x7D).any():
        return None
    if ((words[off_close[~is_last]] & LOW_MASK[4]) != np.uint64(_JOIN)).any():
        return None
    name_start = np.empty(n, dtype=np.int64)
    name_start[is_first] = part_start[has] + 1
    name_start[1:][~is_first[1:]] = off_close[:-1][~is_first[1:]] + 4
    name_len = brace - 2 - name_start
    if (name_len < 0).any() or (shape_close <= brace).any() or (off_close <= shape_close).any():
        return None
    # dtype value: up to the first quote (<= 8 bytes), matched exactly against the known names
    dt_start = brace + 10
    word = words[dt_start]
    quotes = _zero_bytes(word ^ np.uint64(0x2222222222222222))
    dt_len = np.where(quotes == 0, 8, _low_byte(quotes))
    if int(dt_len.min()) < 1 or (e[dt_start + dt_len] != _QUOTE).any():
        return None
    key = word & LOW_MASK[dt_len]
    known, code_of = _dtype_keys(dtypes)
    slot = np.minimum(np.searchsorted(known, key), len(known) - 1)
    if (known[slot] != key).any():
        return None
    codes = code_of[slot]
    dt_close = dt_start + dt_len
    if (words[dt_close] != np.uint64(_B0)).any() or (words[dt_close + 3] != np.uint64(_B3)).any():
        return None
    # "],"data_offsets":[" after the shape
    if (words[shape_close] != np.uint64(_C0)).any() or (words[shape_close + 8] != np.uint64(_C8)).any() \
            or (words[shape_close + 10] != np.uint64(_C10)).any():
        return None
    # shape: d0,d1,... between '[' and ']', read one number per round for the rows still open
    dims_start = dt_close + 11
    ndim = np.zeros(n, dtype=np.int64)
    dim_rows, dim_vals = [], []
    rows = np.flatnonzero(dims_start != shape_close)          # '[]' is a scalar
    at = dims_start[rows]
    while len(rows):
        if len(dim_rows) == MAXDIM:
            return None                   # a ninth dimension
        got = _numbers_at(e, words, at)
        if got is None:
            return None
        length, value = got
        dim_rows.append(rows)
        dim_vals.append(value)
        ndim[rows] += 1
        stop = at + length
        ended = stop == shape_close[rows]
        if (e[stop[~ended]] != _COMMA).any():
            return None
        rows, at = rows[~ended], stop[~ended] + 1
    # data_offsets: b ',' e between '[' and ']'
    off_start = shape_close + 18
    got_b = _numbers_at(e, words, off_start)
    if got_b is None:
        return None
    comma = off_start + got_b[0]
    if (e[comma] != _COMMA).any():
        return None
    got_e = _numbers_at(e, words, comma + 1)
    if got_e is None or (comma + 1 + got_e[0] != off_close).any():
        return None
    begin, end = got_b[1], got_e[1]
    if (begin > end).any():
        return None
    shape = np.ones((n, MAXDIM), dtype=np.int64)
    for k, (r, v) in enumerate(zip(dim_rows, dim_vals)):
        shape[r, k] = v
    names = NameSpans(buf, name_start, name_len)
    if not _valid_utf8(buf) or _has_metadata_name(names):
        return None
    return ParsedEntries(names, codes, ndim.astype(np.int8), shape, begin, end, counts)


_JOIN = _word(b']},"')                  # between two entries
_HIGH_BITS = np.uint64(0x8080808080808080)
_LOW7 = np.uint64(0x7F7F7F7F7F7F7F7F)
_OVER_NINE = np.uint64(0x7676767676767676)     # 0x7F - 9 in every byte


def _zero_bytes(x: np.ndarray) -> np.ndarray:
    """The high bit of every byte of ``x`` that is zero, exactly (no carries between bytes)."""
    return ~(((x & _LOW7) + _LOW7) | x | _LOW7)


def _non_digits(w: np.ndarray) -> np.ndarray:
    """The high bit of every byte of ``w`` that is not an ASCII digit, exactly."""
    d = w ^ np.uint64(_ASCII_ZEROS)
    return (((d & _LOW7) + _OVER_NINE) | d) & _HIGH_BITS


def _low_byte(mask: np.ndarray) -> np.ndarray:
    """Index of the lowest byte whose high bit is set in ``mask`` (nonzero)."""
    lowest = mask & (~mask + np.uint64(1))
    return (np.frexp(lowest.astype(np.float64))[1] - 8) // 8


def _numbers_at(e: np.ndarray, words: np.ndarray, at: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """(length, value) of the JSON non-negative integer starting at each ``at``: the run of digits
    there. None if any run is empty, has a leading zero or is longer than 15 digits (>= 1 PB)."""
    if not len(at):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    w0 = words[at]
    m0 = _non_digits(w0)
    length = np.full(len(at), 8, dtype=np.int64)
    short = m0 != 0
    length[short] = _low_byte(m0[short])
    long = np.flatnonzero(~short)
    if len(long):
        m1 = _non_digits(words[at[long] + 8])
        if (m1 == 0).any():
            return None                   # 16+ digits (>= 10 PB): the orjson way
        length[long] = 8 + _low_byte(m1)
    if int(length.min()) < 1 or ((length > 1) & ((w0 & np.uint64(0xFF)) == np.uint64(0x30))).any():
        return None                       # no number, or a leading zero (orjson words it)
    value = _fold_digits(w0, np.minimum(length, 8))
    long = np.flatnonzero(length > 8)
    if len(long):
        high = _fold_digits(w0[long], length[long] - 8)
        value[long] = high * 100_000_000 + _fold_digits(words[at[long] + length[long] - 8],
                                                        np.full(len(long), 8))
    return length, value.astype(np.int64)


def _fold_digits(word: np.ndarray, length: np.ndarray) -> np.ndarray:
    """Values of the ``length``-digit (1..8) decimal numbers in the low bytes of ``word`` (SWAR:
    shift the digits to the top bytes, pad with '0', fold pairs, quads and octets)."""
    v = (word << ((8 - length) * 8).astype(np.uint64)) | _ZERO_FILL[length]
    v = v & np.uint64(0x0F0F0F0F0F0F0F0F)
    v = (v * np.uint64(2561)) >> np.uint64(8)
    v = ((v & np.uint64(0x00FF00FF00FF00FF)) * np.uint64(6553601)) >> np.uint64(16)
    v = ((v & np.uint64(0x0000FFFF0000FFFF)) * np.uint64(42949672960001)) >> np.uint64(32)
    return v


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


def _strings_of(raw: bytes, at_least: int):
    """(padded buffer, its bytes, its 8-byte words, opening and closing quote positions) of a
    JSON text whose strings hold no backslash, when it has ``at_least`` strings; else None."""
    if b"\\" in raw or _orjson is None:
        return None
    buf = raw + _PAD
    e = np.frombuffer(buf, dtype=np.uint8)
    q = np.flatnonzero(e == _QUOTE)
    if len(q) % 2 or len(q) < 2 * at_least:
        return None
    return buf, e, u64_view(buf), q[0::2], q[1::2]


def index_columns(raw: bytes) -> IndexColumns | None:
    """The weight_map of an index whose entries are all plain strings, as byte spans.

    Any whitespace layout is accepted as long as it is the same between every key and value and
    between every pair (what ``json.dump(indent=...)`` writes); the rest of the document is small
    and parsed by orjson after cutting the weight map out. Returns None for anything else.
    """
    strings = _strings_of(raw, 3)
    if strings is None:
        return None
    buf, e, words, o, c = strings
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
    strings = _strings_of(raw, 2)
    if strings is None:
        return None
    buf, e, words, o, c = strings
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
