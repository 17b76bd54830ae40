"""Explain observed per-rank weights: which engine configuration reproduces them, rank by rank.

The user pins what they know (plan sizes, and any engine option given on the command line); the
rest of the engine-behaviour space (each engine's ``align_search_space``: engine version, role, SP / DSA-CP, layer sharding,
shared-expert DP, MTP drafter, NZ mode) is enumerated and each configuration's per-rank resident
bytes is compared with the observed ones. A configuration whose ranks differ where the log's ranks
differ (layer sharding leaves some ranks one layer's share lighter) scores better than one that
only matches the mean.

Speed: the model is classified and indexed once (``LedgerCache``); per candidate only placement,
materialization and a per-rank sum run. The materializer's per-module row cache is shared between
candidates with the same row-cache key (``memory.materialized.row_cache_key``: model dtype, NZ mode
and the engine's declared materializer fields), the only inputs of a row besides the module's own
arguments; configurations whose placement decisions coincide are materialized once, and so are
plans that differ only in what the per-rank sum reads (``memory.materialized.reference_plan``: DP, EP
and EPLB redundancy with EP on and no layer sharding): a walk keeps only its ``RankBytes``, and each
plan spreads them over its own ranks (``spread``). GLM-5.1 with DP and recipe unknown (#9422's log):
660 walks for 4,800 configurations, was 1,560.
"""
from __future__ import annotations

import itertools
import math
import time
from dataclasses import dataclass, field, fields

import numpy as np

from ..engines.base import Engine
from ..engines.materialize import Materialization, nz_nbytes
from ..engines.placement import Placement
from ..engines.registry import as_engine, families
from ..engines.stored import StoredIndex
from ..errors import AuditInputError
from ..memory.audit import MemoryAudit, run_memory_audit
from ..memory.ledger import experts_per_slot
from ..memory.materialized import _PLACEMENT_WORDING, reference_plan, row_cache_key
from ..model.classify import classify
from ..dtypes import DTYPE_BYTES
from ..parallel import ParallelPlan
from ..source import ModelSource
from .ranks import Observed

#: plan options a candidate may set (each engine's ``align_search_space`` says which it searches and in
#: what order: earlier values are the defaults, so the simpler configuration wins an exact tie)
PLAN_OPTIONS = ("role", "sp", "dsa_cp", "layer_sharding", "shared_expert_dp", "mtp", "nz_mode")


def engine_keys(pinned: dict, engines: tuple[str, ...] | None = None) -> tuple[str, ...]:
    """The engine profiles searched: the given ones, the pinned one, else every registered profile."""
    if engines:
        return tuple(engines)
    if "engine" in pinned:
        return (pinned["engine"],)
    return tuple(k for cls in families().values() for k in cls.profiles)


def search_space(keys: tuple[str, ...]) -> dict[str, tuple]:
    """The union of the searched engines' spaces, ``engine`` first (what the ticket says was searched)."""
    out: dict[str, tuple] = {"engine": keys}
    for key in keys:
        for dim, values in as_engine(key).align_search_space.items():
            out.setdefault(dim, values)
    return out


@dataclass(frozen=True)
class Candidate:
    engine: str
    plan: ParallelPlan

    @property
    def role(self) -> str:
        return self.plan.role

    def options(self) -> dict:
        p = self.plan
        return {"sp": p.sp, "dsa_cp": p.dsa_cp, "layer_sharding": list(p.layer_sharding),
                "shared_expert_dp": p.shared_expert_dp, "mtp_drafter": p.mtp, "nz_mode": p.nz_mode}

    def complexity(self) -> int:
        """How many options differ from their default (fewer wins a tie)."""
        p = self.plan
        return (int(p.role != "mixed") + int(p.dsa_cp is not None) + len(p.layer_sharding)
                + int(p.shared_expert_dp) + int(p.mtp) + int(p.nz_mode != 1))

    def describe(self) -> str:
        p = self.plan
        bits = [as_engine(self.engine).label, f"role {p.role}"]
        if p.sp:
            bits.append("SP")
        if p.dsa_cp:
            bits.append("DSA-CP")
        if p.layer_sharding:
            bits.append("layer sharding " + ",".join(p.layer_sharding))
        if p.shared_expert_dp:
            bits.append("shared-expert DP")
        if p.mtp:
            bits.append("MTP drafter")
        if p.nz_mode != 1:
            bits.append(f"nz_mode {p.nz_mode}")
        return ", ".join(bits)


@dataclass
class Fit:
    candidate: Candidate
    ranks_bytes: np.ndarray                       # [world]
    residual: dict[int, int]                      # observed ranks: predicted - observed
    max_abs: int
    max_rel: float
    score: float                                  # max over ranks of |residual| beyond print resolution
    equivalent: list[Candidate] = field(default_factory=list)
    grouping_ok: bool = True                      # the ranks it makes equal are the ranks the log shows equal

    def to_json(self) -> dict:
        c = self.candidate
        return {"engine": c.engine, "role": c.role, "options": c.options(), "label": c.describe(),
                "ranks_bytes": [int(v) for v in self.ranks_bytes],
                "max_abs_residual_bytes": int(self.max_abs), "max_rel_residual": float(self.max_rel),
                "residual_by_rank": {str(r): int(v) for r, v in self.residual.items()},
                "grouping_matches": self.grouping_ok,
                "equivalent": [{"engine": e.engine, "role": e.role, "options": e.options(), "label": e.describe()}
                               for e in self.equivalent]}


@dataclass
class MemoryFit:
    observed: Observed
    fits: list[Fit]                               # best first, equivalents folded
    searched: list[str]                           # dimensions searched
    evaluated: int                                # configurations enumerated
    materialized: int                             # distinct materializations
    seconds: float
    best_audit: MemoryAudit | None = None
    skipped: list[dict] = field(default_factory=list)   # {dimension, why}: not searched, from the shapes


class LedgerCache:
    """Everything about one model source that does not change between candidate configurations."""

    def __init__(self, source: ModelSource, drop_causes: frozenset[str] = frozenset()):
        self.source = source
        self.drop_causes = drop_causes      # bridge causes the log says are absent (MLAPO disabled)
        spec = source.spec
        ct = classify(source.table, spec.Lyr, source.desc)
        self.classified = (ct, StoredIndex(ct))
        self._rows: dict[tuple, dict] = {}
        self._totals: dict[tuple, np.ndarray] = {}
        self._walks: dict[tuple, RankBytes] = {}
        self.materialized = 0
        self.nz_padded: set[str] = set()        # tensors whose shape FRACTAL_NZ would pad (any pass so far)
        self._nz_checked: dict[tuple, bool] = {}

    def _key(self, plan: ParallelPlan, eng: Engine, pl: Placement) -> tuple:
        # configurations that agree on the engine's materializer fields, on the placement and on the
        # plan's sizes hold the same bytes (kv_role only words an MLAPO note)
        return (eng.materializer_key(),
                tuple((f.name, getattr(pl, f.name)) for f in fields(pl) if f.name not in _PLACEMENT_WORDING),
                plan.tp, plan.dp, plan.ep, plan.pp, plan.mtp, plan.nz_mode, plan.redundant_experts,
                plan.max_num_batched_tokens, plan.fused_mc2)

    def totals(self, plan: ParallelPlan, engine: str) -> np.ndarray:
        """Resident bytes per global rank for one configuration."""
        spec = self.source.spec
        eng = as_engine(engine)
        pl = eng.placement(spec, plan)
        key = self._key(plan, eng, pl)
        hit = self._totals.get(key)
        if hit is not None:
            return hit
        # plans that differ only in what the per-rank sum reads (DP, EP and EPLB with EP on and no layer
        # sharding; roles with equal placements) share one walk: ``memory.materialized.reference_plan``
        ref = reference_plan(plan, spec, eng)
        ref_pl = pl if ref == plan else eng.placement(spec, ref)
        walk = self._key(ref, eng, ref_pl)
        rb = self._walks.get(walk)
        if rb is None:
            rows = self._rows.setdefault(row_cache_key(spec, ref, eng), {})
            mat = eng.materializer(spec, ref, ref_pl, self.classified[1], self.source.desc, row_cache=rows).run()
            rb = self._walks[walk] = rank_bytes(mat, ref.pp, self.drop_causes)
            self._note_nz(mat)
            self.materialized += 1
        out = self._totals[key] = spread(rb, spec, plan)
        return out

    def _note_nz(self, mat: Materialization) -> None:
        """Record every resident tensor whose NZ layout depends on the NZ mode (rules with nz "quant"
        or "bf16") and whose shape NZ would pad: [..., m, n] to m a multiple of 16 and n of 32 bytes
        (``nz_nbytes``). Decided from the shapes the engine rules give this model."""
        for r in mat.rows:
            if r.nz not in ("quant", "bf16") or len(r.shape) < 2 or r.dtype == "F32":
                continue
            key = (r.shape, r.dtype)
            pads = self._nz_checked.get(key)
            if pads is None:
                item = DTYPE_BYTES[r.dtype]
                pads = nz_nbytes(r.shape, item) != int(math.prod(r.shape) * item)
                self._nz_checked[key] = pads
            if pads:
                self.nz_padded.add(f"{r.module}.{r.tensor} {list(r.shape)} {r.dtype}")

    def audit(self, plan: ParallelPlan, engine: str) -> MemoryAudit:
        return run_memory_audit(self.source, plan, engine, classified=self.classified)


@dataclass(frozen=True)
class RankBytes:
    """A materialization's resident bytes by where they sit: what the per-rank sum needs, small enough
    to keep for every walk of a search (the rows are not kept)."""

    stage: np.ndarray                   # per PP stage, on every rank of it
    experts: np.ndarray                 # per PP stage, one routed expert's bytes (times the rank's slots)
    owner: dict[tuple[int, int], float]  # (stage or -1, owner rank) -> bytes on that rank (layer sharding)
    every: float                        # on every rank
    first: float                        # on the first stage's ranks
    last: float                         # on the last stage's ranks


def rank_bytes(mat: Materialization, pp: int, drop_causes: frozenset[str] = frozenset()) -> RankBytes:
    """A materialization's bytes by placement; ``spread`` of them under a plan is what
    ``build_ledger(...).total`` gives, without the per-category matrices."""
    stage = np.zeros(pp)
    experts = np.zeros(pp)
    owner: dict[tuple[int, int], float] = {}
    every = first = last = 0.0
    sol = mat.stage_of_layer
    for r in mat.rows:
        b = r.bytes
        if not b or (drop_causes and r.cause in drop_causes):
            continue
        st = sol.get(r.layer, 0) if r.layer >= 0 else -1
        p = r.placement
        if p == "stage":
            if st < 0:
                every += b
            else:
                stage[st] += b
        elif p == "expert":
            if st < 0:
                experts += b
            else:
                experts[st] += b
        elif p == "owner":
            owner[(st, r.owner)] = owner.get((st, r.owner), 0.0) + b
        elif p == "first":
            first += b
        elif p == "last":
            last += b
        else:
            every += b
    return RankBytes(stage, experts, owner, every, first, last)


def spread(rb: RankBytes, spec, plan: ParallelPlan) -> np.ndarray:
    """Per global rank bytes of ``rb`` under ``plan`` (its EP slots and ranks per stage)."""
    pp, rps = plan.pp, plan.ranks_per_stage
    owner = np.zeros((pp, rps))
    for (st, o), b in rb.owner.items():
        if st < 0:
            owner[:, o] += b
        else:
            owner[st, o] += b
    slots = experts_per_slot(spec.E + plan.redundant_experts, plan.ep)[np.arange(rps)] if plan.ep > 1 \
        else np.ones(rps)
    per_stage = rb.stage[:, None] + rb.experts[:, None] * slots[None, :] + owner + rb.every
    per_stage[0] += rb.first
    per_stage[-1] += rb.last
    return per_stage.reshape(-1)


def candidates(spec, base: ParallelPlan, pinned: dict, engines: tuple[str, ...] | None = None):
    """Every configuration of each searched engine's space (``Engine.align_search_space``) that agrees
    with the pinned options and that the engine would actually run as asked (e.g. layer sharding only
    where the profile has it and it applies; ``Engine.align_skip``)."""
    for key in engine_keys(pinned, engines):
        eng = as_engine(key)
        prof = eng.profile
        dims = {k: ((pinned[k],) if k in pinned else v) for k, v in eng.align_search_space.items()}
        dims.update({k: (pinned[k],) for k in PLAN_OPTIONS if k in pinned and k not in dims})
        if "mtp" in dims and not spec.mtp_layers:
            dims["mtp"] = (False,)
        if "shared_expert_dp" in dims and not (base.ep > 1 and base.tp > 1) and "shared_expert_dp" not in pinned:
            dims["shared_expert_dp"] = (False,)
        yield from _engine_candidates(spec, base, pinned, eng, prof, dims)


def _engine_candidates(spec, base: ParallelPlan, pinned: dict, eng, prof, dims: dict):
    names = list(dims)
    for values in itertools.product(*(dims[n] for n in names)):
        opt = dict(zip(names, values))
        if eng.align_skip(opt, pinned):
            continue
        plan = base.with_(**{k: opt[k] for k in PLAN_OPTIONS if k in opt})
        try:
            pl = eng.placement(spec, plan)
        except AuditInputError:
            continue
        if tuple(pl.layer_sharding) != tuple(plan.layer_sharding) and "layer_sharding" not in pinned:
            continue     # the engine would ignore (part of) the request: not a distinct configuration
        yield Candidate(prof.name, plan)


def partition(values: np.ndarray, tol: np.ndarray) -> tuple[tuple[int, ...], ...]:
    """Positions grouped by value (equal within the print resolution), as a canonical tuple."""
    order = np.argsort(values, kind="stable")
    groups: list[list[int]] = []
    last = None
    for i in order:
        v = float(values[i])
        if last is None or abs(v - last) > 2 * float(tol[i]):
            groups.append([])
            last = v
        groups[-1].append(int(i))
    return tuple(sorted(tuple(sorted(g)) for g in groups))


def fit_memory(cache: LedgerCache, base: ParallelPlan, observed: Observed, pinned: dict,
               engines: tuple[str, ...] | None = None, top: int = 10) -> MemoryFit:
    """Rank configurations by how closely their per-rank bytes reproduce the observed ones."""
    if not observed.bytes_by_rank:
        raise AuditInputError("--log", "no per-worker weights line to explain ('Loading model weights took ...')")
    t0 = time.perf_counter()
    ranks = np.array(sorted(observed.bytes_by_rank))
    obs = np.array([observed.bytes_by_rank[r] for r in ranks], dtype=np.float64)
    tol = np.array([observed.resolution_by_rank[r] for r in ranks], dtype=np.float64)
    groups: dict[tuple, Fit] = {}
    obs_part = partition(obs, tol)
    n = 0
    # NZ padding is searched last and only when some resident shape is not already NZ-aligned: for a
    # model whose every padded dimension is aligned, nz_mode 0/1/2 hold the same bytes
    space = search_space(engine_keys(pinned, engines))
    nz_values = space.get("nz_mode", ())
    nz_free = "nz_mode" not in pinned and len(nz_values) > 1
    passes = [dict(pinned, nz_mode=nz_values[0])] if nz_free else [pinned]
    skipped: list[dict] = []
    k = 0
    while k < len(passes):
        for cand in candidates(cache.source.spec, base, passes[k], engines):
            n += 1
            tot = cache.totals(cand.plan, cand.engine)
            key = tuple(np.round(tot).astype(np.int64))
            g = groups.get(key)
            if g is not None:
                if cand.complexity() < g.candidate.complexity():
                    g.equivalent.insert(0, g.candidate)
                    g.candidate = cand
                else:
                    g.equivalent.append(cand)
                continue
            res = tot[ranks] - obs
            groups[key] = Fit(cand, tot, {int(r): int(round(v)) for r, v in zip(ranks, res)},
                              int(round(np.abs(res).max())), float((np.abs(res) / np.maximum(obs, 1)).max()),
                              float(np.maximum(np.abs(res) - tol, 0).max()),
                              grouping_ok=partition(tot[ranks], tol) == obs_part)
        if k == 0 and nz_free:
            if cache.nz_padded:
                passes += [dict(pinned, nz_mode=v) for v in nz_values[1:]]
            else:
                skipped.append({"dimension": "nz_mode", "why": (
                    "no resident tensor of this model has a shape FRACTAL_NZ would pad (every 2-D+ weight is "
                    "already a multiple of 16 rows and 32 bytes per row), so nz_mode 0/1/2 hold the same bytes")})
        k += 1
    # rank groupings are part of the score: at equal residual, the configuration whose ranks differ where
    # the log's ranks differ wins
    fits = sorted(groups.values(), key=lambda f: (f.score, not f.grouping_ok, f.candidate.complexity(), f.max_abs))
    seconds = time.perf_counter() - t0
    searched = [k for k in space if k not in pinned and not (k == "engine" and engines)
                and k not in {x["dimension"] for x in skipped}]
    out = MemoryFit(observed, fits[:top], searched, n, cache.materialized, seconds, skipped=skipped)
    if fits:
        out.best_audit = cache.audit(fits[0].candidate.plan, fits[0].candidate.engine)
    return out
