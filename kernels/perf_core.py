"""Numba core of ``audit perf``: token-shape propagation and roofline cost over a layer program.

Why a kernel: a sweep evaluates the same program (ops x layers) for hundreds of thousands of
workloads; the Python side builds the program once per (model, plan, quant, phase) as plain
arrays and these functions turn (tokens, context, batch, mtp) into per-op token counts, FLOPs,
bytes and times. The formulas live here and only here; ``auditor.perf.ops`` documents them.

Program arrays (one row per op, see ``auditor.perf.program.Program.arrays``):

* ``op_i[n, 5]`` int64: kind, stream, exp, dpmul, mma dtype code
* ``op_f[n, 10]`` float64: p0..p7 (kind-specific), weight bytes, count
* ``op_m[n]`` int64: multiplicity mode (0 fixed, 1 first MTP pass, 2 later MTP passes)
* ``co_i[m, 5]`` int64: collective kind (0 AR, 1 AG, 2 RS, 3 A2A), group (0 tp, 1 dp, 2 ep),
  stream, exp, dpmul
* ``co_f[m, 3]`` float64: bytes per token, constant bytes, count;  ``co_m[m]`` multiplicity mode

Token count of an op: base = requests x queries of its stream; ``exp`` < 0 means the token
range is sequence-sharded by TP (ceil(base / tp^-exp)), ``exp`` > 0 means it was gathered more
than once (base x tp^exp, a contract violation the tests look for); times ``dpmul`` for
tensors gathered across DP.

Streams (``stream_table``): 0 = the main forward (prefill: batch x tokens; decode: batch x
(1+K)), 1 = a later MTP drafter pass (batch x 1, context grown by the main query length),
2 = rows that reach lm_head (prefill: one per request; decode: 1+K per request).

Device vector ``dev``: 0 hbm bytes/s, 1 eta_memory, 2 eta_compute, 3 eta_sfa_kv (relative to
memory), 4 eta_indexer_cache (relative to memory), 5 static mma s, 6 static gp s, 7 static comm s,
8 vector peak FLOP/s, 9..13 mma peak FLOP/s for F32, BF16, F16, I8, F8 (0 = absent -> BF16).
Groups ``grp[3, 3]``: per tp/dp/ep row (size, effective bytes/s, latency s).
"""
from __future__ import annotations

import math

import numpy as np
from numba import njit, prange

from .collectives import collective_time_s

# op kinds (mirrored by auditor.perf.ops.Kind)
LINEAR = 1
BMM = 2
VEC = 3
SFA = 4
IDX_SCORE = 5
IDX_TOPK = 6
ROUTER_TOPK = 7
GMM = 8
EMBED = 9
ZERO = 10
ATTN = 11

N_OUT = 9   # tokens, mma, vec, bytes, t_compute, t_memory, time, count, bound(1 compute)


@njit(cache=True)
def stream_table(decode: int, tokens: float, context: float, batch: float, mtp: float) -> np.ndarray:
    """[3, 4] rows of (requests, queries per request, context, is_decode) per stream."""
    s = np.empty((3, 4))
    q0 = 1.0 + mtp if decode else tokens
    s[0, 0] = batch
    s[0, 1] = q0
    s[0, 2] = context
    s[0, 3] = decode
    s[1, 0] = batch
    s[1, 1] = 1.0
    s[1, 2] = context + q0
    s[1, 3] = 1.0
    s[2, 0] = batch
    s[2, 1] = 1.0 + mtp if decode else 1.0
    s[2, 2] = context
    s[2, 3] = decode
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
def mult(mode: int, mtp: float) -> float:
    if mode == 0:
        return 1.0
    if mode == 1:
        return 1.0 if mtp >= 1.0 else 0.0
    return max(mtp - 1.0, 0.0)


@njit(cache=True)
def op_work(kind: int, p: np.ndarray, w: float, t: float, frac: float, st: np.ndarray) -> tuple:
    """(mma FLOPs, vector FLOPs, sequential bytes, random bytes, random kind) of one op.

    ``t`` = tokens the op processes on this rank; ``frac`` = t / stream tokens (the share of the
    stream's queries this rank owns, used for attention-like work); ``st`` = (requests, queries,
    context, is_decode) of its stream. Random kind: 0 none, 1 SFA KV gather, 2 indexer cache.
    """
    n = st[0]
    q = st[1]
    c = st[2]
    dec = st[3] > 0.5
    if kind == LINEAR:      # p: K, N, act_in_bytes, dynamic_quant, out_bytes
        k = p[0]
        nn = p[1]
        mma = 2.0 * t * k * nn
        vec = 4.0 * t * k if p[3] > 0.5 else 0.0
        seq = t * k * p[2] + w + t * nn * p[4] + (t * k * 2.0 if p[3] > 0.5 else 0.0)
        return mma, vec, seq, 0.0, 0
    if kind == BMM:         # p: heads, K, N
        h = p[0]
        mma = 2.0 * t * h * p[1] * p[2]
        seq = t * h * p[1] * 2.0 + w + t * h * p[2] * 2.0
        return mma, 0.0, seq, 0.0, 0
    if kind == VEC:         # p: D, tensors read+written, ops per element
        return 0.0, t * p[0] * p[2], t * p[0] * 2.0 * p[1], 0.0, 0
    if kind == SFA:         # p: heads, latent, rope, top-k cap
        h = p[0]
        dl = p[1]
        dr = p[2]
        cap = p[3]
        pairs = capped_pairs(n, q, c, cap) * frac
        mma = 2.0 * pairs * h * (dl + dr) + 2.0 * pairs * h * dl
        vec = 4.0 * pairs * h
        seq = t * h * (dl + dr) * 2.0 + t * h * dl * 2.0
        if cap < 1e17:
            seq += t * cap * 4.0
        if dec:
            entries = n * math.ceil(q / 64.0) * min(c + q, cap) * frac
            return mma, vec, seq, entries * (dl + dr) * 2.0, 1
        return mma, vec, seq + pairs * (dl + dr) * 2.0, 0.0, 0
    if kind == IDX_SCORE:   # p: index heads, index head dim
        ih = p[0]
        d = p[1]
        keys = causal_keys(n, q, c) * frac
        mma = 2.0 * keys * ih * d
        vec = 3.0 * keys * ih
        seq = t * ih * d * 2.0 + t * ih * 4.0
        if dec:
            return mma, vec, seq, n * q * frac * (c + q) * d * 2.0, 2
        tiles = math.ceil(q * frac / 128.0)
        return mma, vec, seq + n * tiles * (c + q) * d * 2.0, 0.0, 0
    if kind == IDX_TOPK:    # p: top-k kept
        keys = causal_keys(n, q, c) * frac
        return 0.0, keys, t * p[0] * 4.0, 0.0, 0
    if kind == ROUTER_TOPK:  # p: E, k
        return 0.0, 4.0 * t * p[0], t * p[0] * 4.0 + t * p[1] * 8.0, 0.0, 0
    if kind == GMM:         # p: H, I, k, E, domain multiplier, act_in_bytes, dynamic
        h = p[0]
        inter = p[1]
        k = p[2]
        rows = t * k
        mma = 6.0 * rows * h * inter
        vec = 3.0 * rows * inter
        if p[6] > 0.5:
            vec += 4.0 * rows * (h + inter)
        hit = 1.0 - (1.0 - k / p[3]) ** (t * p[4]) if t > 0 else 0.0
        seq = rows * h * p[5] + rows * 2.0 * inter * 2.0 + rows * inter * p[5] + rows * h * 2.0 + w * hit
        return mma, vec, seq, 0.0, 0
    if kind == EMBED:       # p: H
        return 0.0, 0.0, t * p[0] * 4.0 + t * 4.0, 0.0, 0
    if kind == ATTN:        # p: heads, kv heads, head dim  (dense causal flash attention)
        h = p[0]
        hd = p[2]
        pairs = causal_keys(n, q, c) * frac
        mma = 4.0 * pairs * h * hd
        kv = n * (c + q) * p[1] * hd * 4.0
        return mma, 4.0 * pairs * h, t * h * hd * 4.0 + kv, 0.0, 0
    return 0.0, 0.0, 0.0, 0.0, 0


@njit(cache=True)
def op_time(kind: int, dtype: int, mma: float, vec: float, seq: float, rnd: float, rkind: int,
            dev: np.ndarray) -> tuple:
    """(t_compute, t_memory, time) in seconds: max(compute, memory) + launch cost."""
    if kind == ZERO:
        return 0.0, 0.0, 0.0
    peak = dev[9 + dtype]
    if peak <= 0.0:
        peak = dev[10]
    tc = (mma / peak + vec / dev[8]) / dev[2]
    bw = dev[0] * dev[1]
    tm = seq / bw
    if rkind == 1:
        tm += rnd / (bw * dev[3])
    elif rkind == 2:
        tm += rnd / (bw * dev[4])
    static = dev[5] if mma > 0.0 else dev[6]
    return tc, tm, max(tc, tm) + static


@njit(cache=True)
def coll_time(kind: int, m: float, grp_row: np.ndarray, static_s: float) -> float:
    return collective_time_s(kind, m, grp_row[0], grp_row[1], grp_row[2], m, static_s)


@njit(cache=True)
def evaluate_program(op_i: np.ndarray, op_f: np.ndarray, op_m: np.ndarray, co_i: np.ndarray,
                     co_f: np.ndarray, co_m: np.ndarray, decode: int, tp: float, tokens: float,
                     context: float, batch: float, mtp: float, dev: np.ndarray, grp: np.ndarray,
                     op_out: np.ndarray, co_out: np.ndarray) -> float:
    """Fill per-op rows ``op_out[n, N_OUT]`` and per-collective rows ``co_out[m, 3]`` (bytes,
    time, count) for ONE workload; return the phase time in seconds (ops and collectives are
    serialised: no compute/communication overlap is assumed)."""
    st = stream_table(decode, tokens, context, batch, mtp)
    total = 0.0
    for i in range(op_i.shape[0]):
        kind = op_i[i, 0]
        s = op_i[i, 1]
        base = st[s, 0] * st[s, 1]
        t = op_tokens(base, op_i[i, 2], op_i[i, 3], tp)
        frac = t / base if base > 0 else 0.0
        mma, vec, seq, rnd, rk = op_work(kind, op_f[i, :8], op_f[i, 8], t, frac, st[s])
        tc, tm, tt = op_time(kind, op_i[i, 4], mma, vec, seq, rnd, rk, dev)
        cnt = op_f[i, 9] * mult(op_m[i], mtp)
        op_out[i, 0] = t
        op_out[i, 1] = mma
        op_out[i, 2] = vec
        op_out[i, 3] = seq + rnd
        op_out[i, 4] = tc
        op_out[i, 5] = tm
        op_out[i, 6] = tt
        op_out[i, 7] = cnt
        op_out[i, 8] = 1.0 if tc >= tm else 0.0
        total += tt * cnt
    for j in range(co_i.shape[0]):
        s = co_i[j, 2]
        base = st[s, 0] * st[s, 1]
        t = op_tokens(base, co_i[j, 3], co_i[j, 4], tp)
        m = t * co_f[j, 0] + co_f[j, 1]
        tt = coll_time(co_i[j, 0], m, grp[co_i[j, 1]], dev[7])
        cnt = co_f[j, 2] * mult(co_m[j], mtp)
        co_out[j, 0] = m
        co_out[j, 1] = tt
        co_out[j, 2] = cnt
        total += tt * cnt
    return total


# which ops a partial evaluation covers
ALL_PARTS, CTX_PART, REST_PART = 0, 1, 2


@njit(cache=True)
def context_dependent(kind: int) -> bool:
    """Op kinds whose cost depends on the cached context (everything else depends only on the
    token counts, so a sweep evaluates it once per (tokens, batch, mtp))."""
    return kind == SFA or kind == IDX_SCORE or kind == IDX_TOPK or kind == ATTN


@njit(cache=True)
def partial_time(op_i: np.ndarray, op_f: np.ndarray, op_m: np.ndarray, co_i: np.ndarray, co_f: np.ndarray,
                 co_m: np.ndarray, decode: int, tp: float, tokens: float, context: float, batch: float,
                 mtp: float, dev: np.ndarray, grp: np.ndarray, part: int) -> float:
    """Phase time (no per-op output), the inner loop of a sweep: every op and collective
    (``ALL_PARTS``), only the context-dependent ops (``CTX_PART``) or everything else including
    the collectives (``REST_PART``); the last two sum to the first."""
    st = stream_table(decode, tokens, context, batch, mtp)
    total = 0.0
    for i in range(op_i.shape[0]):
        kind = op_i[i, 0]
        if kind == ZERO or (part != ALL_PARTS and context_dependent(kind) != (part == CTX_PART)):
            continue
        cnt = op_f[i, 9] * mult(op_m[i], mtp)
        if cnt == 0.0:
            continue
        s = op_i[i, 1]
        base = st[s, 0] * st[s, 1]
        t = op_tokens(base, op_i[i, 2], op_i[i, 3], tp)
        frac = t / base if base > 0 else 0.0
        mma, vec, seq, rnd, rk = op_work(kind, op_f[i, :8], op_f[i, 8], t, frac, st[s])
        total += op_time(kind, op_i[i, 4], mma, vec, seq, rnd, rk, dev)[2] * cnt
    if part == CTX_PART:
        return total
    for j in range(co_i.shape[0]):
        cnt = co_f[j, 2] * mult(co_m[j], mtp)
        if cnt == 0.0:
            continue
        s = co_i[j, 2]
        base = st[s, 0] * st[s, 1]
        t = op_tokens(base, co_i[j, 3], co_i[j, 4], tp)
        total += coll_time(co_i[j, 0], t * co_f[j, 0] + co_f[j, 1], grp[co_i[j, 1]], dev[7]) * cnt
    return total


@njit(cache=True)
def program_time(op_i: np.ndarray, op_f: np.ndarray, op_m: np.ndarray, co_i: np.ndarray,
                 co_f: np.ndarray, co_m: np.ndarray, decode: int, tp: float, tokens: float,
                 context: float, batch: float, mtp: float, dev: np.ndarray, grp: np.ndarray) -> float:
    """Phase time only (no per-op output)."""
    return partial_time(op_i, op_f, op_m, co_i, co_f, co_m, decode, tp, tokens, context, batch, mtp, dev, grp,
                        ALL_PARTS)


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
                             REST_PART)
        for c in range(contexts.shape[0]):
            out[u, c] = fixed + partial_time(op_i, op_f, op_m, co_i, co_f, co_m, decode, tp, tok, contexts[c],
                                             bat, mtp, dev, grp, CTX_PART)
    return out


@njit(cache=True, parallel=True)
def sweep_times(op_i: np.ndarray, op_f: np.ndarray, op_m: np.ndarray, co_i: np.ndarray,
                co_f: np.ndarray, co_m: np.ndarray, decode: int, tp: float, cfg: np.ndarray,
                dev: np.ndarray, grp: np.ndarray) -> np.ndarray:
    """Batched evaluation: ``cfg[k] = (tokens, context, batch, mtp)``; returns seconds per row."""
    out = np.empty(cfg.shape[0])
    for k in prange(cfg.shape[0]):
        out[k] = program_time(op_i, op_f, op_m, co_i, co_f, co_m, decode, tp, cfg[k, 0], cfg[k, 1],
                              cfg[k, 2], cfg[k, 3], dev, grp)
    return out
