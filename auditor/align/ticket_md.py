"""The ticket as markdown: the same content as ticket.json, in the order a reviewer reads it."""
from __future__ import annotations

from tabulate import tabulate

from ..layer_ranges import ranges
from ..units import gib, signed_gib

#: section headings, in order (the golden test checks them)
SECTIONS = ("Verdict", "Configuration", "Evidence", "Memory: observed vs predicted", "Candidate configurations", "KV cache",
            "Time per op class", "Top discrepancies", "Benchmark vs model", "Tolerance", "Assumptions")


def _g(b) -> str:
    return "-" if b is None else gib(b)


def _sg(b) -> str:
    return "-" if b is None else signed_gib(b)


def _ms(v) -> str:
    return "-" if v is None else f"{v:.3f}"


def _pct(v) -> str:
    """A signed share of the observed value (every percentage of the ticket has that one base)."""
    return "-" if v is None else f"{v * 100:+.1f}%"


def _apct(v) -> str:
    """An absolute share (no sign: it is a magnitude)."""
    return "-" if v is None else f"{abs(v) * 100:.1f}%"


def _table(rows, headers) -> str:
    return tabulate(rows, headers=headers, tablefmt="github", disable_numparse=True)


def render_ticket(t: dict) -> str:
    out = [f"# {t['title']}", ""]
    v = t.get("verdict") or {}
    out += [f"## {SECTIONS[0]}", "", v.get("summary", "-"), ""]
    if len(v.get("contradictions") or ()) > 3:
        out += ["Observed figures that contradict it:", ""] + [f"* {c}" for c in v["contradictions"]] + [""]
    if v.get("reasons"):
        out += ["What could explain the figures instead:", ""] + [f"* {r}" for r in v["reasons"]] + [""]
    if v.get("rank_notes"):
        out += [f"* {r}" for r in v["rank_notes"]] + [""]
    c = t["configuration"]
    p = c["plan"]
    out += [f"## {SECTIONS[1]}", "",
            f"* model: {c['model']}",
            f"* engine: {c['engine_label']} (`{c['engine']}`)" + (f" - {c['engine_note']}" if c["engine_note"] else ""),
            "* plan: " + ", ".join(f"{k}={v}" for k, v in p.items()),
            f"* taken from: {c['source']}; pinned on the command line: {', '.join(c['pinned']) or 'nothing'}", ""]
    out += [f"## {SECTIONS[2]}", "",
            _table([[e["kind"], e["path"], e["bytes"], e["sha256"]] for e in t["evidence"]],
                   ["kind", "file", "bytes", "sha256"]), ""]
    if t.get("parsed"):
        out += ["Parsed from the logs (every recognised line that is not a per-rank figure below):", "",
                _table([[p["what"], p["text"], p["where"]] for p in t["parsed"]], ["what", "value", "where"]), ""]
    m = t["memory"]
    out += [f"## {SECTIONS[3]}", ""]
    if m is None:
        out += ["No per-worker weights line in the logs.", ""]
    else:
        out += [_table([[g["ranks"], g["count"], _g(g["observed_bytes"]), _g(g["predicted_bytes"]),
                         _sg(g["delta_bytes"]), _pct(g["relative"])] for g in m["groups"]],
                       ["ranks", "n", "observed GiB", "predicted GiB", "delta GiB", "delta %"]), ""]
        for g in m["groups"][:4]:
            out += [f"Bridge, ranks {g['ranks']}: naive {_g(g['naive_bytes'])} GiB -> predicted "
                    f"{_g(g['predicted_bytes'])} GiB -> observed {_g(g['observed_bytes'])} GiB", "",
                    _table([[s["step"], _sg(s["bytes"])] for s in g["bridge"]], ["step", "GiB"]), ""]
    out += [f"## {SECTIONS[4]}", ""]
    if m is not None:
        s = m["search"]
        out += [f"{s['evaluated']} configurations searched over {', '.join(s['dimensions']) or 'nothing'} "
                f"({s['materialized']} distinct materializations); equal per-rank bytes are folded into one row.", ""]
        if s.get("skipped"):
            out += [f"Not searched: {x['dimension']}, because {x['why']}." for x in s["skipped"]] + [""]
        out += [_table([[i + 1, f["label"], _g(min(f["ranks_bytes"])) + (
                    "" if min(f["ranks_bytes"]) == max(f["ranks_bytes"]) else " - " + _g(max(f["ranks_bytes"]))),
                         _g(f["max_abs_residual_bytes"]), _apct(f["max_rel_residual"]),
                         "yes" if f.get("grouping_matches", True) else "NO", len(f["equivalent"])]
                        for i, f in enumerate(m["candidates"])],
                       ["#", "configuration", "predicted GiB / rank", "max |residual| GiB", "max rel",
                        "rank groups match", "equivalent"]),
                ""]
    else:
        out += ["Not searched (no weights line).", ""]
    kv = t["kv"]
    out += [f"## {SECTIONS[5]}", ""]
    if kv is None:
        out += ["No log given.", ""]
    else:
        o = kv["observed"]
        rows = [[f"available KV ({_ranks_label(rs)})", _g(v) + " GiB", where]
                for (v,), rs, where in _fold_ranks((a["rank"], (a["bytes"],), a["where"]) for a in o["available_kv"])]
        rows += [["KV tokens", f"{k['tokens']:,}", k["where"]] for k in o["kv_tokens"]]
        rows += [[f"concurrency @ {c['tokens_per_request']:,} tokens", f"{c['factor']:.2f}x", c["where"]]
                 for c in o["concurrency"]]
        rows += [["KV shortfall", f"needs {_g(s['needed_bytes'])} GiB for {s['max_seq_len']:,} tokens, has "
                  f"{_g(s['available_bytes'])} GiB" + (f" (estimated max len {s['estimated_max_len']:,})"
                                                       if s["estimated_max_len"] is not None else ""), s["where"]]
                 for s in o["shortfall"]]
        rows += [["NPU OOM" + (f" (device {x['device']})" if x["device"] is not None else ""),
                  ", ".join(f"{k} {_g(x[k + '_bytes'])} GiB" for k in ("tried", "allocated", "total", "free",
                                                                        "reserved") if x[k + "_bytes"] is not None),
                  x["where"]] for x in o["oom"]]
        rows += [[f"npu-smi NPU {r['npu']} chip {r['chip']}", f"{r['name']} pid {r['pid']}: {_g(r['memory_bytes'])} GiB",
                  r["where"]] for r in o.get("npu_smi", [])]
        rows += [["warm-up breakdown", f"W {_g(b['weights_bytes'])}, activation {_g(b['activation_bytes'])}, non-torch "
                  f"{_g(b['non_torch_bytes'])}, graph {_g(b['graph_bytes'])}, KV {_g(b['kv_bytes'])} GiB", b["where"]]
                 for b in o["breakdown"]]
        out += [_table(rows, ["figure", "observed", "where"]) if rows else "No KV lines in the logs.", ""]
        pr = kv["predicted"]
        if not pr:
            out += ["Predicted: " + kv["predicted_note"], ""]
        else:
            st = pr["settings"]
            out += [f"Predicted for the best candidate (runtime budget, W = {_g(pr['weights_bytes'])} GiB from its "
                    f"ledger; max_model_len {st['max_model_len']:,}, utilization {st['util']:g}, KV dtype "
                    f"{st['kv_cache_dtype']}; sources under Assumptions): available KV {_g(pr['available_kv_bytes'])} "
                    f"GiB, {pr['num_blocks']:,} blocks, {pr['kv_tokens']:,} tokens, concurrency "
                    f"{pr['max_concurrency']:.2f}x.", ""]
            if kv["compared"]:
                def fig(v, unit):
                    return _g(v) + " GiB" if unit == "bytes" else (f"{v:.2f}x" if unit == "x" else f"{v:,}")
                per_rank = [c for c in kv["compared"] if c.get("rank") is not None]
                rows = [[f"available KV ({_ranks_label(rs)})", fig(ob, "bytes"), fig(pr_, "bytes"), _pct(rel)]
                        for (ob, pr_, rel), rs, _ in _fold_ranks((c["rank"], (c["observed"], c["predicted"], c["relative"]),
                                                                  c["where"]) for c in per_rank)]
                rows += [[c["figure"], fig(c["observed"], c["unit"]), fig(c["predicted"], c["unit"]), _pct(c["relative"])]
                         for c in kv["compared"] if c.get("rank") is None]
                out += [_table(rows, ["figure", "observed", "predicted", "deviation"]), ""]
    tm = t["time"]
    out += [f"## {SECTIONS[6]}", ""]
    if tm is None:
        out += ["No profile or benchmark given.", ""]
    else:
        out += [f"Phase {tm['phase']}, workload {tm['workload']}, device {tm['device']}: predicted "
                f"{_ms(tm['predicted_total_ms'])} ms, measured {_ms(tm['measured_total_ms'])} ms (kernel time per step).",
                "", _table([[r["class"], _ms(r["predicted_us"] / 1e3),
                             _ms(r["measured_us"] / 1e3 if r["measured_us"] is not None else None),
                             _ms(r["delta_us"] / 1e3 if r["delta_us"] is not None else None),
                             "-" if r["ratio"] is None else f"{r['ratio']:.2f}"] for r in tm["by_class"]],
                           ["op class", "predicted ms", "measured ms", "delta ms", "measured / predicted"]), ""]
        if tm.get("host_ms"):
            out += [f"Host time (the device profile's per-step host overhead, not a kernel): predicted "
                    f"{_ms(tm['host_ms'])} ms; a kernel profile does not measure it.", ""]
        if tm.get("merged"):
            out += ["Fused kernels compared with the sum of the modelled kinds they run: "
                    + "; ".join(f"{k}" for k in tm["merged"]), ""]
        if tm.get("measured_only"):
            out += ["Measured only (the model has no op of these classes; not compared):", "",
                    _table([[r["class"], _ms(r["measured_us"] / 1e3)] for r in tm["measured_only"]],
                           ["op class", "measured ms"]), ""]
        if tm.get("predicted_only"):
            out += ["Predicted only (the profile has no kernel of these classes; not compared):", "",
                    _table([[r["class"], _ms(r["predicted_us"] / 1e3)] for r in tm["predicted_only"]],
                           ["op class", "predicted ms"]), ""]
        if tm.get("ignored"):
            out += ["Listed, not fitted:", "",
                    _table([[u["type"], u["count"], _ms(u["total_us"] / 1e3), u["why"]] for u in tm["ignored"]],
                           ["kernel type", "count", "total ms", "why"]), ""]
        rt = tm.get("rank_total_us") or {}
        if len(rt) > 1:
            vals = sorted(rt.values())
            out += [f"Kernel time per step over {len(rt)} ranks: {_ms(vals[0] / 1e3)} - {_ms(vals[-1] / 1e3)} ms"
                    + (f" (spread {(vals[-1] - vals[0]) / vals[-1] * 100:.1f}% of the slowest)" if vals[-1] else ""),
                    ""]
        if tm["unmapped"]:
            out += ["Unmapped kernels (kept, not compared):", "",
                    _table([[u["type"], u["count"], _ms(u["total_us"] / 1e3)] for u in tm["unmapped"]],
                           ["kernel type", "count", "total ms"]), ""]
    out += [f"## {SECTIONS[7]}", ""]
    if tm is None or not tm["discrepancies"]:
        out += ["None (no profile).", ""]
    else:
        out += ["Per layer; identical rows of several layers are one row (layer range, n layers, total delta).",
                "",
                _table([[i + 1, "-" if d["layer"] is None else d["layer"], d["class"], _ms(d["predicted_us"] / 1e3),
                         _ms(d["measured_us"] / 1e3), _ms(d["delta_us"] / 1e3),
                         ", ".join(f"{k}={v:g}" for k, v in d["constants"].items()), d["assumption"],
                         d.get("layers", 1), _ms(d.get("total_delta_us", d["delta_us"]) / 1e3)]
                        for i, d in enumerate(tm["discrepancies"])],
                       ["#", "layer", "op class", "predicted ms", "measured ms", "delta ms", "constants",
                        "could account for it", "n layers", "total delta ms"]), ""]
    out += [f"## {SECTIONS[8]}", ""]
    if tm is None or not tm["bench"]:
        out += ["No benchmark given.", ""]
    else:
        out += [_table([[b["metric"], b["stat"], b["phase"], _ms(b["measured_ms"]), _ms(b["predicted_ms"]),
                         _ms(b["delta_ms"]), _pct(b["relative"])] for b in tm["bench"]],
                       ["metric", "stat", "model phase", "measured ms", "predicted ms", "delta ms", "delta %"]), ""]
    tol = t["tolerance"]
    out += [f"## {SECTIONS[9]}", ""]
    if tol["limit"] is None:
        out += [f"No --tolerance given ({tol['compared']} figures compared).", ""]
    else:
        out += [f"Limit {tol['limit'] * 100:g}% over {tol['compared']} figures: "
                + ("all within." if tol["ok"] else f"{len(tol['exceeded'])} exceed it."), ""]
        if tol["exceeded"]:
            out += [_table([[e["figure"], _pct(e["relative"])] for e in tol["exceeded"]], ["figure", "deviation"]), ""]
    out += [f"## {SECTIONS[10]}", ""] + [f"* {a}" for a in t["assumptions"]] + [""]
    if t.get("figures"):
        out += ["Figures: " + ", ".join(f"`{f}`" for f in t["figures"]), ""]
    return "\n".join(out)


def _fold_ranks(items) -> list[tuple[tuple, list, str]]:
    """(rank, values, where) items -> one (values, ranks, first where) per distinct values, in first-seen
    order: 32 workers printing the same figure make one row, not 32."""
    groups: dict[tuple, tuple[list, str]] = {}
    for rank, values, where in items:
        ranks, first = groups.setdefault(values, ([], where))
        ranks.append(rank)
    return [(values, ranks, first) for values, (ranks, first) in groups.items()]


def _ranks_label(ranks: list) -> str:
    known = [r for r in ranks if r is not None]
    if not known:
        return "rank ?"
    label = f"rank {known[0]}" if len(known) == 1 else f"ranks {ranges(known)}, {len(known)} workers"
    return label + (f" + {len(ranks) - len(known)} unplaced" if len(known) < len(ranks) else "")
