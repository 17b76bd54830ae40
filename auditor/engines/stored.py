"""Per-module view of the stored checkpoint: scheme, weight dtype/shape and bytes by suffix.

Built with one bincount over (layer, module, suffix) codes, so it costs the same for 500 or
180,000 tensors. Routed experts are collapsed per layer and projection ("mlp.experts.gate_proj").
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field

import numpy as np

from ..model.classify import ClassifiedTable


@dataclass
class StoredModule:
    layer: int
    module: str
    scheme: str
    weight_dtype: str
    bytes_by_suffix: dict[str, int] = field(default_factory=dict)
    count_by_suffix: dict[str, int] = field(default_factory=dict)
    n_experts: int = 0

    @property
    def weight_bytes(self) -> int:
        return self.bytes_by_suffix.get("weight", 0)


class StoredIndex:
    """Lookup (layer, module) -> StoredModule for the tensors the engine loads."""

    def __init__(self, ct: ClassifiedTable):
        self.ct = ct
        a = ct.addr
        t = ct.table
        self.modules: dict[tuple[int, str], StoredModule] = {}
        mask = t.loaded
        if not mask.any():
            return
        layer = a.layer[mask].astype(np.int64) + 1          # -1 -> 0
        mc = a.modcode[mask].astype(np.int64)
        sc = a.sufcode[mask].astype(np.int64)
        M, S = max(len(a.modules), 1), max(len(a.suffixes), 1)
        key = (layer * M + mc) * S + sc
        size = int(key.max()) + 1
        if size <= 4 * len(key) + (1 << 20):
            # the usual small key space ((layers + 1) x modules x suffixes): count by key, no sort
            counts_all = np.bincount(key, minlength=size)
            uniq = np.flatnonzero(counts_all)
            counts = counts_all[uniq]
            sums = np.bincount(key, weights=t.nbytes[mask], minlength=size)[uniq]
            pos = np.full(size, len(key), dtype=np.int64)
            np.minimum.at(pos, key, np.arange(len(key)))
            first = pos[uniq]                               # first row of each key
        else:
            uniq, first, inv = np.unique(key, return_index=True, return_inverse=True)
            sums = np.bincount(inv, weights=t.nbytes[mask])
            counts = np.bincount(inv)
        idx = np.nonzero(mask)[0]
        rows = idx[first]                                   # first stored row of each key
        lay, rem = np.divmod(uniq, M * S)
        mods, sufs = np.divmod(rem, S)
        # one bulk conversion per column instead of ~4,000 numpy scalar reads in the loop
        is_expert = (a.expert[rows] >= 0).tolist()
        dtypes = t.dtype[rows].tolist()
        schemes = ct.scheme[rows].tolist()
        for u, (ly, m, sx, total, count) in enumerate(zip((lay - 1).tolist(), mods.tolist(), sufs.tolist(),
                                                         sums.tolist(), counts.tolist())):
            mkey = (ly, a.modules[m])
            sm = self.modules.get(mkey)
            if sm is None:
                sm = self.modules[mkey] = StoredModule(ly, a.modules[m], "", "")
            suffix = a.suffixes[sx]
            sm.bytes_by_suffix[suffix] = int(total)
            sm.count_by_suffix[suffix] = int(count)
            if suffix == "weight":
                sm.weight_dtype = str(dtypes[u])
                sm.scheme = str(schemes[u] or "")
                if is_expert[u]:
                    sm.n_experts = int(count)
        for sm in self.modules.values():
            if not sm.scheme and sm.weight_dtype:
                sm.scheme = "FLOAT"

    def get(self, layer: int, module: str) -> StoredModule | None:
        return self.modules.get((layer, module))

    def layer_signature(self, layer: int) -> tuple:
        """Everything stored under ``layer`` but the index: each module's name, scheme, weight dtype, bytes by
        suffix and expert count. Two layers with equal signatures hold the same modules at the same sizes, so
        a walk may copy one's rows to the other (``Materializer.walk_layers``)."""
        return self._layer_sigs.get(layer, ())

    @functools.cached_property
    def _layer_sigs(self) -> dict[int, tuple]:
        """``layer_signature`` of every layer, built once per index."""
        by_layer: dict[int, list] = {}
        for (ly, module), sm in self.modules.items():
            by_layer.setdefault(ly, []).append((module, sm.scheme, sm.weight_dtype,
                                                tuple(sorted(sm.bytes_by_suffix.items())), sm.n_experts))
        return {ly: tuple(sorted(v)) for ly, v in by_layer.items()}
