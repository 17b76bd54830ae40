"""Chrome trace (``--trace out.json``, opens in Perfetto / chrome://tracing): one serial timeline
per phase, ops on one track and collectives on another, in execution order."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..outputs import write_output
from ..perf.api import PerfResult, PhaseResult


def _order_key(e: dict[str, Any], n_main: int) -> tuple:
    """Execution order: main forward (embed, layers, head), then MTP pass 1, 2, ...; inside a
    layer the emission order. Model-level ops (layer None) before the first layer when emitted
    before it, after the last otherwise."""
    p = e.get("pass") or 0
    layer = e["layer"]
    if layer is None:
        layer = -1 if e["seq"] < n_main else 10 ** 9
    return (p, layer, e["seq"])


def timeline(ph: PhaseResult) -> list[dict[str, Any]]:
    ops = ph.op_entries(seq=True)
    colls = ph.collective_entries(seq=True)
    first_layer_seq = min((e["seq"] for e in ops if e["layer"] is not None), default=0)
    events = [dict(e, track="ops") for e in ops if e["kind"] != "layout"]
    events += [dict(c, track="comm", name=f"{c['kind']}({c['tensor']})") for c in colls]
    events.sort(key=lambda e: _order_key(e, first_layer_seq))
    return events


def chrome_trace(res: PerfResult) -> dict[str, Any]:
    out: list[dict[str, Any]] = []
    for pid, (name, ph) in enumerate(res.phases.items()):
        out.append({"ph": "M", "pid": pid, "name": "process_name", "args": {"name": f"{name} ({res.model})"}})
        for tid, t in enumerate(("ops", "comm")):
            out.append({"ph": "M", "pid": pid, "tid": tid, "name": "thread_name", "args": {"name": t}})
        ts = 0.0
        for e in timeline(ph):
            dur = e["time_us"]
            args = {k: e[k] for k in ("layer", "tokens", "bytes") if k in e}
            args.update({k: e[k] for k in ("layout", "flops", "bound", "source", "group", "pass") if k in e})
            cat = e.get("kind", "comm")
            out.append({"ph": "X", "pid": pid, "tid": 0 if e["track"] == "ops" else 1, "ts": ts, "dur": dur,
                        "name": e["name"] if e["layer"] is None else f"L{e['layer']} {e['name']}",
                        "cat": cat, "args": args})
            ts += dur
    return {"traceEvents": out, "displayTimeUnit": "ms"}


def write_trace(res: PerfResult, path: Path) -> None:
    write_output(path, json.dumps(chrome_trace(res)), "--trace")
