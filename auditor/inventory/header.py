"""Read and validate one safetensors header without touching the tensor data.

The layout is: 8-byte little-endian u64 ``N``, ``N`` bytes of UTF-8 JSON, then the data buffer.
The checks follow what the ``safetensors`` library enforces when it opens a file (so a file we
accept is one the engine can load, and a file it rejects we reject with a clearer message):

* the file is a regular file (after symlinks; opened without blocking: ``auditor.inputs``);
* ``0 < N <= 100_000_000`` and ``8 + N <= file size``;
* the header is a JSON object nested at most 127 levels (the library's serde_json limit: the
  top-level object is level 1); ``__metadata__`` (optional) maps str -> str;
* each tensor has a ``dtype`` of ``model.spec.DTYPE_BITS`` (exactly the library's set), a
  ``shape`` of non-negative ints of any rank and ``data_offsets [begin, end]`` with ``begin <=
  end`` and ``end - begin == numel * bits / 8`` (whole bytes); members besides those three are
  ignored, as the library ignores them;
* every product of leading dimensions, and numel x bits, stays below 2**64 (the library's
  overflow rule, evaluated left to right);
* offsets sorted by (begin, end) tile the data buffer from 0 with no gap or overlap, and the
  buffer ends exactly at the end of the file (trailing bytes are rejected, as the library does).

Rules of ours, stricter than the library (documented, each with its own error):
* a key twice anywhere in the header is refused: the library silently keeps the last tensor of
  a repeated name, so the header is ambiguous and some stored bytes belong to no tensor;
* a dimension or offset of 2**63 or more is refused (int64 columns; no real file is that big).

This runs once per shard on checkpoints with ~180,000 tensors, so the common case is a fast path
that builds numpy columns with C-level iteration (``map``/``itemgetter``/``np.fromiter``) and
checks everything vectorized. Anything the fast path cannot vouch for is re-checked entry by
entry by a slow path whose only job is to name the first offending tensor precisely.
"""
from __future__ import annotations

import json
import os
import struct
from contextlib import contextmanager
from dataclasses import dataclass, field
from itertools import chain
from operator import itemgetter
from pathlib import Path
from typing import BinaryIO, Iterator

import numpy as np

from ..errors import AuditInputError
from ..inputs import open_binary
from ..dtypes import DTYPE_BITS
from .table import MAXDIM

try:  # orjson is several times faster than json on multi-megabyte headers
    import orjson as _orjson
except ImportError:  # pragma: no cover - orjson is a declared dependency
    _orjson = None

MAX_HEADER_SIZE = 100_000_000   # the safetensors library refuses larger headers
METADATA_KEY = "__metadata__"

MAX_DEPTH = 127                 # nesting the library's JSON parser accepts (top object = 1)

# Bits per element: the one dtype table the rest of the package uses (= the library's set).
KNOWN_DTYPES = frozenset(DTYPE_BITS)

_get_dtype = itemgetter("dtype")
_get_shape = itemgetter("shape")
_get_offsets = itemgetter("data_offsets")
_LIST, _TWO, _INT = {list}, {2}, {int}
# dtypes as small integer codes: one dict lookup per tensor instead of string arrays
DTYPE_NAMES = tuple(sorted(DTYPE_BITS))
_DTYPE_CODE = {name: i for i, name in enumerate(DTYPE_NAMES)}
_DTYPE_NAME_ARR = np.array(DTYPE_NAMES, dtype=str)
_DTYPE_BITS_ARR = np.array([DTYPE_BITS[d] for d in DTYPE_NAMES], dtype=np.int64)
_EXACT_BELOW = float(2 ** 46)   # element counts whose bits (x <= 64) int64 holds exactly
_U64 = 2 ** 64


@dataclass
class HeaderEntries:
    """The validated content of one safetensors header, as parallel columns.

    ``begin``/``end`` are relative to the data buffer (as stored); ``data_start`` (8 + N) turns
    them into absolute file offsets.
    """

    path: Path
    header_len: int              # N
    file_size: int
    names: list[str]
    dtype_code: np.ndarray       # int8 [n], index into DTYPE_NAMES
    ndim: np.ndarray             # int8 [n]
    shape: np.ndarray            # int64 [n, MAXDIM], trailing dims 1 (rank > MAXDIM: folded, see fold_shape)
    begin: np.ndarray            # int64 [n], relative to the data buffer
    end: np.ndarray              # int64 [n]
    metadata: dict[str, str] | None = None
    wide: dict[int, tuple[int, ...]] = field(default_factory=dict)   # row -> shape, rank > MAXDIM

    @property
    def data_start(self) -> int:
        return 8 + self.header_len

    def __len__(self) -> int:
        return len(self.names)

    @property
    def dtypes(self) -> np.ndarray:
        """Safetensors dtype strings (str)."""
        return _DTYPE_NAME_ARR[self.dtype_code]


def read_header(path: Path) -> HeaderEntries:
    """Read the header of ``path`` (following symlinks) and validate it; never reads tensor data.

    Raises AuditInputError(path, problem) with a one-line problem for every kind of damage.
    """
    path = Path(path)
    raw, file_size = _read_raw_header(path)
    return entries_from_raw(path, raw, file_size)


def entries_from_raw(path: Path, raw: bytes, file_size: int) -> HeaderEntries:
    """Validate already-read header bytes through orjson: the exact path, precise errors."""
    header = _parse_json(path, raw)
    if not isinstance(header, dict):
        raise AuditInputError(path, f"header is a JSON {_json_kind(header)}, not an object")
    _check_depth(path, header)         # before anything recursive looks at it
    metadata = _pop_metadata(path, header)
    n_len = len(raw)
    _maybe_duplicates(path, raw, header, metadata)
    try:
        entries = _fast_columns(header)
    except (TypeError, KeyError, ValueError, OverflowError):
        entries = None
    if entries is None:
        _slow_validate(path, header)   # raises with the precise problem
        raise AuditInputError(path, "header entries are malformed")  # pragma: no cover
    names, codes, ndim, shape, begin, end, wide = entries
    _check_sizes(path, names, codes, ndim, shape, begin, end, wide)
    data_len = _check_layout(path, names, begin, end)
    expected = 8 + n_len + data_len
    if expected != file_size:
        if file_size < expected:
            raise AuditInputError(path, f"file is truncated: tensor data ends at byte {expected} "
                                        f"but the file has {file_size} bytes")
        raise AuditInputError(path, f"{file_size - expected} unexpected trailing bytes after the "
                                    f"tensor data (data ends at byte {expected}, file has {file_size})")
    return HeaderEntries(path=path, header_len=n_len, file_size=file_size, names=names,
                         dtype_code=codes, ndim=ndim, shape=shape, begin=begin, end=end,
                         metadata=metadata, wide=wide)


# ----------------------------------------------------------------------------- reading

def _read_raw_header(path: Path) -> tuple[bytes, int]:
    with reading(path):
        fh, _ = open_binary(path, "shard")
        with fh:
            n, file_size = header_length(path, fh)
            raw = fh.read(n)
    if len(raw) != n:   # file shrank while we read it
        raise AuditInputError(path, f"header length {n} is past the end of the file ({file_size} bytes)")
    return raw, file_size


@contextmanager
def reading(path: Path) -> Iterator[None]:
    """OS errors while reading ``path`` become one-line AuditInputErrors naming it."""
    try:
        yield
    except IsADirectoryError:
        raise AuditInputError(path, "cannot read: is a directory, not a safetensors file") from None
    except OSError as exc:
        raise AuditInputError(path, f"cannot read: {exc.strerror or exc}") from None


def header_length(path: Path, fh: BinaryIO) -> tuple[int, int]:
    """(header length N, file size) from the 8-byte prefix of the open file ``fh``; the checks
    every header must pass before its N bytes are read."""
    file_size = os.fstat(fh.fileno()).st_size
    prefix = fh.read(8)
    if len(prefix) < 8:
        raise AuditInputError(path, f"file is too short for a safetensors header "
                                    f"({file_size} bytes, need at least 8)")
    (n,) = struct.unpack("<Q", prefix)
    if n == 0:
        raise AuditInputError(path, "header length is 0 (no JSON header)")
    if n > MAX_HEADER_SIZE:
        raise AuditInputError(path, f"header length {n} exceeds the safetensors limit of "
                                    f"{MAX_HEADER_SIZE} bytes")
    if 8 + n > file_size:
        raise AuditInputError(path, f"header length {n} is past the end of the file "
                                    f"({file_size} bytes)")
    return n, file_size


def _parse_json(path: Path, raw: bytes):
    try:
        if _orjson is not None:
            return _orjson.loads(raw)
        return json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError) as exc:
        try:
            raw.decode("utf-8")
        except UnicodeDecodeError as uexc:
            raise AuditInputError(path, f"header is not valid UTF-8 (bad byte at offset "
                                        f"{8 + uexc.start})") from None
        msg = str(exc).split(":")[0] if _orjson is not None else getattr(exc, "msg", str(exc))
        raise AuditInputError(path, f"header is not valid JSON ({msg})") from None


def _json_kind(value) -> str:
    return {list: "array", str: "string", int: "number", float: "number", bool: "boolean",
            type(None): "null", dict: "object"}.get(type(value), type(value).__name__)


def _pop_metadata(path: Path, header: dict) -> dict[str, str] | None:
    meta = header.pop(METADATA_KEY, None)
    if meta is None:
        return None
    if not isinstance(meta, dict):
        raise AuditInputError(path, f"'{METADATA_KEY}' is a JSON {_json_kind(meta)}, "
                                    f"must be an object of strings")
    for k, v in meta.items():
        if not isinstance(v, str):
            raise AuditInputError(path, f"'{METADATA_KEY}' value for {k!r} is a JSON "
                                        f"{_json_kind(v)}, must be a string")
    return meta


def _check_depth(path: Path, header: dict) -> None:
    """Refuse nesting past the library's limit (MAX_DEPTH), without recursion. Only members
    besides dtype/shape/data_offsets can nest deeper than 3 levels, so only entries carrying
    them are walked."""
    extra = [v for v in header.values() if type(v) is dict and len(v) != 3]
    extra += [v for v in header.values() if type(v) is list]
    if not extra:
        return
    stack = [(v, 2) for v in extra]
    while stack:
        value, depth = stack.pop()
        if depth > MAX_DEPTH:
            raise AuditInputError(path, f"header nests deeper than {MAX_DEPTH} levels (the safetensors "
                                        f"library's limit)")
        kids = value.values() if type(value) is dict else value
        stack.extend((k, depth + 1) for k in kids if type(k) in (dict, list))


def _maybe_duplicates(path: Path, raw: bytes, header: dict, metadata: dict | None) -> None:
    """orjson silently keeps the last of duplicate keys, so count what it could have dropped.

    Every ``key: value`` pair in the document has exactly one ':' outside strings. A well-formed
    entry has 4 (its name + dtype/shape/data_offsets), __metadata__ has 1 + one per item. Any
    dropped duplicate adds at least one more, so a matching count proves there were none; a
    mismatch (duplicates, extra keys, ':' inside names) triggers the exact check. One memchr-speed
    pass instead of re-parsing. That count is only sound when decoded strings equal their raw
    bytes; with a backslash escape anywhere, the strings are cut out first (one C-level regex)
    and the pairs left are compared with the pairs orjson kept.
    """
    if b"\\" in raw:
        # an escape can spell a ':' the byte count cannot see: count the pairs outside strings
        if _colons_outside_strings(raw) != _parsed_pairs(header, metadata):
            _check_duplicates(path, raw)
        return
    expected = 4 * len(header)
    if metadata is not None:
        expected += 1 + len(metadata) + sum(k.count(":") + v.count(":") for k, v in metadata.items())
    colons = raw.count(b":")
    if colons == expected:
        return
    if colons == expected + sum(k.count(":") for k in header):
        return
    _check_duplicates(path, raw)


def _colons_outside_strings(raw: bytes) -> int:
    """The ':' bytes of the JSON text ``raw`` that are not inside a string: one per key/value
    pair. Vectorised over the quote, backslash and colon positions only (a regex over 100 MB of
    escaped names took 7 s): a quote is a string's edge unless an odd run of backslashes ends
    right before it."""
    e = np.frombuffer(raw, dtype=np.uint8)
    quotes = np.flatnonzero(e == 0x22)
    slashes = np.flatnonzero(e == 0x5C)
    colons = np.flatnonzero(e == 0x3A)
    if len(slashes) and len(quotes):
        new_run = np.ones(len(slashes), dtype=bool)
        new_run[1:] = np.diff(slashes) != 1
        run_start = slashes[np.maximum.accumulate(np.where(new_run, np.arange(len(slashes)), 0))]
        j = np.minimum(np.searchsorted(slashes, quotes - 1), len(slashes) - 1)
        before = slashes[j] == quotes - 1                  # a backslash right before the quote
        run = np.where(before, quotes - run_start[j], 0)   # its run's length
        quotes = quotes[run % 2 == 0]
    if len(quotes) % 2:
        return -1                                          # unbalanced: not JSON anyway
    opens, closes = quotes[0::2], quotes[1::2]
    k = np.searchsorted(opens, colons) - 1                 # the last string opened before each ':'
    inside = (k >= 0) & (colons < closes[np.maximum(k, 0)]) if len(opens) else np.zeros(len(colons), bool)
    return int(len(colons) - np.count_nonzero(inside))


def _parsed_pairs(header: dict, metadata: dict | None) -> int:
    """A lower bound of the key/value pairs orjson kept, at every depth (exact for a header of
    plain entries and extra members): equal to the pairs written means nothing was dropped."""
    vals = header.values()
    n = len(header) + (1 + len(metadata) if metadata is not None else 0)
    n += sum(map(len, [v for v in vals if type(v) is dict]))
    stack = [m for v in vals if type(v) is dict and len(v) != 3 for m in v.values() if type(m) in (dict, list)]
    stack += [v for v in vals if type(v) is list]
    while stack:
        x = stack.pop()
        if type(x) is dict:
            n += len(x)
            x = x.values()
        stack.extend(m for m in x if type(m) in (dict, list))
    return n


def _check_duplicates(path: Path, raw: bytes) -> None:
    """Exact duplicate-key detection at any depth; only runs when the cheap count disagrees."""
    def hook(pairs):
        seen = set()
        for k, _ in pairs:
            if k in seen:
                raise _Dup(k)
            seen.add(k)
        return dict(pairs)

    try:
        json.loads(raw.decode("utf-8"), object_pairs_hook=hook)
    except ValueError:   # json is stricter than orjson somewhere: leave it to later checks
        return
    except _Dup as d:
        raise AuditInputError(path, f"duplicate key {d.args[0]!r} in header") from None


class _Dup(Exception):
    pass


# ----------------------------------------------------------------------------- columns

def _fast_columns(header: dict):
    """Columns for a well-formed header, or None / an exception when anything looks off.

    Each step is one C-level pass over all entries (``map``/``chain``/``np.fromiter``); the type
    checks are set-of-types passes, so a float, bool or string anywhere sends the file to the
    slow path instead of being silently cast by numpy.
    """
    names = list(header)
    n = len(names)
    if n == 0:
        return names, np.zeros(0, np.int8), np.zeros(0, np.int8), np.ones((0, MAXDIM), np.int64), \
            np.zeros(0, np.int64), np.zeros(0, np.int64), {}
    vals = list(header.values())
    shapes = list(map(_get_shape, vals))
    offsets = list(map(_get_offsets, vals))
    codes = np.fromiter(map(_DTYPE_CODE.get, map(_get_dtype, vals)), dtype=np.int8, count=n)  # None: TypeError
    if set(map(type, shapes)) != _LIST or set(map(type, offsets)) != _LIST or set(map(len, offsets)) != _TWO:
        return None
    nd = np.fromiter(map(len, shapes), dtype=np.int64, count=n)
    flat_shape = list(chain.from_iterable(shapes))
    flat_off = list(chain.from_iterable(offsets))
    if set(map(type, flat_shape)) - _INT or set(map(type, flat_off)) - _INT:
        return None   # bools, floats, strings, nested lists
    dims = np.fromiter(flat_shape, dtype=np.int64, count=len(flat_shape))
    off = np.fromiter(flat_off, dtype=np.int64, count=2 * n)
    if (len(dims) and int(dims.min()) < 0) or int(off.min()) < 0:
        return None
    begin = off[0::2]
    end = off[1::2]
    if (begin > end).any():
        return None
    shape = np.ones((n, MAXDIM), dtype=np.int64)
    wide: dict[int, tuple[int, ...]] = {}
    if len(dims):
        rows = np.repeat(np.arange(n), nd)
        cols = np.arange(len(dims)) - np.repeat(np.cumsum(nd) - nd, nd)
        keep = cols < MAXDIM
        shape[rows[keep], cols[keep]] = dims[keep]
        for i in np.flatnonzero(nd > MAXDIM).tolist():     # rare: ranks the table folds
            wide[i] = tuple(shapes[i])
            shape[i] = fold_shape(wide[i])
    return names, codes, nd.astype(np.int8 if int(nd.max()) < 128 else np.int32), shape, begin, end, wide


def fold_shape(dims: tuple[int, ...] | list[int]) -> list[int]:
    """A shape of any rank as MAXDIM columns with the same element count: the first MAXDIM - 1
    dimensions, then the product of the rest (0 when any dimension is 0: the count is 0 anyway).
    The table keeps the full shape of such rows aside for reports."""
    head = list(dims[:MAXDIM - 1])
    tail = 1
    for d in dims[MAXDIM - 1:]:
        tail *= d
    if 0 in dims:
        tail = 0
    return head + [tail] + [1] * (MAXDIM - 1 - len(head))


def _slow_validate(path: Path, header: dict) -> None:
    """Entry-by-entry checks that name the first bad tensor; raises on the first problem."""
    for name, entry in header.items():
        where = f"tensor {name!r}"
        if not isinstance(entry, dict):
            raise AuditInputError(path, f"{where}: entry is a JSON {_json_kind(entry)}, not an object")
        for key in ("dtype", "shape", "data_offsets"):
            if key not in entry:
                raise AuditInputError(path, f"{where}: missing '{key}'")
        dt = entry["dtype"]
        if not isinstance(dt, str) or dt not in KNOWN_DTYPES:
            raise AuditInputError(path, f"{where}: unknown dtype {dt!r}")
        shp = entry["shape"]
        if not isinstance(shp, list) or not all(type(d) is int and d >= 0 for d in shp):
            raise AuditInputError(path, f"{where}: shape {_short(shp)} is not a list of "
                                        f"non-negative integers")
        if any(d >= 2 ** 63 for d in shp):
            raise AuditInputError(path, f"{where}: shape {_short(shp)} has a dimension of 2**63 or more "
                                        f"(refused: no real tensor is that large)")
        off = entry["data_offsets"]
        if not (isinstance(off, list) and len(off) == 2 and all(type(o) is int and o >= 0 for o in off)):
            raise AuditInputError(path, f"{where}: data_offsets {_short(off)} must be two "
                                        f"non-negative integers [begin, end]")
        if off[0] > off[1]:
            raise AuditInputError(path, f"{where}: data_offsets {off} end before they begin")
        if off[1] >= 2 ** 63:
            raise AuditInputError(path, f"{where}: data_offsets {off} are too large")


def _short(value) -> str:
    text = json.dumps(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _check_sizes(path: Path, names: list[str], codes: np.ndarray, ndim: np.ndarray,
                 shape: np.ndarray, begin: np.ndarray, end: np.ndarray,
                 wide: dict[int, tuple[int, ...]] | None = None) -> None:
    """Stored bytes must equal numel * bits / 8, in whole bytes (sub-byte dtypes included), and
    no product may reach 2**64 (the library multiplies the dimensions left to right with checked
    u64 arithmetic, then by the bits, and refuses an overflow even when a later 0 would zero it)."""
    n = len(names)
    if n == 0:
        return
    wide = wide or {}
    bits = _DTYPE_BITS_ARR[codes]
    # rows whose products int64 might not hold exactly are checked with Python ints
    risky = np.cumprod(shape.astype(np.float64), axis=1).max(axis=1) >= _EXACT_BELOW
    if wide:
        risky[list(wide)] = True
    exact_bits = np.zeros(n, dtype=np.int64)
    for i in np.flatnonzero(risky).tolist():
        dims = wide.get(i) or _dims(ndim, shape, i)
        count = 1
        for d in dims:
            count *= d
            if count >= _U64:
                break
        total = count * int(bits[i])
        if count >= _U64 or total >= _U64:
            raise AuditInputError(path, f"tensor {names[i]!r}: {DTYPE_NAMES[int(codes[i])]} x shape "
                                        f"{_short(list(dims))} overflows 64 bits (the safetensors library "
                                        f"refuses it)")
        nb = int(end[i] - begin[i])
        if total % 8 == 0 and total // 8 != nb:
            raise AuditInputError(path, f"tensor {names[i]!r}: data_offsets [{int(begin[i])}, {int(end[i])}] "
                                        f"({nb} bytes) do not match dtype {DTYPE_NAMES[int(codes[i])]} x shape "
                                        f"{_short(list(dims))} = {total // 8} bytes")
        exact_bits[i] = (end[i] - begin[i]) * 8 if total % 8 == 0 else 4     # verdict below
    numel = np.prod(np.where(risky[:, None], 1, shape), axis=1)
    total_bits = np.where(risky, exact_bits, numel * bits)
    bad = (total_bits % 8 != 0) | (total_bits // 8 != end - begin)
    if bad.any():
        i = int(np.argmax(bad))
        nb = int(end[i] - begin[i])
        dt = DTYPE_NAMES[int(codes[i])]
        dims = _short(list(wide.get(i) or _dims(ndim, shape, i)))
        if total_bits[i] % 8:
            raise AuditInputError(path, f"tensor {names[i]!r}: {dt} x shape {dims} "
                                        f"is not a whole number of bytes")
        raise AuditInputError(path, f"tensor {names[i]!r}: data_offsets [{int(begin[i])}, {int(end[i])}] "
                                    f"({nb} bytes) do not match dtype {dt} x shape "
                                    f"{dims} = {int(total_bits[i] // 8)} bytes")


def _dims(ndim: np.ndarray, shape: np.ndarray, i: int) -> list[int]:
    """Shape row i as stored (padding dims dropped), for error messages."""
    return [int(x) for x in shape[i, : int(ndim[i])]]


def _check_layout(path: Path, names: list[str], begin: np.ndarray, end: np.ndarray) -> int:
    """Offsets sorted by (begin, end) must tile [0, total) exactly; returns the data length."""
    if len(names) == 0:
        return 0
    order = np.lexsort((end, begin))
    b = begin[order]
    e = end[order]
    if b[0] != 0:
        raise AuditInputError(path, f"tensor data does not start at offset 0: first tensor "
                                    f"{names[order[0]]!r} begins at {int(b[0])} (gap of {int(b[0])} bytes)")
    nxt = b[1:]
    prev = e[:-1]
    bad = nxt != prev
    if bad.any():
        k = int(np.argmax(bad))
        a, c = names[order[k]], names[order[k + 1]]
        if nxt[k] < prev[k]:
            raise AuditInputError(path, f"tensors {a!r} and {c!r} overlap (data_offsets "
                                        f"[{int(b[k])}, {int(e[k])}] and [{int(b[k + 1])}, {int(e[k + 1])}])")
        raise AuditInputError(path, f"gap of {int(nxt[k] - prev[k])} bytes between tensors {a!r} "
                                    f"(ends at {int(prev[k])}) and {c!r} (begins at {int(nxt[k])})")
    return int(e[-1])
