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
import time
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np

from ..perf.mtp import expected_tokens
from ..errors import AuditInputError
from ..model.spec import ModelSpec
from ..parallel import ParallelPlan
from ..runtime.budget import usable_total
from ..runtime.feasibility import grid_budget, margin_util
from ..runtime.weights import plan_weights
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


@dataclass
class PlanSpace:
    dies: list[int]
    tps: tuple[int, ...] = DEFAULT_TPS
    batches: tuple[int, ...] = DEFAULT_BATCHES
    mtps: tuple[int, ...] = DEFAULT_MTPS
    sps: tuple[bool, ...] = (True, False)
    util: float = DEFAULT_UTIL          # the value being searched (one of ``utils``)
    kv_cache_dtype: str = "bf16"
    acceptance: float = 0.7
    disaggregated: bool = True
    utils: tuple[float, ...] = ()       # gpu-memory-utilization values searched; () -> (util,)
    prefill_tokens: tuple[int, ...] = DEFAULT_PREFILL_TOKENS    # P max_num_batched_tokens searched
    prefill_mtp: int = 1                # the drafter on P nodes (K = 1, as the engine's P/D tutorials run)
    simulate: int = 4                   # deployments simulated per die budget and mode (the shortlist)
    dcp: bool = True                    # search DCP = TP on decode / aggregated instances for long inputs
    dcp_only: bool = False              # --dcp N: every DSA instance of TP N runs DCP N (no DCP 1 variant)
    hccl_buffsize_mb: int = 200         # HCCL_BUFFSIZE of every instance (the mc2 communicator's buffer)

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
    sim_seconds: float = 0.0

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

    def __init__(self, spec, engine, recipe, device):
        from auditor_kernels.perf_core import sweep_grid

        from ..perf.device import kernel_vector
        self.sweep_grid = sweep_grid
        self.spec, self.engine, self.recipe, self.device = spec, engine, recipe, device
        # no per-step host slots: the host time is the serving model's, from each plan's own launches
        # (``decode_host``, ``_prefill_time``), as bench and perf add it; the device's derived per-step
        # constants are a reference step's (GLM's eager drafter), and adding them too counted host twice
        self.dv = kernel_vector(device)
        self.count = 0
        self.cache: dict = {}
        from ..serving.costs import host_params
        self.host = host_params(device)       # the serving model's host time, so estimates track the simulation

    def host_model(self, plan: ParallelPlan, k: int):
        """The serving host model (``perf.host.HostModel``) of a plan at K: its launches, its drafter's
        launches when the drafter runs eager (GLM) and its token split, cached per (plan, K)."""
        key = ("host", plan, k)
        if key not in self.cache:
            from ..perf.api import cached_program
            from ..perf.host import host_model
            pre, dec = (cached_program(self.spec, plan, self.engine, self.recipe, ph, "repetition", True)
                        for ph in ("prefill", "decode"))
            self.cache[key] = host_model(self.spec, pre, dec, k, self.device, self.host)
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
        prog = cached_program(self.spec, plan, self.engine, self.recipe, phase, "repetition", True)
        out = self.sweep_grid(*prog.arrays(), 1 if phase == "decode" else 0, float(plan.tp), keys, ctx, self.dv,
                              group_table(self.device, plan))
        self.count += out.size
        self.cache[key] = out
        return out


def _instance_plans(spec: ModelSpec, space: PlanSpace, role: str, engine: str, recipe: str, device: Any,
                    max_num_batched_tokens: int = 8192, rejected: list | None = None,
                    mtp: bool = False) -> list[ParallelPlan]:
    """Instance plans (TP x DP, EP = DP x TP for MoE) whose weights leave room on the die; the
    others go to ``rejected`` as (plan, worst-rank weight bytes). ``mtp``: the drafter is loaded,
    as the budget of a grid with any K > 0 counts it (so the filter and the budget share one W)."""
    sizes = sorted({s for n in space.dies for s in range(1, n + 1) if n % s == 0})
    limit = usable_total(device) * space.util
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
            w = max(plan_weights(spec, plan, engine, recipe))
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


def run_plan(spec: ModelSpec, engine: str, recipe: str, device: Any, wl: PlanWorkload, space: PlanSpace,
             ttft_ms: float, tpot_ms: float) -> PlanResult:
    """Estimate every candidate (steady state), then simulate the shortlist with the serving model
    (``auditor.planner.simulate``) and rank by the simulated figures."""
    from .simulate import simulate_shortlist
    with serial():
        t0 = time.perf_counter()
        kern = _Kernel(spec, engine, recipe, device)
        configs: list[Config] = []
        verdicts: dict[int, str] = {}
        evaluated = 0
        for u in space.searched_utils:
            sp = replace(space, util=u)
            c, n, v = _estimate(spec, engine, recipe, device, wl, sp, ttft_ms, tpot_ms, kern)
            configs += c
            evaluated += n
            for k, text in v.items():
                verdicts.setdefault(k, text)
        for n in list(verdicts):
            if any(c.mode == "disagg" and c.dies == n for c in configs):
                del verdicts[n]
        res = PlanResult(configs, 0, 0.0, wl, _notes(space, wl), verdicts, space.disaggregated, dies=tuple(space.dies))
        t1 = time.perf_counter()
        if space.simulate > 0:
            res.simulated = simulate_shortlist(res, spec, engine, recipe, device, wl, space, ttft_ms, tpot_ms)
        res.sim_seconds = time.perf_counter() - t1
        res.evaluated = evaluated + kern.count
        res.seconds = time.perf_counter() - t0
        return res


def _notes(space: PlanSpace, wl: PlanWorkload) -> list[str]:
    return [
        "ranking: every candidate is estimated (below); per die budget and mode the best "
        f"{space.simulate} by estimate, then the next while its estimate beats the best simulated row, are "
        "simulated with the serving model of `audit bench` (vLLM's scheduler over the perf model's step "
        "costs and the host model), at the largest client concurrency up to the decode slots whose mean "
        "TTFT and TPOT meet the SLA (halving, then bisection), over 2 x concurrency prompts; tok_s_die, "
        "TTFT, TPOT are the simulated figures; a row that misses the SLA or loses a fifth of its throughput "
        "with 5% fewer KV blocks per rank (same concurrency) is marked 'edge' after its headroom and ranks "
        "after the rows that hold: the model's KV pool is within about +-7% of the engine's on the published "
        "rows",
        "estimate (shortlist only): aggregated = (osl/E) decode steps at the mean context + B prefills "
        "stalling the batch; P/D = P instances balanced against D's request rate (B x E per step), with "
        "the closed-loop client's burst queueing at P (first wave in rounds of the P ranks, one P step of "
        "lockstep wait for the second)",
        "each instance runs at the largest gpu-memory-utilization (at most the searched one) whose "
        "(1 - util) margin holds what the engine allocates outside the KV budget (sparse-attention prefill "
        "transients the profile run skips, late HCCL groups, workspaces: `audit memory`'s outside-budget "
        "table); a P node with long chunks gets less (the engine's tutorial runs one at 0.82)",
        f"MTP: per-draft acceptance {space.acceptance:g}, E = 1 + a + ... + a^K tokens per step",
        f"disaggregated: P nodes chunk prompts at max_num_batched_tokens searched in "
        f"{', '.join(map(str, space.prefill_tokens))} (activation bounded by the chunk, not the prompt), run the "
        f"MTP drafter (K = {space.prefill_mtp}, as the engine's P/D tutorials) whose prefill pass TTFT includes, "
        "and hold the largest max_num_seqs of 1-16 whose full prompts fit their KV pool; the KV pull P -> D is "
        "timed in the simulation (196 GB/s per die, an assumption)",
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


def _estimate(spec: ModelSpec, engine: str, recipe: str, device: Any, wl: PlanWorkload, space: PlanSpace,
              ttft_ms: float, tpot_ms: float, kern: _Kernel) -> tuple[list[Config], int, dict[int, str]]:
    """The steady-state estimate of every candidate at one gpu-memory-utilization."""
    mtps = tuple(m for m in space.mtps if m == 0 or spec.mtp_layers) or (0,)
    BK = np.array(list(itertools.product(space.batches, mtps)), dtype=np.float64)
    keys_dec = np.column_stack([np.ones(len(BK)), BK[:, 0], BK[:, 1]])
    ctx_dec = np.array([float(wl.mean_context)])
    E = expected_tokens(BK[:, 1], space.acceptance)
    configs: list[Config] = []
    evaluated = 0
    u = space.util
    dcps = lambda plan: (((plan.tp,) if space.dcp_only else (1, plan.tp))  # noqa: E731
                         if space.dcp and spec.dsa and plan.tp > 1 and (space.dcp_only or wl.isl >= DCP_FROM_ISL)
                         else (1,))

    def decode_side(plan: ParallelPlan, dcp: int = 1) -> dict[str, np.ndarray]:
        # graph decode step + the host model's step constant and per-decode-token work
        t_step = kern.times(plan, "decode", keys_dec, ctx_dec).ravel() + kern.decode_host(plan, keys_dec)
        step_tokens = BK[:, 0] * (1 + BK[:, 1])
        # the instance runs at the largest util whose (1 - util) margin holds what it allocates outside
        # the KV budget (at its largest batch, K and step)
        ui = margin_util(spec, plan, engine, device, util=u, max_model_len=wl.max_len, max_num_seqs=int(BK[:, 0].max()),
                         max_num_batched_tokens=int(max(plan.max_num_batched_tokens, step_tokens.max())),
                         mtp=int(BK[:, 1].max()), kv_cache_dtype=space.kv_cache_dtype, dcp=dcp,
                         hccl_buffsize_mb=space.hccl_buffsize_mb)
        g = grid_budget(spec, plan, engine, recipe, device, batch=BK[:, 0], request_tokens=np.full(len(BK), wl.max_len),
                        step_tokens=step_tokens, mtp=BK[:, 1], util=ui,
                        kv_cache_dtype=space.kv_cache_dtype, dcp=dcp, hccl_buffsize_mb=space.hccl_buffsize_mb)
        n = len(BK)
        # per-row weights and page size (a K = 0 row loads no drafter: runtime.feasibility.grid_budget)
        g["weights"] = np.broadcast_to(np.asarray(g["weights"], dtype=float), (n,))
        g["page_block"] = np.broadcast_to(np.asarray(g["page_block"], dtype=float), (n,))
        return {"t_step": t_step, "util": ui, **g}

    # ---- aggregated
    drafter = bool(spec.mtp_layers) and bool(np.any(BK[:, 1] > 0))
    for plan in _instance_plans(spec, space, "mixed", engine, recipe, device, mtp=drafter):
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
                    configs.append(Config(
                        "agg", n, n, f"{n // s} x {_label(plan)}" + (f" DCP{dcp}" if dcp > 1 else ""), int(B[i]),
                        int(BK[i, 1]), t_pre * 1e3, tpot[i] * 1e3, per_die[i], 1 / tpot[i], d["weights"][i] / GiB,
                        d["num_blocks"][i] * d["page_block"][i] / GiB, int(d["num_blocks"][i] * d["block_tokens"]),
                        d["kv_free"][i] / GiB, t_pre * 1e3 <= ttft_ms and tpot[i] * 1e3 <= tpot_ms,
                        {"replicas": n // s, "tp": plan.tp, "dp": plan.dp, "ep": plan.ep, "sp": plan.sp,
                         "dsa_cp": plan.dsa_cp, "role": "mixed", "dcp": dcp}, util=d["util"]))

    # ---- disaggregated
    verdicts: dict[int, str] = {}
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
            for plan in _instance_plans(spec, space, "prefill", engine, recipe, device, chunk, p_heavy,
                                        mtp=k_p > 0):
                t_pre = _prefill_time(kern, plan, wl.isl, chunk, k_p)
                # a P node needs little KV: it runs at the largest util whose margin holds its chunk's
                # prefill transients (the engine's tutorial sets 0.82 for 32,560-token chunks)
                u_p = margin_util(spec, plan, engine, device, util=u, max_model_len=p_len,
                                  max_num_seqs=int(p_seqs[-1]), max_num_batched_tokens=chunk, mtp=k_p,
                                  kv_cache_dtype=space.kv_cache_dtype, hccl_buffsize_mb=space.hccl_buffsize_mb)
                g = grid_budget(spec, plan, engine, recipe, device, batch=p_seqs,
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
        for dplan in _instance_plans(spec, space, "decode", engine, recipe, device, d_tokens, d_heavy, mtp=drafter):
            for dcp in dcps(dplan):
                d = decode_side(dplan, dcp)
                evaluated += len(BK)
                tpot = d["t_step"] / E
                d_seen.append((dplan, d, tpot))
                r_d = dplan.dp * BK[:, 0] * E / (d["t_step"] * wl.osl)          # requests/s per D instance
                s_d = dplan.tp * dplan.dp
                ok = np.flatnonzero((d["kv_free"] >= 0) & (tpot * 1e3 <= tpot_ms))
                for pplan, t_pre, r_p, g, chunk, pseq, pw, u_p in shortlist:
                    s_p = pplan.tp * pplan.dp
                    for n in space.dies:
                        for nd in range(1, (n - s_p) // s_d + 1):
                            n_p = np.clip(np.ceil(nd * r_d[ok] / r_p), 1, (n - nd * s_d) // s_p)
                            used = n_p * s_p + nd * s_d
                            evaluated += len(ok)
                            for j, i in enumerate(ok):
                                conc, rate, ttft = closed_loop(nd * dplan.dp * int(BK[i, 0]), int(n_p[j]) * pplan.dp,
                                                               t_pre, wl.osl * tpot[i], ttft_ms / 1e3,
                                                               t_pre / -(-wl.isl // chunk))
                                configs.append(Config(
                                    "disagg", n, int(used[j]),
                                    f"{int(n_p[j])}P x {_label(pplan)} + {nd}D x {_label(dplan)}"
                                    + (f" DCP{dcp}" if dcp > 1 else ""),
                                    int(BK[i, 0]), int(BK[i, 1]), ttft * 1e3, tpot[i] * 1e3, rate * wl.osl / used[j],
                                    1 / tpot[i],
                                    d["weights"][i] / GiB, d["num_blocks"][i] * d["page_block"][i] / GiB,
                                    int(d["num_blocks"][i] * d["block_tokens"]), d["kv_free"][i] / GiB, True,
                                    {"n_prefill": int(n_p[j]), "n_decode": nd, "p_tp": pplan.tp, "p_dp": pplan.dp,
                                     "p_ep": pplan.ep, "p_sp": pplan.sp, "p_dsa_cp": pplan.dsa_cp, "p_weights_gib": pw / GiB,
                                     "p_max_num_batched_tokens": chunk, "p_max_model_len": p_len,
                                     "p_max_num_seqs": pseq, "p_mtp": k_p, "p_util": u_p,
                                     "tp": dplan.tp, "dp": dplan.dp, "ep": dplan.ep, "sp": dplan.sp, "dsa_cp": dplan.dsa_cp, "dcp": dcp,
                                     "max_num_batched_tokens": d_tokens, "role": "decode"}, util=d["util"],
                                    concurrency=conc))
        for n in space.dies:
            if not any(c.mode == "disagg" and c.dies == n for c in configs):
                verdicts[n] = disagg_verdict(n, spec, engine, recipe, device, space, wl, BK, E, ttft_ms, tpot_ms,
                                             p_seen, d_seen, p_heavy, d_heavy, p_len)
    return configs, evaluated, verdicts
