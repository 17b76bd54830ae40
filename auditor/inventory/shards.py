"""Read and validate the headers of many shards at once, as one set of columns.

Why a batch: per-file numpy work costs a fixed overhead ~150 times over, and the vectorised
parser (fastheader) is fastest over one concatenated buffer. The rules are those of
``header.read_header``, which stays the reference: any file the fast path cannot vouch for in
full (non-canonical layout, a size or layout problem, a name stored twice) is re-read through
it, in file order, so the first damaged file raises exactly the error it always raised.
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from ..errors import AuditInputError
from ..inputs import open_binary
from .fast import shards as fast_shards
from .header import (_DTYPE_NAME_ARR, HeaderEntries,
                     _read_raw_header, entries_from_raw, header_length, reading)
from .namespans import PAD, NameSpans, spans_distinct
from .table import MAXDIM, TensorTable


@dataclass
class HeaderBatch:
    """Every tensor of a list of shards, in file order then header order."""

    paths: list[Path]
    header_lens: list[int]
    metadata: list[dict[str, str] | None]
    names: NameSpans
    dtype_code: np.ndarray       # int8 index into header.DTYPE_NAMES
    ndim: np.ndarray             # int8
    shape: np.ndarray            # int64 [n, MAXDIM]
    begin: np.ndarray            # int64 absolute file offsets
    end: np.ndarray
    counts: np.ndarray           # int64 tensors per file
    wide: dict[int, tuple[int, ...]] = field(default_factory=dict)   # row -> shape of rank > MAXDIM
    _raw: "HeaderBytes | None" = field(default=None, repr=False, compare=False)

    def file_names(self, i: int) -> list[str]:
        """Names of the tensors stored in file ``i``."""
        stop = int(self.counts[: i + 1].sum())
        return self.names.take(slice(stop - int(self.counts[i]), stop)).strings().tolist()

    def to_table(self, rels: list[str], loaded: list[bool]) -> TensorTable:
        """One table over all files; ``rels`` are the names kept in ``files``."""
        file = np.repeat(np.arange(len(rels), dtype=np.int32), self.counts)
        return TensorTable(
            name=self.names, file=file, dtype=_DTYPE_NAME_ARR[self.dtype_code], ndim=self.ndim,
            shape=self.shape, nbytes=self.end - self.begin, begin=self.begin, end=self.end,
            loaded=np.repeat(np.array(loaded, dtype=bool), self.counts), files=list(rels), wide=self.wide,
        )


def read_headers(paths: list[Path], on_file: Callable[[int], None] | None = None, *,
                 check_unique: bool = True) -> HeaderBatch:
    """Validated headers of ``paths``; ``on_file(bytes)`` is called as each header is read.

    Raises AuditInputError for the first damaged file, as ``read_header`` in a loop would.
    ``check_unique=False`` leaves the name-uniqueness rule to the caller, who must call
    ``unique_names`` on the batch unless it has proven the names distinct some other way (the
    scanner's index check does, for the price of hashing it pays anyway).
    """
    return parse_header_bytes(HeaderBytes([Path(p) for p in paths], on_file), check_unique=check_unique)


def parse_header_bytes(hb: "HeaderBytes", *, check_unique: bool = True) -> HeaderBatch:
    """read_headers over headers already read (the scanner hashes them first: a scan cache hit
    needs no parse)."""
    fast = fast_shards.parsed_files(hb) or [None] * len(hb)
    batch = _assemble(hb, fast)
    batch._raw = hb
    return unique_names(batch) if check_unique else batch


def unique_names(batch: HeaderBatch) -> HeaderBatch:
    """``batch``, or when a name is stored twice, the batch the exact path gives: it tells a
    duplicate key inside one header (raised here) from a tensor stored in two files (which the
    scanner reports, naming both files)."""
    if batch._raw is not None and not spans_distinct(batch.names):
        batch = _assemble(batch._raw, [None] * len(batch.paths))
    return batch


_KEEP_OPEN = 256      # shards read with one open each (more: reopened for the second pass)


class HeaderBytes:
    """Every header read straight into one buffer: one copy and one round of page faults for
    ~20 MB, where reading each header on its own and joining them costs both twice (measured
    ~25 ms more in a fresh process). ``raw(i)`` still gives header i's exact bytes after the
    fast path has blanked everything around the entries."""

    def __init__(self, paths: list[Path], on_file: Callable[[int], None] | None = None) -> None:
        self.paths = paths
        self.length: list[int] = []
        self.size: list[int] = []
        # each file is opened once and kept open between the two passes (an open costs ~0.1 ms
        # here), unless there are so many that descriptors could run short
        keep = len(paths) <= _KEEP_OPEN
        handles: list = []
        try:
            for k, path in enumerate(paths):
                try:
                    with reading(path):
                        fh, _ = open_binary(path, "shard")     # no blocking, regular files only
                        try:
                            n, size = header_length(path, fh)
                        finally:
                            if keep:
                                handles.append(fh)
                            else:
                                fh.close()
                except AuditInputError:
                    self._earlier_first(k)
                    raise
                self.length.append(n)
                self.size.append(size)
            self.offset = np.concatenate(([0], np.cumsum(self.length, dtype=np.int64)))[:-1].tolist()
            total = sum(self.length)
            self.buf = bytearray(total + len(PAD))
            self.buf[total:] = PAD
            with memoryview(self.buf) as view:
                for k, path in enumerate(paths):
                    a, n = self.offset[k], self.length[k]
                    try:
                        with reading(path):
                            if keep:
                                got = handles[k].readinto(view[a:a + n])     # just past the prefix
                            else:
                                fh, _ = open_binary(path, "shard")
                                with fh:
                                    fh.seek(8)
                                    got = fh.readinto(view[a:a + n])
                        if got != n:      # the file shrank since its length was read
                            raise AuditInputError(path, f"header length {n} is past the end of the file "
                                                        f"({os.stat(path).st_size} bytes)")
                    except AuditInputError:
                        self._earlier_first(k)
                        raise
                    if on_file is not None:
                        on_file(8 + n)
        finally:
            for fh in handles:
                fh.close()
        self._saved: dict[int, tuple[bytes, bytes] | bytes] = {}

    def __len__(self) -> int:
        return len(self.paths)

    def raw(self, i: int) -> bytes:
        """Header i as stored in the file."""
        saved = self._saved.get(i)
        a, n = self.offset[i], self.length[i]
        if isinstance(saved, bytes):
            return saved
        if saved is None:
            return bytes(self.buf[a:a + n])
        head, tail = saved
        return head + bytes(self.buf[a + len(head):a + n - len(tail)]) + tail

    def keep_only(self, spans: list[tuple[int, int] | None]) -> None:
        """Blank (to spaces) every byte but ``buf[start:end]`` of each file's span (absolute
        positions; None keeps nothing of that file), saving what is blanked for ``raw``."""
        buf = self.buf
        for i, span in enumerate(spans):
            a, n = self.offset[i], self.length[i]
            if span is None:
                self._saved[i] = bytes(buf[a:a + n])
                buf[a:a + n] = b" " * n
            else:
                s, e = span
                self._saved[i] = (bytes(buf[a:s]), bytes(buf[e:a + n]))
                buf[a:s] = b" " * (s - a)
                buf[e:a + n] = b" " * (a + n - e)

    def _earlier_first(self, k: int) -> None:
        """A damaged earlier file is reported before file ``k``'s problem: check 0..k-1 exactly."""
        for j in range(k):
            raw, size = _read_raw_header(self.paths[j])
            entries_from_raw(self.paths[j], raw, size)


def _assemble(hb: HeaderBytes, fast: "list[fast_shards.FastFile | None]") -> HeaderBatch:
    """Columns of every file in order: fast slices where valid, the exact path elsewhere."""
    paths, lens = hb.paths, hb.length
    starts = np.array([8 + n for n in lens], dtype=np.int64)
    if fast and all(f is not None for f in fast) and len({id(f.parsed) for f in fast}) == 1:
        p = fast[0].parsed
        data_start = np.repeat(starts, p.counts)
        return HeaderBatch(paths, lens, [f.metadata for f in fast], p.names, p.dtype_code, p.ndim,
                           p.shape, p.begin + data_start, p.end + data_start, p.counts)
    pieces: list[HeaderEntries | tuple] = []
    metadata: list[dict[str, str] | None] = []
    wide: dict[int, tuple[int, ...]] = {}
    row0 = 0
    for i, f in enumerate(fast):
        if f is None:
            h = entries_from_raw(paths[i], hb.raw(i), hb.size[i])
            pieces.append((h.names, h.dtype_code, h.ndim, h.shape, h.begin, h.end))
            metadata.append(h.metadata)
            wide.update((row0 + r, dims) for r, dims in h.wide.items())
        else:
            sl = slice(f.row0, f.row0 + f.rows)
            p = f.parsed
            pieces.append((p.names.take(sl).strings().tolist(), p.dtype_code[sl], p.ndim[sl], p.shape[sl],
                           p.begin[sl], p.end[sl]))
            metadata.append(f.metadata)
        row0 += len(pieces[-1][0])
    counts = np.array([len(pc[0]) for pc in pieces], dtype=np.int64)
    data_start = np.repeat(starts, counts)
    names = NameSpans.from_strings([name for pc in pieces for name in pc[0]])
    cat = [np.concatenate([pc[k] for pc in pieces]) if pieces else None for k in range(1, 6)]
    if not pieces:
        cat = [np.zeros(0, np.int8), np.zeros(0, np.int8), np.ones((0, MAXDIM), np.int64),
               np.zeros(0, np.int64), np.zeros(0, np.int64)]
    ndim = cat[1].astype(np.int8 if not len(cat[1]) or int(cat[1].max()) < 128 else np.int32)
    return HeaderBatch(paths, list(lens), metadata, names, cat[0].astype(np.int8), ndim,
                       cat[2], cat[3] + data_start, cat[4] + data_start, counts, wide=wide)
