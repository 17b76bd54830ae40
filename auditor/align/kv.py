"""KV figures: what the log says about the KV pool (available memory, tokens, concurrency, the
shortfall error, OOMs, the warm-up breakdown), next to what the runtime model predicts for the best
candidate configuration (``auditor.runtime.budget.rank_budget`` with that candidate's ledger as W).

The engine options behind the log's KV lines are taken from the log where it prints them (the
config line's ``max_seq_len`` / ``kv_cache_dtype`` / ``speculative_config``, the concurrency line's
request length, the warm-up breakdown's utilization, activation and non-torch figures); every
other one is the runtime default, and each choice is listed among the ticket's assumptions.
"""
from __future__ import annotations

import re
from typing import Any

import numpy as np

from .evidence.logs import LogEvidence
from .ranks import global_rank
from ..units import GiB

_KV_DTYPES = {"auto": "bf16", "bf16": "bf16", "bfloat16": "bf16", "c8": "c8", "c8-indexer": "c8-indexer"}


def _field(logs: LogEvidence, name: str) -> str | None:
    for nd in reversed(logs.non_default):           # what the user typed wins over the config repr
        v = nd.args.get(name)
        if v not in (None, "", "None") and not isinstance(v, bool):
            return str(v).strip().strip("'\"")
    for c in logs.configs:
        v = c.fields.get(name)
        if v not in (None, "", "None"):
            return str(v).strip().strip("'\"")
    return None


def _int_field(logs: LogEvidence, *names: str, hi: int = 1 << 24) -> int | None:
    for n in names:
        v = _field(logs, n)
        if v and v.isascii() and v.isdigit() and len(v) <= 9 and 1 <= int(v) <= hi:
            return int(v)
    return None


def kv_settings(spec: Any, plan: Any, logs: LogEvidence, runtime: dict | None = None,
                engine: Any = None) -> tuple[dict, list[str]]:
    """(rank_budget options, one assumption per option saying where it came from). Order: the align
    option the user gave (``runtime``, only options given on the command line), else the log's
    ``non-default args`` / config line, else the runtime default."""
    from ..runtime.budget import DEFAULT_MAX_NUM_SEQS, DEFAULT_UTIL
    rt = {k: v for k, v in (runtime or {}).items() if v is not None}
    out: dict[str, Any] = {}
    notes: list[str] = []
    mml = _int_field(logs, "max_model_len", "max_seq_len")
    if "max_model_len" in rt:
        out["max_model_len"], src = rt["max_model_len"], "--max-model-len"
    elif mml:
        out["max_model_len"], src = mml, "the log's non-default args / config line"
    elif logs.concurrency:
        out["max_model_len"], src = logs.concurrency[0].tokens_per_request, "the concurrency line's request length"
    else:
        out["max_model_len"], src = spec.max_position, "max_position_embeddings (the engine default)"
    notes.append(f"KV prediction: max_model_len {out['max_model_len']:,} from {src}")
    util = next((b.utilization for b in logs.breakdowns if b.utilization), None)
    log_util = _field(logs, "gpu_memory_utilization")
    try:
        log_util_v = float(log_util) if log_util and len(log_util) <= 12 and log_util.isascii() else None
    except ValueError:
        log_util_v = None
    if log_util_v is not None and not 0 < log_util_v <= 1:
        log_util_v = None
    if "util" in rt:
        out["util"], src = rt["util"], "--gpu-memory-utilization"
    elif util:
        out["util"], src = util, "the warm-up breakdown line"
    elif log_util_v:
        out["util"], src = log_util_v, "the log's non-default args"
    else:
        if engine is None:
            out["util"], src = DEFAULT_UTIL, "the runtime default"
        else:                       # the candidate engine's own default (vLLM 0.92 from v0.22, vLLM-Ascend 0.9)
            from ..engines.registry import as_engine
            eng = as_engine(engine)
            out["util"], src = eng.default_gpu_memory_utilization, f"{eng.profile.label}'s default"
    notes.append(f"KV prediction: gpu_memory_utilization {out['util']:g} from {src}")
    raw = _field(logs, "kv_cache_dtype")
    if "kv_cache_dtype" in rt:
        out["kv_cache_dtype"], src = rt["kv_cache_dtype"], "--kv-cache-dtype"
    else:
        out["kv_cache_dtype"] = _KV_DTYPES.get((raw or "auto").lower(), "bf16")
        src = f"the log ({raw})" if raw else "the runtime default"
    notes.append(f"KV prediction: kv_cache_dtype {out['kv_cache_dtype']} from {src}")
    k = 0
    sc = _field(logs, "speculative_config")
    if sc:
        m = re.search(r"num_spec(?:ulative)?_tokens['\"]?[ \t]{0,4}[:=][ \t]{0,4}(\d{1,3})", sc[:4096], re.ASCII)
        k = int(m.group(1)) if m else 0
    if plan.mtp and not k:
        k = 1
        notes.append("KV prediction: MTP drafter loaded, 1 speculative token assumed (no speculative_config in the log)")
    out["mtp"] = k if plan.mtp else 0
    seqs = _int_field(logs, "max_num_seqs", hi=65_536)
    if "max_num_seqs" in rt:
        out["max_num_seqs"], src = rt["max_num_seqs"], "--max-num-seqs"
    elif seqs:
        out["max_num_seqs"], src = seqs, "the log's non-default args"
    else:
        out["max_num_seqs"], src = DEFAULT_MAX_NUM_SEQS, "the runtime default"
    notes.append(f"KV prediction: max_num_seqs {out['max_num_seqs']} from {src}; max_num_batched_tokens "
                 f"{plan.max_num_batched_tokens} (sizes the activation estimate)")
    for key, opt in (("dcp", "--dcp"), ("hccl_buffsize_mb", "--hccl-buffsize")):
        if key in rt:
            out[key] = rt[key]
            notes.append(f"KV prediction: {opt} {rt[key]} from the command line")
    dcp = _int_field(logs, "decode_context_parallel_size", hi=65_536)
    if "dcp" not in out and dcp and dcp > 1:
        out["dcp"] = dcp
        notes.append(f"KV prediction: dcp {dcp} from the log")
    bd = logs.breakdowns[0] if logs.breakdowns else None
    if bd is not None and bd.activation_bytes is not None and bd.non_torch_bytes is not None:
        out["activation_bytes"], out["non_torch_bytes"] = bd.activation_bytes, bd.non_torch_bytes
        notes.append("KV prediction: activation peak and non-torch memory as the log's warm-up breakdown measured "
                     "them (not the model's estimates)")
    return out, notes


def _rel(observed: float, predicted: float) -> float | None:
    """(observed - predicted) / observed: every percentage of the ticket has the observed value as base."""
    return (observed - predicted) / abs(observed) if observed else None


def predicted_kv(source: Any, plan: Any, engine: str, ranks_bytes: Any, logs: LogEvidence,
                 device: str | None = None, runtime: dict | None = None) -> dict | None:
    """The runtime budget of the best candidate (W = its ledger's worst rank per PP stage) and every
    observed KV figure compared with it; None without a candidate (no weights line)."""
    if ranks_bytes is None:
        return None
    from ..devices.profiles import load_device
    from ..runtime.budget import rank_budget, usable_total
    from ..runtime.weights import stage_worst
    spec = source.spec
    settings, notes = kv_settings(spec, plan, logs, runtime, engine)
    dev = load_device(device) if device else load_device()
    total = usable_total(dev)
    notes.append(f"KV prediction: usable HBM {total / GiB:.2f} GiB per die ({dev.name})")
    ranks_bytes = np.asarray(ranks_bytes, dtype=np.float64)

    def budget(w, max_model_len=None):
        kw = dict(settings)
        if max_model_len is not None:
            kw["max_model_len"] = max_model_len
        return rank_budget(spec, plan, engine, weights_bytes=w, total_bytes=total,
                           recipe=getattr(source, "scheme_recipe", None), **kw)

    b = budget(stage_worst(ranks_bytes, plan))
    compared = []
    per_w: dict[int, int] = {}
    for a in logs.kv_available:
        r = global_rank(a.worker, plan)
        if r is not None and 0 <= r < len(ranks_bytes):
            w = int(round(ranks_bytes[r]))
            if w not in per_w:
                per_w[w] = budget(float(w)).kv_available_bytes
            pred, name, rank = per_w[w], f"available KV rank {r}", r
        else:
            pred, name, rank = b.kv_available_bytes, "available KV (binding worker)", None
        compared.append({"figure": name, "rank": rank, "observed": a.bytes, "predicted": pred, "unit": "bytes",
                         "relative": _rel(a.bytes, pred), "where": str(a.where)})
    for t in logs.kv_tokens:
        compared.append({"figure": "KV tokens", "observed": t.tokens, "predicted": b.kv_tokens, "unit": "tokens",
                         "relative": _rel(t.tokens, b.kv_tokens), "where": str(t.where)})
    seen = set()
    for c in logs.concurrency:
        if c.tokens_per_request in seen:
            continue
        seen.add(c.tokens_per_request)
        pc = b if c.tokens_per_request == b.max_model_len else budget(stage_worst(ranks_bytes, plan),
                                                                      c.tokens_per_request)
        compared.append({"figure": f"concurrency @ {c.tokens_per_request:,} tokens", "observed": c.factor,
                         "predicted": pc.max_concurrency, "unit": "x", "relative": _rel(c.factor, pc.max_concurrency),
                         "where": str(c.where)})
    for sf in logs.shortfalls:
        ps = budget(stage_worst(ranks_bytes, plan), sf.max_seq_len)
        compared.append({"figure": f"KV needed for {sf.max_seq_len:,} tokens", "observed": sf.needed_bytes,
                         "predicted": ps.kv_bytes_per_request, "unit": "bytes",
                         "relative": _rel(sf.needed_bytes, ps.kv_bytes_per_request), "where": str(sf.where)})
    return {"weights_bytes": b.weights_bytes, "available_kv_bytes": b.kv_available_bytes,
            "num_blocks": b.num_blocks, "kv_tokens": b.kv_tokens, "max_concurrency": b.max_concurrency,
            "max_model_len": b.max_model_len, "settings": settings, "log_lines": b.log_lines(),
            "runtime": b.to_json(), "compared": compared, "assumptions": notes}


def observed_kv(ev: LogEvidence, plan: Any) -> dict:
    """The KV-related lines of the log, in the ticket's JSON shape (bytes, tokens, factors)."""
    def where(x):
        return str(x.where)

    def rank_of(w):
        return global_rank(w, plan)

    conc = [{"tokens_per_request": c.tokens_per_request, "factor": c.factor, "where": where(c)}
            for c in ev.concurrency]      # every line kept (one per engine / request length)
    return {
        "available_kv": [{"rank": rank_of(k.worker), "worker": k.worker.label() if k.worker else None,
                          "bytes": k.bytes, "total_bytes": k.total_bytes, "form": k.form, "where": where(k)}
                         for k in ev.kv_available],
        "kv_tokens": [{"tokens": k.tokens, "where": where(k)} for k in ev.kv_tokens],
        "concurrency": conc,
        "shortfall": [{"max_seq_len": s.max_seq_len, "needed_bytes": s.needed_bytes,
                       "available_bytes": s.available_bytes, "estimated_max_len": s.estimated_max_len,
                       "where": where(s)} for s in ev.shortfalls],
        "oom": [{"rank": rank_of(o.worker), "tried_bytes": o.tried_bytes, "device": o.device,
                 "total_bytes": o.total_bytes, "allocated_bytes": o.allocated_bytes, "free_bytes": o.free_bytes,
                 "reserved_bytes": o.reserved_bytes, "where": where(o)} for o in ev.ooms],
        "breakdown": [{"rank": rank_of(b.worker), "free_bytes": b.free_bytes, "total_bytes": b.total_bytes,
                       "utilization": b.utilization, "weights_bytes": b.weights_bytes,
                       "activation_bytes": b.activation_bytes, "non_torch_bytes": b.non_torch_bytes,
                       "graph_bytes": b.graph_bytes, "kv_bytes": b.kv_bytes, "where": where(b)}
                      for b in ev.breakdowns],
        "npu_smi": [{"npu": r.npu, "chip": r.chip, "pid": r.pid, "name": r.name, "memory_bytes": r.memory_bytes,
                     "where": where(r)} for r in ev.npu_smi],
    }
