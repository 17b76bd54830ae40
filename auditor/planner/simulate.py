"""The serving figures of a plan: its shortlist simulated with ``audit bench``'s serving model.

Every candidate is first estimated (``planner.search``, microseconds each: steady-state steps, and
for P/D the burst of the closed-loop client at P, ``closed_loop``). Per die budget and deployment
kind the candidates are taken best estimate first (TPOT within 1.25 x the SLA, TTFT within it; at
most two per deployment shape and four per instance shape, so the simulation, not the estimate,
chooses between shapes) and run through ``auditor.serving`` exactly as ``audit bench`` runs them: the
instance plans the launch prints (``planner.launch.instance_plans``), their step-cost tables, and the
scheduler simulation. The first
``space.simulate`` are always simulated; then the next while its estimate still beats the best
simulated row that meets the SLA (at most 3 x ``space.simulate``). The operating point is a
closed-loop client (``vllm bench serve --max-concurrency c --num-prompts 2c``) at the largest c of at
most the decode slots (D ranks x max_num_seqs, or one replica's ranks x max_num_seqs) whose mean TTFT
and mean TPOT meet the SLA, found by halving then bisection (``search.operating_point``, at most seven
runs). An aggregated deployment of R replicas is simulated as one replica (replicas are independent)
and its throughput multiplied by R.

Step-cost tables are built once per instance plan and shared by every deployment that uses it.
"""
from __future__ import annotations

from typing import Any

from ..context import DeploymentContext
from ..deployment import InstancePlan
from .launch import instance_plans
from .search import Config, PlanResult, PlanSpace, operating_point
from .workload import PlanWorkload

SLACK = 1.25        # the estimate is not a bound: shortlist rows within 1.25 x the SLA
EXTRA = 3           # at most this many x ``space.simulate`` per die budget and mode (see simulate_shortlist)
#: the scheduler kernel's waiting queues are (instance kinds x ranks x (2 x prompts + 2)) int64 cells and its
#: step loop visits every rank: a row whose first run (at its full decode slots, 2 x slots prompts) needs
#: more cells than this (256 MiB) is not simulated. Any row of at most 128 dies at batch <= 128 needs at most
#: 2 x 128 x (4 x 128 x 128 + 2) = 16.8M, so the bound only acts on larger budgets (1P x DP2048 + 7D x DP128
#: at 14,336 slots would need 1.9 GB and ~10 s per run)
MAX_SIM_CELLS = 1 << 25


def sim_cells(c: Config) -> int:
    """Waiting-queue cells of the scheduler kernel at the row's full decode slots (``serving.sim``: ranks
    per instance kind = DP x count; an aggregated row runs one replica)."""
    d = c.detail
    if c.mode == "agg":
        kinds, ranks, slots = 1, d["dp"], d["dp"] * c.batch
    else:
        kinds, ranks = 2, max(d["p_dp"] * d["n_prefill"], d["dp"] * d["n_decode"])
        slots = d["dp"] * d["n_decode"] * c.batch
    return kinds * ranks * (4 * slots + 2)


def shortlist(res: PlanResult, space: PlanSpace, ttft_ms: float, tpot_ms: float) -> list[list[Config]]:
    """Per die budget and mode, the candidates in the order the simulation takes them: best estimate
    first, TPOT within 1.25 x the SLA and TTFT within it, each deployment once, at most two per
    deployment shape and four per instance shape (``_shapes``: the estimate ranks shapes least
    reliably)."""
    return _shortlist(res, space, ttft_ms, tpot_ms, ("agg", "disagg"))


def _shortlist(res: PlanResult, space: PlanSpace, ttft_ms: float, tpot_ms: float, modes: tuple[str, ...]
               ) -> list[list[Config]]:
    """``shortlist``'s queues of ``modes`` only (a queue reads only its own mode's rows)."""
    out: list[list[Config]] = []
    for n in space.dies:
        for mode in modes:
            # DCP rows too: their instance plans carry the DCP size, so the step tables run SFA DCP (query
            # gather, LSE merge, the prefill KV gather) and the KV pool holds 1/DCP of each latent
            rows = [c for c in res.configs if c.dies == n and c.mode == mode
                    and c.ttft_ms <= ttft_ms * SLACK and c.tpot_ms <= tpot_ms * SLACK]
            rows.sort(key=lambda c: -c.tok_s_die)
            seen: set = set()
            per_shape: dict[tuple, int] = {}
            queue = []
            for c in rows:
                pairs, parts = _shapes(c)
                if (c.key in seen or any(per_shape.get(k, 0) >= 2 for k in pairs)
                        or any(per_shape.get(k, 0) >= 4 for k in parts)):
                    continue
                if sim_cells(c) > MAX_SIM_CELLS:
                    continue
                seen.add(c.key)
                for k in pairs + parts:
                    per_shape[k] = per_shape.get(k, 0) + 1
                queue.append(c)
                if len(queue) >= EXTRA * space.simulate:
                    break
            out.append(queue)
    return out


def over_bound(res: PlanResult, ttft_ms: float, tpot_ms: float) -> dict[str, int]:
    """Rows within 1.25 x the SLA over the simulation bound, per mode: P/D rows counted while they were
    enumerated (``res.pd_over_bound``; most are never built), the others from the built rows."""
    out = {"agg": 0, "disagg": 0}
    for c in res.configs:
        if (c.mode == "agg" or res.pd_over_bound is None) and c.ttft_ms <= ttft_ms * SLACK \
                and c.tpot_ms <= tpot_ms * SLACK and sim_cells(c) > MAX_SIM_CELLS:
            out[c.mode] += 1
    if res.pd_over_bound is not None:
        out["disagg"] = res.pd_over_bound
    return out


def _shapes(c: Config) -> tuple[tuple, tuple]:
    """(deployment shapes, instance shapes) of a row. The deployment shape is the aggregated or decode
    instance's (TP, DP) with, for P/D, the prefill instance's (TP, DP, chunk): two rows per deployment
    shape reach the simulation, so its budget goes to shapes, not to variants of one (batch, K, DCP).
    Each instance shape (a P shape, a D shape) gets at most four: a P-bound P shape pairs alike with
    every D, and the pairs must not fill the queue either."""
    d = c.detail
    own = ("d", d.get("tp"), d.get("dp"))
    if c.mode != "disagg":
        return (("pair", own),), (own,)
    pre = ("p", d.get("p_tp"), d.get("p_dp"), d.get("p_max_num_batched_tokens"))
    return (("pair", own, pre),), (own, pre)


class _Sim:
    """What every simulated row shares: the deployment, the workload, the SLA and the step-cost tables of
    each instance plan, built once under ``search.KERNEL_LOCK`` (they call the parallel perf kernel, which
    numba's threading layer must not enter from two threads at once; the planner's own kernel calls take
    the same lock)."""

    def __init__(self, base: DeploymentContext, wl: PlanWorkload, space: PlanSpace, ttft_ms: float,
                 tpot_ms: float):
        import numba
        self.base, self.wl, self.space, self.ttft_ms, self.tpot_ms = base, wl, space, ttft_ms, tpot_ms
        self.tables: dict[InstancePlan, Any] = {}
        self.threads = numba.get_num_threads()      # numba's thread count is per thread: carry the caller's over

    def costs(self, inst: InstancePlan):
        from ..serving.costs import step_costs
        from .search import KERNEL_LOCK
        key = InstancePlan(**{**inst.__dict__, "count": 1})
        with KERNEL_LOCK:
            if key not in self.tables:
                self.tables[key] = step_costs(self.base, inst)
            return self.tables[key]

    def one(self, c: Config) -> None:
        _simulate_one(c, self.base, self.wl, self.space, self.ttft_ms, self.tpot_ms, self.costs)


def _queue_stops(i: int, first: int, estimate: float, best: float) -> bool:
    """A queue's stopping rule at its row i: ``first`` rows (``space.simulate``) always; then go on while
    the row's estimate could still beat ``best``, the best simulated row so far that meets the SLA (an
    estimate right at the SLA often lands a concurrency step lower in the simulation, so a fixed
    shortlist kept such losers)."""
    return i >= first and estimate <= best


def _bound_note(res: PlanResult, ttft_ms: float, tpot_ms: float) -> None:
    over = over_bound(res, ttft_ms, tpot_ms)
    if any(over.values()):
        res.notes.append(
            f"simulation bound: a candidate whose scheduler run needs more than {MAX_SIM_CELLS:,} queue cells "
            "(instance kinds x ranks x (4 x decode slots + 2)) is not simulated and the shortlist takes the next; "
            f"{over['agg']:,} aggregated and {over['disagg']:,} P/D rows within 1.25 x the SLA were over it")


def _default_workers(workers: int | None) -> int:
    import os
    return min(2, os.cpu_count() or 1) if workers is None else workers


def simulate_shortlist(res: PlanResult, base: DeploymentContext, wl: PlanWorkload, space: PlanSpace,
                       ttft_ms: float, tpot_ms: float, workers: int | None = None) -> int:
    """Replace the figures of the shortlisted rows by simulated ones; returns how many were simulated.

    The queues (one per die budget and mode) are independent: each row belongs to one queue and a
    queue's stopping rule reads only its own rows. So their rows run on up to ``workers`` threads
    (default: the machine's cores, at most 2; the scheduler kernel releases the GIL), a free thread
    running ahead in a long queue speculatively (``_RowScheduler``). The figures do not depend on the
    order. ``Shortlist`` does the same with the aggregated queues started before the P/D estimate."""
    sim = _Sim(base, wl, space, ttft_ms, tpot_ms)
    queues = [q for q in shortlist(res, space, ttft_ms, tpot_ms) if q]
    _bound_note(res, ttft_ms, tpot_ms)
    return _run_rows(queues, _default_workers(workers), space.simulate, sim.threads, sim.one)


class Shortlist:
    """``simulate_shortlist`` in two steps, so the aggregated rows simulate while the P/D rows are estimated.

    ``start`` (called once every aggregated row of every searched util is estimated) puts the aggregated
    queues on a ``_RowScheduler`` worked by one background thread; the P/D estimate (Python, holding the GIL
    most of the time) then runs beside the scheduler kernel (which releases it). ``finish`` adds the P/D
    queues, works the rest on ``workers`` threads and commits. Rows are simulated on copies and committed
    only in ``finish``, so the shortlist, the bound note and every figure are what ``simulate_shortlist``
    gives: an aggregated queue reads only aggregated rows, which the P/D estimate does not touch. With one
    worker everything runs in ``finish``, queue by queue."""

    def __init__(self, base: DeploymentContext, wl: PlanWorkload, space: PlanSpace, ttft_ms: float,
                 tpot_ms: float, workers: int | None = None):
        self.sim = _Sim(base, wl, space, ttft_ms, tpot_ms)
        self.workers = _default_workers(workers)
        self.sched = _RowScheduler(space.simulate, self.sim.threads, self.sim.one)
        self.agg: list[list[Config]] | None = None
        self.thread = None
        self.error: BaseException | None = None
        self.started_at: float | None = None

    def _work(self) -> None:
        try:
            self.sched.work()
        except BaseException as e:          # re-raised by finish
            self.error = e

    def start(self, agg_rows: list[Config]) -> None:
        import threading
        import time
        sim = self.sim
        tmp = PlanResult(list(agg_rows), 0, 0.0, sim.wl, [])
        self.agg = [q for q in _shortlist(tmp, sim.space, sim.ttft_ms, sim.tpot_ms, ("agg",)) if q]
        self.started_at = time.perf_counter()
        if self.workers > 1 and self.agg:
            self.sched.add(self.agg)
            self.thread = threading.Thread(target=self._work, name="plan-sim-agg", daemon=True)
            self.thread.start()

    def stop(self) -> None:
        """Let the background thread end after its current row (the estimate failed)."""
        if self.thread is not None:
            with self.sched.cond:
                self.sched.stopped = True
            self.thread.join()

    def finish(self, res: PlanResult) -> int:
        import threading
        sim = self.sim
        if self.agg is None:
            self.start([c for c in res.configs if c.mode == "agg"])
        pd = [q for q in _shortlist(res, sim.space, sim.ttft_ms, sim.tpot_ms, ("disagg",)) if q]
        _bound_note(res, sim.ttft_ms, sim.tpot_ms)
        if self.thread is None:
            self.sched.add(self.agg)
        self.sched.add(pd)
        extra = [threading.Thread(target=self._work, daemon=True)
                 for _ in range(self.workers - 1 - (self.thread is not None and self.thread.is_alive()))]
        for t in extra:
            t.start()
        self._work()                    # this thread works too
        for t in extra + ([self.thread] if self.thread is not None else []):
            t.join()
        if self.error is not None:
            raise self.error
        return self.sched.commit()


def _run_rows(queues: list[list[Config]], workers: int, first: int, threads: int, sim: Any) -> int:
    """Every queue under its stopping rule, with rows, not queues, as the unit of work on ``workers``
    threads, this one included (``_RowScheduler``; one worker runs the queues in order, row by row);
    returns how many rows were simulated."""
    from concurrent.futures import ThreadPoolExecutor
    sched = _RowScheduler(first, threads, sim)
    sched.add(queues)
    with ThreadPoolExecutor(max_workers=max(workers - 1, 1)) as pool:
        others = [pool.submit(sched.work) for _ in range(workers - 1)]
        sched.work()
        for f in others:
            f.result()
    return sched.commit()


class _RowScheduler:
    """Rows of queues simulated by any number of worker threads, with each queue's stopping rule.

    Why: a queue's stopping rule (the first ``first`` rows always; then the next while its estimate beats
    the best simulated row meeting the SLA) made it sequential, and one queue per thread left a thread
    idle while the other ran a long queue (128 dies: the aggregated queue of 12 rows ran ~1 s after the
    P/D queue of 4 had finished). Here a free thread takes the next row some queue surely runs, else the
    next row it may run (speculatively, on a copy); ``commit`` then replays each queue in order with the
    same rule over the same results, so exactly the rows one thread going queue by queue simulates get
    their figures, and a
    speculative result the rule does not reach is dropped. A row's figures depend only on the row (and
    the shared step-cost tables), not on the order, the thread or when its queue was added (``add``)."""

    def __init__(self, first: int, threads: int, sim: Any):
        import threading
        self.first, self.threads, self.sim = first, threads, sim
        self.queues: list[list[Config]] = []
        self.results: list[dict[int, Config]] = []
        self.claimed: list[set[int]] = []
        self.cond = threading.Condition()
        self.stopped = False                # ``Shortlist.stop``: no further row is taken

    def add(self, queues: list[list[Config]]) -> None:
        with self.cond:
            for q in queues:
                self.queues.append(q)
                self.results.append({})
                self.claimed.append(set())

    def status(self, q: int, j: int) -> bool | None:
        """Whether the stopping rule reaches row j of queue q: True, False, or None (not known yet)."""
        first = self.first
        if j < first:
            return True
        rows, res, best = self.queues[q], self.results[q], 0.0
        for i in range(j + 1):
            if _queue_stops(i, first, rows[i].tok_s_die, best):
                return False                    # the rule stops at i <= j
            if i == j:
                return True
            r = res.get(i)
            if r is None:
                # the best over rows < j only grows as more finish: if a finished one already beats row j's
                # estimate, the rule stops at j or before
                known = max((x.tok_s_die for k, x in res.items() if k < j and x.meets_sla), default=0.0)
                return False if rows[j].tok_s_die <= known else None
            if r.meets_sla:
                best = max(best, r.tok_s_die)
        return None

    def pick(self) -> tuple[int, int] | None:
        if self.stopped:
            return None
        maybe = None
        for q, rows in enumerate(self.queues):
            for j in range(len(rows)):
                if j in self.claimed[q] or j in self.results[q]:
                    continue
                st = self.status(q, j)
                if st:
                    return q, j
                if st is None and (maybe is None or j < maybe[1]):
                    maybe = (q, j)
                break                       # later rows of this queue wait for this one's status
        return maybe

    def work(self) -> None:
        """Simulate rows until none is left that some queue may run (a worker thread's loop)."""
        import copy

        import numba
        numba.set_num_threads(self.threads)
        while True:
            with self.cond:
                task = self.pick()
                if task is None:
                    return
                q, j = task
                self.claimed[q].add(j)
                c = self.queues[q][j]
            r = copy.copy(c)
            r.detail, r.estimate = dict(c.detail), dict(c.estimate)
            self.sim(r)
            with self.cond:
                self.results[q][j] = r

    def commit(self) -> int:
        """Give each queue's rows the figures one thread going queue by queue would; returns how many were
        simulated."""
        n = 0
        for q, rows in enumerate(self.queues):
            best = 0.0
            for i, c in enumerate(rows):
                if _queue_stops(i, self.first, c.tok_s_die, best):
                    break
                r = self.results[q][i]
                detail = c.detail
                for k, v in r.__dict__.items():
                    if k != "detail":
                        setattr(c, k, v)
                detail.clear()
                detail.update(r.detail)
                n += 1
                if c.meets_sla:
                    best = max(best, c.tok_s_die)
        return n


def _simulate_one(c: Config, base: DeploymentContext, wl: PlanWorkload, space: PlanSpace, ttft_ms: float,
                  tpot_ms: float, costs: Any) -> None:
    """Replace one row's figures by the simulation's at its operating point (the largest concurrency of
    the ladder whose mean TTFT and TPOT meet the SLA)."""
    from ..serving.bench import metrics
    from ..serving.sim import EDGE_SPREAD, EDGE_STEP, BenchWorkload, Deployment, scaled_pool, simulate
    insts = instance_plans(c, max_model_len=wl.max_len, isl=wl.isl, kv_cache_dtype=space.kv_cache_dtype)
    reps = 1
    if c.mode == "agg":
        reps = insts[0].count
        insts = [InstancePlan(**{**insts[0].__dict__, "count": 1})]
    dep = Deployment(base, insts)
    dep._costs = [costs(i) for i in insts]
    dec = insts[-1]

    def measure(d: Any, conc: int, give_up: bool = False) -> tuple[bool, dict]:
        """The closed-loop client at ``conc`` on ``d``: (every request done within the SLA, metrics).
        ``give_up``: stop the run once it surely misses the SLA (its metrics are then partial)."""
        r = simulate(d, BenchWorkload(conc, wl.isl, wl.osl, 2 * conc, acceptance=space.acceptance,
                                      prefix_caching=False), give_up_sla=(ttft_ms, tpot_ms) if give_up else None)
        if r.gave_up:
            return False, {}            # a partial run: nothing reads its figures (``run``)
        m = metrics(r)
        ok = m["completed"] == m["num_prompts"] and m["mean_ttft_ms"] <= ttft_ms and m["mean_tpot_ms"] <= tpot_ms
        return ok, m

    def run(conc: int) -> tuple[bool, tuple[bool, dict]]:
        # operating_point keeps a missing run's metrics only at concurrency 1 (when nothing meets the SLA)
        ok, m = measure(dep, conc, give_up=conc > 1)
        return ok, (ok, m)

    conc, (ok, m) = operating_point(dec.count * dec.dp * dec.max_num_seqs, run)
    c.estimate = {"ttft_ms": c.ttft_ms, "tpot_ms": c.tpot_ms, "tok_s_die": c.tok_s_die}
    c.simulated = True
    if m["completed"] < m["num_prompts"]:
        c.meets_sla = False         # figures stay the estimate's; the simulation says why it failed
        c.detail["simulation"] = (f"{m['failed']} of {m['num_prompts']} requests never finished "
                                  "(a prompt larger than the instance's KV pool)")
        return
    c.concurrency = conc * reps
    c.ttft_ms, c.tpot_ms = m["mean_ttft_ms"], m["mean_tpot_ms"]
    c.tok_s_die = m["output_throughput"] * reps / c.dies_used
    c.tok_s_user = 1e3 / c.tpot_ms if c.tpot_ms > 0 else 0.0
    c.meets_sla = bool(ok)
    if ok:
        # the KV edge: the same client against 5 % fewer blocks per rank (serving.sim.kv_sensitivity's
        # step); admission needs whole prompts, so one request fewer per rank can cost a fifth or more.
        # A pool that holds max_num_seqs whole requests even 5 % smaller never binds: the run is the same.
        thr = c.tok_s_die
        if _kv_may_bind(dep, wl, 1.0 - EDGE_STEP):
            low_ok, low = measure(scaled_pool(dep, 1.0 - EDGE_STEP), conc)
            thr = low["output_throughput"] * reps / c.dies_used
            c.kv_edge = not low_ok or thr * EDGE_SPREAD < c.tok_s_die
        c.detail["kv_edge_tok_s_die"] = round(thr, 3)


def _kv_may_bind(dep: Any, wl: PlanWorkload, factor: float) -> bool:
    """Whether some instance's KV pool at ``factor`` x its blocks could refuse or preempt a request: a
    rank holds at most max_num_seqs requests of at most isl + osl + K tokens (no prefix caching here), each
    with its fixed blocks (a pool's windows and states)."""
    for c in dep.costs():
        per_req = -(-(wl.isl + wl.osl + int(c.inst.mtp)) // int(c.block_tokens)) + int(c.fixed_blocks)
        if c.inst.max_num_seqs * per_req > int(c.num_blocks * factor):
            return True
    return False
