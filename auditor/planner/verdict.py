"""Why a die budget has no prefill/decode-disaggregated configuration, with the closest one.

A disaggregated deployment needs a P instance that fits (one prompt's KV) and meets TTFT, plus a D
instance that fits B full-length requests and meets TPOT, on at most the dies the P instance leaves.
When none exists the plan says which side fails first, and for the closest instance of that side
(the least short of memory, or the fastest) what the engine would report: weights per rank against
what the budget leaves, or the KV the batch needs against the pool.
"""
from __future__ import annotations

from typing import Any

import numpy as np

from ..context import DeploymentContext
from ..parallel import ParallelPlan
from ..runtime.budget import usable_total
from ..runtime.feasibility import workload_fit
from ..units import GiB



def _size(p: ParallelPlan) -> int:
    return p.tp * p.dp


def _label(p: ParallelPlan) -> str:
    return f"TP{p.tp} DP{p.dp}" + (f" EP{p.ep}" if p.ep > 1 else "") + (" SP" if p.sp else "")


def _too_heavy(heavy: list, limit_dies: int, role: str, device: Any, util: float, eng: Any) -> str | None:
    cands = [(p, w) for p, w in heavy if _size(p) <= limit_dies]
    if not cands:
        return None
    p, w = min(cands, key=lambda x: x[1])
    cap = usable_total(device) * util
    return (f"the lightest {role} instance within {eng.devices(limit_dies)}, {_label(p)} ({eng.devices(_size(p))}), holds "
            f"{w / GiB:.2f} GiB of weights per rank, over the {cap / GiB:.2f} GiB the engine may use "
            f"(util {util:g} x {usable_total(device) / GiB:.2f} GiB)")


def disagg_verdict(n: int, base: DeploymentContext, space: Any, wl: Any,
                   BK: np.ndarray, E: np.ndarray, ttft_ms: float, tpot_ms: float, p_seen: list, d_seen: list,
                   p_heavy: list, d_heavy: list, p_len: int) -> str:
    """One sentence: why no P/D configuration fits within ``n`` dies, and the closest instance."""
    util, kvd = space.util, space.kv_cache_dtype
    spec, eng, device = base.spec, base.engine, base.device
    # ---- P side: an instance of fewer than n dies (D needs at least one die)
    p_in = [x for x in p_seen if _size(x[0]) < n]
    p_fit = [x for x in p_in if x[2] >= 0]
    p_ok = [x for x in p_fit if x[1] * 1e3 <= ttft_ms]
    if not p_ok:
        head = f"no prefill instance of fewer than {eng.devices(n)} "
        if p_fit:
            p, t, _ = min(p_fit, key=lambda x: x[1])
            return head + f"meets TTFT {ttft_ms:g} ms: the fastest that fits, {_label(p)}, prefills {wl.isl:,} tokens in {t * 1e3:.0f} ms"
        if p_in:
            p, _, _ = max(p_in, key=lambda x: x[2])
            f = workload_fit(base.with_plan(p), batch=1, request_tokens=p_len,
                             step_tokens=p.max_num_batched_tokens,
                             mtp=getattr(space, 'prefill_mtp', 0) if spec.mtp_layers else 0, util=util, kv_cache_dtype=kvd)
            return head + f"fits in memory; closest {_label(p)} ({eng.devices(_size(p))}, one {p_len:,}-token prompt): {f.verdict()}"
        return head + "fits: " + (_too_heavy(p_heavy, n - 1, "prefill", device, util, eng) or "none could be formed")
    room = n - min(_size(x[0]) for x in p_ok)
    # ---- D side: within the dies the smallest working P instance leaves
    d_in = [x for x in d_seen if _size(x[0]) <= room]
    head = f"no decode instance of at most {eng.devices(room)} (what the smallest working P instance leaves of {n}) "
    if not d_in:
        return head + "fits: " + (_too_heavy(d_heavy, room, "decode", device, util, eng) or "none could be formed")
    best, best_free = None, -np.inf
    for p, d, tpot in d_in:
        i = int(np.argmax(d["kv_free"]))
        if d["kv_free"][i] > best_free:
            best, best_free = (p, i), float(d["kv_free"][i])
    if best_free < 0:
        p, i = best
        B, K = int(BK[i, 0]), int(BK[i, 1])
        f = workload_fit(base.with_plan(p), batch=B, request_tokens=wl.max_len,
                         step_tokens=B * (1 + K), mtp=K, util=util, kv_cache_dtype=kvd)
        return head + (f"fits in memory; closest {_label(p)} ({eng.devices(_size(p))}) at batch {B}, MTP {K}, "
                       f"{wl.max_len:,}-token requests: {f.verdict()}")
    fast = min(((p, i, float(tpot[i])) for p, d, tpot in d_in for i in np.flatnonzero(d["kv_free"] >= 0)),
               key=lambda x: x[2])
    p, i, t = fast
    return head + (f"meets TPOT {tpot_ms:g} ms: the fastest that fits, {_label(p)} at batch {int(BK[i, 0])}, "
                   f"MTP {int(BK[i, 1])}, takes {t * 1e3:.1f} ms per output token")
