"""Tensor names as byte spans of one buffer, decoded to Python strings only when asked.

Why: a 180,000-tensor checkpoint has 180,000 names, and creating them as ``str`` objects costs
more than parsing the headers around them. Every bulk consumer (name templates, the index
check, the description match) works on the bytes: the scanner hands over the spans of the names
inside the concatenated header bytes, and strings exist only for the rows a report prints.
The exact readers build the same spans from strings (``from_strings``); the word hashes cached
here serve the accelerators (``fast/``) only.
"""
from __future__ import annotations

from typing import Sequence

import numpy as np

from .fast.words import mask_digits, span_columns, span_hash, u64_view

PAD = b" " * 32     # slack after the last span: 8-byte loads at any span start stay in bounds


class NameSpans:
    """``buf[start[i]:start[i] + length[i]]`` is the UTF-8 name of row i; ``buf`` ends with >= 8
    bytes that belong to no span. Immutable by convention (arrays are shared by ``take``)."""

    __slots__ = ("buf", "start", "length", "_strings", "_hashed", "_order", "_masked")

    def __init__(self, buf: bytes, start: np.ndarray, length: np.ndarray,
                 strings: np.ndarray | None = None) -> None:
        self.buf = buf
        self.start = start.astype(np.int64, copy=False)
        self.length = length.astype(np.int64, copy=False)
        self._strings = strings
        self._hashed: tuple[int, np.ndarray, np.ndarray] | None = None
        self._order: np.ndarray | None = None
        self._masked: tuple[int, np.ndarray, np.ndarray] | None = None

    @classmethod
    def from_strings(cls, names: Sequence[str]) -> "NameSpans":
        """Spans over ``"\\n".join(names)`` (the strings are kept: no decode later)."""
        encoded = [n.encode("utf-8") for n in names]
        length = np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded))
        start = np.cumsum(length + 1) - length - 1
        strings = np.empty(len(names), dtype=object)
        strings[:] = list(names)
        return cls(b"\n".join(encoded) + b"\n" + PAD, start, length, strings)

    def __len__(self) -> int:
        return len(self.start)

    @property
    def end(self) -> np.ndarray:
        return self.start + self.length

    def strings(self) -> np.ndarray:
        """Object array of ``str``, built once."""
        if self._strings is None:
            out = np.empty(len(self), dtype=object)
            if len(self):
                out[:] = decode_spans(self.buf, self.start, self.end)
            self._strings = out
        return self._strings

    def words_and_hash(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """(span_columns over ``k`` words, span_hash), kept for the last ``k``: the index check
        and the description match hash the same names with the same ``k``."""
        if self._hashed is None or self._hashed[0] != k:
            cols = span_columns(u64_view(self.buf), self.start, self.length, k)
            self._hashed = (k, cols, span_hash(cols, self.length))
            self._order = None
        return self._hashed[1], self._hashed[2]

    def masked_words_and_hash(self, k: int) -> tuple[np.ndarray, np.ndarray]:
        """words_and_hash with every ASCII digit read as '#': names that differ only in their
        numbers share it (name templates group by it)."""
        if self._masked is None or self._masked[0] != k:
            cols = mask_digits(self.words_and_hash(k)[0])
            self._masked = (k, cols, span_hash(cols, self.length))
        return self._masked[1], self._masked[2]

    def adopt_hashes(self, *parts: "NameSpans") -> None:
        """Take the word hashes (plain and digit-masked) from ``parts`` (these spans, in order,
        each hashed on its own): columns a part's shorter names never reach are zero, so a
        part's hash is redone over the common width only when the widths differ."""
        for slot in ("_hashed", "_masked"):
            cached = [getattr(p, slot) for p in parts if len(p)]
            if not cached or any(c is None for c in cached):
                continue
            k = max(c[0] for c in cached)
            cols, hashes = [], []
            for p, (pk, pc, ph) in zip((p for p in parts if len(p)), cached):
                if pk != k:
                    pc = np.vstack((pc, np.zeros((k - pk, len(p)), dtype=np.uint64)))
                    ph = span_hash(pc, p.length)
                cols.append(pc)
                hashes.append(ph)
            setattr(self, slot, (k, np.concatenate(cols, axis=1), np.concatenate(hashes)))
        self._order = None

    def hash_order(self, k: int) -> np.ndarray:
        """Rows sorted by their ``k``-word hash (argsort, kept with the hash)."""
        _, h = self.words_and_hash(k)
        if self._order is None:
            self._order = np.argsort(h)
        return self._order

    def take(self, rows: np.ndarray | slice) -> "NameSpans":
        """The spans of ``rows`` (same buffer, no copy of the bytes)."""
        strings = self._strings[rows] if self._strings is not None else None
        return NameSpans(self.buf, self.start[rows], self.length[rows], strings)

    def get(self, i: int) -> str:
        if self._strings is not None:
            return self._strings[i]
        a = int(self.start[i])
        return self.buf[a:a + int(self.length[i])].decode("utf-8")

    @staticmethod
    def concat(parts: list["NameSpans"]) -> "NameSpans":
        """One span set over the parts' buffers joined end to end."""
        if not parts:
            return NameSpans(PAD, np.zeros(0, np.int64), np.zeros(0, np.int64))
        shift = np.cumsum([0] + [len(p.buf) for p in parts[:-1]])
        strings = None
        if all(p._strings is not None for p in parts):
            strings = np.concatenate([p._strings for p in parts])
        return NameSpans(b"".join(p.buf for p in parts),
                         np.concatenate([p.start + s for p, s in zip(parts, shift.tolist())]),
                         np.concatenate([p.length for p in parts]), strings)


def decode_spans(buf: bytes, start: np.ndarray, end: np.ndarray) -> list[str]:
    """``buf[start:end]`` as str for each pair. Raises UnicodeDecodeError like bytes.decode."""
    if buf.isascii():                 # one char per byte: byte offsets are str offsets
        text = buf.decode("ascii")
        return list(map(text.__getitem__, map(slice, start.tolist(), end.tolist())))
    return [buf[a:b].decode("utf-8") for a, b in zip(start.tolist(), end.tolist())]


def spans_distinct(names: NameSpans) -> bool:
    """True when no two spans hold the same bytes (the accelerator's hashes, else a set)."""
    from .fast.names import proven_distinct
    if len(names) < 2 or proven_distinct(names):
        return True
    return len(set(names.strings().tolist())) == len(names)
