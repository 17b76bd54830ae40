"""The shards accelerator: every canonical header of a batch parsed at once from the shared
buffer (``shards.HeaderBytes``), checked with the exact reader's rules over all files at once.

A file that is not canonical (whitespace, another key order, escapes, ...) or breaks a rule
(a size or layout problem) is left to the exact reader, which also words the error.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from ...errors import AuditInputError
from ..header import DTYPE_NAMES, _DTYPE_BITS_ARR, _check_layout
from ..namespans import PAD, NameSpans
from . import accelerator
from .header import ParsedEntries, parse_entries, parse_entry_buffer, split_header_at

_EXACT_BELOW = float(2 ** 46)     # element counts whose bits (x <= 64) int64 holds exactly

if TYPE_CHECKING:
    from ..shards import HeaderBytes

@dataclass
class FastFile:
    """One file's slice of a fast parse."""

    parsed: ParsedEntries
    row0: int
    rows: int
    metadata: dict[str, str] | None


@accelerator
def parsed_files(hb: "HeaderBytes") -> list[FastFile | None] | None:
    """Per file, its fast-parsed slice when every rule of the exact reader holds for it, else
    None for that file (the exact reader then reads it); None when no file was parsed."""
    out: list[FastFile | None] = [None] * len(hb)
    splits = [split_header_at(hb.buf, a, a + n) for a, n in zip(hb.offset, hb.length)]
    todo = [i for i, s in enumerate(splits) if s is not None]
    if not todo:
        return None
    hb.keep_only([(s[0], s[1]) if s is not None else None for s in splits])
    groups = [todo]
    parsed = _parse_in_two(hb, splits, todo)
    if parsed is None and len(todo) > 1:     # one odd file: parse the others one by one
        groups = [[i] for i in todo]
    for group in groups:
        if len(groups) == 1:
            p = parsed
        else:
            i = group[0]
            p = parse_entries([bytes(hb.buf[splits[i][0]:splits[i][1]])], DTYPE_NAMES)
        if p is None:
            continue
        good = _files_valid(p, [hb.length[i] for i in group], [hb.size[i] for i in group])
        row0 = np.cumsum(p.counts) - p.counts
        for k, i in enumerate(group):
            if good[k]:
                out[i] = FastFile(p, int(row0[k]), int(p.counts[k]), splits[i][2])
    return out


_SPLIT_FROM = 4 << 20       # entry bytes from which the parse is shared by two threads


def _parse_in_two(hb: "HeaderBytes", splits: list, todo: list[int]) -> ParsedEntries | None:
    """One parse of the ``todo`` files' entries; a large one in two halves at a file boundary,
    the second on another thread (numpy releases the GIL for the byte passes and gathers)."""
    starts = np.array([splits[i][0] for i in todo], dtype=np.int64)
    ends = np.array([splits[i][1] for i in todo], dtype=np.int64)
    cum = np.cumsum(ends - starts)
    if len(todo) < 2 or int(cum[-1]) < _SPLIT_FROM:
        return parse_entry_buffer(hb.buf, starts, ends, DTYPE_NAMES)
    m = min(max(int(np.searchsorted(cum, cum[-1] // 2)) + 1, 1), len(todo) - 1)
    cut = hb.offset[todo[m]]             # the second half's files start here in the buffer
    with ThreadPoolExecutor(max_workers=1) as pool:
        second = pool.submit(_parse_and_hash, hb.buf, starts[m:], ends[m:], cut, len(hb.buf) - len(PAD))
        first = _parse_and_hash(hb.buf, starts[:m], ends[:m], 0, cut)
        second = second.result()
    if first is None or second is None:
        return None
    names = NameSpans(hb.buf, np.concatenate((first.names.start, second.names.start)),
                      np.concatenate((first.names.length, second.names.length)))
    names.adopt_hashes(first.names, second.names)
    return ParsedEntries(names, *(np.concatenate((getattr(first, f), getattr(second, f)))
                                  for f in ("dtype_code", "ndim", "shape", "begin", "end", "counts")))


def _parse_and_hash(buf: bytearray, starts: np.ndarray, ends: np.ndarray, lo: int, hi: int) -> ParsedEntries | None:
    """One half's parse plus its names' word hashes, plain (the index check and the description
    match) and digit-masked (the name templates), while the other core does the other half."""
    p = parse_entry_buffer(buf, starts, ends, DTYPE_NAMES, lo, hi)
    if p is not None and len(p.names):
        p.names.masked_words_and_hash((int(p.names.length.max()) + 7) // 8)     # and the plain one
    return p


def _files_valid(p: ParsedEntries, header_lens: list[int], file_sizes: list[int]) -> np.ndarray:
    """Per file: sizes match dtype x shape, offsets tile the data, the data ends the file.

    The same rules as header._check_sizes/_check_layout, over all files at once; a file whose
    tensors are not stored in header order is checked on its own (sorting).
    """
    n_files = len(p.counts)
    fid = np.repeat(np.arange(n_files), p.counts)
    dims = p.shape[:, :int(p.ndim.max(initial=0))]          # trailing dims are 1
    # products that int64 might not hold exactly (any prefix, times the bits) go to the exact
    # reader, which applies the library's overflow rule; real tensors are far below 2**46
    prefix = np.cumprod(dims.astype(np.float64), axis=1) if dims.shape[1] else np.ones((len(dims), 1))
    bad_row = prefix.max(axis=1, initial=1.0) >= _EXACT_BELOW
    total_bits = np.prod(dims, axis=1) * _DTYPE_BITS_ARR[p.dtype_code]
    bad_row |= (total_bits % 8 != 0) | (total_bits // 8 != p.end - p.begin)
    bad = np.bincount(fid[bad_row], minlength=n_files) > 0
    # tiling, when stored in header order: each begins where the previous ended, from 0
    first = np.cumsum(p.counts) - p.counts
    follows = np.ones(len(fid), dtype=bool)
    follows[1:] = p.begin[1:] == p.end[:-1]
    has = p.counts > 0
    follows[first[has]] = p.begin[first[has]] == 0
    in_order = np.bincount(fid[~follows], minlength=n_files) == 0
    data_len = np.zeros(n_files, dtype=np.int64)
    data_len[has] = p.end[(first + p.counts - 1)[has]]
    for f in np.flatnonzero(~in_order & ~bad).tolist():
        sl = slice(int(first[f]), int(first[f] + p.counts[f]))
        try:
            data_len[f] = _check_layout(Path(), p.names.take(sl).strings().tolist(), p.begin[sl], p.end[sl])
        except AuditInputError:
            bad[f] = True
    bad |= 8 + np.array(header_lens, dtype=np.int64) + data_len != np.array(file_sizes, dtype=np.int64)
    return ~bad
