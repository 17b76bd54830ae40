"""Vectorised parsing of machine-written safetensors headers (the index and the quant
description, flat JSON objects, are read by jsonspans).

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

from ..namespans import PAD, NameSpans
from ..table import MAXDIM
from .words import _ASCII_ZEROS, LOW_MASK, fold_digits, u64_view, valid_utf8, word8, word_of

try:
    import orjson as _orjson
except ImportError:  # pragma: no cover - orjson is a declared dependency
    _orjson = None

METADATA_KEY = "__metadata__"
_PAD = PAD                  # lets 8-byte loads near the end stay inside the buffer; not structural

_QUOTE, _COMMA, _RBRACK = 0x22, 0x2C, 0x5D

# `{"__metadata__":{"k":"v",...}` followed by `,` (tensors follow) or `}` (none do)
_META_RE = re.compile(rb'\{"__metadata__":(\{(?:"[^"\\]*":"[^"\\]*"(?:,"[^"\\]*":"[^"\\]*")*)?\})([,}])')


# fixed stretches of a canonical entry, checked with overlapping 8-byte loads
_A0, _A4 = word8(b'":{"dtyp'), word8(b'dtype":"')                    # after the name
_B0, _B3 = word8(b'","shape'), word8(b'shape":[')                    # after the dtype value
_C0, _C8, _C10 = word8(b'],"data_'), word8(b'offsets"'), word8(b'fsets":[')   # after the shape

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
    while end > a and buf[end - 1] == 0x20 and b - end < 8:    # the library pads to 8 bytes
        end -= 1
    if end > a and buf[end - 1] == 0x20:      # more: one C-level strip, not a Python loop
        end = a + len(bytes(memoryview(buf)[a:end]).rstrip(b" "))
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
    """(sorted 8-byte keys, code of each) of the dtype names that fit one word; longer names
    (F8_E4M3FNUZ) are left to the exact reader, so a truncated key can never match them."""
    short = [i for i, d in enumerate(dtypes) if len(d.encode()) <= 8]
    keys = np.array([word_of(dtypes[i].encode()) for i in short], dtype=np.uint64)
    order = np.argsort(keys)
    return keys[order], np.array(short, dtype=np.int64)[order].astype(np.int8)


def parse_entries(parts: list[bytes], dtypes: tuple[str, ...]) -> ParsedEntries | None:
    """All-or-nothing parse of the entries parts (``raw[start:end]`` from split_header) of many
    headers at once. ``dtypes`` lists the accepted dtype names (<= 8 bytes); codes index it."""
    lens = np.fromiter(map(len, parts), dtype=np.int64, count=len(parts))
    part_end = np.cumsum(lens)
    return parse_entry_buffer(b"".join([*parts, _PAD]), part_end - lens, part_end, dtypes)


def parse_entry_buffer(buf: bytes | bytearray, part_start: np.ndarray, part_end: np.ndarray,
                       dtypes: tuple[str, ...], lo: int = 0, hi: int | None = None) -> ParsedEntries | None:
    """parse_entries over parts already in one buffer: ``buf[part_start[i]:part_end[i]]`` are the
    parts in order, all inside ``buf[lo:hi]`` (default: all but the trailing _PAD, which ``buf``
    must end with), and every other byte of that range is a space. Names are spans of ``buf``,
    which must not change afterwards. Ranges that do not overlap can be parsed in parallel.

    Two byte passes find the anchors every entry has exactly once or twice, ``{`` (opens the
    entry's object) and ``]`` (closes shape and data_offsets); everything else is read at fixed
    offsets from them with 8-byte loads and checked against the canonical text. The only free
    text left is the names, and the quote count proves they hold no quote (so a '{' in a name,
    never preceded by '":', is told from an entry's). A ']' in a name sends the file to orjson.
    """
    part_start = np.asarray(part_start, dtype=np.int64)
    part_end = np.asarray(part_end, dtype=np.int64)
    lens = part_end - part_start
    hi = len(buf) - len(_PAD) if hi is None else hi
    e = np.frombuffer(buf, dtype=np.uint8)
    text = e[lo:hi]
    # one scratch mask for the three byte passes: a fresh 20 MB temporary per pass costs page
    # faults, and two threads faulting at once slow each other down (measured 3x)
    scratch = np.empty(len(text), dtype=bool)
    brace = np.flatnonzero(np.equal(text, 0x7B, out=scratch)) + lo   # '{' after '":' opens each entry
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
    closers = np.flatnonzero(np.equal(text, _RBRACK, out=scratch)) + lo   # ']': shape, data_offsets
    if len(closers) != 2 * n or buf.find(b"\\", lo, hi) >= 0 or int(text.min()) < 0x20 \
            or int(np.count_nonzero(np.equal(text, _QUOTE, out=scratch))) != 10 * n:
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
    dt_len = np.where(quotes == 0, np.uint64(8), _low_byte(quotes)).astype(np.int64)
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
    if not valid_utf8(buf, lo, hi) or _has_metadata_name(names):
        return None
    return ParsedEntries(names, codes, ndim.astype(np.int8), shape, begin, end, counts)


_JOIN = word_of(b']},"')                  # between two entries
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


_BYTE_INDEX = np.uint64(0x0001020304050607)     # byte j (from the top) holds j


def _low_byte(mask: np.ndarray) -> np.ndarray:
    """Index of the lowest byte whose high bit is set in ``mask``; 0 where ``mask`` is 0. The
    lowest set bit is 1 << (8k + 7); multiplying 1 << 8k by _BYTE_INDEX puts k in the top byte."""
    lowest = mask & (~mask + np.uint64(1))
    return ((lowest >> np.uint64(7)) * _BYTE_INDEX) >> np.uint64(56)


def _numbers_at(e: np.ndarray, words: np.ndarray, at: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """(length, value) of the JSON non-negative integer starting at each ``at``: the run of digits
    there. None if any run is empty, has a leading zero or is longer than 15 digits (>= 1 PB)."""
    if not len(at):
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    w0 = words[at]
    m0 = _non_digits(w0)
    length = np.where(m0 != 0, _low_byte(m0), np.uint64(8)).astype(np.int64)
    long = np.flatnonzero(m0 == 0)
    if len(long):
        m1 = _non_digits(words[at[long] + 8])
        if (m1 == 0).any():
            return None                   # 16+ digits (>= 10 PB): the orjson way
        length[long] = 8 + _low_byte(m1)
    if int(length.min()) < 1 or ((length > 1) & ((w0 & np.uint64(0xFF)) == np.uint64(0x30))).any():
        return None                       # no number, or a leading zero (orjson words it)
    value = fold_digits(w0, np.minimum(length, 8))
    long = np.flatnonzero(length > 8)
    if len(long):
        high = fold_digits(w0[long], length[long] - 8)
        value[long] = high * 100_000_000 + fold_digits(words[at[long] + length[long] - 8],
                                                        np.full(len(long), 8))
    return length, value.astype(np.int64)


def _has_metadata_name(names: NameSpans) -> bool:
    """A tensor called __metadata__ outside the first position is for the orjson path to judge."""
    key = METADATA_KEY.encode()
    return any(names.buf[a:a + len(key)] == key
               for a in names.start[names.length == len(key)].tolist())
