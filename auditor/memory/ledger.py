"""Per-rank ledger: place every resident row on the ranks that hold it and sum.

Ranks are numbered stage*DP*TP + dp*TP + tp. A row's placement decides its per-rank multiplier:
``stage`` (every rank of the stage holding its layer), ``expert`` (the local expert count of the
rank's EP slot), ``owner`` (one rank of the stage, layer sharding), ``first``/``last`` (first or last
PP stage), ``all`` (every rank: per-process buffers). One bincount per grouping then gives totals by
category, block and layer for every rank at once.
"""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ..engines.bridge import BRIDGE_ORDER
from ..engines.materialize import Materialization
from ..engines.placement import Placement
from ..model.classify import CATEGORIES
from ..model.names import BLOCKS
from ..model.spec import ModelSpec
from ..parallel import ParallelPlan


def experts_per_slot(total: int, ep: int) -> np.ndarray:
    """vLLM's expert map: an even split, the first ``total % ep`` EP ranks take one more."""
    base, rem = divmod(total, ep)
    return np.array([base + (1 if r < rem else 0) for r in range(ep)], dtype=np.int64)


@dataclass
class Ledger:
    ranks: int
    total: np.ndarray               # [R] bytes
    naive: np.ndarray               # [R]
    by_category: np.ndarray         # [R, C]
    by_block: np.ndarray            # [R, B]
    by_layer: np.ndarray            # [R, L+1] (last column: outside decoder layers)
    by_cause: np.ndarray            # [R, len(BRIDGE_ORDER)] resident - naive
    mult: np.ndarray                # [rows, R] resident multipliers
    naive_mult: np.ndarray          # [rows, R]
    layers: list[int] = field(default_factory=list)

    @property
    def worst_rank(self) -> int:
        return int(np.argmax(self.total))

    def order(self) -> np.ndarray:
        """Ranks worst first (stable, so equal ranks keep their number order)."""
        return np.argsort(-self.total, kind="stable")


@dataclass
class RowArrays:
    """The columns of a materialization's rows the ledger reads, built once per materialization
    (~30 ms for GLM-5.1's ~5,800 rows) and reusable for any plan that shares the pass."""
    st_row: np.ndarray              # [rows] PP stage of the row's layer (-1: outside decoder layers)
    kind: np.ndarray                # [rows] placement (object)
    owner: np.ndarray               # [rows]
    nbytes: np.ndarray              # [rows] per holder
    nnaive: np.ndarray              # [rows]
    cat: np.ndarray                 # [rows] CATEGORIES index
    blk: np.ndarray                 # [rows] BLOCKS index
    lay: np.ndarray                 # [rows] index into ``layers`` (len(layers): outside decoder layers)
    cause: np.ndarray               # [rows] BRIDGE_ORDER index or -1
    layers: list[int]

    def kind_mask(self, kind: str) -> np.ndarray:
        """``self.kind == kind``, computed once per placement kind (a string comparison over every row
        was most of a one-rank ``rank_multipliers``, which perf's weight bytes run per plan). Read only."""
        if self.__dict__.get("_masks_of") is not self.kind:        # first call, or ``kind`` was replaced
            self._kind_masks = {}           # before ``_masks_of``: another thread never reads a missing dict
            self._masks_of = self.kind
        m = self._kind_masks.get(kind)
        if m is None:
            m = self._kind_masks[kind] = self.kind == kind
            m.flags.writeable = False
        return m


def row_arrays(mat: Materialization) -> RowArrays:
    return rows_arrays(mat.rows, mat.stage_of_layer, sorted({r.layer for r in mat.rows if r.layer >= 0}))


def rows_arrays(rows: list, stage_of_layer: dict[int, int], layers: list[int]) -> RowArrays:
    """``row_arrays`` of ``rows`` with the decoder-layer list given (``lay`` indexes it; a row outside it
    gets ``len(layers)``): the columns of a slice of a materialization, to join with ``concat_rows``."""
    lidx = {l: i for i, l in enumerate(layers)}
    cause_idx = {c: i for i, c in enumerate(BRIDGE_ORDER)}
    return RowArrays(
        st_row=np.array([stage_of_layer.get(r.layer, 0) if r.layer >= 0 else -1 for r in rows], dtype=np.int64),
        kind=np.array([r.placement for r in rows], dtype=object),
        owner=np.array([r.owner for r in rows], dtype=np.int64),
        nbytes=np.array([r.bytes for r in rows], dtype=np.float64),
        nnaive=np.array([r.naive for r in rows], dtype=np.float64),
        cat=np.array([CATEGORIES.index(r.category) for r in rows], dtype=np.int64),
        blk=np.array([BLOCKS.index(r.block) for r in rows], dtype=np.int64),
        lay=np.array([lidx.get(r.layer, len(layers)) for r in rows], dtype=np.int64),
        cause=np.array([cause_idx.get(r.cause, -1) for r in rows], dtype=np.int64),
        layers=layers,
    )


def concat_rows(head: RowArrays, tail: RowArrays) -> RowArrays:
    """The columns of ``head``'s rows followed by ``tail``'s, both built with the same ``layers``."""
    assert head.layers == tail.layers
    return RowArrays(**{f: np.concatenate([getattr(head, f), getattr(tail, f)]) for f in
                        ("st_row", "kind", "owner", "nbytes", "nnaive", "cat", "blk", "lay", "cause")},
                     layers=list(head.layers))


def rank_multipliers(arr: RowArrays, spec: ModelSpec, plan: ParallelPlan, rank: np.ndarray
                     ) -> tuple[np.ndarray, np.ndarray]:
    """(resident, naive) multipliers [rows, len(rank)]: how many copies of each row a rank holds."""
    n, R = len(arr.kind), len(rank)
    stage = rank // plan.ranks_per_stage
    in_stage = rank % plan.ranks_per_stage           # = dp*TP + tp = EP slot when EP is on
    last = plan.pp - 1
    st_row, kind, owner = arr.st_row, arr.kind, arr.owner
    same_stage = (st_row[:, None] == stage[None, :]) | (st_row[:, None] < 0)      # [rows, R]
    mult = np.zeros((n, R), dtype=np.float64)
    naive_mult = np.zeros((n, R), dtype=np.float64)
    mask = arr.kind_mask if isinstance(arr, RowArrays) else (lambda k: kind == k)
    m = mask("stage")
    mult[m] = naive_mult[m] = same_stage[m]
    m = mask("expert")
    if m.any():
        mult[m] = same_stage[m] * experts_per_slot(spec.E + plan.redundant_experts, plan.ep)[in_stage]
        naive_mult[m] = same_stage[m] * experts_per_slot(spec.E, plan.ep)[in_stage]
    m = mask("owner")
    mult[m] = naive_mult[m] = same_stage[m] & (owner[m, None] == in_stage[None, :])
    m = mask("first")
    mult[m] = naive_mult[m] = (stage == 0)[None, :]
    m = mask("last")
    mult[m] = naive_mult[m] = (stage == last)[None, :]
    m = mask("all")
    mult[m] = naive_mult[m] = 1.0
    return mult, naive_mult


def build_ledger(mat: Materialization, spec: ModelSpec, plan: ParallelPlan, layout: Placement,
                 ranks: np.ndarray | None = None, arrays: RowArrays | None = None) -> Ledger:
    """``ranks``: only these global ranks (columns in that order); default every rank of the plan.
    ``arrays``: ``row_arrays(mat)`` when the caller keeps it between ledgers of the same pass."""
    arr = row_arrays(mat) if arrays is None else arrays
    rank = np.arange(plan.world) if ranks is None else np.asarray(ranks, dtype=np.int64)
    mult, naive_mult = rank_multipliers(arr, spec, plan, rank)
    res = mult * arr.nbytes[:, None]                   # [rows, R]
    nai = naive_mult * arr.nnaive[:, None]
    layers = arr.layers

    def group(codes: np.ndarray, k: int, values: np.ndarray) -> np.ndarray:
        """[R, k] sums of ``values`` rows by code (rows with code -1 are dropped)."""
        # one bincount over (rank, code) cells: no BLAS call (a threaded OpenBLAS product spun
        # 0.1-0.3 s of CPU waking its threads on a busy machine) and no np.add.at (~4x slower);
        # every value is a whole number of bytes far below 2**53, so the sums are exact in any order
        keep = codes >= 0
        cell = codes[keep][:, None] + k * np.arange(values.shape[1])[None, :]      # [rows, R]
        sums = np.bincount(cell.ravel(), weights=values[keep].ravel(), minlength=k * values.shape[1])
        return sums.reshape(values.shape[1], k)

    return Ledger(
        ranks=len(rank), total=res.sum(axis=0), naive=nai.sum(axis=0),
        by_category=group(arr.cat, len(CATEGORIES), res), by_block=group(arr.blk, len(BLOCKS), res),
        by_layer=group(arr.lay, len(layers) + 1, res), by_cause=group(arr.cause, len(BRIDGE_ORDER), res - nai),
        mult=mult, naive_mult=naive_mult, layers=layers,
    )
