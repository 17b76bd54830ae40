"""Numba core of ``audit perf``: token-shape propagation and roofline cost over a layer program.

Why a kernel: a sweep evaluates the same program (ops x layers) for hundreds of thousands of
workloads; the Python side builds the program once per (model, plan, quant, phase) as plain
arrays and these functions turn (tokens, context, batch, mtp) into per-op token counts, FLOPs,
bytes and times. The formulas live here and only here; ``auditor.perf.ops`` documents them.
Every code and column index below is named in ``kinds.py`` (the one place to declare an op kind).
One op row goes through one chain, ``op_tokens`` -> ``op_work`` -> ``op_time``, inside ``ops_time``;
``evaluate_program`` (per-op rows for reports) and ``partial_time`` (the sweep) both call it.

Program arrays (one row per op, see ``auditor.perf.program.Program.arrays``):

* ``op_i[n, N_OPI]`` int64: kind, stream, exp, dpmul, mma dtype code (``OPI_*``)
* ``op_f[n, N_OPF]`` float64: the kind's parameter slots (``LINEAR_K`` ...), weight bytes, count
* ``op_m[n]`` int64: multiplicity mode (``MULT_*``: fixed, first MTP pass, later MTP passes)
* ``co_i[m, N_COI]`` int64: collective kind, group, stream, exp, dpmul (``COI_*``)
* ``co_f[m, N_COF]`` float64: bytes per token, constant bytes, count;  ``co_m[m]`` multiplicity mode

Token count of an op: base = requests x queries of its stream; ``exp`` < 0 means the token
range is sequence-sharded by TP (ceil(base / tp^-exp)), ``exp`` > 0 means it was gathered more
than once (base x tp^exp, a contract violation the tests look for); times ``dpmul`` for
tensors gathered across DP.

Streams (``stream_table``): ``STREAM_MAIN`` = the main forward (prefill: batch x tokens; decode:
batch x (1+K)), ``STREAM_MTP_LATER`` = a later MTP drafter pass (batch x 1, context grown by the
main query length), ``STREAM_ROWS`` = rows that reach lm_head (prefill: one per request; decode:
1+K per request), ``STREAM_DRAFT_BLOCK`` = a block drafter's query block (DSpark: K queries per request
in one pass, after the main query).

Device vector ``dev[N_DEV]`` (``DEV_*``): hbm bytes/s, eta_memory, eta_compute, eta_sfa_kv and
eta_indexer_cache (relative to memory), static mma / gp / comm s, vector peak FLOP/s, then the mma
peak FLOP/s per dtype code (0 = absent -> BF16). Groups ``grp[N_GROUPS, N_GRP]``: per tp/dp/ep row
(size, effective bytes/s, latency s).
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from .collectives import collective_time_s
from .kinds import (ATTN, ATTN_HEADS, ATTN_HEAD_DIM, ATTN_KV_HEADS, BMM, BMM_HEADS, BMM_K, BMM_N, CAPPED,
                    COF_BYTES_PER_TOKEN, COF_CONST_BYTES, COF_COUNT, COF_CTX_BYTES, COI_DPMUL, COI_EXP, COI_GROUP,
                    COI_KIND, COI_STREAM, CONTEXT_KINDS, CO_BYTES, CO_COUNT, CO_TIME, DEV_ETA_COMPUTE, DEV_ETA_INDEXER_CACHE,
                    DEV_ETA_MEMORY, DEV_ETA_SFA_KV, DEV_HBM, DEV_HOST_DECODE, DEV_HOST_PREFILL, DEV_MMA_PEAK,
                    DEV_STATIC_COMM, DEV_STATIC_GP, DEV_STATIC_MMA, DEV_VECTOR_PEAK, DEV_VECTOR_SORT, DT_BF16,
                    EMBED, EMBED_H, GMM, GMM_ACT_BYTES, GMM_DOMAIN, GMM_DYNAMIC, GMM_E, GMM_H, GMM_I, GMM_TOPK,
                    GRP_BW, GRP_LATENCY, GRP_SIZE, IDX_DIM, IDX_HEADS, IDX_KEY_BYTES, IDX_SCORE, IDX_TILE,
                    IDX_RATIO, IDX_TOPK, IDX_VEC_PER_HEAD, LINEAR, LINEAR_ACT_BYTES, LINEAR_DYNAMIC, LINEAR_K, LINEAR_N,
                    LINEAR_OUT_BYTES, MULT_ALWAYS, MULT_FIRST_MTP, N_CO_OUT, N_OUT, N_PARAMS, N_ST, N_STREAMS,
                    OPF_COUNT, OPF_WEIGHT, OPI_DPMUL, OPI_DTYPE, OPI_EXP, OPI_KIND, OPI_STREAM, OUT_BOUND,
                    OUT_BYTES, OUT_COUNT, OUT_MMA, OUT_SORT, OUT_TIME, OUT_TOKENS, OUT_T_COMPUTE, OUT_T_MEMORY,
                    OUT_VEC, RND_INDEXER_CACHE, RND_NONE, RND_SFA_KV, ROUTER_E, ROUTER_K, ROUTER_TOPK, SFA,
                    SFA_CAP, SFA_ENTRY_BYTES, SFA_HEADS, SFA_LATENT, SFA_RATIO, SFA_ROPE, SFA_SPLIT, SFA_TILE, STREAM_MAIN,
                    STREAM_DRAFT_BLOCK, STREAM_MTP_LATER, STREAM_ROWS, ST_CONTEXT, ST_DECODE, ST_QUERIES, ST_REQUESTS, TOPK_K,
                    TOPK_PER_KEPT, TOPK_PER_KEY, TOPK_RATIO, VEC, VEC_D, VEC_OPS, VEC_TENSORS, ZERO)

__all__ = ["N_OUT", "N_CO_OUT", "evaluate_program", "partial_time", "sweep_grid", "stream_table", "op_work",
           "ops_time", "colls_time", "host_time", "context_dependent"]


@njit(cache=True)
def stream_table(decode: int, tokens: float, context: float, batch: float, mtp: float) -> np.ndarray:
    """[N_STREAMS, N_ST] rows of (requests, queries per request, context, is_decode) per stream."""
    s = np.empty((N_STREAMS, N_ST))
    q0 = 1.0 + mtp if decode else tokens
    s[STREAM_MAIN, ST_REQUESTS] = batch
    s[STREAM_MAIN, ST_QUERIES] = q0
    s[STREAM_MAIN, ST_CONTEXT] = context
    s[STREAM_MAIN, ST_DECODE] = decode
    s[STREAM_MTP_LATER, ST_REQUESTS] = batch
    s[STREAM_MTP_LATER, ST_QUERIES] = 1.0
    s[STREAM_MTP_LATER, ST_CONTEXT] = context + q0
    s[STREAM_MTP_LATER, ST_DECODE] = 1.0
    s[STREAM_ROWS, ST_REQUESTS] = batch
    s[STREAM_ROWS, ST_QUERIES] = 1.0 + mtp if decode else 1.0
    s[STREAM_ROWS, ST_CONTEXT] = context
    s[STREAM_ROWS, ST_DECODE] = decode
    s[STREAM_DRAFT_BLOCK, ST_REQUESTS] = batch
    s[STREAM_DRAFT_BLOCK, ST_QUERIES] = mtp
    s[STREAM_DRAFT_BLOCK, ST_CONTEXT] = context + q0
    s[STREAM_DRAFT_BLOCK, ST_DECODE] = 1.0
    return s


@njit(cache=True)
def op_tokens(base: float, exp: int, dpmul: int, tp: float) -> float:
    if exp == 0:
        t = base
    elif exp == -1:
        t = math.ceil(base / tp)
    elif exp < 0:
        t = math.ceil(base / tp ** (-exp))
    else:
        t = base * tp ** exp
    return t * dpmul


@njit(cache=True)
def causal_keys(n: float, q: float, c: float) -> float:
    """Sum over queries i = 1..q of (c + i) keys, for n requests."""
    return n * (q * c + q * (q + 1.0) / 2.0)


@njit(cache=True)
def capped_pairs(n: float, q: float, c: float, cap: float) -> float:
    """Sum over i = 1..q of min(c + i, cap), for n requests (top-k-capped causal attention)."""
    m = min(max(cap - c, 0.0), q)
    return n * (m * c + m * (m + 1.0) / 2.0 + (q - m) * cap)


@njit(cache=True)
def ratio_pairs(n: float, q: float, c: float, r: float, cap: float) -> float:
    """Sum over i = 1..q of min((c + i) / r, cap), for n requests: attention over a cache that keeps one
    row per ``r`` tokens (compressed attention), top-k capped; r <= 1 is one row per token."""
    if r <= 1.0:
        return capped_pairs(n, q, c, cap)
    m = min(max(cap * r - c, 0.0), q)
    return n * ((m * c + m * (m + 1.0) / 2.0) / r + (q - m) * cap)


@njit(cache=True)
def mult(mode: int, mtp: float) -> float:
    if mode == MULT_ALWAYS:
        return 1.0
    if mode == MULT_FIRST_MTP:
        return 1.0 if mtp >= 1.0 else 0.0
    return max(mtp - 1.0, 0.0)


@njit(cache=True)
def op_work(kind: int, p: np.ndarray, w: float, t: float, frac: float, st: np.ndarray) -> tuple:
    """(mma FLOPs, vector FLOPs, vector sort ops, sequential bytes, random bytes, random kind,
    launches) of one op.

    ``t`` = tokens the op processes on this rank; ``frac`` = t / stream tokens (the share of the
    stream's queries this rank owns, used for attention-like work); ``st`` = (requests, queries,
    context, is_decode) of its stream. Random kind: ``RND_*`` (none, SFA KV gather, indexer cache).
    Prefill and decode share every formula: a decode step is a prefill of 1 + K queries, so
    summing single-token steps over a context range gives the prefill of that range.
    """
    n = st[ST_REQUESTS]
    q = st[ST_QUERIES]
    c = st[ST_CONTEXT]
    if kind == LINEAR:
        k = p[LINEAR_K]
        nn = p[LINEAR_N]
        dyn = p[LINEAR_DYNAMIC] > 0.5
        mma = 2.0 * t * k * nn
        vec = 4.0 * t * k if dyn else 0.0
        seq = t * k * p[LINEAR_ACT_BYTES] + w + t * nn * p[LINEAR_OUT_BYTES] + (t * k * 2.0 if dyn else 0.0)
        return mma, vec, 0.0, seq, 0.0, RND_NONE, 1.0
    if kind == BMM:
        h = p[BMM_HEADS]
        mma = 2.0 * t * h * p[BMM_K] * p[BMM_N]
        seq = t * h * p[BMM_K] * 2.0 + w + t * h * p[BMM_N] * 2.0
        return mma, 0.0, 0.0, seq, 0.0, RND_NONE, 1.0
    if kind == VEC:
        return 0.0, t * p[VEC_D] * p[VEC_OPS], 0.0, t * p[VEC_D] * 2.0 * p[VEC_TENSORS], 0.0, RND_NONE, 1.0
    if kind == SFA:
        h = p[SFA_HEADS]
        dl = p[SFA_LATENT]
        dr = p[SFA_ROPE]
        cap = p[SFA_CAP]
        pairs = ratio_pairs(n, q, c, p[SFA_RATIO], cap) * frac / max(p[SFA_SPLIT], 1.0)
        mma = 2.0 * pairs * h * (dl + dr) + 2.0 * pairs * h * dl
        vec = 4.0 * pairs * h
        seq = t * h * (dl + dr) * 2.0 + t * h * dl * 2.0
        if cap < CAPPED:
            seq += t * cap * 4.0
        # every query row gathers its own selected entries; rows of one tile share a staged set
        entries = pairs / max(min(p[SFA_TILE], q), 1.0)
        return mma, vec, 0.0, seq, entries * p[SFA_ENTRY_BYTES], RND_SFA_KV, 1.0
    if kind == IDX_SCORE:
        ih = p[IDX_HEADS]
        d = p[IDX_DIM]
        r = max(p[IDX_RATIO], 1.0)        # compressed keys: one per r tokens
        keys = causal_keys(n, q, c) * frac / r
        mma = 2.0 * keys * ih * d
        vec = p[IDX_VEC_PER_HEAD] * keys * ih
        seq = t * ih * d * 2.0 + t * ih * 4.0
        # a request's key cache is read once per tile of its query rows on this rank; a sequence-sharded
        # step (DSA-CP, frac < 1) puts a contiguous n*q*frac rows here, which touch about n*frac + 1 of
        # the n requests (one straddles each shard edge), not all n
        present = min(n, n * frac + 1.0) if frac < 1.0 else n
        rows = n * q * frac / present if present > 0 else 0.0
        reads = present * math.ceil(rows / max(p[IDX_TILE], 1.0) - 1e-9)
        return mma, vec, 0.0, seq, reads * (c + q) / r * p[IDX_KEY_BYTES], RND_INDEXER_CACHE, 1.0
    if kind == IDX_TOPK:
        keys = causal_keys(n, q, c) * frac / max(p[TOPK_RATIO], 1.0)
        srt = p[TOPK_PER_KEY] * keys + p[TOPK_PER_KEPT] * p[TOPK_K] * t
        return 0.0, 0.0, srt, t * p[TOPK_K] * 4.0, 0.0, RND_NONE, 0.0
    if kind == ROUTER_TOPK:
        return 0.0, 4.0 * t * p[ROUTER_E], 0.0, t * p[ROUTER_E] * 4.0 + t * p[ROUTER_K] * 8.0, 0.0, RND_NONE, 1.0
    if kind == GMM:
        h = p[GMM_H]
        inter = p[GMM_I]
        k = p[GMM_TOPK]
        a = p[GMM_ACT_BYTES]
        rows = t * k
        mma = 6.0 * rows * h * inter
        vec = 3.0 * rows * inter
        if p[GMM_DYNAMIC] > 0.5:
            vec += 4.0 * rows * (h + inter)
        hit = 1.0 - (1.0 - k / p[GMM_E]) ** (t * p[GMM_DOMAIN]) if t > 0 else 0.0
        seq = rows * h * a + rows * 2.0 * inter * 2.0 + rows * inter * a + rows * h * 2.0 + w * hit
        return mma, vec, 0.0, seq, 0.0, RND_NONE, 1.0
    if kind == EMBED:
        return 0.0, 0.0, 0.0, t * p[EMBED_H] * 4.0 + t * 4.0, 0.0, RND_NONE, 1.0
    if kind == ATTN:        # dense causal flash attention
        h = p[ATTN_HEADS]
        hd = p[ATTN_HEAD_DIM]
        pairs = causal_keys(n, q, c) * frac
        mma = 4.0 * pairs * h * hd
        kv = n * (c + q) * p[ATTN_KV_HEADS] * hd * 4.0
        return mma, 4.0 * pairs * h, 0.0, t * h * hd * 4.0 + kv, 0.0, RND_NONE, 1.0
    return 0.0, 0.0, 0.0, 0.0, 0.0, RND_NONE, 0.0


@njit(cache=True)
def op_time(kind: int, dtype: int, mma: float, vec: float, srt: float, seq: float, rnd: float, rkind: int,
            launch: float, dev: np.ndarray) -> tuple:
    """(t_compute, t_memory, time) in seconds: max(compute, memory) + launch cost. Compute adds the
    matrix, vector and sort work (one core type waits for the other, as TensorCast assumes)."""
    if kind == ZERO:
        return 0.0, 0.0, 0.0
    peak = dev[DEV_MMA_PEAK + dtype]
    if peak <= 0.0:
        peak = dev[DEV_MMA_PEAK + DT_BF16]
    tc = (mma / peak + vec / dev[DEV_VECTOR_PEAK] + srt / dev[DEV_VECTOR_SORT]) / dev[DEV_ETA_COMPUTE]
    tm = seq / (dev[DEV_HBM] * dev[DEV_ETA_MEMORY])
    if rkind == RND_SFA_KV:
        tm += rnd / (dev[DEV_HBM] * dev[DEV_ETA_SFA_KV])
    elif rkind == RND_INDEXER_CACHE:
        tm += rnd / (dev[DEV_HBM] * dev[DEV_ETA_INDEXER_CACHE])
    static = dev[DEV_STATIC_MMA] if mma > 0.0 else dev[DEV_STATIC_GP]
    return tc, tm, max(tc, tm) + static * launch


# which ops a partial evaluation covers
ALL_PARTS, CTX_PART, REST_PART = 0, 1, 2


@njit(cache=True)
def context_dependent(kind: int) -> bool:
    """Op kinds whose cost depends on the cached context (``kinds.CONTEXT_KINDS``)."""
    return kind in CONTEXT_KINDS


@njit(cache=True)
def ops_time(op_i: np.ndarray, op_f: np.ndarray, op_m: np.ndarray, st: np.ndarray, tp: float, mtp: float,
             dev: np.ndarray, part: int, fill: bool, op_out: np.ndarray) -> float:
    """Sum of time x count over the op rows, each row through the one chain op_tokens -> op_work
    -> op_time. ``fill``: every row's outputs go to ``op_out[n, N_OUT]`` (``part`` must be
    ``ALL_PARTS``); otherwise only the rows of ``part`` are summed and rows that cost nothing
    (layout ops, MTP passes not run) are skipped unevaluated: the sweep's inner loop.
    One loop for both uses, not a per-row helper: a call per row costs the kernel ~2x."""
    total = 0.0
    for i in range(op_i.shape[0]):
        kind = op_i[i, OPI_KIND]
        if not fill and (kind == ZERO or (part != ALL_PARTS and context_dependent(kind) != (part == CTX_PART))):
            continue
        cnt = op_f[i, OPF_COUNT] * mult(op_m[i], mtp)
        if not fill and cnt == 0.0:
            continue
        s = op_i[i, OPI_STREAM]
        base = st[s, ST_REQUESTS] * st[s, ST_QUERIES]
        t = op_tokens(base, op_i[i, OPI_EXP], op_i[i, OPI_DPMUL], tp)
        frac = t / base if base > 0 else 0.0
        mma, vec, srt, seq, rnd, rk, launch = op_work(kind, op_f[i, :N_PARAMS], op_f[i, OPF_WEIGHT], t, frac,
                                                      st[s])
        tc, tm, tt = op_time(kind, op_i[i, OPI_DTYPE], mma, vec, srt, seq, rnd, rk, launch, dev)
        if fill:
            op_out[i, OUT_TOKENS] = t
            op_out[i, OUT_MMA] = mma
            op_out[i, OUT_VEC] = vec
            op_out[i, OUT_BYTES] = seq + rnd
            op_out[i, OUT_T_COMPUTE] = tc
            op_out[i, OUT_T_MEMORY] = tm
            op_out[i, OUT_TIME] = tt
            op_out[i, OUT_COUNT] = cnt
            op_out[i, OUT_BOUND] = 1.0 if tc >= tm else 0.0
            op_out[i, OUT_SORT] = srt
        total += tt * cnt
    return total


@njit(cache=True)
def _coll_s(kind: int, g: int, m: float, grp: np.ndarray, dev: np.ndarray) -> float:
    """Seconds of one collective moving ``m`` bytes per rank on group ``g``."""
    return collective_time_s(kind, m, grp[g, GRP_SIZE], grp[g, GRP_BW], grp[g, GRP_LATENCY], m, dev[DEV_STATIC_COMM])


@njit(cache=True)
def colls_time(co_i: np.ndarray, co_f: np.ndarray, co_m: np.ndarray, st: np.ndarray, tp: float, mtp: float,
               grp: np.ndarray, dev: np.ndarray, fill: bool, co_out: np.ndarray, total: float,
               part: int = 0) -> float:
    """``total`` plus time x count of every collective row (bytes per rank from its token range and,
    for a row that moves the cache, from the context of the step's requests; alpha-beta time on its
    group); ``fill`` writes ``co_out[m, N_CO_OUT]``, otherwise rows run zero times are skipped.
    ``part``: ``CTX_PART`` counts only what the context adds to such rows, ``REST_PART`` the rest."""
    for j in range(co_i.shape[0]):
        cnt = co_f[j, COF_COUNT] * mult(co_m[j], mtp)
        if not fill and cnt == 0.0:
            continue
        cb = co_f[j, COF_CTX_BYTES]
        if part == CTX_PART and cb == 0.0:
            continue
        s = co_i[j, COI_STREAM]
        base = st[s, ST_REQUESTS] * st[s, ST_QUERIES]
        t = op_tokens(base, co_i[j, COI_EXP], co_i[j, COI_DPMUL], tp)
        m = t * co_f[j, COF_BYTES_PER_TOKEN] + co_f[j, COF_CONST_BYTES]
        mc = st[s, ST_REQUESTS] * (st[s, ST_CONTEXT] + st[s, ST_QUERIES]) * cb if cb > 0.0 else 0.0
        kind, g = co_i[j, COI_KIND], co_i[j, COI_GROUP]
        if part == CTX_PART:
            # the context's share: the time at the full size minus the time without the cached tokens
            total += (_coll_s(kind, g, m + mc, grp, dev) - _coll_s(kind, g, m, grp, dev)) * cnt
            continue
        if part == REST_PART:
            mc = 0.0
        m += mc
        tt = _coll_s(kind, g, m, grp, dev)
        if fill:
            co_out[j, CO_BYTES] = m
            co_out[j, CO_TIME] = tt
            co_out[j, CO_COUNT] = cnt
        total += tt * cnt
    return total


@njit(cache=True)
def host_time(decode: int, dev: np.ndarray) -> float:
    """Host-side time of one forward step (scheduling, input preparation, graph launch, sampling),
    during which the device idles: a per-step constant of the device profile."""
    return dev[DEV_HOST_DECODE] if decode else dev[DEV_HOST_PREFILL]


@njit(cache=True)
def evaluate_program(op_i: np.ndarray, op_f: np.ndarray, op_m: np.ndarray, co_i: np.ndarray,
                     co_f: np.ndarray, co_m: np.ndarray, decode: int, tp: float, tokens: float,
                     context: float, batch: float, mtp: float, dev: np.ndarray, grp: np.ndarray,
                     op_out: np.ndarray, co_out: np.ndarray) -> float:
    """Fill per-op rows ``op_out[n, N_OUT]`` and per-collective rows ``co_out[m, N_CO_OUT]`` for ONE
    workload; return the phase time in seconds: ops, collectives and the host overhead of one step,
    serialised (no compute/communication overlap is assumed)."""
    st = stream_table(decode, tokens, context, batch, mtp)
    total = ops_time(op_i, op_f, op_m, st, tp, mtp, dev, np.int64(ALL_PARTS), True, op_out)
    return colls_time(co_i, co_f, co_m, st, tp, mtp, grp, dev, True, co_out, total + host_time(decode, dev),
                      np.int64(ALL_PARTS))


@njit(cache=True)
def partial_time(op_i: np.ndarray, op_f: np.ndarray, op_m: np.ndarray, co_i: np.ndarray, co_f: np.ndarray,
                 co_m: np.ndarray, decode: int, tp: float, tokens: float, context: float, batch: float,
                 mtp: float, dev: np.ndarray, grp: np.ndarray, part: int) -> float:
    """Phase time (no per-op output), the inner loop of a sweep: every op and collective
    (``ALL_PARTS``), only the context-dependent ops (``CTX_PART``) or everything else including
    the collectives and the host overhead (``REST_PART``); the last two sum to the first."""
    st = stream_table(decode, tokens, context, batch, mtp)
    total = ops_time(op_i, op_f, op_m, st, tp, mtp, dev, part, False, st)    # st: an unused out array
    if part == CTX_PART:
        return colls_time(co_i, co_f, co_m, st, tp, mtp, grp, dev, False, st, total, part)
    return colls_time(co_i, co_f, co_m, st, tp, mtp, grp, dev, False, st, total + host_time(decode, dev), part)


@njit(cache=True, parallel=True)
def sweep_grid(op_i: np.ndarray, op_f: np.ndarray, op_m: np.ndarray, co_i: np.ndarray, co_f: np.ndarray,
               co_m: np.ndarray, decode: int, tp: float, keys: np.ndarray, contexts: np.ndarray,
               dev: np.ndarray, grp: np.ndarray) -> np.ndarray:
    """Batched evaluation over a product grid: ``keys[u] = (tokens, batch, mtp)`` x ``contexts``.
    Context-independent work is evaluated once per key; returns seconds ``[len(keys), len(contexts)]``."""
    out = np.empty((keys.shape[0], contexts.shape[0]))
    for u in prange(keys.shape[0]):
        tok, bat, mtp = keys[u, 0], keys[u, 1], keys[u, 2]
        fixed = partial_time(op_i, op_f, op_m, co_i, co_f, co_m, decode, tp, tok, 0.0, bat, mtp, dev, grp,
                             np.int64(REST_PART))
        for c in range(contexts.shape[0]):
            out[u, c] = fixed + partial_time(op_i, op_f, op_m, co_i, co_f, co_m, decode, tp, tok, contexts[c],
                                             bat, mtp, dev, grp, np.int64(CTX_PART))
    return out
