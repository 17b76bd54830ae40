"""``audit sweep``: evaluate a grid of parallel plans x workloads with the batched kernel.

One repetition-graph program per (tp, dp) plan and phase is built in Python (cached); every
workload of the grid for that plan is then evaluated by one ``sweep_grid`` kernel call, which
costs the context-independent ops once per (tokens, batch, mtp) and only the attention-like ops
once per context.
"""
from __future__ import annotations

import itertools
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable

import numpy as np

from ..context import DeploymentContext
from .mtp import expected_tokens
from ..errors import AuditInputError
from ..limits import OPTION_CAPS
from ..model.spec import ModelSpec
from ..runtime.feasibility import grid_kv_free
from .api import cached_program
from .host import host_model
from ..model.recipes import check_recipe
from ..units import GiB

COLUMNS = ["tp", "dp", "ep", "tokens", "context", "batch", "mtp", "ttft_ms", "decode_step_ms",
           "prefill_tok_s_per_device", "decode_tok_s_per_device",
           # memory feasibility (auditor.runtime): decode's context, the worst rank's weights, the KV
           # bytes left after the batch's requests are placed (negative: short), fits 1/0
           "decode_context", "weights_gib", "kv_free_gib", "fits"]
_FITS = COLUMNS.index("fits")


@dataclass
class SweepResult:
    rows: np.ndarray            # [n, len(COLUMNS)]
    skipped: list[str]
    n_configs: int
    notes: list[str] = field(default_factory=list)

    def best(self, column: str, largest: bool, k: int = 5) -> np.ndarray:
        c = COLUMNS.index(column)
        rows = self.rows[self.rows[:, _FITS] > 0]          # a configuration that cannot load never ranks
        if not len(rows):
            return rows
        order = np.argsort(-rows[:, c] if largest else rows[:, c], kind="stable")
        return rows[order[:k]]

    @property
    def n_infeasible(self) -> int:
        return int((self.rows[:, _FITS] == 0).sum()) if len(self.rows) else 0


def parse_grid(text: str, name: str) -> list[int]:
    try:
        vals = [int(v) for v in str(text).split(",") if v.strip()]
    except ValueError:
        raise AuditInputError(f"--{name}", f"expected a comma list of integers, got {text!r}") from None
    if not vals:
        raise AuditInputError(f"--{name}", "empty list")
    cap = OPTION_CAPS[f"--{name}"]
    for v in vals:
        if not cap.lo <= v <= cap.hi:
            raise AuditInputError(f"--{name}", f"{v} is outside the accepted range {cap.lo:,}..{cap.hi:,}")
    return vals


def _chunked_ttft(sweep_grid: Callable, spec: ModelSpec, pre: Any, dec: Any, tp: float,
                  keys: np.ndarray, ctx: np.ndarray, dv: np.ndarray, grp: np.ndarray, chunk: int,
                  device: Any) -> np.ndarray:
    """TTFT [len(keys), len(ctx)] of ``batch`` prompts of ``tokens`` at each context: the sum of their
    chunk steps (``api.chunk_plan``), each eager with its host time, as ``audit perf`` computes it.
    Every distinct step shape is evaluated once by the batched kernel over the contexts it needs."""
    from .api import chunk_plan
    plans = [chunk_plan(int(t), int(b), chunk) for t, b, _ in keys]
    shapes = sorted({(n, bb, float(m)) for (t, b, m), pl in zip(keys, plans) for n, _, bb, _ in pl})
    offsets = sorted({o for pl in plans for _, o, _, _ in pl})
    ctx_all = np.unique(np.concatenate([ctx + o for o in offsets]))
    skeys = np.array(shapes, dtype=np.float64)
    table = sweep_grid(*pre.arrays(), 0, tp, skeys, ctx_all, dv, grp)
    row = {sh: i for i, sh in enumerate(shapes)}
    hosts = {m: host_model(spec, pre, dec, int(m), device) for m in np.unique(keys[:, 2])}
    out = np.zeros((len(keys), len(ctx)))
    for u, ((t, b, m), pl) in enumerate(zip(keys, plans)):
        for n, o, bb, rep in pl:
            cols = np.searchsorted(ctx_all, ctx + o)
            out[u] += rep * table[row[(n, bb, float(m))], cols]
            out[u] += rep * float(hosts[m].steps_s(True, n * bb, 0.0))
    return out


def run_sweep(dep: DeploymentContext, tps: Iterable[int], dps: Iterable[int], tokens: Iterable[int], contexts: Iterable[int],
              batches: Iterable[int], mtps: Iterable[int], ep_on: bool = True,
              progress: Callable[[int], None] | None = None, decode_follows_prefill: bool = False,
              util: float = 0.9, kv_cache_dtype: str = "bf16", acceptance: float = 1.0,
              hccl_buffsize_mb: int = 200, dcp: int = 1, max_model_len: int | None = None) -> SweepResult:
    """TTFT and decode step time for every grid point of TP x DP around ``dep.plan`` (the base plan);
    plans the model cannot take are skipped."""
    from auditor_kernels.perf_core import sweep_grid

    from .device import group_table, kernel_vector
    dep = dep.with_(recipe=check_recipe(dep.recipe))
    spec, base, eng, device = dep.spec, dep.plan, dep.engine, dep.device
    version_note = eng.note
    keys = np.array(list(itertools.product(tokens, batches, mtps)), dtype=np.float64)
    ctx = np.array(list(contexts), dtype=np.float64)
    # rows in (tokens, batch, mtp) x context order, as the kernel returns them
    work = np.empty((len(keys) * len(ctx), 4))
    work[:, 0] = np.repeat(keys[:, 0], len(ctx))
    work[:, 1] = np.tile(ctx, len(keys))
    work[:, 2] = np.repeat(keys[:, 1], len(ctx))
    work[:, 3] = np.repeat(keys[:, 2], len(ctx))
    if spec.mtp_layers == 0 and (work[:, 3] > 0).any():
        raise AuditInputError("--mtp", f"{spec.name} has no MTP layer")
    dv = kernel_vector(device)
    from .program import kernel_path_of
    path = kernel_path_of(eng, "bf16", device)          # the engine's kernels on this device's generation
    out, skipped = [], []
    for tp, dp in itertools.product(tps, dps):
        # enable_dsa_cp shards nothing at TP1: the grid's TP1 rows run without it
        plan = base.with_(tp=tp, dp=dp, ep=tp * dp if ep_on and tp * dp > 1 else 1,
                          dsa_cp=base.dsa_cp if tp > 1 else None)
        try:
            pre = cached_program(dep.with_plan(plan), "prefill", "repetition", True, path)
            dec = cached_program(dep.with_plan(plan), "decode", "repetition", True, path)
        except AuditInputError as exc:
            skipped.append(f"tp{tp} dp{dp}: {exc.one_line()}")
            if progress:
                progress(1)
            continue
        grp = group_table(device, plan)
        t_pre = _chunked_ttft(sweep_grid, spec, pre, dec, float(tp), keys, ctx, dv, grp,
                              plan.max_num_batched_tokens, device).ravel()
        if decode_follows_prefill:
            # decode continues each prefill: its context is the prefill length (one kernel call per length)
            t_dec = np.empty(len(work))
            dec_arrays = dec.arrays()
            for tok in np.unique(keys[:, 0]):
                sel = keys[:, 0] == tok
                part = sweep_grid(*dec_arrays, 1, float(tp), keys[sel], np.array([tok]), dv, grp)
                t_dec.reshape(len(keys), len(ctx))[sel] = part
            dec_ctx = work[:, 0] + work[:, 1]
        else:
            t_dec = sweep_grid(*dec.arrays(), 1, float(tp), keys, ctx, dv, grp).ravel()
            dec_ctx = work[:, 1]
        # host time of a graph decode step (auditor.perf.host: the model perf and bench use)
        for m in np.unique(keys[:, 2]):
            hm = host_model(spec, pre, dec, int(m), device, engine=eng)
            sel = work[:, 3] == m
            t_dec[sel] += hm.steps_s(False, 0.0, work[sel, 2] * (1 + m))
        # memory: the longest request of the row (prefill end or decode step); the engine's batched
        # tokens are its configured chunk (prefill longer than that is chunked) or the decode step
        req = np.maximum(work[:, 1] + work[:, 0], dec_ctx + 1 + work[:, 3])
        weights, free = grid_kv_free(dep.with_plan(plan), batch=work[:, 2], request_tokens=req,
                                     step_tokens=work[:, 2] * (1 + work[:, 3]), mtp=work[:, 3], util=util,
                                     kv_cache_dtype=kv_cache_dtype, hccl_buffsize_mb=hccl_buffsize_mb, dcp=dcp,
                                     max_model_len=max_model_len)
        n = len(work)
        block = np.empty((n, len(COLUMNS)))
        block[:, 0], block[:, 1], block[:, 2] = tp, dp, plan.ep
        block[:, 3:7] = work
        block[:, 7] = t_pre * 1e3
        block[:, 8] = t_dec * 1e3
        block[:, 9] = work[:, 2] * work[:, 0] / t_pre / tp
        block[:, 10] = work[:, 2] * expected_tokens(work[:, 3], acceptance) / t_dec / tp
        block[:, 11] = dec_ctx
        block[:, 12] = weights / GiB
        block[:, 13] = free / GiB
        block[:, 14] = free >= 0
        out.append(block)
        if progress:
            progress(1)
    rows = np.concatenate(out) if out else np.empty((0, len(COLUMNS)))
    return SweepResult(rows, skipped, len(rows), [version_note] if version_note else [])
