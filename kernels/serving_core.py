"""Numba core of the serving simulation (``auditor.serving.sim``): vLLM v1's scheduler, step by step.

Why a kernel: ``audit bench`` simulates thousands of engine steps per deployment and ``plan`` many
deployments; a Python loop over requests x steps would cost seconds. Everything is plain arrays.

What one step of one instance does (research/serving-facts.md §1, vLLM ``v1/core/sched/scheduler.py``):

* per DP rank, a token budget ``max_num_batched_tokens`` (``scheduler.py:348``); RUNNING requests
  first in arrival order (``:364-366``): a decode takes 1+K tokens (drafts truncated to the budget
  left, ``:511-513``), a partly prefilled prompt its next chunk ``min(left, budget)`` (``:384-397``);
* KV blocks are allocated for computed + new + K lookahead tokens (``:444-448``); when they do not
  fit, the LAST running request is preempted (recompute: its prompt and output so far are prefilled
  again, ``:442-491``, ``:929-949``) and no request is admitted in that step (``:545``);
* WAITING requests are admitted while running < ``max_num_seqs``, budget > 0, and the whole prompt
  fits in free blocks (``scheduler_reserve_full_isl``, ``kv_cache_manager.py:346-360``); their first
  chunk is ``min(prompt, budget)`` (``:650-669``);
* DP ranks step in lockstep (MoE: dummy batches, MC2 collectives; serving-facts §2); one rank with a
  prefill chunk makes the step eager on every rank (graph mode = min over ranks,
  ``model_runner_v1.py:4905-4911``); the step takes the slowest rank's time;
* requests are routed to the rank with the least ``4 x waiting + running``
  (``core_client.py:1350-1376``), ties to the first rank. A P/D deployment of the CI's external-DP runs sits
  behind vLLM-Ascend's load-balance proxy (``tests/e2e/nightly/multi_node/external_dp/scripts/
  external_dp_config.py:25``@182b75ea): it picks the prefiller of least ``active_tokens + 0.3 x
  active_kv_cache``, ties to the first listed (``examples/disaggregated_prefill_v1/
  load_balance_proxy_server_example.py:304-328``), and releases a request's prefill load at its first
  decode chunk (``:1027-1048``), so at concurrency 1 every request goes to the first prefiller, the
  warm-up's too, as here;
* a decode step yields 1 + (accepted drafts) tokens per request for k drafts scheduled: draft i is
  accepted with probability ``acc[i-1]`` after drafts 1..i-1 were (the conditional rates of
  ``auditor.perf.acceptance``; one per-draft a gives mean 1 + a + ... + a^k), sampled with ``seed``;
* prefix cache hits (``hits[i]`` tokens on instance i: whole blocks of its pool's hit alignment
  ``align[i]``, 128 tokens for one block table, the lcm of the groups' block sizes for a pool of groups
  sharing block ids; 0 on an instance without prefix caching) are computed already: only the suffix
  costs budget, but its chunks attend to the full context; the hit blocks are shared per rank. The
  cache is per DP rank (each DP rank is its own EngineCore with its own KV cache manager), and a
  rank holds the prefix only once a request on it has computed it: blocks are cached as each chunk
  finishes (``kv_cache_manager.py:425``; serving-facts §1.5). The prefix lookup runs when a
  request is admitted (``scheduler.py:590-595``), so a request queued behind the rank's first
  prompt hits, and requests admitted before it computed the prefix miss. ``warm`` ranks of
  instance 0 hold the prefix before the run (a client warm-up prompt; -1 = every rank);
* a decode step whose largest rank carries more tokens than ``graph_tokens[i]`` (the largest
  captured ACL graph size; -1 = no limit, 0 = eager) runs eager and pays the eager host cost;
* ``--async-scheduling`` (``async_sched[i]``, vLLM's AsyncScheduler: EngineCore schedules step N+1 and
  prepares its inputs while step N runs on the device) hides the share ``hp[5]`` (``async_overlap``) of
  the per-step host term ``step_ms`` behind the step's device time, up to that time;
* balance scheduling (vLLM-Ascend ``enable_balance_scheduling``, ``balance[i]``): when any DP rank's
  running count reached ``max_num_seqs`` at the end of the previous step, no rank admits a waiting
  request (a global admission freeze; ``patch_balance_schedule.py:146-162``, ``:396-403``,
  serving-facts §1.7);
* P/D: a prefill-role instance hands a finished prompt to the decode instance after the KV pull
  (``xfer`` seconds; MooncakeConnectorV1 is not layerwise, serving-facts §1.8); the decode instance
  admits it as a computed prompt whose first step samples the first token. A decode rank has its own
  prefix cache (unless ``hits[d]`` is 0): once it has loaded the shared prefix, later prompts pull only their suffix and share
  the prefix blocks (``mooncake_connector.py:1843-1871``@182b75ea: the remote count is the prompt
  minus the locally computed tokens).

Requests: ``rq_*`` arrays. States: 0 unsent, 1 waiting, 2 running, 3 done.
"""
from __future__ import annotations


import numpy as np
from numba import njit

INF = 1e300


@njit(cache=True)
def _interp(x: np.ndarray, y: np.ndarray, v: float) -> float:
    n = x.shape[0]
    if v <= x[0]:
        return y[0]
    if v >= x[n - 1]:
        if n == 1:
            return y[0]
        return y[n - 2] + (y[n - 1] - y[n - 2]) * (v - x[n - 2]) / (x[n - 1] - x[n - 2])
    i = np.searchsorted(x, v) - 1
    return y[i] + (y[i + 1] - y[i]) * (v - x[i]) / (x[i + 1] - x[i])


@njit(cache=True)
def _bilinear(tx: np.ndarray, cx: np.ndarray, z: np.ndarray, t: float, c: float) -> float:
    n = tx.shape[0]
    if t <= tx[0]:
        return _interp(cx, z[0], c) * t / max(tx[0], 1.0)
    if t >= tx[n - 1]:
        return _interp(cx, z[n - 1], c) * t / tx[n - 1]
    i = np.searchsorted(tx, t) - 1
    a = _interp(cx, z[i], c)
    b = _interp(cx, z[i + 1], c)
    return a + (b - a) * (t - tx[i]) / (tx[i + 1] - tx[i])


@njit(cache=True)
def expected(k: float, a: float) -> float:
    if a >= 1.0:
        return k + 1.0
    return (1.0 - a ** (k + 1.0)) / (1.0 - a)


@njit(cache=True)
def rank_time(i: int, eager: bool, t_pre: float, pre_ctx_s: float, nd: int, dtok: float, cdec: float,
              ctx: np.ndarray, tok: np.ndarray, dec: np.ndarray, pre_rest: np.ndarray, dec_ctx: np.ndarray) -> float:
    """Device seconds of one rank's share of a step (tables of instance ``i``)."""
    if not eager:
        b = nd if nd > 0 else 1          # an idle rank runs a dummy batch
        b = min(b, dec.shape[1] - 1)
        return _interp(ctx, dec[i, b], cdec)
    return _interp(tok, pre_rest[i], max(t_pre + dtok, 1.0)) + pre_ctx_s + nd * _interp(ctx, dec_ctx[i], cdec)


@njit(cache=True)
def step_host(eager: bool, t_pre: float, dtok: float, launches_eager: float, launches_draft: float,
              hp: np.ndarray, token_split: float = 1.0) -> float:
    """Host seconds of one step: hp = (launch s, prefill-token s, decode-token s, step s, drafter launch
    s, async share, DSA-CP prefill-token s); the per-prefill-token work is a rank's: a rank that splits
    its step's tokens over TP (DSA-CP) runs ``t_pre / token_split`` of them at its own price ``hp[6]``
    (``auditor.perf.host``)."""
    h = hp[3] + dtok * hp[2]
    if eager:
        per = hp[6] if token_split > 1.0 else hp[1]
        return h + launches_eager * hp[0] + t_pre / token_split * per
    return h + launches_draft * hp[4]


@njit(cache=True)
def async_host(eager: bool, launches_draft: float, hp: np.ndarray) -> float:
    """Host seconds of one step that ``--async-scheduling`` can run while the device executes: step_ms,
    plus, in a graph decode step, the eager drafter's launches (in an eager step every kernel's launch
    stays on the critical path: ``launch_us`` already prices only what the device work does not hide)."""
    if eager:
        return hp[3]
    return hp[3] + launches_draft * hp[4]


@njit(cache=True, nogil=True)     # plan runs independent simulations on two threads
def simulate(n_inst, ranks, seqs, budget, blocks, btok, bfix, kk, role, launches_eager, launches_draft, token_split,
             ctx, tok, dec, pre_rest, pre_ctx, dec_ctx, hp,
             n_req, conc, isl, osl, hits, arrival, acc, xfer,
             rq_send, rq_first, rq_done, step_log, warm, balance, seed, graph_tokens, preempts, async_sched, align,
             sla, gave_up):
    """Run the whole benchmark; fills ``rq_send/first/done`` (seconds), ``step_log[s] = (start,
    dt, decoding requests, instance, eager)`` and ``preempts[i]`` (requests instance i preempted for KV
    blocks, each recomputed); returns the number of steps logged.

    ``sla`` = (mean TTFT s, mean TPOT s), each <= 0 for none: the run stops (``gave_up[0] = 1``) once the
    mean over all ``n_req`` requests is sure to exceed one of them. Why: ``audit plan`` bisects the
    concurrency of a row, and most of its simulated time went to runs far over the SLA whose figures it
    discards. Sure means a lower bound over the requests' final values: TTFT of those with a first token,
    plus ``t - send`` for those sent and still waiting (and 0 for those not sent); TPOT likewise with
    ``t - first`` for those decoding, where ``t`` is the start of the step just applied."""
    np.random.seed(seed)
    R = ranks.max()
    S = seqs.max()
    run = np.full((n_inst, R, S), -1, np.int64)
    nrun = np.zeros((n_inst, R), np.int64)
    Q = 2 * n_req + 2
    wq = np.full((n_inst, R, Q), -1, np.int64)
    wh = np.full((n_inst, R), n_req + 1, np.int64)     # head index (preempted requests go before it)
    wt = np.full((n_inst, R), n_req + 1, np.int64)     # tail index (exclusive)
    # tokens per block per instance (a DCP instance's block holds DCP x block_size tokens) and the
    # shared prefix's blocks, resident once per rank
    shared = np.zeros(n_inst, np.int64)
    for i in range(n_inst):
        shared[i] = (hits[i] + btok[i] - 1) // btok[i]
    free = np.zeros((n_inst, R), np.int64)
    cached = np.zeros((n_inst, R), np.int64)        # prefix tokens this rank holds in its cache
    for r in range(ranks[0]):
        if warm < 0 or r < warm:
            cached[0, r] = hits[0]
    for i in range(n_inst):
        for r in range(ranks[i]):
            free[i, r] = blocks[i] - (shared[i] if hits[i] > 0 else 0)
    state = np.zeros(n_req, np.int64)
    left = np.zeros(n_req, np.int64)        # prompt tokens still to compute on the current instance
    comp = np.zeros(n_req, np.int64)        # tokens in the KV cache
    held = np.zeros(n_req, np.int64)
    out = np.zeros(n_req)
    ready = np.zeros(n_req)
    where = np.zeros(n_req, np.int64)       # instance
    rrank = np.zeros(n_req, np.int64)
    new = np.zeros(n_req, np.int64)
    isdec = np.zeros(n_req, np.bool_)
    clock = np.zeros(n_inst)
    nxt = 0
    inflight = 0
    done = 0
    nlog = 0
    t_free = 0.0                             # when the last client slot was freed
    # the SLA bound's running sums (``sla``): waiting = sent without a first token, decoding = first token
    # without done; ``s_*`` the sums of final TTFT / (done - first) over the requests past that stage
    n_wait, sum_send, s_ttft = 0, 0.0, 0.0
    n_dec, sum_first, s_span = 0, 0.0, 0.0
    ttft_cap = sla[0] * n_req * (1.0 + 1e-9)
    span_cap = sla[1] * max(osl - 1, 1) * n_req * (1.0 + 1e-9)

    while done < n_req:
        # ---- client: send while a slot is free (request j is sent at max(arrival, slot free))
        # ---- choose the instance whose next step starts first
        best = np.int64(-1)
        tbest = INF
        for i in range(n_inst):
            s_i = INF
            for r in range(ranks[i]):
                if nrun[i, r] > 0:
                    s_i = clock[i]
                    break
                if wh[i, r] < wt[i, r]:
                    # a D rank skips prompts whose KV is still loading (WAITING_FOR_REMOTE_KVS), so
                    # any queued prompt may start it; elsewhere the queue head does
                    last = wt[i, r] if role[i] == 2 else wh[i, r] + 1
                    for q in range(wh[i, r], last):
                        s_i = min(s_i, max(clock[i], ready[wq[i, r, q]]))
            if i == 0 and nxt < n_req and inflight < conc:
                s_i = min(s_i, max(clock[0], arrival[nxt], t_free))
            if s_i < tbest:
                tbest = s_i
                best = i
        if best < 0:
            break                            # nothing can ever run (a request larger than the KV pool)
        i = best
        clock[i] = tbest
        t = tbest
        if i == 0:
            while nxt < n_req and inflight < conc and arrival[nxt] <= t:
                j = nxt
                nxt += 1
                inflight += 1
                rq_send[j] = min(t, max(arrival[j], t_free))
                n_wait += 1
                sum_send += rq_send[j]
                state[j] = 1
                comp[j] = 0                 # the prefix lookup runs at admission
                left[j] = isl
                held[j] = shared[0] if hits[0] > 0 and role[0] != 2 else 0    # the shared prefix blocks
                ready[j] = t
                where[j] = 0
                # least 4 x waiting + running
                br = 0
                bs = 1 << 60
                for r in range(ranks[0]):
                    sc = 4 * (wt[0, r] - wh[0, r]) + nrun[0, r]
                    if sc < bs:
                        bs = sc
                        br = r
                rrank[j] = br
                wq[0, br, wt[0, br]] = j
                wt[0, br] += 1
        # ---- schedule every rank of instance i
        any_pre = role[i] == 1
        frozen = False
        if balance[i] != 0:
            for r in range(ranks[i]):
                if nrun[i, r] >= seqs[i]:
                    frozen = True
        for r in range(ranks[i]):
            bud = budget[i]
            preempted = False
            k = 0
            while k < nrun[i, r]:
                j = run[i, r, k]
                if left[j] > 0:
                    n = min(left[j], bud)
                    isdec[j] = False
                else:
                    n = min(1 + kk[i], bud)
                    isdec[j] = True
                if n <= 0:
                    new[j] = 0
                    k += 1
                    continue
                need = (comp[j] + n + kk[i] + btok[i] - 1) // btok[i] + bfix[i] - held[j]
                self_out = False
                while need > free[i, r]:
                    v = run[i, r, nrun[i, r] - 1]
                    nrun[i, r] -= 1
                    base = shared[i] if hits[i] > 0 else 0
                    free[i, r] += held[v] - base
                    held[v] = base
                    state[v] = 1
                    new[v] = 0
                    # recompute: the prompt and the output so far are prefilled again
                    comp[v] = 0
                    left[v] = isl + int(out[v])
                    wh[i, r] -= 1
                    wq[i, r, wh[i, r]] = v
                    preempted = True
                    preempts[i] += 1
                    if v == j:
                        self_out = True
                        break
                if self_out:
                    break
                free[i, r] -= need
                held[j] += need
                new[j] = n
                bud -= n
                k += 1
            if not preempted and not frozen:
                while nrun[i, r] < seqs[i] and bud > 0 and wh[i, r] < wt[i, r]:
                    j = wq[i, r, wh[i, r]]
                    if ready[j] > t and role[i] == 2:
                        # vLLM skips a prompt still loading its remote KV and keeps its place: the
                        # first ready prompt in queue order moves to the head
                        q = wh[i, r] + 1
                        while q < wt[i, r] and ready[wq[i, r, q]] > t:
                            q += 1
                        if q < wt[i, r]:
                            j = wq[i, r, q]
                            for m in range(q, wh[i, r], -1):
                                wq[i, r, m] = wq[i, r, m - 1]
                            wq[i, r, wh[i, r]] = j
                    if ready[j] > t:
                        break
                    if role[i] != 2 and comp[j] == 0 and cached[i, r] > 0:
                        # prefix lookup at admission: whole cached blocks, never the last prompt token
                        comp[j] = min(cached[i, r], hits[i])
                        left[j] -= comp[j]
                    if role[i] == 2 and out[j] == 0.0 and left[j] == 0:
                        n = 1                         # D: the pulled prompt's last token is recomputed
                        total = isl
                    else:
                        n = min(left[j], bud)
                        total = comp[j] + left[j]
                    full = (total + btok[i] - 1) // btok[i] + bfix[i] - held[j]
                    if full > free[i, r]:
                        break
                    need = full if n == 1 and role[i] == 2 else (comp[j] + n + btok[i] - 1) // btok[i] + bfix[i] - held[j]
                    free[i, r] -= need
                    held[j] += need
                    wh[i, r] += 1
                    run[i, r, nrun[i, r]] = j
                    nrun[i, r] += 1
                    state[j] = 2
                    new[j] = n
                    isdec[j] = left[j] == 0
                    bud -= n
        # ---- nothing scheduled and nothing running: a waiting prompt can never fit the KV pool
        busy = False
        for r in range(ranks[i]):
            for k in range(nrun[i, r]):
                if new[run[i, r, k]] > 0:
                    busy = True
        if not busy:
            for r in range(ranks[i]):
                if nrun[i, r] == 0 and wh[i, r] < wt[i, r] and ready[wq[i, r, wh[i, r]]] <= t:
                    j = wq[i, r, wh[i, r]]
                    wh[i, r] += 1
                    state[j] = 3
                    done += 1
                    inflight -= 1
                    t_free = t
            clock[i] = t + 1e-6
            continue
        # ---- cost of the step: the slowest rank; eager when any rank prefills
        t_pre_max = 0.0
        for r in range(ranks[i]):
            for k in range(nrun[i, r]):
                j = run[i, r, k]
                if new[j] > 0 and not isdec[j]:
                    any_pre = True
        dt_dev = 0.0
        dtok_max = 0.0
        nd_total = 0
        for r in range(ranks[i]):
            t_pre = 0.0
            pctx = 0.0
            nd = np.int64(0)
            dtok = 0.0
            csum = 0.0
            for k in range(nrun[i, r]):
                j = run[i, r, k]
                if new[j] <= 0:
                    continue
                if isdec[j]:
                    nd += 1
                    dtok += new[j]
                    csum += comp[j]
                else:
                    t_pre += new[j]
                    pctx += _bilinear(tok, ctx, pre_ctx[i], float(new[j]), float(comp[j]))
            cdec = csum / nd if nd > 0 else 0.0
            tr = rank_time(i, any_pre, t_pre, pctx, nd, dtok, cdec, ctx, tok, dec, pre_rest, dec_ctx)
            dt_dev = max(dt_dev, tr)
            t_pre_max = max(t_pre_max, t_pre)
            dtok_max = max(dtok_max, dtok)
            nd_total += nd
        # a decode step above the largest captured graph size runs eager (vLLM pads to the next captured
        # size; DP ranks pad to the largest rank's count, so the largest rank decides)
        if graph_tokens[i] >= 0 and dtok_max > graph_tokens[i]:
            any_pre = True
        dt = dt_dev + step_host(any_pre, t_pre_max, dtok_max, launches_eager[i], launches_draft[i], hp,
                                token_split[i])
        if async_sched[i] != 0:
            # --async-scheduling: the step's scheduling and input preparation (step_ms) run while the
            # device executes, so only what the device time does not cover is paid. In a graph decode
            # step the eager drafter's launches overlap too: the host does not wait for the sampled
            # tokens (model_runner_v1.py:2555-2561@182b75ea puts a -1 placeholder where the sync path
            # waits on the D2H copy, :2498-2508), so it queues the drafter's kernels behind the
            # replayed target graph while the device runs it
            dt -= hp[5] * min(async_host(any_pre, launches_draft[i], hp), dt_dev)
        te = t + dt
        if nlog < step_log.shape[0]:
            step_log[nlog, 0] = t
            step_log[nlog, 1] = dt
            step_log[nlog, 2] = nd_total
            step_log[nlog, 3] = i
            step_log[nlog, 4] = 1.0 if any_pre else 0.0
            nlog += 1
        clock[i] = te
        # ---- apply
        for r in range(ranks[i]):
            k = 0
            while k < nrun[i, r]:
                j = run[i, r, k]
                n = new[j]
                fin = False
                moved = False
                if n > 0:
                    new[j] = 0
                    if isdec[j]:
                        if role[i] == 2 and out[j] == 0.0:
                            out[j] = 1.0
                            comp[j] = isl
                            rq_first[j] = te
                            n_wait -= 1
                            sum_send -= rq_send[j]
                            s_ttft += te - rq_send[j]
                            n_dec += 1
                            sum_first += te
                        else:
                            comp[j] += n
                            # rejection sampling accepts a chain of drafts: draft m with probability
                            # acc[m-1] (conditional on drafts 1..m-1 kept; the last one beyond),
                            # stopping at the first rejection; seeded, so a run is reproducible. The
                            # spread of finish times matters under DP lockstep and balance scheduling
                            m = 1
                            while m < n and np.random.random() < acc[min(m - 1, acc.shape[0] - 1)]:
                                m += 1
                            out[j] += m
                    else:
                        comp[j] += n
                        left[j] -= n
                        if role[i] != 2 and hits[i] > 0 and cached[i, r] < hits[i]:
                            cached[i, r] = max(cached[i, r], min(comp[j], hits[i]) // align[i] * align[i])
                        if left[j] == 0:
                            if role[i] == 1:
                                moved = True
                            else:
                                out[j] += 1.0
                                if rq_first[j] < 0:
                                    rq_first[j] = te
                                    n_wait -= 1
                                    sum_send -= rq_send[j]
                                    s_ttft += te - rq_send[j]
                                    n_dec += 1
                                    sum_first += te
                    if out[j] >= osl:
                        fin = True
                if fin or moved:
                    base = shared[i] if hits[i] > 0 else 0
                    free[i, r] += held[j] - base
                    held[j] = 0
                    for m in range(k, nrun[i, r] - 1):
                        run[i, r, m] = run[i, r, m + 1]
                    nrun[i, r] -= 1
                    if fin:
                        state[j] = 3
                        rq_done[j] = te
                        n_dec -= 1
                        sum_first -= rq_first[j]
                        s_span += te - rq_first[j]
                        done += 1
                        inflight -= 1
                        t_free = te
                    else:
                        # P done: the D instance pulls the KV, then admits the computed prompt
                        d = n_inst - 1
                        br = 0
                        bs = 1 << 60
                        for q in range(ranks[d]):
                            sc = 4 * (wt[d, q] - wh[d, q]) + nrun[d, q]
                            if sc < bs:
                                bs = sc
                                br = q
                        where[j] = d
                        rrank[j] = br
                        state[j] = 1
                        left[j] = 0
                        comp[j] = 0
                        # D's own prefix cache: the connector pulls only what the rank does not hold
                        # (mooncake_connector.py:1866-1871 count = prompt - locally computed), and the
                        # prefix blocks are shared once the rank has loaded them
                        held[j] = shared[d] if hits[d] > 0 else 0
                        if hits[d] > 0 and cached[d, br] >= hits[d]:
                            ready[j] = te + xfer * (isl - hits[d]) / isl
                        else:
                            ready[j] = te + xfer
                            if hits[d] > 0:
                                cached[d, br] = hits[d]
                        wq[d, br, wt[d, br]] = j
                        wt[d, br] += 1
                else:
                    k += 1
        # steps run in start order (each iteration takes the instance whose next step starts first), so
        # every later first token or finish ends a step that starts at t or after
        if sla[0] > 0.0 or sla[1] > 0.0:
            if (sla[0] > 0.0 and s_ttft + n_wait * t - sum_send > ttft_cap) or (
                    sla[1] > 0.0 and s_span + n_dec * t - sum_first > span_cap):
                gave_up[0] = 1
                break
    return nlog
