"""Name accelerators: distinctness and digit-masked grouping of tensor names from their 8-byte
word hashes, instead of one Python object per name."""
from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from . import accelerator
from .words import MAX_WORDS

if TYPE_CHECKING:
    from ..namespans import NameSpans


@accelerator
def proven_distinct(names: "NameSpans") -> bool | None:
    """True when the word hashes prove no two spans hold the same bytes; None when they cannot
    (a hash tie, or a name too long to hash as words): the caller compares strings."""
    n = len(names)
    if n < 2:
        return True
    k = (int(names.length.max()) + 7) // 8
    if k > MAX_WORDS:
        return None
    _, h = names.words_and_hash(k)          # kept: the index check hashes the same names
    h = h[names.hash_order(k)]
    return True if not (h[1:] == h[:-1]).any() else None


@accelerator
def mask_groups(names: "NameSpans") -> tuple[np.ndarray, np.ndarray] | None:
    """(group number per name, first row of each group), groups numbered by first appearance, of
    names equal once every digit is masked, from 8-byte word columns and a hash instead of 180,000 bytes objects in a dict; None
    when a name is too long for it or two different masked names share a hash (the caller then
    groups through a dict)."""
    n, length = len(names), names.length
    k = (int(length.max()) + 7) // 8 if n else 0
    if k > MAX_WORDS:
        return None
    cols, masked_hash = names.masked_words_and_hash(k)
    _, first, inv = np.unique(masked_hash, return_index=True, return_inverse=True)
    rep = first[inv]
    if not np.array_equal(length[rep], length) or any(not np.array_equal(c[rep], c) for c in cols):
        return None
    by_appearance = np.argsort(first)                   # groups in order of first appearance
    rank = np.empty(len(first), dtype=np.int64)
    rank[by_appearance] = np.arange(len(first))
    return rank[inv], first[by_appearance]
