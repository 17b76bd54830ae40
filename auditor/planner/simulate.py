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
    out: list[list[Config]] = []
    for n in space.dies:
        for mode in ("agg", "disagg"):
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


def simulate_shortlist(res: PlanResult, base: DeploymentContext, wl: PlanWorkload, space: PlanSpace,
                       ttft_ms: float, tpot_ms: float, workers: int | None = None) -> int:
    """Replace the figures of the shortlisted rows by simulated ones; returns how many were simulated.

    The queues (one per die budget and mode) are independent: each row belongs to one queue and a
    queue's stopping rule reads only its own rows. So their rows run on up to ``workers`` threads
    (default: the machine's cores, at most 2; the scheduler kernel releases the GIL), a free thread
    running ahead in a long queue speculatively (``_run_rows``). Step-cost tables are
    built under one lock: they call the parallel perf kernel, which numba's default threading layer
    must not enter from two threads at once. The figures do not depend on the order."""
    import os
    import threading

    import numba

    from ..serving.costs import step_costs

    tables: dict[InstancePlan, Any] = {}
    lock = threading.Lock()

    def costs(inst: InstancePlan):
        key = InstancePlan(**{**inst.__dict__, "count": 1})
        with lock:
            if key not in tables:
                tables[key] = step_costs(base, inst)
            return tables[key]

    threads = numba.get_num_threads()       # numba's thread count is per thread: carry the caller's over

    def run_queue(queue: list[Config]) -> int:
        numba.set_num_threads(threads)
        n, best = 0, 0.0
        for i, c in enumerate(queue):
            # ``space.simulate`` rows always; then go on while the next row's estimate could still beat the
            # best simulated row that meets the SLA (an estimate right at the SLA often lands a concurrency
            # step lower in the simulation, so a fixed shortlist kept such losers)
            if i >= space.simulate and c.tok_s_die <= best:
                break
            _simulate_one(c, base, wl, space, ttft_ms, tpot_ms, costs)
            n += 1
            if c.meets_sla:
                best = max(best, c.tok_s_die)
        return n

    queues = [q for q in shortlist(res, space, ttft_ms, tpot_ms) if q]
    over = over_bound(res, ttft_ms, tpot_ms)
    if any(over.values()):
        res.notes.append(
            f"simulation bound: a candidate whose scheduler run needs more than {MAX_SIM_CELLS:,} queue cells "
            "(instance kinds x ranks x (4 x decode slots + 2)) is not simulated and the shortlist takes the next; "
            f"{over['agg']:,} aggregated and {over['disagg']:,} P/D rows within 1.25 x the SLA were over it")
    workers = min(2, os.cpu_count() or 1) if workers is None else workers
    if workers <= 1:
        return sum(run_queue(q) for q in queues)
    return _run_rows(queues, workers, space.simulate, threads,
                     lambda c: _simulate_one(c, base, wl, space, ttft_ms, tpot_ms, costs))


def _run_rows(queues: list[list[Config]], workers: int, first: int, threads: int, sim: Any) -> int:
    """``run_queue`` of every queue with rows, not queues, as the unit of work on ``workers`` threads.

    Why: a queue's stopping rule (the first ``first`` rows always; then the next while its estimate beats
    the best simulated row meeting the SLA) made it sequential, and one queue per thread left a thread
    idle while the other ran a long queue (128 dies: the aggregated queue of 12 rows ran ~1 s after the
    P/D queue of 4 had finished). Here a free thread takes the next row some queue surely runs, else the
    next row it may run (speculatively, on a copy); then each queue is replayed in order with the same
    rule over the same results, so exactly the rows ``run_queue`` simulates get their figures, and a
    speculative result the rule does not reach is dropped. A row's figures depend only on the row (and
    the shared step-cost tables), not on the order or the thread."""
    import copy
    import threading
    from concurrent.futures import ThreadPoolExecutor

    import numba

    results: list[dict[int, Config]] = [{} for _ in queues]
    claimed: list[set[int]] = [set() for _ in queues]
    cond = threading.Condition()

    def status(q: int, j: int) -> bool | None:
        """Whether ``run_queue`` simulates row j of queue q: True, False, or None (not known yet)."""
        if j < first:
            return True
        rows, res, best = queues[q], results[q], 0.0
        for i in range(j + 1):
            if i >= first and rows[i].tok_s_die <= best:
                return False                    # the rule stops at i <= j
            if i == j:
                return True
            r = res.get(i)
            if r is None:
                # the best over rows < j only grows as more finish: if a finished one already beats row j's
                # estimate, the rule stops at j or before
                known = max((x.tok_s_die for k, x in res.items() if k < j and x.meets_sla), default=0.0)
                return False if j >= first and rows[j].tok_s_die <= known else None
            if r.meets_sla:
                best = max(best, r.tok_s_die)
        return None

    def pick() -> tuple[int, int] | None:
        maybe = None
        for q, rows in enumerate(queues):
            for j in range(len(rows)):
                if j in claimed[q] or j in results[q]:
                    continue
                st = status(q, j)
                if st:
                    return q, j
                if st is None and (maybe is None or j < maybe[1]):
                    maybe = (q, j)
                break                       # later rows of this queue wait for this one's status
        return maybe

    def worker() -> None:
        numba.set_num_threads(threads)
        while True:
            with cond:
                task = pick()
                if task is None:
                    return
                q, j = task
                claimed[q].add(j)
            c = queues[q][j]
            r = copy.copy(c)
            r.detail, r.estimate = dict(c.detail), dict(c.estimate)
            sim(r)
            with cond:
                results[q][j] = r

    with ThreadPoolExecutor(max_workers=workers) as pool:
        for f in [pool.submit(worker) for _ in range(workers)]:
            f.result()
    n = 0
    for q, rows in enumerate(queues):
        best = 0.0
        for i, c in enumerate(rows):
            if i >= first and c.tok_s_die <= best:
                break
            r = results[q][i]
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

    def measure(d: Any, conc: int) -> tuple[bool, dict]:
        """The closed-loop client at ``conc`` on ``d``: (every request done within the SLA, metrics)."""
        m = metrics(simulate(d, BenchWorkload(conc, wl.isl, wl.osl, 2 * conc, acceptance=space.acceptance,
                                              prefix_caching=False)))
        ok = m["completed"] == m["num_prompts"] and m["mean_ttft_ms"] <= ttft_ms and m["mean_tpot_ms"] <= tpot_ms
        return ok, m

    def run(conc: int) -> tuple[bool, tuple[bool, dict]]:
        ok, m = measure(dep, conc)
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
