"""Explain time: measured kernel time (profiler) against the perf model, per op class and per
layer, and benchmark TTFT / TPOT against the modelled phase totals.

Each discrepancy names the model constant or report assumption that could account for it
(``LEVERS``, data): the device-profile efficiency or static cost the op class depends on, with its
current value, or the kernel-mapping gap for time the profile shows and the program lacks.
"""
from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

from ..layer_ranges import ranges
from .evidence.bench import BenchEvidence
from .evidence.profile import ProfileEvidence

#: op class -> (device constants it depends on, what could be wrong)
LEVERS: dict[str, tuple[tuple[str, ...], str]] = {
    "linear": (("efficiency.compute", "efficiency.memory", "static_us.mma"),
               "matmul efficiency (compute-bound prefill, memory-bound decode) or per-kernel launch cost"),
    "grouped_matmul": (("efficiency.compute", "efficiency.memory", "static_us.mma"),
                       "expert load balance (model assumes uniform routing) and grouped-matmul efficiency"),
    "bmm": (("efficiency.compute", "static_us.mma"), "absorbed W_UK_T / W_UV batched matmul efficiency"),
    "sfa": (("efficiency.sfa_kv", "efficiency.memory"), "sparse-attention KV gather efficiency (paged top-k reads)"),
    "indexer_score": (("efficiency.indexer_cache", "efficiency.compute"),
                      "lightning-indexer cache read efficiency / causal key count"),
    "indexer_topk": (("static_us.gp", "efficiency.memory"), "top-k selection modelled as one vector pass"),
    "attention": (("efficiency.compute", "efficiency.memory"), "dense attention efficiency"),
    "router_topk": (("static_us.gp",), "vector-kernel launch cost"),
    "embedding": (("efficiency.memory",), "embedding gather bandwidth"),
    "all_gather": (("efficiency.comm", "static_us.comm"),
                   "link bandwidth / latency of the group's tier; no compute-communication overlap is modelled"),
    "reduce_scatter": (("efficiency.comm", "static_us.comm"), "link bandwidth / latency of the group's tier"),
    "all_reduce": (("efficiency.comm", "static_us.comm"), "link bandwidth / latency of the group's tier"),
    "all_to_all": (("efficiency.comm", "static_us.comm"),
                   "MoE dispatch/combine: routing imbalance and MC2 vs all-to-all method"),
}
_VECTOR = (("static_us.gp", "efficiency.memory"), "vector-kernel launch cost and bandwidth (fused kernels differ)")
UNMAPPED = "kernels not mapped to any op of the perf program (KERNEL_CLASSES in align/evidence/profile.py)"


def lever(cls: str, device: Any) -> dict:
    consts, why = LEVERS.get(cls, _VECTOR)
    vals = {}
    for c in consts:
        group, key = c.split(".")
        v = getattr(device, "efficiency" if group == "efficiency" else "static_us", {}).get(key)
        if v is not None:
            vals[c] = v
    return {"constants": vals, "assumption": why}


@dataclass
class TimeFit:
    phase: str
    workload: dict
    by_class: list[dict] = field(default_factory=list)       # {class, predicted_us, measured_us, delta_us, ratio}
    by_layer: list[dict] = field(default_factory=list)       # {layer, class, predicted_us, measured_us, delta_us}
    discrepancies: list[dict] = field(default_factory=list)  # top by |delta|, with lever
    unmapped: list[dict] = field(default_factory=list)
    measured_only: list[dict] = field(default_factory=list)   # classes the model has no op for
    predicted_only: list[dict] = field(default_factory=list)  # classes the profile has no kernel of
    merged: dict[str, list[str]] = field(default_factory=dict)  # composite row -> the kinds it covers
    host_ms: float = 0.0
    predicted_total_ms: float = 0.0
    measured_total_ms: float | None = None


def predicted_by_class(phase_result: Any) -> tuple[dict[str, float], dict[tuple[int, str], float]]:
    """(class -> us, (layer, class) -> us) of one modelled phase (ops and collectives)."""
    by_c: dict[str, float] = defaultdict(float)
    by_l: dict[tuple[int, str], float] = defaultdict(float)
    for e in phase_result.op_entries():
        if e["kind"] == "layout":
            continue
        by_c[e["kind"]] += e["time_us"]
        if e["layer"] is not None:
            by_l[(e["layer"], e["kind"])] += e["time_us"]
    for c in phase_result.collective_entries():
        by_c[c["kind"]] += c["time_us"]
        if c["layer"] is not None:
            by_l[(c["layer"], c["kind"])] += c["time_us"]
    return dict(by_c), dict(by_l)


def fold_layers(rows: list[dict]) -> list[dict]:
    """Rows of one op class with the same predicted and measured time (to the nanosecond) in several
    layers become one row: ``layer`` is their range ('3-77'), ``layers`` the count, ``total_delta_us``
    the delta summed over them (what the ranking uses)."""
    groups: dict[tuple, dict] = {}
    for r in rows:
        key = (r["scope"], r["class"], round(r["predicted_us"], 3), round(r["measured_us"], 3))
        g = groups.get(key)
        if g is None:
            groups[key] = g = dict(r, _layers=[])
        g["_layers"].append(r["layer"])
    out = []
    for g in groups.values():
        layers = g.pop("_layers")
        n = len(layers)
        out.append(dict(g, layer=ranges(layers) if g["layer"] is not None else None, layers=n,
                        total_delta_us=g["delta_us"] * n))
    return out


def fit_time(phase_result: Any, profile: ProfileEvidence | None, device: Any, top: int = 10,
             engine: Any = None) -> TimeFit:
    """Per-class and per-layer comparison of one modelled phase with the profile (if any), in the
    engine's kernel classes (its profiler's fused composites and collectives)."""
    from ..engines.registry import DEFAULT_FAMILY, as_engine
    prof = as_engine(engine if engine is not None else DEFAULT_FAMILY + "@main").profiler
    pc, pl = predicted_by_class(phase_result)
    tf = TimeFit(phase_result.phase, dict(phase_result.workload.__dict__),
                 predicted_total_ms=phase_result.time_ms, host_ms=float(getattr(phase_result, "host_ms", 0.0)))
    mc = dict(profile.by_class_us) if profile else {}
    ml = profile.by_layer_class_us if profile else {}
    if profile:
        # a fused kernel (DispatchFFNCombine, mla_preprocess, ...) covers several modelled kinds: compare it
        # with their sum, and the kinds it covers only through it
        for comp, kinds in prof.COMPOSITES.items():
            if comp not in mc:
                continue
            covered = [k for k in kinds if k in pc or k in mc]
            name = comp + " (= " + " + ".join(covered) + ")"
            mc[name] = mc.pop(comp) + sum(mc.pop(k, 0.0) for k in covered)
            pc[name] = sum(pc.pop(k, 0.0) for k in covered)
            tf.merged[name] = covered
        both = [c for c in pc if c in mc]
        tf.measured_only = [{"class": c, "measured_us": mc[c]} for c in sorted(mc, key=lambda c: -mc[c])
                            if c not in pc]
        tf.predicted_only = [{"class": c, "predicted_us": pc[c]} for c in sorted(pc, key=lambda c: -pc[c])
                             if c not in mc and pc[c] > 0]
    else:
        both = list(pc)
    for cls in sorted(both, key=lambda c: (-max(pc.get(c, 0), mc.get(c, 0)), c)):
        p, m = pc.get(cls, 0.0), mc.get(cls) if profile else None
        tf.by_class.append({"class": cls, "collective": cls in prof.COLLECTIVE_CLASSES, "predicted_us": p,
                            "measured_us": m, "delta_us": (m - p) if m is not None else None,
                            "ratio": (m / p) if m is not None and p > 0 else None})
    if profile:
        tf.measured_total_ms = profile.total_us() / 1e3
        for key in sorted(k for k in set(pl) & set(ml)):
            p, m = pl.get(key, 0.0), ml.get(key, 0.0)
            tf.by_layer.append({"layer": key[0], "class": key[1], "predicted_us": p, "measured_us": m,
                                "delta_us": m - p})
        rows = [dict(r, scope="layer") for r in tf.by_layer]
        rows += [{"layer": None, "class": r["class"], "predicted_us": r["predicted_us"],
                  "measured_us": r["measured_us"], "delta_us": r["delta_us"], "scope": "outside layers"}
                 for r in tf.by_class if r["measured_us"] is not None]
        # outside-layer part of a class = class total minus its per-layer sum
        for r in rows:
            if r["scope"] == "outside layers":
                lp = sum(v for (l, c), v in pl.items() if c == r["class"])
                lm = sum(v for (l, c), v in ml.items() if c == r["class"])
                r["predicted_us"] -= lp
                r["measured_us"] -= lm
                r["delta_us"] = r["measured_us"] - r["predicted_us"]
        rows = fold_layers([r for r in rows if abs(r["delta_us"]) > 1e-9])
        rows.sort(key=lambda r: -abs(r["total_delta_us"]))
        tf.discrepancies = [dict(r, **lever(r["class"], device)) for r in rows[:top]]
        tf.unmapped = [dict(u, assumption=UNMAPPED) for u in profile.unmapped]
    return tf


def bench_vs_model(bench: BenchEvidence | None, phases: dict[str, Any],
                   scenario_ms: Any = None) -> list[dict]:
    """TTFT against the prefill total and TPOT / ITL against the decode step (means, medians, p99);
    latency-CSV scenarios against ``scenario_ms(scenario)``, the model at the scenario's own lengths."""
    out: list[dict] = []
    if bench is None:
        return out
    pairs = (("ttft", "prefill"), ("tpot", "decode"), ("itl", "decode"))
    for s in bench.serve:
        for metric, phase in pairs:
            ph = phases.get(phase)
            for stat, ms in s.latency_ms.get(metric, {}).items():
                model = ph.time_ms if ph is not None else None
                out.append({"file": s.file, "metric": metric, "stat": stat, "measured_ms": ms, "phase": phase,
                            "predicted_ms": model, "delta_ms": (ms - model) if model is not None else None,
                            "relative": ((ms - model) / ms) if model is not None and ms else None})
    for f, sc in bench.latency:
        model = scenario_ms(sc) if scenario_ms is not None else None
        out.append({"file": f, "metric": sc.name, "stat": "measured", "measured_ms": sc.measured_ms,
                    "phase": sc.phase, "predicted_ms": model,
                    "delta_ms": (sc.measured_ms - model) if model is not None else None,
                    "relative": ((sc.measured_ms - model) / sc.measured_ms) if model is not None and sc.measured_ms
                    else None})
    return out
