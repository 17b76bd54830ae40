"""TensorTable: one row per stored tensor, as columnar numpy arrays.

Everything downstream (classification, materialization, ledger) works on these columns with
vectorized numpy, which is what keeps a 180,000-tensor checkpoint under a second.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from ..dtypes import DTYPE_BYTES
from .namespans import NameSpans

MAXDIM = 8


class TensorTable:
    """Columns of one row per tensor. Names are held as byte spans (``name_spans``) and become
    an object array of ``str`` (``name``) only when something asks for them."""

    def __init__(self, *, name: "np.ndarray | list[str] | NameSpans", file: np.ndarray, dtype: np.ndarray,
                 ndim: np.ndarray, shape: np.ndarray, nbytes: np.ndarray, begin: np.ndarray,
                 end: np.ndarray, loaded: np.ndarray, files: list[str] | None = None,
                 wide: dict[int, tuple[int, ...]] | None = None) -> None:
        self.name_spans = name if isinstance(name, NameSpans) else NameSpans.from_strings(list(name))
        self.file = file            # int32 index into ``files``
        self.dtype = dtype          # str safetensors dtype string (BF16, I8, F32, ...)
        self.ndim = ndim            # int8
        self.shape = shape          # int64 [n, MAXDIM], unused trailing dims are 1; a rank over
                                    # MAXDIM is folded into the last column (same element count)
        self.wide = dict(wide or {})    # row -> full shape, for the (rare) ranks over MAXDIM
        self.nbytes = nbytes        # int64, stored bytes (end - begin)
        self.begin = begin          # int64 absolute byte offset of the data in the file
        self.end = end              # int64 absolute end offset (exclusive)
        self.loaded = loaded        # bool: the engine loads this tensor (False for rot.safetensors, optional/)
        self.files = list(files) if files is not None else []   # paths relative to the model directory
        # set by the scanner: the scan cache's key of these exact columns, and the directory they
        # came from (what the classification cache keys on); None for any other table
        self.cache_key: str | None = None
        self.cache_dir: "Path | None" = None

    @property
    def name(self) -> np.ndarray:
        """Object array of ``str`` (decoded on first use)."""
        return self.name_spans.strings()

    def __len__(self) -> int:
        return len(self.name_spans)

    @property
    def numel(self) -> np.ndarray:
        return np.prod(self.shape, axis=1)

    def shape_of(self, i: int) -> tuple[int, ...]:
        if i in self.wide:
            return self.wide[i]
        return tuple(int(x) for x in self.shape[i, : int(self.ndim[i])])

    def row(self, i: int) -> dict:
        return {"name": self.name_spans.get(i), "file": self.files[int(self.file[i])], "dtype": str(self.dtype[i]),
                "shape": list(self.shape_of(i)), "nbytes": int(self.nbytes[i]),
                "data_offsets": [int(self.begin[i]), int(self.end[i])], "loaded": bool(self.loaded[i])}

    @staticmethod
    def from_rows(rows: list[tuple[str, str, tuple[int, ...]]], file: str = "<synthesized>",
                  loaded: bool = True) -> "TensorTable":
        """Build a table from (name, dtype, shape) rows, e.g. a config-only inventory."""
        n = len(rows)
        shape = np.ones((n, MAXDIM), dtype=np.int64)
        ndim = np.zeros(n, dtype=np.int8)
        nbytes = np.zeros(n, dtype=np.int64)
        for i, (_, dt, shp) in enumerate(rows):
            ndim[i] = len(shp)
            shape[i, : len(shp)] = shp
            numel = 1
            for d in shp:
                numel *= d
            nbytes[i] = int(numel * DTYPE_BYTES[dt])
        end = np.cumsum(nbytes)
        return TensorTable(
            name=np.array([r[0] for r in rows], dtype=object),
            file=np.zeros(n, dtype=np.int32),
            dtype=np.array([r[1] for r in rows], dtype=str),
            ndim=ndim, shape=shape, nbytes=nbytes, begin=end - nbytes, end=end,
            loaded=np.full(n, loaded, dtype=bool), files=[file],
        )

    @staticmethod
    def concat(tables: list["TensorTable"]) -> "TensorTable":
        files: list[str] = []
        parts_file = []
        for t in tables:
            parts_file.append(t.file + len(files))
            files.extend(t.files)
        return TensorTable(
            name=NameSpans.concat([t.name_spans for t in tables]),
            file=np.concatenate(parts_file).astype(np.int32) if tables else np.array([], dtype=np.int32),
            dtype=np.concatenate([t.dtype for t in tables]) if tables else np.array([], dtype=str),
            ndim=np.concatenate([t.ndim for t in tables]) if tables else np.array([], dtype=np.int8),
            shape=np.concatenate([t.shape for t in tables]) if tables else np.ones((0, MAXDIM), np.int64),
            nbytes=np.concatenate([t.nbytes for t in tables]) if tables else np.array([], dtype=np.int64),
            begin=np.concatenate([t.begin for t in tables]) if tables else np.array([], dtype=np.int64),
            end=np.concatenate([t.end for t in tables]) if tables else np.array([], dtype=np.int64),
            loaded=np.concatenate([t.loaded for t in tables]) if tables else np.array([], dtype=bool),
            files=files,
            wide={row0 + r: dims for t, row0 in zip(tables, np.cumsum([0] + [len(t) for t in tables]).tolist())
                  for r, dims in t.wide.items()},
        )
