"""8-byte-word tools every accelerator shares: unaligned loads, byte masks, a span hash, SWAR
digit folding. Fixed-width words let numpy compare and hash 180,000 names without a Python
object per name; the exact readers never need any of this."""
from __future__ import annotations

import codecs

import numpy as np

LOW_MASK = np.array([(1 << (8 * k)) - 1 for k in range(8)] + [(1 << 64) - 1], dtype=np.uint64)


def u64_view(buf: bytes) -> np.ndarray:
    """Every byte offset of ``buf`` as an unaligned little-endian u64 (a view, no copy)."""
    return np.ndarray(shape=(len(buf) - 7,), dtype="<u8", buffer=buf, strides=(1,))


MAX_WORDS = 32     # names up to 256 bytes are compared as words; longer ones go the slow way


_P = np.uint64(0x100000001B3)      # odd multiplier of the word-polynomial hash
_M1, _M2 = np.uint64(0x9E3779B97F4A7C15), np.uint64(0xBF58476D1CE4E5B9)


def span_columns(words: np.ndarray, start: np.ndarray, length: np.ndarray, k: int) -> np.ndarray:
    """Row j: the j-th 8-byte word of every span, zero past its end. Column-major on purpose:
    each pass touches two 1.4 MB arrays instead of one [n, k] block, which is ~2x faster here."""
    cols = np.empty((k, len(start)), dtype=np.uint64)
    last = len(words) - 1
    for j in range(k):
        at = start + 8 * j
        np.minimum(at, last, out=at)
        np.bitwise_and(words[at], LOW_MASK[np.clip(length - 8 * j, 0, 8)], out=cols[j])
    return cols


def span_hash(cols: np.ndarray, length: np.ndarray) -> np.ndarray:
    """A u64 per span (polynomial over its words and length, then a splitmix finaliser). Equal
    spans hash equal; a tie between different spans only sends the check to the exact path."""
    h = length.astype(np.uint64) * _M2
    # each word is folded in and mixed down (xor-shift) before the next: a multiply alone only moves
    # differences upward, so two names differing in the top bytes of two words (DeepSeek's
    # layers.11...experts.51 vs layers.41...experts.54) tied in 41,208 of 288,242 names and sent
    # every check to the exact path
    for j in range(cols.shape[0]):
        h ^= cols[j]
        h *= _P
        h ^= h >> np.uint64(32)
    h ^= h >> np.uint64(31)
    h *= _M1
    h ^= h >> np.uint64(29)
    return h


def word_of(text: bytes) -> int:
    """The first 8 bytes of ``text`` as the little-endian u64 an unaligned load would give."""
    return int.from_bytes(text[:8].ljust(8, b"\0"), "little")


def word8(text: bytes) -> int:
    assert len(text) == 8, text
    return word_of(text)


def valid_utf8(buf: bytes | bytearray, lo: int = 0, hi: int | None = None) -> bool:
    """``buf[lo:hi]`` decodes as UTF-8; then so does every span in it cut at an ASCII byte such as
    '"' (never part of a multi-byte sequence)."""
    if buf.isascii():
        return True
    try:
        codecs.decode(memoryview(buf)[lo:hi], "utf-8")
    except UnicodeDecodeError:
        return False
    return True


_ASCII_ZEROS = 0x3030303030303030
# low (8 - L) bytes set to '0': pads an L-digit number on the left once shifted into the top bytes
_ZERO_FILL = np.array([_ASCII_ZEROS & ((1 << (8 * (8 - k))) - 1) for k in range(9)], dtype=np.uint64)


def fold_digits(word: np.ndarray, length: np.ndarray) -> np.ndarray:
    """Values of the ``length``-digit (1..8) decimal numbers in the low bytes of ``word`` (SWAR:
    shift the digits to the top bytes, pad with '0', fold pairs, quads and octets)."""
    v = (word << ((8 - length) * 8).astype(np.uint64)) | _ZERO_FILL[length]
    v = v & np.uint64(0x0F0F0F0F0F0F0F0F)
    v = (v * np.uint64(2561)) >> np.uint64(8)
    v = ((v & np.uint64(0x00FF00FF00FF00FF)) * np.uint64(6553601)) >> np.uint64(16)
    v = ((v & np.uint64(0x0000FFFF0000FFFF)) * np.uint64(42949672960001)) >> np.uint64(32)
    return v


_LOW7 = np.uint64(0x7F7F7F7F7F7F7F7F)
_OVER_NINE = np.uint64(0x7676767676767676)     # 0x7F - 9 in every byte
_ZEROS = np.uint64(0x3030303030303030)
_HASHES = np.uint64(0x2323232323232323)


def mask_digits(cols: np.ndarray) -> np.ndarray:
    """The word columns with every ASCII digit byte replaced by '#' (SWAR, exact per byte; two
    temporaries, everything else in place: these are 11 MB arrays)."""
    d = cols ^ _ZEROS                                  # digits -> 0..9 in their byte
    t = d & _LOW7
    t += _OVER_NINE
    t |= d                                             # high bit set: not a digit
    np.invert(t, out=t)
    t &= ~_LOW7
    t >>= np.uint64(7)
    t *= np.uint64(0xFF)                               # 0xFF in each digit byte
    np.bitwise_xor(cols, _HASHES, out=d)
    d &= t
    d ^= cols                                          # digit bytes from '#', the rest from cols
    return d
