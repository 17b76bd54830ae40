"""Search deployments: aggregated and prefill/decode-disaggregated, memory-feasible, SLA-ranked.

Throughput model (per DP rank; all times from the batched perf kernel ``sweep_grid``):

* ``t_pre``  = prefill time of one request of ``isl`` tokens (batch 1, empty cache) = TTFT.
* ``t_step`` = one decode step of ``B`` requests verifying ``1+K`` tokens at the mean context
  ``isl + osl/2`` (steady state). With per-draft acceptance ``a`` a step yields
  ``E = 1 + a + ... + a^K`` tokens per request (a draft counts only if all before it were accepted).
* Aggregated (role mixed): while ``B`` requests decode their ``osl`` tokens (``osl/E`` steps), ``B``
  new prompts arrive and each prefill stalls the batch. Per request lifetime
  ``cycle = (osl/E)·t_step + B·t_pre``; TPOT = cycle/osl (stalls included); output tokens/s per
  DP rank = B·osl/cycle; per die = that / TP (replicas of the instance scale it, not the ratio).
* Disaggregated: a P instance (role prefill: kv_producer behaviour, e.g. o_proj replicated on a
  v0.18 P node) serves ``DP/t_pre`` requests/s; a D instance (role decode) ``DP·B·E/(t_step·osl)``
  requests/s with TPOT = t_step/E. ``n_p`` P and ``n_d`` D instances within the die budget serve
  ``min(n_p·r_p, n_d·r_d)`` requests/s; tokens/s per die divides ``osl`` times that by the dies used.
  The KV transfer between them is not timed.

A candidate is kept only when its memory fits (weights + activation + non-torch inside the budget
and ``B`` full-length requests in the KV pool; ``auditor.runtime``); candidates meeting TTFT and TPOT
are ranked by output tokens/s per die.
"""
from __future__ import annotations

import itertools
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from ..perf.acceptance import value_text
from ..perf.mtp import expected_tokens
from ..engines.registry import as_engine
from ..errors import AuditInputError
from ..parallel import ParallelPlan
from ..runtime.budget import usable_total
from ..runtime.feasibility import grid_budget, margin_util
from ..runtime.weights import plan_weights
from ..context import DeploymentContext
from .verdict import disagg_verdict
from .workload import PlanWorkload

GiB = 1 << 30
DEFAULT_TPS = (1, 2, 4, 8, 16)
DEFAULT_BATCHES = (1, 2, 4, 8, 16, 24, 32, 48, 64, 96, 128)
DEFAULT_MTPS = (0, 1, 2, 3)
#: gpu-memory-utilization of the engine's own deployment docs (DeepSeek-V3.2 aggregated tutorial, GLM-5 D nodes)
DEFAULT_UTIL = 0.92
#: P-node chunk budgets searched (4096: GLM-5 P/D tutorial; 8192: nightly N3; 32560: DeepSeek-V3.2 64k tutorial)
DEFAULT_PREFILL_TOKENS = (4096, 8192, 16384, 32560)
#: P max_num_seqs searched (the largest whose full prompts fit the KV pool is kept)
P_SEQS = (1, 2, 4, 8, 16)
#: inputs from this length on search DCP (decode context parallel, DCP = TP) on decode instances
DCP_FROM_ISL = 32768
#: P/D rows built when every one is listed (--csv, --png, --simulate 0): ~1.5 kB each
MAX_LISTED_ROWS = 1_000_000
#: held around every call of the parallel perf kernel (``sweep_grid``) while the shortlist may simulate on
#: other threads (``planner.simulate.Shortlist``): numba's threading layer must not be entered from two
#: threads at once
KERNEL_LOCK = threading.Lock()


@dataclass
class PlanSpace:
    dies: list[int]
    tps: tuple[int, ...] = DEFAULT_TPS
    batches: tuple[int, ...] = DEFAULT_BATCHES
    mtps: tuple[int, ...] = DEFAULT_MTPS
    sps: tuple[bool, ...] = (True, False)
    util: float = DEFAULT_UTIL          # the value being searched (one of ``utils``)
    kv_cache_dtype: str = "bf16"
    acceptance: Any = 0.7               # per-draft a, or a per-position Acceptance (perf.acceptance.plan_value)
    disaggregated: bool = True
    utils: tuple[float, ...] = ()       # gpu-memory-utilization values searched; () -> (util,)
    prefill_tokens: tuple[int, ...] = DEFAULT_PREFILL_TOKENS    # P max_num_batched_tokens searched
    prefill_mtp: int = 1                # the drafter on P nodes (K = 1, as the engine's P/D tutorials run)
    drafter: str = "mtp"                # the checkpoint's drafter (ModelSpec.drafter): what the notes name
    simulate: int = 4                   # deployments simulated per die budget and mode (the shortlist)
    dcp: bool = True                    # search DCP = TP on decode / aggregated instances for long inputs
    dcp_only: bool = False              # --dcp N: every DSA instance of TP N runs DCP N (no DCP 1 variant)
    hccl_buffsize_mb: int = 200         # HCCL_BUFFSIZE of every instance (the mc2 communicator's buffer)
    #: build every memory-feasible P/D row (--csv, --png, --simulate 0 list or rank them all); else only the
    #: rows the shortlist, the binds line and the closest-row note can read are built (``_PDRows``)
    every_row: bool = False

    @property
    def searched_utils(self) -> tuple[float, ...]:
        return tuple(self.utils) or (self.util,)


@dataclass
class Config:
    mode: str                       # "agg" | "disagg"
    dies: int                       # die budget
    dies_used: int
    plan: str
    batch: int
    mtp: int
    ttft_ms: float
    tpot_ms: float
    tok_s_die: float
    tok_s_user: float
    weights_gib: float
    kv_gib: float
    kv_tokens: int
    headroom_gib: float             # KV pool left after B full-length requests (D / aggregated rank)
    meets_sla: bool
    detail: dict = field(default_factory=dict)
    util: float = DEFAULT_UTIL
    simulated: bool = False         # figures from the serving simulation (else the steady-state estimate)
    concurrency: int = 0            # simulated client concurrency the figures hold at
    estimate: dict = field(default_factory=dict)     # the steady-state estimate a simulated row replaced
    #: with 5 % fewer KV blocks per rank the simulated row misses the SLA or loses a fifth of its throughput
    #: at the same concurrency (``planner.simulate``): it holds only if the model's pool is exact
    kv_edge: bool = False

    def to_json(self) -> dict[str, Any]:
        d = {k: v for k, v in self.__dict__.items() if k != "detail"}
        return {**d, **self.detail}

    @property
    def key(self) -> tuple:
        """One deployment (the rows of a plan differ by batch, MTP, util and P chunk budget)."""
        return (self.mode, self.dies, self.plan, self.batch, self.mtp, self.util,
                self.detail.get("p_max_num_batched_tokens"), self.detail.get("dcp", 1))


@dataclass
class PlanResult:
    configs: list[Config]
    evaluated: int
    seconds: float
    workload: PlanWorkload
    notes: list[str]
    disagg_verdicts: dict[int, str] = field(default_factory=dict)   # die budget -> why no P/D config
    searched_disagg: bool = True
    simulated: int = 0                  # deployments simulated (0: the ranking is the estimate's)
    #: wall time from the first simulated row to the last (the aggregated rows start while the P/D rows are
    #: still estimated, so it overlaps ``seconds``' estimate part)
    sim_seconds: float = 0.0
    #: memory-feasible rows per (die budget, mode), built or not (``configs`` holds the built ones)
    feasible_by: dict = field(default_factory=dict)
    #: P/D rows within the shortlist's SLA slack too large to simulate (None: every row was built, count those)
    pd_over_bound: int | None = None

    @property
    def feasible(self) -> int:
        return sum(self.feasible_by.values()) if self.feasible_by else len(self.configs)

    def has_mode(self, mode: str) -> bool:
        if not self.feasible_by:
            return any(c.mode == mode for c in self.configs)
        return any(v for (_, m), v in self.feasible_by.items() if m == mode)

    def feasible_of(self, n: int, mode: str | None = None) -> int:
        if not self.feasible_by:
            return sum(1 for c in self.configs if c.dies == n and mode in (None, c.mode))
        return sum(v for (d, m), v in self.feasible_by.items() if d == n and mode in (None, m))

    def ranked(self) -> list[Config]:
        """Rows the ranking may use: the simulated ones when any was simulated."""
        return [c for c in self.configs if c.simulated] if self.simulated else list(self.configs)

    def best_of(self, mode: str, k: int = 10) -> list[Config]:
        return [c for c in self.best(len(self.configs)) if c.mode == mode][:k]

    def best(self, k: int = 10) -> list[Config]:
        """Rows meeting the SLA, best throughput per die first; a row at the KV edge ranks after the
        rows that hold with a few % less memory (the model's pool is within about +-7 % of the engine's
        on the published rows, P5 and P8)."""
        ok = [c for c in self.ranked() if c.meets_sla]
        return sorted(ok, key=lambda c: (c.kv_edge, -c.tok_s_die))[:k]

    def best_per_budget(self) -> dict[int, Config | None]:
        """The best deployment of every die budget searched (None: none meets the SLA)."""
        ok = self.best(len(self.configs))
        return {n: next((c for c in ok if c.dies == n), None) for n in sorted({c.dies for c in self.configs}
                                                                               | set(self.dies))}

    dies: tuple[int, ...] = ()


class _Kernel:
    """Programs and kernel calls, cached per (plan, phase).

    Each call is a small grid (batch x MTP keys of one plan, ~0.2 ms of work), so the kernel runs
    on one thread: waking numba's thread pool costs ~8 ms per call on a busy 2-core machine, 40x
    the work (``serial``)."""

    def __init__(self, base: DeploymentContext):
        from auditor_kernels.perf_core import sweep_grid

        from ..perf.device import kernel_vector
        self.sweep_grid = sweep_grid
        self.base = base
        self.spec, self.engine, self.device = base.spec, base.engine, base.device
        engine, device = base.engine, base.device
        # no per-step host slots: the host time is the serving model's, from each plan's own launches
        # (``decode_host``, ``_prefill_time``), as bench and perf add it; the device's derived per-step
        # constants are a reference step's (GLM's eager drafter), and adding them too counted host twice
        self.dv = kernel_vector(device)
        self.count = 0
        self.cache: dict = {}
        from ..serving.costs import host_params
        self.host = host_params(device)       # the serving model's host time, so estimates track the simulation
        from ..perf.program import kernel_path_of
        self.path = kernel_path_of(engine, "bf16", device)     # the engine's kernels on this device's generation

    def host_model(self, plan: ParallelPlan, k: int):
        """The serving host model (``perf.host.HostModel``) of a plan at K: its launches, its drafter's
        launches when the drafter runs eager (GLM) and its token split, cached per (plan, K)."""
        key = ("host", plan, k)
        if key not in self.cache:
            from ..perf.api import cached_program
            from ..perf.host import host_model
            pre, dec = (cached_program(self.base.with_plan(plan), ph, "repetition", True, self.path)
                        for ph in ("prefill", "decode"))
            self.cache[key] = host_model(self.spec, pre, dec, k, self.device, self.host, engine=self.engine)
        return self.cache[key]

    def decode_host(self, plan: ParallelPlan, keys: np.ndarray) -> np.ndarray:
        """Host time of a graph decode step per row of ``keys`` (tokens, batch, K): the serving host
        model's graph step, as bench and perf add it."""
        out = np.empty(len(keys))
        for k in np.unique(keys[:, 2]):
            rows = keys[:, 2] == k
            out[rows] = self.host_model(plan, int(k)).steps_s(False, 0.0, keys[rows, 1] * (1 + k))
        return out

    def times(self, plan: ParallelPlan, phase: str, keys: np.ndarray, ctx: np.ndarray) -> np.ndarray:
        key = (plan, phase, keys.tobytes(), ctx.tobytes())
        hit = self.cache.get(key)
        if hit is not None:
            return hit
        from ..perf.api import cached_program
        from ..perf.device import group_table
        prog = cached_program(self.base.with_plan(plan), phase, "repetition", True, self.path)
        with KERNEL_LOCK:
            out = self.sweep_grid(*prog.arrays(), 1 if phase == "decode" else 0, float(plan.tp), keys, ctx, self.dv,
                                  group_table(self.device, plan))
        self.count += out.size
        self.cache[key] = out
        return out


def _instance_plans(base: DeploymentContext, space: PlanSpace, role: str, max_num_batched_tokens: int = 8192,
                    rejected: list | None = None, mtp: bool = False) -> list[ParallelPlan]:
    """Instance plans (TP x DP, EP = DP x TP for MoE) whose weights leave room on the die; the
    others go to ``rejected`` as (plan, worst-rank weight bytes). ``mtp``: the drafter is loaded,
    as the budget of a grid with any K > 0 counts it (so the filter and the budget share one W)."""
    spec = base.spec
    sizes = sorted({s for n in space.dies for s in range(1, n + 1) if n % s == 0})
    limit = usable_total(base.device) * space.util
    out = []
    for tp, sp, s in itertools.product(space.tps, space.sps, sizes):
        if s % tp or (sp and not spec.dsa and tp == 1):
            continue
        dp = s // tp
        ep = s if spec.moe and s > 1 else 1
        # the search's SP axis is the DSA-CP deployment: FlashComm1 with enable_dsa_cp on a DSA model
        plan = ParallelPlan(tp=tp, dp=dp, ep=ep, sp=sp, dsa_cp=True if sp and spec.dsa and tp > 1 else None,
                            role=role, max_num_batched_tokens=max_num_batched_tokens, mtp=mtp)
        try:
            plan.validate()
            w = max(plan_weights(base.with_plan(plan)))
        except AuditInputError:
            continue
        if w < limit:
            out.append(plan)
        elif rejected is not None:
            rejected.append((plan, w))
    return out


def _label(p: ParallelPlan) -> str:
    return f"TP{p.tp} DP{p.dp}" + (f" EP{p.ep}" if p.ep > 1 else "") + (" SP" if p.sp else "")


@contextmanager
def serial():
    """numba kernels on one thread for the duration (restored after)."""
    import numba
    n = numba.get_num_threads()
    numba.set_num_threads(1)
    try:
        yield
    finally:
        numba.set_num_threads(n)


def run_plan(base: DeploymentContext, wl: PlanWorkload, space: PlanSpace, ttft_ms: float,
             tpot_ms: float) -> PlanResult:
    """Estimate every candidate (steady state), then simulate the shortlist with the serving model
    (``auditor.planner.simulate``) and rank by the simulated figures."""
    from .simulate import Shortlist
    engine = base.engine
    with serial():
        t0 = time.perf_counter()
        kern = _Kernel(base)
        configs: list[Config] = []
        verdicts: dict[int, str] = {}
        feasible: dict[tuple[int, str], int] = {}
        over_bound: int | None = 0
        evaluated = 0
        # the aggregated rows simulate (on another thread) while the last util's P/D rows are estimated
        sim = Shortlist(base, wl, space, ttft_ms, tpot_ms) if space.simulate > 0 else None
        utils = space.searched_utils
        try:
            for i, u in enumerate(utils):
                sp = replace(space, util=u)
                hook = None
                if sim is not None and i == len(utils) - 1:
                    hook = (lambda prior: lambda rows: sim.start(prior + rows))(list(configs))
                c, n, v, f = _estimate(base, wl, sp, ttft_ms, tpot_ms, kern, after_agg=hook)
                configs += c
                evaluated += n
                for k, text in v.items():
                    verdicts.setdefault(k, text)
                for k, cnt in f["feasible"].items():
                    feasible[k] = feasible.get(k, 0) + cnt
                if f["over_bound"] is None or over_bound is None:
                    over_bound = None
                else:
                    over_bound += f["over_bound"]
        except BaseException:
            if sim is not None:
                sim.stop()
            raise
        for n in list(verdicts):
            if feasible.get((n, "disagg")):
                del verdicts[n]
        res = PlanResult(configs, 0, 0.0, wl, _notes(space, wl, engine), verdicts, space.disaggregated, dies=tuple(space.dies),
                         feasible_by=feasible, pd_over_bound=over_bound)
        t1 = time.perf_counter()
        if sim is not None:
            res.simulated = sim.finish(res)
            t1 = sim.started_at or t1
        res.sim_seconds = time.perf_counter() - t1
        res.evaluated = evaluated + kern.count
        res.seconds = time.perf_counter() - t0
        return res


def _notes(space: PlanSpace, wl: PlanWorkload, engine: Any) -> list[str]:
    """The plan's notes, in the engine's words (``Engine.device_noun`` and the wording hooks)."""
    from ..engines.registry import as_engine
    from ..serving.costs import DEFAULT_KV_LINK_BYTES_PER_S
    eng = as_engine(engine)
    noun = eng.device_noun
    evidence = f" ({eng.prefill_util_evidence})" if eng.prefill_util_evidence else ""
    return [
        f"ranking: every candidate is estimated (below); per {noun} budget and mode the best "
        f"{space.simulate} by estimate, then the next while its estimate beats the best simulated row, are "
        "simulated with the serving model of `audit bench` (vLLM's scheduler over the perf model's step "
        "costs and the host model), at the largest client concurrency up to the decode slots whose mean "
        f"TTFT and TPOT meet the SLA (halving, then bisection), over 2 x concurrency prompts; tok_s_{noun.lower()}, "
        "TTFT, TPOT are the simulated figures; a row that misses the SLA or loses a fifth of its throughput "
        "with 5% fewer KV blocks per rank (same concurrency) is marked 'edge' after its headroom and ranks "
        "after the rows that hold: the model's KV pool is within about +-7% of the engine's on the published "
        "rows",
        "estimate (shortlist only): aggregated = (osl/E) decode steps at the mean context + B prefills "
        "stalling the batch; P/D = P instances balanced against D's request rate (B x E per step), with "
        "the closed-loop client's burst queueing at P (first wave in rounds of the P ranks, one P step of "
        "lockstep wait for the second)",
        "each instance runs at the largest gpu-memory-utilization (at most the searched one) whose "
        f"(1 - util) margin holds what the engine allocates outside the KV budget ({eng.outside_budget_words}: "
        f"`audit memory`'s outside-budget table); a P node with long chunks gets less{evidence}",
        (f"MTP: per-draft acceptance {space.acceptance:g}, E = 1 + a + ... + a^K tokens per step"
         if isinstance(space.acceptance, (int, float)) else
         f"speculative decoding: acceptance {value_text(space.acceptance)} ({space.acceptance.source}), "
         "E = 1 + p1 + ... + pK tokens per step"),
        f"disaggregated: P nodes chunk prompts at max_num_batched_tokens searched in "
        f"{', '.join(map(str, space.prefill_tokens))} (activation bounded by the chunk, not the prompt), run the "
        f"{'DSpark' if space.drafter == 'dspark' else 'MTP'} drafter (K = {space.prefill_mtp}, {eng.prefill_mtp_source}) whose prefill pass TTFT includes, "
        "and hold the largest max_num_seqs of 1-16 whose full prompts fit their KV pool; the KV pull P -> D is "
        f"timed in the simulation ({eng.kv_link_words(DEFAULT_KV_LINK_BYTES_PER_S)})",
        f"gpu-memory-utilization searched: {', '.join(f'{u:g}' for u in space.searched_utils)}"
        + (f"; DCP = TP searched on decode instances for inputs of {DCP_FROM_ISL:,} tokens and more (memory: "
           "KV sharded along the sequence, indexer cache replicated; the serving model times DCP as the perf "
           "model does)" if space.dcp and wl.isl >= DCP_FROM_ISL else ""),
        "memory: every listed configuration fits (weights + activation + non-torch + B full-length "
        "requests of KV); headroom = KV pool left after them",
    ]


def closed_loop(slots: int, p_ranks: int, t_pre: float, t_dec: float, ttft_sla: float, t_step: float = 0.0
                ) -> tuple[int, float, float]:
    """(client concurrency, requests/s, mean TTFT s) of a P/D deployment under the simulation's client:
    c requests at once, 2c prompts in all (``vllm bench serve --max-concurrency c --num-prompts 2c``),
    at the largest c of at most the decode slots whose TTFT meets the SLA (``operating_point``).

    The P ranks (``p_ranks`` prompts in flight, ``t_pre`` each) work off the first c prompts in
    ceil(c / p_ranks) rounds, so that wave waits (rounds + 1) / 2 prefills on average; each second-wave
    prompt arrives when its client's first request has decoded (``t_dec``), and waits for what P has
    not finished by then (c x t_pre / p_ranks - t_dec, when positive), plus one P step ``t_step`` when
    c > 1: second-wave prompts arrive together, the first starts a chunk and the DP ranks step in
    lockstep, so the rest wait for that step before theirs begins. The run lasts the first wave's
    rounds, two decodes, one prefill and that lag. Why: an estimate without the burst ranked P-bound
    deployments by one idle prefill, so shapes the simulation rejects filled its shortlist."""
    def at(c: int) -> tuple[bool, tuple[float, float]]:
        rounds = -(-c // max(p_ranks, 1))
        lag = max(0.0, c * t_pre / max(p_ranks, 1) - t_dec) + (t_step if c > 1 else 0.0)
        ttft = 0.5 * (t_pre * (rounds + 1) / 2 + t_pre + lag)
        return ttft <= ttft_sla, (2 * c / (t_pre * (rounds + 1) + 2 * t_dec + lag), ttft)

    c, (rate, ttft) = operating_point(slots, at)
    return c, rate, ttft


def operating_point(slots: int, run: Any, tries: int = 7) -> tuple[int, Any]:
    """(c, result) at the largest client concurrency c in 1..slots for which ``run(c)`` -> (ok, result)
    says ok, found by bisection in at most ``tries`` runs (the full slots first); when none is ok, c = 1
    and its result. Why bisection: halving from the slots lost up to half the throughput of a deployment
    whose TTFT meets the SLA just below a power-of-two fraction of its slots."""
    slots = max(int(slots), 1)
    ok, res = run(slots)
    if ok or slots == 1:
        return slots, res
    lo, hi, best, n = 0, slots, None, 1          # hi fails; lo = largest c known ok (0: none yet)
    while hi - lo > 1 and n < tries:
        mid = (lo + hi) // 2 if lo else max(1, hi // 2)
        ok, r = run(mid)
        n += 1
        if ok:
            lo, best = mid, r
        else:
            hi = mid
    if best is not None:
        return lo, best
    return 1, (r if hi == 1 else run(1)[1])


def closed_loop_v(slots: np.ndarray, p_ranks: np.ndarray, t_pre: Any, t_dec: Any, ttft_sla: float, t_step: Any,
                  tries: int = 7) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``closed_loop`` over arrays that broadcast together: the same arithmetic element by element (the
    same operations in the same order, so each element equals the scalar call's result), and the same
    bisection (``operating_point``) run on every element at once. Why: the P/D grid of a large die budget
    is millions of (deployment, batch, K) rows, and one Python call each took minutes."""
    slots = np.maximum(np.asarray(slots, dtype=np.int64), 1)
    pr = np.maximum(np.asarray(p_ranks, dtype=np.int64), 1)
    slots, pr = np.broadcast_arrays(slots, pr)

    def at(c: np.ndarray):
        rounds = -(-c // pr)
        lag = np.maximum(0.0, c * t_pre / pr - t_dec) + np.where(c > 1, t_step, 0.0)
        ttft = 0.5 * (t_pre * (rounds + 1) / 2 + t_pre + lag)
        return ttft <= ttft_sla, 2 * c / (t_pre * (rounds + 1) + 2 * t_dec + lag), ttft

    ok, rate, ttft = at(slots)
    todo = ~ok & (slots > 1)
    if not todo.any():
        return slots, rate, ttft
    lo, hi = np.zeros_like(slots), slots.copy()
    found = np.zeros(slots.shape, dtype=bool)
    best_rate, best_ttft = np.zeros_like(rate), np.zeros_like(ttft)
    for _ in range(tries - 1):
        act = todo & (hi - lo > 1)
        if not act.any():
            break
        mid = np.where(lo > 0, (lo + hi) // 2, np.maximum(1, hi // 2))
        ok_m, rate_m, ttft_m = at(mid)
        good, bad = act & ok_m, act & ~ok_m
        lo = np.where(good, mid, lo)
        best_rate = np.where(good, rate_m, best_rate)
        best_ttft = np.where(good, ttft_m, best_ttft)
        found |= good
        hi = np.where(bad, mid, hi)
    _, rate1, ttft1 = at(np.ones_like(slots))
    conc = np.where(todo, np.where(found, lo, 1), slots)
    return (conc, np.where(todo, np.where(found, best_rate, rate1), rate),
            np.where(todo, np.where(found, best_ttft, ttft1), ttft))


#: grid elements (rows x batch-K columns) evaluated per numpy pass of the P/D enumeration
_PD_CHUNK = 1 << 19


class _PDBlock:
    """The P/D rows of one decode plan (and DCP) against every shortlisted P plan and die budget, kept
    as the few arrays they are computed from: row r is (P entry ``e[r]``, budget ``n[r]``, ``nd[r]`` D
    instances), column j the r-th row's deployment at batch-K row ``ok[j]``. Row-major order is the
    order the rows were enumerated in before (P entry, budget, D count, batch-K)."""

    def __init__(self, dplan, dcp, d, tpot, r_d, ok, shortlist, dies, base: int):
        self.dplan, self.dcp, self.d, self.tpot, self.r_d, self.ok = dplan, dcp, d, tpot, r_d, ok
        self.shortlist, self.base = shortlist, base
        self.s_d = dplan.tp * dplan.dp
        e, n, nd = [], [], []
        for k, x in enumerate(shortlist):
            s_p = x[0].tp * x[0].dp
            for m in dies:
                cnt = max(0, (m - s_p) // self.s_d)
                e.append(np.full(cnt, k, dtype=np.int64))
                n.append(np.full(cnt, m, dtype=np.int64))
                nd.append(np.arange(1, cnt + 1, dtype=np.int64))
        cat = (lambda a: np.concatenate(a) if a else np.zeros(0, dtype=np.int64))  # noqa: E731
        self.e, self.n, self.nd = cat(e), cat(n), cat(nd)
        self.rows, self.cols = len(self.e), len(ok)
        # per P entry: size, request rate, DP, prefill time, one chunk step
        self.s_p = np.array([x[0].tp * x[0].dp for x in shortlist], dtype=np.int64)
        self.r_p = np.array([x[2] for x in shortlist], dtype=np.float64)
        self.p_dp = np.array([x[0].dp for x in shortlist], dtype=np.int64)
        self.t_pre = np.array([x[1] for x in shortlist], dtype=np.float64)

    def grid(self, a: int, b: int, wl: PlanWorkload, BK: np.ndarray, ttft_ms: float) -> dict[str, np.ndarray]:
        """The estimate of rows a..b (2-D arrays, rows x columns), as the per-row loop computed it."""
        e, n, nd = self.e[a:b], self.n[a:b, None], self.nd[a:b, None]
        s_p, r_p = self.s_p[e][:, None], self.r_p[e][:, None]
        ok = self.ok
        n_p = np.clip(np.ceil(nd * self.r_d[ok][None, :] / r_p), 1, (n - nd * self.s_d) // s_p)
        used = n_p * s_p + nd * self.s_d
        chunks = np.array([-(-wl.isl // x[4]) for x in self.shortlist], dtype=np.int64)[e][:, None]
        t_pre = self.t_pre[e][:, None]
        conc, rate, ttft = closed_loop_v(nd * self.dplan.dp * BK[ok, 0].astype(np.int64)[None, :],
                                         n_p.astype(np.int64) * self.p_dp[e][:, None], t_pre,
                                         (wl.osl * self.tpot[ok])[None, :], ttft_ms / 1e3, t_pre / chunks)
        return {"n_p": n_p, "used": used, "conc": conc, "rate": rate, "ttft": ttft}

    def configs(self, r: int, wl: PlanWorkload, BK: np.ndarray, ttft_ms: float, d_tokens: int, p_len: int,
                k_p: int) -> list[Config]:
        """Row r's configurations, one per batch-K column."""
        g = self.grid(r, r + 1, wl, BK, ttft_ms)
        pplan, t_pre, r_p, _, chunk, pseq, pw, u_p = self.shortlist[int(self.e[r])]
        dplan, dcp, d, tpot = self.dplan, self.dcp, self.d, self.tpot
        n, nd = int(self.n[r]), int(self.nd[r])
        out = []
        for j, i in enumerate(self.ok):
            n_p, used = g["n_p"][0, j], g["used"][0, j]
            out.append(Config(
                "disagg", n, int(used),
                f"{int(n_p)}P x {_label(pplan)} + {nd}D x {_label(dplan)}" + (f" DCP{dcp}" if dcp > 1 else ""),
                int(BK[i, 0]), int(BK[i, 1]), g["ttft"][0, j] * 1e3, tpot[i] * 1e3, g["rate"][0, j] * wl.osl / used,
                1 / tpot[i],
                d["weights"][i] / GiB, d["num_blocks"][i] * d["page_block"][i] / GiB,
                int(d["kv_tokens"][i]), d["kv_free"][i] / GiB, True,
                {"n_prefill": int(n_p), "n_decode": nd, "p_tp": pplan.tp, "p_dp": pplan.dp,
                 "p_ep": pplan.ep, "p_sp": pplan.sp, "p_dsa_cp": pplan.dsa_cp, "p_weights_gib": pw / GiB,
                 "p_max_num_batched_tokens": chunk, "p_max_model_len": p_len,
                 "p_max_num_seqs": pseq, "p_mtp": k_p, "p_util": u_p,
                 "tp": dplan.tp, "dp": dplan.dp, "ep": dplan.ep, "sp": dplan.sp, "dsa_cp": dplan.dsa_cp, "dcp": dcp,
                 "max_num_batched_tokens": d_tokens, "role": "decode"}, util=d["util"],
                concurrency=int(g["conc"][0, j])))
        return out


class _PDRows:
    """Every P/D row of one gpu-memory-utilization, counted; built as Config only where some output can
    read it, unless ``every_row``:

    * the shortlist (``planner.simulate.shortlist``) takes, per die budget, rows within 1.25 x the SLA
      best estimate first and at most two per deployment shape (D TP x DP, P TP x DP, chunk); a row
      after the first two of its shape (in that order) is never taken, so only those two are built;
    * the binds line reads the SLA-closest row of a budget when nothing meets it: that row is built;
    * the binds line also reads the best row's larger batches of the same deployment: ``siblings``
      builds the whole row (every batch and K) of each deployment the shortlist took.

    Rows keep their enumeration index, so the built ones are listed in the order all were."""

    def __init__(self, every_row: bool, wl: PlanWorkload, BK: np.ndarray, ttft_ms: float, tpot_ms: float,
                 d_tokens: int, p_len: int, k_p: int):
        from .simulate import MAX_SIM_CELLS, SLACK
        self.max_cells, self.over_bound = MAX_SIM_CELLS, 0
        self.every_row, self.wl, self.BK, self.ttft_ms, self.tpot_ms = every_row, wl, BK, ttft_ms, tpot_ms
        self.args = (wl, BK, ttft_ms, d_tokens, p_len, k_p)
        self.slack = SLACK
        self.count: dict[int, int] = {}
        self.top2: dict[tuple, list] = {}            # (budget, shape) -> up to two (-tok/s/die, index, block, row)
        self.near: dict[int, tuple] = {}             # budget -> (SLA ratio, index, block, row)
        self.built: dict[tuple, list[Config]] = {}   # (block sequence, row) -> its Configs
        self.blocks: list[_PDBlock] = []
        self.total = 0                               # grid elements enumerated (the next block's base)

    def add(self, blk: _PDBlock) -> None:
        blk.seq = len(self.blocks)          # blocks without rows share a base: the key is the sequence
        self.blocks.append(blk)
        self.total += blk.rows * blk.cols
        if not blk.rows or not blk.cols:
            return
        for m, c in zip(*np.unique(blk.n, return_counts=True)):
            self.count[int(m)] = self.count.get(int(m), 0) + int(c) * blk.cols
        if self.every_row:
            return
        tpot_ms = (blk.tpot[blk.ok] * 1e3)[None, :]
        step = max(1, _PD_CHUNK // blk.cols)
        for a in range(0, blk.rows, step):
            b = min(blk.rows, a + step)
            g = blk.grid(a, b, *self.args[:3])
            ttft_ms = g["ttft"] * 1e3
            tok = g["rate"] * self.wl.osl / g["used"]
            idx = blk.base + np.arange(a * blk.cols, b * blk.cols, dtype=np.int64).reshape(b - a, blk.cols)
            rows = np.broadcast_to(np.arange(a, b)[:, None], idx.shape)
            # the shortlist's candidates: the first two of each (budget, P entry) in (-tok/s/die, index) order
            inside = (ttft_ms <= self.ttft_ms * self.slack) & (tpot_ms <= self.tpot_ms * self.slack)
            # the shortlist skips a row its simulation cannot bound (``planner.simulate.sim_cells``) without
            # counting it against its shape: the first two of a shape are the first two under the bound
            n_p, nd = g["n_p"].astype(np.int64), blk.nd[a:b, None]
            p_dp = blk.p_dp[blk.e[a:b]][:, None]
            cells = 2 * np.maximum(p_dp * n_p, blk.dplan.dp * nd) * (
                4 * (blk.dplan.dp * nd * self.BK[blk.ok, 0].astype(np.int64)[None, :]) + 2)
            big = inside & (cells > self.max_cells)
            self.over_bound += int(big.sum())
            inside &= ~big
            if inside.any():
                grp = np.broadcast_to((blk.e[a:b] * (1 << 20) + blk.n[a:b])[:, None], idx.shape)[inside]
                neg, ix, rr = -tok[inside], idx[inside], rows[inside]
                order = np.lexsort((ix, neg, grp))
                grp, neg, ix, rr = grp[order], neg[order], ix[order], rr[order]
                first = np.r_[True, grp[1:] != grp[:-1]]
                second = np.r_[False, first[:-1]] & ~first
                for q in np.flatnonzero(first | second):
                    pplan, chunk = blk.shortlist[int(grp[q] >> 20)][0], blk.shortlist[int(grp[q] >> 20)][4]
                    key = (int(grp[q] & ((1 << 20) - 1)), blk.dplan.tp, blk.dplan.dp, pplan.tp, pplan.dp, chunk)
                    lst = self.top2.setdefault(key, [])
                    lst.append((float(neg[q]), int(ix[q]), blk, int(rr[q])))
                    lst.sort(key=lambda t: (t[0], t[1]))
                    del lst[2:]
            # the SLA-closest row of each budget (first in order on a tie)
            ratio = np.maximum(ttft_ms / self.ttft_ms, tpot_ms / self.tpot_ms)
            nn = blk.n[a:b]
            for m in np.unique(nn):
                sub = np.flatnonzero(nn == m)
                flat = ratio[sub].ravel()
                q = int(np.argmin(flat))
                v, r = float(flat[q]), a + int(sub[q // blk.cols])
                cur = self.near.get(int(m))
                if cur is None or v < cur[0]:
                    self.near[int(m)] = (v, int(idx[sub[q // blk.cols], q % blk.cols]), blk, r)

    def _build(self, blk: _PDBlock, r: int) -> list[Config]:
        key = (blk.seq, r)
        if key not in self.built:
            self.built[key] = blk.configs(r, *self.args)
        return self.built[key]

    def configs(self) -> list[tuple[int, Config]]:
        """(enumeration index, Config) of the rows built, in enumeration order."""
        if self.every_row:
            for blk in self.blocks:
                for r in range(blk.rows):
                    self._build(blk, r)
        else:
            for lst in self.top2.values():
                for _, _, blk, r in lst:
                    self._build(blk, r)
            for _, _, blk, r in self.near.values():
                self._build(blk, r)
        return self._listed()

    def _listed(self) -> list[tuple[int, Config]]:
        out = []
        for (seq, r), cs in sorted(self.built.items(), key=lambda kv: kv[0]):
            blk = self.blocks[seq]
            out += [(blk.base + r * blk.cols + j, c) for j, c in enumerate(cs)]
        return out


def _prefill_time(kern: _Kernel, plan: ParallelPlan, isl: int, chunk: int, k: int) -> float:
    """One prompt of ``isl`` tokens prefilled in chunks of ``chunk`` (each chunk at the context before
    it), the drafter's pass (``k`` > 0) included."""
    n = -(-isl // chunk)
    t = 0.0
    if n > 1:
        t += float(kern.times(plan, "prefill", np.array([[float(chunk), 1.0, float(k)]]),
                              np.arange(n - 1, dtype=np.float64) * chunk).sum())
    last = isl - (n - 1) * chunk
    t += float(kern.times(plan, "prefill", np.array([[float(last), 1.0, float(k)]]),
                          np.array([float((n - 1) * chunk)]))[0, 0])
    hm = kern.host_model(plan, k)       # every chunk an eager step of the serving host model
    return t + (n - 1) * hm.step_s(True, chunk, 0.0) + hm.step_s(True, last, 0.0)


def _estimate(base: DeploymentContext, wl: PlanWorkload, space: PlanSpace,
              ttft_ms: float, tpot_ms: float, kern: _Kernel, after_agg: Any = None
              ) -> tuple[list[Config], int, dict[int, str], dict]:
    """The steady-state estimate of every candidate at one gpu-memory-utilization; ``after_agg`` is called
    with the aggregated rows once they are all estimated, before the P/D rows (``run_plan``)."""
    spec, engine = base.spec, base.engine
    mtps = tuple(m for m in space.mtps if m == 0 or spec.mtp_layers) or (0,)
    BK = np.array(list(itertools.product(space.batches, mtps)), dtype=np.float64)
    keys_dec = np.column_stack([np.ones(len(BK)), BK[:, 0], BK[:, 1]])
    ctx_dec = np.array([float(wl.mean_context)])
    E = expected_tokens(BK[:, 1], space.acceptance)
    configs: list[Config] = []
    feasible: dict[tuple[int, str], int] = {}      # (budget, mode) -> memory-feasible rows, built or not
    evaluated = 0
    u = space.util
    dcp_taken: dict[int, bool] = {}

    def engine_takes_dcp(plan: ParallelPlan) -> bool:
        # the engine's KV spec decides (DeepSeek-V4's pool has no DCP on vLLM-Ascend); a pinned --dcp it
        # refuses is the engine's one-line error, a searched one is just not searched
        if plan.tp not in dcp_taken:
            try:
                as_engine(engine).kv_spec(spec, plan, variant=space.kv_cache_dtype, dcp=plan.tp)
                dcp_taken[plan.tp] = True
            except AuditInputError:
                if space.dcp_only:
                    raise
                dcp_taken[plan.tp] = False
        return dcp_taken[plan.tp]

    dcps = lambda plan: (((plan.tp,) if space.dcp_only else (1, plan.tp))  # noqa: E731
                         if space.dcp and spec.dsa and plan.tp > 1 and (space.dcp_only or wl.isl >= DCP_FROM_ISL)
                         and engine_takes_dcp(plan) else (1,))

    def decode_side(plan: ParallelPlan, dcp: int = 1) -> dict[str, np.ndarray]:
        # graph decode step + the host model's step constant and per-decode-token work
        t_step = kern.times(plan, "decode", keys_dec, ctx_dec).ravel() + kern.decode_host(plan, keys_dec)
        step_tokens = BK[:, 0] * (1 + BK[:, 1])
        # the instance runs at the largest util whose (1 - util) margin holds what it allocates outside
        # the KV budget (at its largest batch, K and step)
        ui = margin_util(base.with_plan(plan), util=u, max_model_len=wl.max_len, max_num_seqs=int(BK[:, 0].max()),
                         max_num_batched_tokens=int(max(plan.max_num_batched_tokens, step_tokens.max())),
                         mtp=int(BK[:, 1].max()), kv_cache_dtype=space.kv_cache_dtype, dcp=dcp,
                         hccl_buffsize_mb=space.hccl_buffsize_mb)
        g = grid_budget(base.with_plan(plan), batch=BK[:, 0], request_tokens=np.full(len(BK), wl.max_len),
                        step_tokens=step_tokens, mtp=BK[:, 1], util=ui,
                        kv_cache_dtype=space.kv_cache_dtype, dcp=dcp, hccl_buffsize_mb=space.hccl_buffsize_mb)
        n = len(BK)
        # per-row weights and page size (a K = 0 row loads no drafter: runtime.feasibility.grid_budget)
        g["weights"] = np.broadcast_to(np.asarray(g["weights"], dtype=float), (n,))
        g["page_block"] = np.broadcast_to(np.asarray(g["page_block"], dtype=float), (n,))
        return {"t_step": t_step, "util": ui, **g}

    # ---- aggregated
    drafter = bool(spec.mtp_layers) and bool(np.any(BK[:, 1] > 0))
    for plan in _instance_plans(base, space, "mixed", mtp=drafter):
        t_pre = _prefill_time(kern, plan, wl.isl, plan.max_num_batched_tokens, 0)
        for dcp in dcps(plan):
            d = decode_side(plan, dcp)
            evaluated += len(BK) + 1
            B = BK[:, 0]
            cycle = wl.osl / E * d["t_step"] + B * t_pre
            tpot = cycle / wl.osl
            per_die = B * wl.osl / cycle / plan.tp
            fits = d["kv_free"] >= 0
            s = plan.tp * plan.dp
            for i in np.flatnonzero(fits):
                for n in space.dies:
                    if n % s:
                        continue
                    feasible[(n, "agg")] = feasible.get((n, "agg"), 0) + 1
                    configs.append(Config(
                        "agg", n, n, f"{n // s} x {_label(plan)}" + (f" DCP{dcp}" if dcp > 1 else ""), int(B[i]),
                        int(BK[i, 1]), t_pre * 1e3, tpot[i] * 1e3, per_die[i], 1 / tpot[i], d["weights"][i] / GiB,
                        d["num_blocks"][i] * d["page_block"][i] / GiB, int(d["kv_tokens"][i]),
                        d["kv_free"][i] / GiB, t_pre * 1e3 <= ttft_ms and tpot[i] * 1e3 <= tpot_ms,
                        {"replicas": n // s, "tp": plan.tp, "dp": plan.dp, "ep": plan.ep, "sp": plan.sp,
                         "dsa_cp": plan.dsa_cp, "role": "mixed", "dcp": dcp}, util=d["util"]))

    if after_agg is not None:
        after_agg(list(configs))

    # ---- disaggregated
    verdicts: dict[int, str] = {}
    over_bound: int | None = None if space.every_row else 0
    if space.disaggregated:
        # each role configured for its own work: a P node prefills prompts in chunks of its own
        # max_num_batched_tokens with the drafter (K = prefill_mtp) and holds the prompts that fit;
        # a D node only runs decode steps of B x (1 + K) tokens
        k_p = space.prefill_mtp if spec.mtp_layers else 0
        chunks = sorted({c for c in space.prefill_tokens if c <= max(wl.isl, min(space.prefill_tokens))})
        d_tokens = int(max(BK[:, 0] * (1 + BK[:, 1])))
        p_len = wl.max_isl + 1
        p_seqs = np.array(P_SEQS, dtype=np.float64)
        p_seen, d_seen = [], []                 # (plan, t_pre or t_step row, kv_free, ...) for the verdict
        p_heavy: list = []
        d_heavy: list = []
        prefill = []
        for chunk in chunks:
            for plan in _instance_plans(base, space, "prefill", chunk, p_heavy,
                                        mtp=k_p > 0):
                t_pre = _prefill_time(kern, plan, wl.isl, chunk, k_p)
                # a P node needs little KV: it runs at the largest util whose margin holds its chunk's
                # prefill transients (the engine's tutorial sets 0.82 for 32,560-token chunks)
                u_p = margin_util(base.with_plan(plan), util=u, max_model_len=p_len,
                                  max_num_seqs=int(p_seqs[-1]), max_num_batched_tokens=chunk, mtp=k_p,
                                  kv_cache_dtype=space.kv_cache_dtype, hccl_buffsize_mb=space.hccl_buffsize_mb)
                g = grid_budget(base.with_plan(plan), batch=p_seqs,
                                request_tokens=np.full(len(p_seqs), float(p_len)),
                                step_tokens=np.full(len(p_seqs), float(chunk)), mtp=np.full(len(p_seqs), float(k_p)),
                                util=u_p, kv_cache_dtype=space.kv_cache_dtype, hccl_buffsize_mb=space.hccl_buffsize_mb)
                evaluated += 1
                ok_seqs = np.flatnonzero(np.asarray(g["kv_free"]) >= 0)
                free1 = float(np.asarray(g["kv_free"])[0])
                p_seen.append((plan, t_pre, free1))
                if len(ok_seqs) and t_pre * 1e3 <= ttft_ms:
                    j = int(ok_seqs[-1])
                    prefill.append((plan, t_pre, plan.dp / t_pre, g, chunk, int(p_seqs[j]),
                                    float(np.asarray(g["weights"]).ravel()[0]), u_p))
        # per P instance size, TP and chunk budget, the P plan with the best request rate per die carries
        # the pairing (a global shortlist would keep only sizes that leave no dies for D; every shape and
        # chunk so they all reach the simulation: the rate has no queueing, and a shorter chunk waits less
        # for a lockstep step)
        prefill.sort(key=lambda x: -x[2] / (x[0].tp * x[0].dp))
        by_shape: set = set()
        shortlist = []
        for x in prefill:
            k = (x[0].tp * x[0].dp, x[0].tp, x[4])
            if k not in by_shape:
                by_shape.add(k)
                shortlist.append(x)
        pd = _PDRows(space.every_row, wl, BK, ttft_ms, tpot_ms, d_tokens, p_len, k_p)
        for dplan in _instance_plans(base, space, "decode", d_tokens, d_heavy, mtp=drafter):
            for dcp in dcps(dplan):
                d = decode_side(dplan, dcp)
                evaluated += len(BK)
                tpot = d["t_step"] / E
                d_seen.append((dplan, d, tpot))
                r_d = dplan.dp * BK[:, 0] * E / (d["t_step"] * wl.osl)          # requests/s per D instance
                ok = np.flatnonzero((d["kv_free"] >= 0) & (tpot * 1e3 <= tpot_ms))
                # every (P plan, budget, D count, batch-K) row of this D plan, as arrays (_PDBlock)
                blk = _PDBlock(dplan, dcp, d, tpot, r_d, ok, shortlist, space.dies, pd.total)
                evaluated += blk.rows * blk.cols
                if space.every_row and pd.total + blk.rows * blk.cols > MAX_LISTED_ROWS:
                    raise AuditInputError("--csv/--png/--simulate 0", (
                        f"listing every P/D configuration of {', '.join(map(str, space.dies))} dies builds more than "
                        f"{MAX_LISTED_ROWS:,} rows; search fewer or smaller --dies, --tp or --batch values, or drop "
                        "--csv, --png and --simulate 0 (the ranked table builds only the rows it reads)"))
                pd.add(blk)
        disagg_rows = [c for _, c in pd.configs()]
        configs += disagg_rows
        feasible.update({(n, "disagg"): v for n, v in pd.count.items()})
        over_bound = None if space.every_row else pd.over_bound
        for n in space.dies:
            if not feasible.get((n, "disagg")):
                verdicts[n] = disagg_verdict(n, base, space, wl, BK, E, ttft_ms, tpot_ms,
                                             p_seen, d_seen, p_heavy, d_heavy, p_len)
    return configs, evaluated, verdicts, {"feasible": feasible, "over_bound": over_bound}
