"""Text reports of a PerfResult: per-op table (identical ops across layers folded into one row
with a layer range), per-layer summary, collective table and phase totals, as table / markdown /
csv / json.

Tables print the numbers exactly as formatted here (tabulate's number parsing is off, so no
column loses its trailing zeros): times in us with 1 decimal, ms with 3, FLOPs with an SI prefix
and bytes in binary units (KiB, MiB, GiB, as the memory reports), both with 2 decimals."""
from __future__ import annotations

import csv
import io
import json
from collections import defaultdict
from typing import Any

from auditor_kernels import kinds as K
from tabulate import tabulate

from ..perf.api import PerfResult, PhaseResult
from ..layer_ranges import ranges
from ..units import binary


def _si(x: float) -> str:
    """FLOPs with an SI prefix and 2 decimals ('132.07 G'); below 1000 a plain integer."""
    for k, p in (("P", 1e15), ("T", 1e12), ("G", 1e9), ("M", 1e6), ("k", 1e3)):
        if abs(x) >= p:
            return f"{x / p:.2f} {k}"
    return f"{x:.0f}"


def _shape(s: list) -> str:
    return " ".join("[" + ",".join(str(d) for d in t) + "]" for t in s)


def folded_ops(ph: PhaseResult) -> list[dict[str, Any]]:
    """Op rows folded across layers: one row per (name, MTP pass kind, tokens, cost), built from
    the kernel arrays (entries are materialised once per group, not once per layer)."""
    groups: dict[tuple, dict[str, Any]] = {}
    o = ph.op_out
    for i, op in enumerate(ph.program.ops):
        inst = ph._instances(op.mult, op.layers)
        if not inst:
            continue
        key = (op.name, op.mult == K.MULT_LATER_MTP, o[i, K.OUT_TOKENS], o[i, K.OUT_MMA] + o[i, K.OUT_VEC],
               o[i, K.OUT_BYTES], op.layout)
        g = groups.get(key)
        if g is None:
            g = groups[key] = {"row": i, "layers": [], "count": 0, "pass": inst[0][1]}
        g["layers"].extend(L for L, _ in inst)
        g["count"] += len(inst)
    out = []
    for g in groups.values():
        e = ph.op_entry(g["row"])
        e.update(layers=g["layers"], count=g["count"], **({"pass": g["pass"]} if g["pass"] else {}))
        out.append(e)
    return out


def ops_rows(ph: PhaseResult) -> list[list]:
    rows = []
    for g in folded_ops(ph):
        where = ranges(g["layers"])
        if g.get("pass"):
            where += f" (MTP pass {'1' if g['pass'] == 1 else '2..'})"
        rows.append([g["name"], where, g["count"], _shape(g["shape_in"]), _shape(g["shape_out"]), g["layout"],
                     _si(g["flops"]), binary(g["bytes"]), g["bound"], "grows" if g["context_dependent"] else "",
                     f"{g['time_us']:.1f}",
                     f"{g['time_us'] * g['count'] / 1e3:.3f}", g["source"]])
    return rows


OPS_HEADERS = ["op", "layers", "n", "in", "out", "layout", "FLOPs", "bytes", "bound", "context", "us each",
               "ms total", "source"]
COLL_HEADERS = ["collective", "group", "tensor", "n", "bytes/rank", "us each", "ms total"]
LAYER_HEADERS = ["layers", "n", "ops ms each", "comm ms each", "total ms each", "total ms"]
TOTAL_HEADERS = ["phase", "time ms", "time is", "comm ms", "host ms", "FLOPs", "bytes", "tokens/DP rank",
                 "tokens/s/DP rank"]
_NUMERIC = {"n", "FLOPs", "bytes", "us each", "ms total", "bytes/rank", "ops ms each", "comm ms each",
            "total ms each", "total ms", "time ms", "comm ms", "host ms", "tokens/DP rank", "tokens/s/DP rank"}


def _table(rows: list[list], headers: list[str], tf: str) -> str:
    """Cells printed as formatted (no re-parsing of numbers), numeric columns right-aligned."""
    align = ["right" if h in _NUMERIC else "left" for h in headers]
    return tabulate([[str(c) for c in r] for r in rows], headers, tablefmt=tf, disable_numparse=True,
                    colalign=align)


def layer_rows(ph: PhaseResult) -> list[list]:
    comp: dict[Any, float] = defaultdict(float)
    comm: dict[Any, float] = defaultdict(float)
    for i, op in enumerate(ph.program.ops):
        t = float(ph.op_out[i, K.OUT_TIME]) * 1e6
        for L, _ in ph._instances(op.mult, op.layers):
            comp[L] += t
    for j, c in enumerate(ph.program.colls):
        t = float(ph.co_out[j, K.CO_TIME]) * 1e6
        for L, _ in ph._instances(c.mult, c.layers):
            comm[L] += t
    spec_layers = sorted({k for k in list(comp) + list(comm) if k is not None})
    rows = [["model", 1, f"{comp[None] / 1e3:.3f}", f"{comm[None] / 1e3:.3f}",
             f"{(comp[None] + comm[None]) / 1e3:.3f}", f"{(comp[None] + comm[None]) / 1e3:.3f}"]]
    # consecutive layers that cost the same fold into one row ("3-77", 75 layers), as the op table does
    run: list[int] = []

    def flush() -> None:
        if run:
            L = run[0]
            each = (comp[L] + comm[L]) / 1e3
            rows.append([ranges(run), len(run), f"{comp[L] / 1e3:.3f}", f"{comm[L] / 1e3:.3f}",
                         f"{each:.3f}", f"{each * len(run):.3f}"])

    for L in spec_layers:
        if run and (round(comp[L], 3), round(comm[L], 3)) == (round(comp[run[-1]], 3), round(comm[run[-1]], 3)) \
                and L == run[-1] + 1:
            run.append(L)
        else:
            flush()
            run = [L]
    flush()
    # host time of the step (device profile host_ms): the device idles, no layer owns it
    rows.append(["host", 1, "-", "-", f"{ph.host_ms:.3f}", f"{ph.host_ms:.3f}"])
    return rows


def collective_rows(ph: PhaseResult) -> list[list]:
    agg: dict[tuple, list] = {}
    for c in ph.collective_entries():
        key = (c["kind"], c["group"], c["tensor"], c["bytes"])
        a = agg.setdefault(key, [0, 0.0])
        a[0] += 1
        a[1] += c["time_us"]
    return [[k, g, t, n, binary(b), f"{tt / n:.1f}", f"{tt / 1e3:.3f}"]
            for (k, g, t, b), (n, tt) in agg.items()]


def totals_rows(res: PerfResult) -> list[list]:
    rows = []
    for name, ph in res.phases.items():
        label = "TTFT" if name == "prefill" else "decode step"
        rows.append([name, f"{ph.time_ms:.3f}", label, f"{ph.comm_ms:.3f}", f"{ph.host_ms:.3f}", _si(ph.flops),
                     binary(ph.bytes), f"{ph.tokens:g}", f"{ph.tokens_per_s:.1f}"])
    return rows


def render(res: PerfResult, fmt: str, per_layer: bool = True) -> str:
    if fmt == "json":
        return json.dumps(res.to_json(), indent=1)
    if fmt == "csv":
        return render_csv(res)
    tf = "github" if fmt == "markdown" else "simple"
    out = [f"audit perf: {res.model}  {res.plan.describe()}  engine {res.engine}  quant {res.recipe}  "
           f"device {res.device}  graph {res.graph}"]
    for name, ph in res.phases.items():
        w = ph.workload
        out.append("")
        out.append(f"== {name}: batch {w.batch}, tokens {w.tokens if name == 'prefill' else 1 + w.mtp} per request, "
                   f"context {w.context}, MTP {w.mtp}")
        out.append(_table(ops_rows(ph), OPS_HEADERS, tf))
        out.append("")
        out.append(_table(collective_rows(ph), COLL_HEADERS, tf))
        if per_layer:
            out.append("")
            out.append(_table(layer_rows(ph), LAYER_HEADERS, tf))
    out.append("")
    out.append(_table(totals_rows(res), TOTAL_HEADERS, tf))
    for n in res.notes:
        out.append(f"note: {n}")
    return "\n".join(out) + "\n"


def growth_tables(g: Any, tf: str = "simple") -> str:
    """One table per phase: ms per step of every op class (rows) at every context (columns), the
    context-dependent classes marked, largest growth first; then the step total."""
    out = []
    for phase, rows in g.phases.items():
        head = ["op class", "context"] + [f"{c:,}" for c in g.contexts] + [f"x{g.contexts[-1]:,}/{g.contexts[0]:,}"]
        body = []
        for cls, ms in sorted(rows.items(), key=lambda kv: -(kv[1][-1] - kv[1][0])):
            if max(ms) < 0.0005:
                continue
            ratio = f"{ms[-1] / ms[0]:.2f}" if ms[0] > 0 else "-"
            body.append([cls, "grows" if cls in g.growing else ""] + [f"{v:.3f}" for v in ms] + [ratio])
        tot = g.totals[phase]
        body.append(["total", ""] + [f"{v:.3f}" for v in tot] + [f"{tot[-1] / tot[0]:.2f}"])
        what = (f"a {g.tokens}-token chunk ending at the context" if phase == "prefill"
                else f"one step of {1 + g.mtp} tokens per request at the context")
        out.append(f"== context growth, {phase} (ms per step; {what}; batch {g.batch}, MTP {g.mtp})")
        align = ["left", "left"] + ["right"] * (len(head) - 2)
        out.append(tabulate(body, head, tablefmt=tf, disable_numparse=True, colalign=align))
        out.append("")
    return "\n".join(out)


def render_csv(res: PerfResult) -> str:
    buf = io.StringIO()
    w = csv.writer(buf)
    cols = ["phase", "layer", "pass", "name", "kind", "tokens", "layout", "dtype", "flops", "bytes", "bound",
            "time_us", "source"]
    w.writerow(cols + ["group"])
    for name, ph in res.phases.items():
        for e in ph.op_entries():
            w.writerow([name, e["layer"], e.get("pass", ""), e["name"], e["kind"], e["tokens"], e["layout"],
                        e["dtype"], e["flops"], e["bytes"], e["bound"], f"{e['time_us']:.4f}", e["source"], ""])
        for c in ph.collective_entries():
            w.writerow([name, c["layer"], c.get("pass", ""), c["tensor"], c["kind"], c["tokens"], "", "", 0,
                        c["bytes"], "comm", f"{c['time_us']:.4f}", "analytic", c["group"]])
    return buf.getvalue()
