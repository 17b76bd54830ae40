"""`inventory --by tensor`: one row per stored tensor, held as columns.

Why columns: a full GLM-5.1 checkpoint has 177,000 tensors. Building a dict per tensor and laying
the table out with tabulate took 10-14 s; the text/markdown/CSV renderers read these numpy
columns directly (well under a second), and the per-tensor dicts of the JSON schema
(``tensor_rows[]``) are built only when JSON is asked for (``to_list``).
"""
from __future__ import annotations

import csv
import io
from typing import Callable, Iterator

import numpy as np

from ..model.classify import CATEGORIES, ClassifiedTable
from ..model.names import BLOCKS
from .text_table import fixed_width_table

TABLE_COLUMNS = ("name", "dtype", "shape", "category", "kind", "scheme", "block", "loaded")
CSV_COLUMNS = ("name", "file", "dtype", "shape", "nbytes", "category", "kind", "scheme", "layer", "block",
               "module", "projection", "expert", "loaded")


def shape_strings(shape: np.ndarray, ndim: np.ndarray) -> np.ndarray:
    """'6144x4096' per row from the [n, MAXDIM] shape matrix and the rank of each row ('' for a
    scalar). A checkpoint has few distinct shapes, so each is formatted once."""
    if not len(ndim):
        return np.zeros(0, dtype=object)
    keyed = np.ascontiguousarray(np.concatenate([ndim[:, None].astype(shape.dtype), shape], axis=1))
    rows_as_bytes = keyed.view(np.dtype((np.void, keyed.dtype.itemsize * keyed.shape[1]))).ravel()
    _, first, inverse = np.unique(rows_as_bytes, return_index=True, return_inverse=True)  # 1-D: fast
    text = np.array(["x".join(map(str, row[1:1 + row[0]])) for row in keyed[first].tolist()], dtype=object)
    return text[inverse.reshape(-1)]


class TensorRows:
    """Every stored tensor of a classified table, column-wise (see the module docstring).
    ``len()`` and iteration behave like the list of row dicts it stands for."""

    def __init__(self, ct: ClassifiedTable):
        self.ct = ct

    def __len__(self) -> int:
        return len(self.ct)

    def __iter__(self) -> Iterator[dict]:
        return iter(self.to_list())

    def _text(self, name: str) -> np.ndarray:
        """One column as the text and CSV renderers print it (cells are ``str``; ``None`` prints
        as an empty cell)."""
        ct, t, a = self.ct, self.ct.table, self.ct.addr
        if name == "name":
            return t.name
        if name == "file":
            return np.asarray(t.files, dtype=object)[t.file] if len(t.files) else np.full(len(t), "", dtype=object)
        if name == "dtype":
            return t.dtype
        if name == "shape":
            text = shape_strings(t.shape, t.ndim)
            for i, dims in t.wide.items():        # ranks over MAXDIM: the table keeps them aside
                text[i] = "x".join(map(str, dims))
            return text
        if name == "nbytes":
            return t.nbytes.astype(str)
        if name == "category":
            return np.asarray(CATEGORIES)[ct.category]
        if name == "block":
            return np.asarray(BLOCKS)[a.block]
        if name == "loaded":
            return np.where(t.loaded, "yes", "no")
        if name in ("layer", "expert"):
            v = getattr(a, name)
            return np.where(v >= 0, v.astype(str), "")
        return {"kind": ct.kind, "scheme": ct.scheme, "module": a.module, "projection": a.projection}[name]

    def table(self, fmt: str, on_rows: Callable[[int], None] | None = None) -> str:
        return fixed_width_table(list(TABLE_COLUMNS), [self._text(c) for c in TABLE_COLUMNS], fmt, on_rows)

    def csv_rows(self) -> str:
        cols = [self._text(c) for c in CSV_COLUMNS]
        cols[CSV_COLUMNS.index("loaded")] = np.where(self.ct.table.loaded, "True", "False")
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")     # csv writes None as an empty field
        w.writerow(CSV_COLUMNS)
        w.writerows(zip(*(c.tolist() for c in cols)))
        return buf.getvalue()

    def to_list(self) -> list[dict]:
        """The JSON schema's ``tensor_rows[]``: one dict per tensor."""
        ct, t, a = self.ct, self.ct.table, self.ct.addr
        n = len(t)
        shapes = [row[:k] for row, k in zip(t.shape.tolist(), t.ndim.tolist())]
        for i, dims in t.wide.items():            # ranks over MAXDIM: the table keeps them aside
            shapes[i] = list(dims)
        layer = [x if x >= 0 else None for x in a.layer.tolist()]
        expert = [x if x >= 0 else None for x in a.expert.tolist()]
        files = [t.files[i] for i in t.file.tolist()]
        cats = [CATEGORIES[i] for i in ct.category.tolist()]
        blocks = [BLOCKS[i] for i in a.block.tolist()]
        scheme = [s or "" for s in ct.scheme.tolist()]
        keys = ("name", "file", "dtype", "shape", "nbytes", "category", "kind", "scheme", "layer", "block",
                "module", "projection", "expert", "loaded", "data_offsets")
        offsets = [[b, e] for b, e in zip(t.begin.tolist(), t.end.tolist())]
        cols = (t.name.tolist(), files, t.dtype.tolist(), shapes, t.nbytes.tolist(), cats,
                [str(k) for k in ct.kind.tolist()], scheme, layer, blocks, [str(m) for m in a.module.tolist()],
                [str(p) for p in a.projection.tolist()], expert, t.loaded.tolist(), offsets)
        assert all(len(c) == n for c in cols)
        return [dict(zip(keys, row)) for row in zip(*cols)]
