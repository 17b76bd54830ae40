"""Public entry point of the performance model: ``evaluate(deployment, workload) -> PerfResult``
(a ``context.DeploymentContext``: model, plan, engine, recipe, device).

Re-evaluation is pure kernel work: the layer program is cached per (model, plan, engine, recipe,
phase, graph) and the device is turned into arrays on every call, so calibration can vary the
efficiency constants freely. Per-op dictionaries are built only when a report asks for them.
"""
from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from auditor_kernels import kinds as K

from ..context import DeploymentContext
from ..engines.registry import as_engine
from ..errors import AuditInputError
from ..parallel import ParallelPlan
from .program import GRAPHS, Program, build_program
from ..model.recipes import check_recipe

PHASES = ("prefill", "decode")
CONTEXT_KINDS = frozenset(K.CONTEXT_KINDS)    # op kinds whose cost grows with the cached context


@dataclass(frozen=True)
class Workload:
    """What one DP rank processes. Prefill: ``batch`` requests of ``tokens`` new tokens each on
    top of ``context`` cached tokens. Decode: ``batch`` requests each verifying 1 + ``mtp``
    tokens against ``context`` cached tokens."""

    phase: str = "prefill"
    tokens: int = 4096
    context: int = 0
    batch: int = 1
    mtp: int = 0
    acceptance: float = 1.0     # per-draft MTP acceptance (the CLI's default: cli.options.DEFAULT_ACCEPTANCE)

    def validate(self) -> "Workload":
        if self.phase not in PHASES:
            raise AuditInputError("--phase", f"must be prefill or decode, got {self.phase!r}")
        for k in ("tokens", "batch"):
            if getattr(self, k) < 1:
                raise AuditInputError(f"--{k}", "must be at least 1")
        for k in ("context", "mtp"):
            if getattr(self, k) < 0:
                raise AuditInputError(f"--{k}", "must not be negative")
        if not 0.0 < self.acceptance <= 1.0:
            raise AuditInputError("--mtp-acceptance", f"must be in (0, 1], got {self.acceptance}")
        return self

    def stream_tokens(self) -> tuple[int, int, int, int]:
        """Token counts of the kernel's streams (main, later MTP pass, lm_head rows, a block drafter's block)."""
        dec = self.phase == "decode"
        q0 = 1 + self.mtp if dec else self.tokens
        return self.batch * q0, self.batch, self.batch * (1 + self.mtp if dec else 1), self.batch * self.mtp

    def stream_rows(self) -> list[tuple[int, int, int]]:
        """(requests, queries per request, context) per stream, as kernels.stream_table."""
        dec = self.phase == "decode"
        q0 = 1 + self.mtp if dec else self.tokens
        return [(self.batch, q0, self.context), (self.batch, 1, self.context + q0),
                (self.batch, 1 + self.mtp if dec else 1, self.context), (self.batch, self.mtp, self.context + q0)]


@dataclass
class PhaseResult:
    """One phase of one evaluation: kernel outputs plus the program they belong to."""

    phase: str
    workload: Workload
    program: Program
    op_out: np.ndarray      # [n, kinds.N_OUT]: columns kinds.OUT_* (tokens, mma, ..., time, count, bound)
    co_out: np.ndarray      # [m, kinds.N_CO_OUT]: columns kinds.CO_* (bytes, time, count)
    time_s: float                                      # ops + collectives + host, all steps of the phase
    host_s: float = 0.0                                # host time of the steps (auditor.perf.host)
    sources: list[str] = field(default_factory=list)   # per op row
    steps: list[dict] = field(default_factory=list)    # engine steps (prefill chunks): tokens, context, ms
    _cache: dict = field(default_factory=dict, repr=False)

    @property
    def time_ms(self) -> float:
        return self.time_s * 1e3

    @property
    def flops(self) -> float:
        o = self.op_out
        return float(((o[:, K.OUT_MMA] + o[:, K.OUT_VEC]) * o[:, K.OUT_COUNT]).sum())

    @property
    def bytes(self) -> float:
        o = self.op_out
        return float((o[:, K.OUT_BYTES] * o[:, K.OUT_COUNT]).sum())

    @property
    def comm_ms(self) -> float:
        c = self.co_out
        return float((c[:, K.CO_TIME] * c[:, K.CO_COUNT]).sum()) * 1e3

    @property
    def tokens(self) -> float:
        """Tokens this phase consumes (prefill) or emits (decode: 1 + a + ... + a^K per request with
        per-draft acceptance a; every draft accepted by default) per DP rank."""
        w = self.workload
        if self.phase == "prefill":
            return w.batch * w.tokens
        from .mtp import expected_tokens
        return w.batch * expected_tokens(w.mtp, w.acceptance)

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.time_s if self.time_s > 0 else 0.0

    @property
    def host_ms(self) -> float:
        return self.host_s * 1e3

    def totals(self) -> dict[str, Any]:
        return {"time_ms": self.time_ms, "flops": self.flops, "bytes": self.bytes,
                "comm_ms": self.comm_ms, "host_ms": self.host_ms, "tokens": self.tokens,
                "tokens_per_s": self.tokens_per_s}

    # -- expansion to one entry per op per layer ---------------------------------------------
    def _instances(self, mult: int, layers: list[int]) -> list[tuple[int | None, int | None]]:
        """(layer, pass) pairs an op row stands for in the expanded graph."""
        if mult == K.MULT_ALWAYS:
            return [(L, None) for L in layers] if layers else [(None, None)]
        if mult == K.MULT_FIRST_MTP:
            return [(L, 1) for L in layers] if self.workload.mtp >= 1 else []
        return [(L, p) for L in layers for p in range(2, self.workload.mtp + 1)]

    def op_entries(self, seq: bool = False) -> list[dict[str, Any]]:
        """One dict per op per layer (per MTP pass) in the expanded graph; ``seq`` adds the
        emission index used to order a timeline. Cached: reports call it several times."""
        key = ("ops", seq)
        if key not in self._cache:
            self._cache[key] = self._op_entries(seq)
        return self._cache[key]

    def op_entry(self, i: int) -> dict[str, Any]:
        """The layer-independent fields of op row ``i``."""
        op, o = self.program.ops[i], self.op_out[i]
        base = self.workload.stream_tokens()
        t_in, t_out = int(o[K.OUT_TOKENS]), op.tok_out.count(base[op.tok_out.stream], self.program.tp)
        _, q, c = self.workload.stream_rows()[op.tok.stream]
        rows = t_in * int(op.params[K.GMM_TOPK]) if op.kind == K.GMM else 0
        sym = {"T": t_in, "U": t_out, "K": q + c, "R": rows}
        if op.kind == K.ZERO:
            bound = "layout"
        else:
            bound = "compute" if o[K.OUT_BOUND] > 0.5 else "memory"
        return {
            "name": op.name, "kind": op.cls, "tokens": t_in, "layout": op.layout,
            "shape_in": _shapes(op.shapes_in, sym), "shape_out": _shapes(op.shapes_out, sym),
            "dtype": op.dtype, "flops": float(o[K.OUT_MMA] + o[K.OUT_VEC]), "mma_flops": float(o[K.OUT_MMA]),
            "vector_flops": float(o[K.OUT_VEC]), "vector_sort_ops": float(o[K.OUT_SORT]),
            "bytes": float(o[K.OUT_BYTES]), "weight_bytes": float(op.weight),
            "context_dependent": op.kind in CONTEXT_KINDS,
            "bound": bound, "time_us": float(o[K.OUT_TIME]) * 1e6,
            "source": self.sources[i] if self.sources else "analytic",
            "module": op.module, "kernel": op.kernel,
        }

    def _op_entries(self, seq: bool) -> list[dict[str, Any]]:
        out = []
        for i, op in enumerate(self.program.ops):
            inst = self._instances(op.mult, op.layers)
            if not inst:
                continue
            rec = self.op_entry(i)
            if seq:
                rec["seq"] = op.seq
            for layer, p in inst:
                e = {"layer": layer, **rec}
                if p is not None:
                    e["pass"] = p
                out.append(e)
        return out

    def collective_entries(self, seq: bool = False) -> list[dict[str, Any]]:
        key = ("colls", seq)
        if key not in self._cache:
            self._cache[key] = self._collective_entries(seq)
        return self._cache[key]

    def _collective_entries(self, seq: bool) -> list[dict[str, Any]]:
        out = []
        base = self.workload.stream_tokens()
        tp = self.program.tp
        for j, c in enumerate(self.program.colls):
            o = self.co_out[j]
            rec = {"kind": c.kind, "group": c.group, "tensor": c.tensor,
                   "tokens": c.tok.count(base[c.tok.stream], tp), "bytes": float(o[K.CO_BYTES]),
                   "time_us": float(o[K.CO_TIME]) * 1e6, "after": c.after}
            if seq:
                rec["seq"] = c.seq
            for layer, p in self._instances(c.mult, c.layers):
                e = {"layer": layer, **rec}
                if p is not None:
                    e["pass"] = p
                out.append(e)
        return out

    def to_json(self) -> dict[str, Any]:
        return {"totals": self.totals(), "steps": self.steps, "ops": self.op_entries(),
                "collectives": self.collective_entries()}


def _shapes(shapes: tuple, sym: dict[str, int]) -> list[list]:
    """Substitute the token symbols of ops.Shape by numbers."""
    return [[sym.get(d, d) if isinstance(d, str) else d for d in s] for s in shapes]


@dataclass
class PerfResult:
    model: str
    plan: ParallelPlan
    engine: str
    recipe: str
    device: str
    graph: str
    phases: dict[str, PhaseResult]
    notes: list[str] = field(default_factory=list)
    hbm: dict | None = None         # the rank's HBM budget for this workload (auditor.runtime)
    growth: dict | None = None      # ms per op class across contexts (auditor.perf.growth), on request

    def to_json(self) -> dict[str, Any]:
        first = next(iter(self.phases.values()))
        head = {"model": self.model, "plan": self.plan.describe(), "tp": self.plan.tp, "dp": self.plan.dp,
                "ep": self.plan.ep, "engine": self.engine, "quant": self.recipe, "device": self.device,
                "graph": self.graph, "weights": first.program.weight_source, "notes": self.notes}
        if self.hbm is not None:
            head["hbm"] = self.hbm
        if self.growth is not None:
            head["context_growth"] = self.growth
        if len(self.phases) == 1:
            (name, ph), = self.phases.items()
            return {**head, "phase": name, "workload": ph.workload.__dict__, **ph.to_json()}
        return {**head, **{name: {"workload": ph.workload.__dict__, **ph.to_json()}
                           for name, ph in self.phases.items()}}


def cached_program(dep: DeploymentContext, phase: str, graph: str, mtp_enabled: bool,
                   cache: Any = "bf16") -> Program:
    """The layer program is independent of the workload numbers and of the device (cached without it), and
    of the drafter's K where the resident bytes are (``memory.materialized.drafter_k_free``: K enters
    the kernel's keys, not the program)."""
    from ..memory.materialized import drafter_k_free
    dep = dep.bare
    plan = drafter_k_free(dep.spec, dep.plan, dep.engine)
    return _cached_program(dep if plan is dep.plan else dep.with_plan(plan), phase, graph, mtp_enabled, cache)


#: a 128-die plan builds ~220 programs while estimating (prefill and decode of every instance plan) and its
#: simulation reads the shortlisted ones again: 64 entries evicted those and rebuilt them under the step-cost lock
@functools.lru_cache(maxsize=512)
def _cached_program(dep: DeploymentContext, phase: str, graph: str, mtp_enabled: bool, cache: Any) -> Program:
    return build_program(dep, phase, graph, mtp_enabled, cache)


cached_program.cache_clear = _cached_program.cache_clear        # type: ignore[attr-defined]  (benchmarks: a cold build)


def prefill_chunks(workload: Workload, chunk: int) -> list[tuple[int, int, int, int]]:
    """The engine steps of a phase: ``(tokens, context, batch, repeats)``. vLLM's scheduler gives the
    waiting prompts at most ``max_num_batched_tokens`` per step (``scheduler.py:650-669``;
    serving-facts §1.1), so a prefill is ``chunk_plan``'s steps; decode is one step."""
    w = workload
    return [(t, w.context + c, b, r) for t, c, b, r in chunk_plan(w.tokens, w.batch, chunk)] \
        if w.phase == "prefill" else [(w.tokens, w.context, w.batch, 1)]


def chunk_plan(tokens: int, batch: int, chunk: int) -> list[tuple[int, int, int, int]]:
    """``(tokens, context offset, batch, repeats)`` steps of ``batch`` prompts of ``tokens`` under a
    ``chunk``-token budget: whole prompts packed ``chunk // tokens`` to a step when a prompt fits,
    else each prompt in chunks of ``chunk`` in turn (its tail is not packed with the next prompt)."""
    if tokens <= chunk:
        per = max(min(chunk // tokens, batch), 1)
        out = [(tokens, 0, per, batch // per)]
        if batch % per:
            out.append((tokens, 0, batch % per, 1))
        return out
    out, done = [], 0
    while done < tokens:
        n = min(chunk, tokens - done)
        out.append((n, done, 1, batch))
        done += n
    return out


def _one_step(prog: Program, plan: ParallelPlan, workload: Workload, device: Any, table: Any,
              dv: np.ndarray, grp: np.ndarray) -> "PhaseResult":
    from auditor_kernels.perf_core import evaluate_program   # lazy: numba import is slow
    op_i, op_f, op_m, co_i, co_f, co_m = prog.arrays()
    op_out = np.empty((op_i.shape[0], K.N_OUT))
    co_out = np.empty((co_i.shape[0], K.N_CO_OUT))
    dec = 1 if workload.phase == "decode" else 0
    total = evaluate_program(op_i, op_f, op_m, co_i, co_f, co_m, dec, float(plan.tp), float(workload.tokens),
                             float(workload.context), float(workload.batch), float(workload.mtp), dv, grp,
                             op_out, co_out)
    res = PhaseResult(workload.phase, workload, prog, op_out, co_out, total, 0.0)
    if table is not None:
        _apply_measured(res, table)
    return res


#: op_out / co_out columns that add up over the chunks of a prefill
_ADD_OUT = [K.OUT_TOKENS, K.OUT_MMA, K.OUT_VEC, K.OUT_BYTES, K.OUT_T_COMPUTE, K.OUT_T_MEMORY, K.OUT_TIME, K.OUT_SORT]
_ADD_CO = [K.CO_BYTES, K.CO_TIME]


def evaluate_phase(dep: DeploymentContext, workload: Workload, graph: str = "expanded", table: Any = None,
                   cache: Any = "bf16", chunk: int | None = None, host: np.ndarray | None = None,
                   graph_tokens: int = -1, draft_eager: bool = False, async_scheduling: bool = False) -> PhaseResult:
    """One phase: decode = one graph step (eager when its ``batch x (1 + K)`` tokens exceed
    ``graph_tokens``, the largest captured size; -1 = no limit); prefill = its chunk steps (``chunk``
    tokens per step, by default the plan's ``max_num_batched_tokens``), each an eager step with its own
    host time. Op and collective rows are summed over the chunks. Host time is the serving host model
    (``auditor.perf.host``), the one ``audit bench`` uses; ``host`` overrides the device's constants."""
    from .device import group_table, kernel_vector
    from .host import host_model
    spec, plan, engine, device = dep.spec, dep.plan, dep.engine, dep.device
    workload.validate()
    dep = dep.with_(recipe=check_recipe(dep.recipe))
    if graph not in GRAPHS:
        raise AuditInputError("--graph", f"must be one of {', '.join(GRAPHS)}")
    if workload.mtp and not spec.mtp_layers:
        raise AuditInputError("--mtp", f"{spec.name} has no MTP layer (num_nextn_predict_layers = 0)")
    # the MTP passes are always in the program; their multiplicity (K, K-1 or 0) is a kernel input
    from .program import kernel_path_of
    cache = kernel_path_of(engine, cache, device)      # the engine's kernels of this cache on the device's generation
    prog = cached_program(dep, workload.phase, graph, True, cache)
    other = cached_program(dep, "decode" if workload.phase == "prefill" else "prefill", graph, True, cache)
    pre, dec = (prog, other) if workload.phase == "prefill" else (other, prog)
    # the launch's speculative_config enforce_eager and --async-scheduling, as bench's host model reads them
    hm = host_model(spec, pre, dec, workload.mtp, device, host, engine=engine, draft_eager=draft_eager,
                    async_scheduling=async_scheduling)
    dv, grp = kernel_vector(device), group_table(device, plan)
    steps = prefill_chunks(workload, int(chunk or plan.max_num_batched_tokens))
    res = None
    log = []
    for tokens, context, batch, rep in steps:
        wl = Workload(workload.phase, tokens, context, batch, workload.mtp, workload.acceptance)
        one = _one_step(prog, plan, wl, device, table, dv, grp)
        if workload.phase == "prefill":
            eager = True
            h = hm.step_s(True, tokens * batch, 0.0)
        else:
            dtok = batch * (1 + workload.mtp)
            eager = 0 <= graph_tokens < dtok
            h = hm.step_s(eager, 0.0, dtok)
        if async_scheduling:
            h -= hm.overlap_s(eager, one.time_s)
        # a decode step's tokens are its 1 + K per request (Workload.tokens is the prompt length there)
        log.append({"tokens": tokens if workload.phase == "prefill" else 1 + workload.mtp, "context": context,
                    "batch": batch, "repeats": rep,
                    "device_ms": one.time_s * 1e3, "host_ms": h * 1e3})
        if res is None:
            res = one
            res.op_out[:, _ADD_OUT] *= rep
            res.co_out[:, _ADD_CO] *= rep
            res.time_s = (one.time_s + h) * rep
            res.host_s = h * rep
            srcs = list(one.sources)
        else:
            res.op_out[:, _ADD_OUT] += rep * one.op_out[:, _ADD_OUT]
            res.co_out[:, _ADD_CO] += rep * one.co_out[:, _ADD_CO]
            res.time_s += (one.time_s + h) * rep
            res.host_s += h * rep
            srcs = [a if a == b else "interpolated" for a, b in zip(srcs, one.sources)] if srcs else []
    o = res.op_out
    o[:, K.OUT_BOUND] = (o[:, K.OUT_T_COMPUTE] >= o[:, K.OUT_T_MEMORY]).astype(np.float64)
    res.workload = workload
    res.sources = srcs
    res.steps = log
    res._cache.clear()
    return res


def evaluate(dep: DeploymentContext, workload: Workload, graph: str = "expanded", table: Any = None,
             cache: Any = "bf16") -> PerfResult:
    """Evaluate one phase (``workload.phase``) and return a PerfResult (JSON via ``to_json``)."""
    ph = evaluate_phase(dep, workload, graph, table, cache)
    return PerfResult(dep.spec.name, dep.plan, dep.engine.key, dep.recipe, dep.device_name,
                      graph, {workload.phase: ph}, result_notes(ph.program, dep.plan, workload.mtp, dep.engine))


def result_notes(prog: Program, plan: ParallelPlan, mtp: int, engine: str | None = None) -> list[str]:
    """Assumptions a reader of the numbers must know (engine version resolution, layout resolution
    plus model choices)."""
    version_note = as_engine(engine).note if engine else None
    notes = [version_note] if version_note else []
    notes += list(prog.layout.assumptions) if prog.layout else []
    if mtp and prog.drafter == "dspark":
        notes.append(f"DSpark: the block drafter runs once per step (the target layers' hidden states of every "
                     f"token into each draft layer's window cache, then {mtp} query tokens per request through "
                     f"the draft layers, then {mtp} Markov-head rounds), eager; decode tokens/s counts "
                     "1 + p1 + ... + pK tokens per step (--mtp-acceptance)")
    elif mtp:
        notes.append(f"MTP: the drafter layer runs {mtp}x per step (pass 1 on the main tokens, later passes "
                     "one token per request); decode tokens/s counts 1 + a + ... + a^K tokens per step "
                     "(--mtp-acceptance a)")
    if plan.pp > 1:
        notes.append("PP > 1: all stages' layers are summed (one micro-batch latency); no pipeline "
                     "overlap and no stage-to-stage transfer is modelled")
    notes.append("ops and collectives are serialised (no compute/communication overlap)")
    return notes


def _apply_measured(res: PhaseResult, table: Any) -> None:
    """Replace analytic op times by measured/interpolated kernel times where the table covers
    every key of the op; the phase total is recomputed."""
    from .keys import kernel_name, op_keys
    srcs = []
    for i, op in enumerate(res.program.ops):
        keys = op_keys(op, res.op_out[i], res.workload)
        hits = [table.lookup(kernel_name(op), k) for k in keys]
        if not hits or any(h is None for h in hits):
            srcs.append("analytic")
            continue
        res.op_out[i, K.OUT_TIME] = sum(h[0] for h in hits) * 1e-6
        srcs.append("measured" if all(h[1] == "measured" for h in hits) else "interpolated")
    res.sources = srcs
    res._cache.clear()
    o, c = res.op_out, res.co_out
    res.time_s = float((o[:, K.OUT_TIME] * o[:, K.OUT_COUNT]).sum() + (c[:, K.CO_TIME] * c[:, K.CO_COUNT]).sum()
                       + res.host_s)


__all__ = ["Workload", "PerfResult", "PhaseResult", "evaluate", "evaluate_phase", "PHASES"]
