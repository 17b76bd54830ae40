"""Does the index agree with the shards? Decided on bytes, without a 180,000-entry dict.

Why: building the weight_map dict and looking every tensor up in it cost more than parsing all
the headers. In the common case (the index lists exactly the stored tensors, each in its own
shard) a sort of word rows answers the question exactly; any doubt (a disagreement, a hash tie,
a name over 254 bytes) answers "no", and the scanner then runs its dict-based cross-check,
which words the findings.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pathlib import Path

from ...errors import AuditInputError
from ..index import normalize_shard_path
from ..table import TensorTable
from . import accelerator
from .jsonspans import IndexColumns, index_columns
from .words import MAX_WORDS, span_columns, span_hash, u64_view


@dataclass
class FastIndex:
    cols: IndexColumns
    codes: np.ndarray            # shard code per weight_map entry
    files: list[str]             # normalized shard path per code (distinct)
    _hashed: tuple[int, np.ndarray, np.ndarray, np.ndarray] | None = None   # k, words, hash, order

    def hashed(self, k: int | None = None) -> "FastIndex":
        """Hash the keys now (over ``k`` words, by default as many as the longest key needs), so
        a scanner can do it while the headers are still being read."""
        length = self.cols.key_end - self.cols.key_start
        if k is None:
            k = (int(length.max(initial=0)) + 7) // 8
        if k <= MAX_WORDS and (self._hashed is None or self._hashed[0] != k):
            words = span_columns(u64_view(self.cols.buf), self.cols.key_start, length, k)
            h = span_hash(words, length)
            self._hashed = (k, words, h, np.argsort(h))
        return self

    def agrees_with(self, table: TensorTable, optional: np.ndarray) -> bool:
        """True exactly when the index lists each non-``optional`` row once, in its own file,
        no other name, and no optional row (what the scanner's dict check would conclude)."""
        if int((~optional).sum()) != len(self.cols):
            return False
        names = table.name_spans
        t_len = names.length
        c = self.cols
        i_len = c.key_end - c.key_start
        k = (max(int(t_len.max(initial=0)), int(i_len.max(initial=0))) + 7) // 8
        if k > MAX_WORDS:
            return False
        t_cols, t_hash = names.words_and_hash(k)
        _, i_cols, i_hash, pi = self.hashed(k)._hashed
        code_of = {f: i for i, f in enumerate(self.files)}
        t_code = np.array([code_of.get(f, -1) for f in table.files], dtype=np.int64)[table.file]
        order = names.hash_order(k)
        pt = order[~optional[order]]      # the non-optional rows, by hash
        th = t_hash[pt]
        if not np.array_equal(th, i_hash[pi]):
            return False
        q = np.empty(len(pi), dtype=np.int64)
        q[pi] = pt                        # index entry j <-> table row q[j] (equal hashes)
        if not np.array_equal(t_code[q], self.codes) or not np.array_equal(t_len[q], i_len):
            return False
        for j in range(k):
            if not np.array_equal(t_cols[j][q], i_cols[j]):
                return False              # equal hashes, different names
        if (th[1:] == th[:-1]).any():
            return False                  # a name twice (or a tie): let the exact check decide
        opt = np.sort(t_hash[optional])
        if (opt[1:] == opt[:-1]).any():
            return False
        at = np.minimum(np.searchsorted(th, opt), max(len(th) - 1, 0))
        return not len(th) or not (th[at] == opt).any()


@accelerator
def read_index(raw: bytes, index_path: Path, model_dir: Path) -> "FastIndex | None":
    """The index bytes ``raw`` as columns when it is plain and every shard it names is a file
    here; None sends it through load_index, which also words every error."""
    cols = index_columns(raw)
    coded = cols.file_codes() if cols is not None else None
    if coded is None:
        return None
    codes, files = coded
    try:
        norm = [normalize_shard_path(index_path, rel, lambda _: "") for rel in files]
    except AuditInputError:
        return None
    if len(set(norm)) != len(norm) or not all((model_dir / n).is_file() for n in norm):
        return None
    return FastIndex(cols, codes, norm).hashed()
