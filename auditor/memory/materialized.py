"""One Materializer pass per distinct engine-side layout, shared by every caller that works from a
recipe (perf's weight bytes, the runtime budget's W, ``audit plan``).

Why: ``audit plan`` asks for ~40-100 (TP, DP, SP, role, MTP) plans and each used to pay a full
pass plus a ledger (~60-90 ms). The rows a pass emits depend on DP only through the routed experts,
and there only through the ledger: with EP on an expert row holds ONE expert's bytes (placement
``expert``) and the ledger multiplies it by the rank's ``experts_per_slot(E + R, EP)``; no other
row names a rank unless layer sharding assigns owners (``layer % (DP x TP)``). So every DP size and
every EPLB redundancy of an EP-on plan without layer sharding shares the pass of one reference
plan; the ledger is then built with the real plan. EP off (experts TP-sharded over DP x TP) and
layer sharding keep DP in the key. Roles whose placement decisions coincide (on main a P node and
a mixed node both keep o_proj TP-sharded with the gather pool) share a pass too.
``tests/test_materialized_cache.py`` proves the equality against direct passes, including uneven
EPLB and PP.

Passes also share the materializer's per-module row cache: a module's rows depend, besides the
module's own arguments (its key), only on the model dtype, the NZ mode and the version-row fields
the engine declares its materializer reads (``Engine.materializer_key``): a new field there cannot
silently reuse rows cached for another version.
"""
from __future__ import annotations

import functools
from dataclasses import fields, replace
from typing import Any

from ..engines.materialize import Materialization
from ..context import DeploymentContext
from ..engines.registry import EngineLike, as_engine
from ..model.spec import ModelSpec
from ..parallel import ROLES, ParallelPlan
from .ledger import RowArrays, concat_rows, row_arrays, rows_arrays

_ROW_CACHES: dict[tuple, dict] = {}


#: Placement fields that only word notes, or that the materializer reads only through the engine's
#: ``materializer_plan_key`` (kv_role: vLLM-Ascend's MLAPO release on a decode node)
_PLACEMENT_WORDING = {"assumptions", "findings", "kv_role"}


def placement_key(spec: ModelSpec, plan: ParallelPlan, engine: EngineLike) -> tuple:
    eng = as_engine(engine)
    pl = eng.placement(spec, plan)
    extra = getattr(eng, "materializer_plan_key", None)
    return tuple(getattr(pl, f.name) for f in fields(pl) if f.name not in _PLACEMENT_WORDING) + (
        extra(plan, pl) if extra is not None else ())


def reference_plan(plan: ParallelPlan, spec: ModelSpec | None = None, engine: EngineLike | None = None) -> ParallelPlan:
    """The plan whose Materializer pass holds the same bytes as ``plan``'s: DP (and with it EP) and
    the redundant expert count normalised when only the ledger's expert multipliers depend on
    them; with ``spec`` and ``engine``, also the first role (mixed, prefill, decode) whose placement
    decisions equal this role's (the materializer reads the role only through the placement), and the
    drafter's K dropped where nothing resident depends on it (``drafter_k_free``)."""
    ref = plan if spec is None or engine is None else drafter_k_free(spec, plan, engine)
    if plan.ep_on and not plan.layer_sharding:
        ref_dp = 2 if plan.tp == 1 else 1          # the smallest DP that keeps EP = DP x TP on
        ref = replace(ref, dp=ref_dp, ep=plan.tp * ref_dp, redundant_experts=0)
    if spec is not None and engine is not None:
        own = placement_key(spec, ref, engine)
        for role in ROLES:
            if role == ref.role:
                break
            other = replace(ref, role=role)
            if placement_key(spec, other, engine) == own:
                return other
    return ref


def drafter_k_free(spec: ModelSpec, plan: ParallelPlan, engine: EngineLike) -> ParallelPlan:
    """``plan`` with ``num_speculative_tokens`` 0 when the engine declares the resident bytes of ``spec``
    independent of the drafter's K (``Engine.weights_by_drafter_k``; DeepSeek-V4's RoPE buffers are not)
    and the placement is the same, else ``plan`` itself. Why: plan's simulation runs each deployment at
    its own K, and every K paid its own Materializer pass and layer programs for the same bytes and ops
    (the drafter's passes are the kernel's multipliers at K: ``perf.program``)."""
    if not plan.num_speculative_tokens:
        return plan
    eng = as_engine(engine)
    if eng.weights_by_drafter_k(spec):
        return plan
    other = replace(plan, num_speculative_tokens=0)
    return other if eng.placement(spec, other) == eng.placement(spec, plan) else plan


@functools.lru_cache(maxsize=128)
def _materialize(ref: DeploymentContext) -> tuple[Materialization, RowArrays]:
    """The pass of ``ref`` (a bare deployment under its reference plan)."""
    spec, plan, eng = ref.spec, ref.plan, ref.engine
    # the layer walk is shared by every max_num_batched_tokens it does not read; the tail is the plan's own
    walked = _walked(ref.with_plan(tokens_free(spec, plan, eng)))
    mat = walked.fork(plan, eng.placement(spec, plan)).finish()
    return mat, _arrays_after(walked, mat)


def _arrays_after(walked: Any, mat: Materialization) -> RowArrays:
    """``row_arrays(mat)`` for a pass finished from ``walked``: the walk's rows come first, unchanged (the
    tail only appends), so their columns are built once per walk and joined with the tail's, when the
    tail names no decoder layer the walk does not (else, and if the head is not the walk's rows, in full)."""
    n = len(walked.rows)
    head, tail = mat.rows[:n], mat.rows[n:]
    head_layers = walked.__dict__.get("_layers")
    if head_layers is None:
        head_layers = walked._layers = sorted({r.layer for r in walked.rows if r.layer >= 0})
    if any(r.layer >= 0 and r.layer not in head_layers for r in tail) or not all(
            a is b for a, b in zip(head, walked.rows)):
        return row_arrays(mat)
    cols = walked.__dict__.get("_head_arrays")
    if cols is None:
        cols = walked._head_arrays = rows_arrays(walked.rows, walked._stage_of, head_layers)
    return concat_rows(cols, rows_arrays(tail, mat.stage_of_layer, head_layers))


def tokens_free(spec: ModelSpec, plan: ParallelPlan, engine: EngineLike) -> ParallelPlan:
    """The plan whose layer walk (``Materializer.walk_layers``) is ``plan``'s: ``max_num_batched_tokens``
    at its default when the placement key (the placement's decisions and what the engine's materializer
    reads from the plan besides them, e.g. MLAPO's release) is equal; else ``plan``. Why: a P node's
    chunk budget sizes only the model-wide buffers (``finish``), yet each chunk searched paid a full pass.
    A declared family (DeepSeek-V4) walks its buffers with its layers: its plan is kept."""
    from ..model.families import declared
    norm = replace(plan, max_num_batched_tokens=ParallelPlan.max_num_batched_tokens)
    if norm == plan or declared(spec) is not None or placement_key(spec, norm, engine) != placement_key(
            spec, plan, engine):
        return plan
    return norm


@functools.lru_cache(maxsize=64)
def _walked(ref: DeploymentContext) -> Any:
    """A Materializer of ``ref`` after its layer walk, to ``fork`` for plans that differ only in the tail."""
    from .api import synthesized_stored
    spec, plan, eng = ref.spec, ref.plan, ref.engine
    stored, desc = synthesized_stored(spec, ref.recipe)
    cache = _ROW_CACHES.setdefault(row_cache_key(spec, plan, eng), {})
    return eng.materializer(spec, plan, eng.placement(spec, plan), stored, desc, row_cache=cache).walk_layers()


def reference_of(dep: DeploymentContext) -> DeploymentContext:
    """``dep`` without its device under the reference plan of its plan (``reference_plan``)."""
    return dep.bare.with_plan(reference_plan(dep.plan, dep.spec, dep.engine))


def row_cache_key(spec: ModelSpec, plan: ParallelPlan, engine: EngineLike) -> tuple:
    """What a module's resident rows depend on besides the module's own arguments."""
    return (spec.pd, plan.nz_mode) + as_engine(engine).materializer_key()


def materialize(dep: DeploymentContext) -> tuple[Materialization, RowArrays]:
    """(the rows of ``dep.plan``'s Materializer pass for a recipe's synthesized checkpoint, their ledger
    columns), for their bytes: the pass's assumptions and findings may word the reference's role.
    Shared and cached: callers must not modify them. Build the ledger with ``dep.plan`` itself (and its
    own placement), never with the reference."""
    dep.plan.validate()
    return _materialize(reference_of(dep))
