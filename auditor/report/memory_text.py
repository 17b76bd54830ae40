"""Terminal table and markdown renderers for the memory report (both from the report dict)."""
from __future__ import annotations


from ..model.classify import CATEGORIES
from ..engines.registry import as_engine
from ..errors import AuditInputError
from .findings import findings_section
from ..units import Unit, count
from .text_table import tabulate


def _rank_groups(ranks: list[dict]) -> list[tuple[list[int], dict]]:
    """Collapse ranks with identical totals and categories (worst first), so TP16 DP2 prints
    one line per distinct rank, not 32."""
    groups: dict[tuple, tuple[list[int], dict]] = {}
    for r in ranks:
        key = (r["bytes"], tuple(r["by_category"].values()), r["pp_stage"])
        if key in groups:
            groups[key][0].append(r["rank"])
        else:
            groups[key] = ([r["rank"]], r)
    return list(groups.values())


def _ranks_label(ranks: list[int]) -> str:
    ranks = sorted(ranks)
    if len(ranks) == 1:
        return str(ranks[0])
    if ranks == list(range(ranks[0], ranks[-1] + 1)):
        return f"{ranks[0]}-{ranks[-1]} ({len(ranks)})"
    shown = ",".join(str(x) for x in ranks[:6])
    return f"{shown}{',...' if len(ranks) > 6 else ''} ({len(ranks)})"


def render_memory(rep: dict, fmt: str = "table", max_tensor_rows: int | None = None) -> str:
    tf = "github" if fmt == "markdown" else "simple"
    h = (lambda s: f"\n## {s}\n") if fmt == "markdown" else (lambda s: f"\n{s}\n{'-' * len(s)}")
    m, p, e = rep["model"], rep["plan"], rep["engine"]
    # the engine's own switches (vLLM-Ascend: DSA-CP, nz_mode; upstream vLLM has neither)
    try:
        switches = as_engine(e["name"]).plan_switches(p)
    except (KeyError, ValueError, AuditInputError):       # a report without a known engine key
        switches = f"MTP-drafter={'on' if p.get('mtp_drafter') else 'off'}"
    u = Unit(rep["worst_rank"]["bytes"])
    gib, signed_gib = u, u.signed
    lines: list[str] = []
    title = f"audit memory: {m['name']} ({m['source']}{', recipe ' + m['recipe'] if m['recipe'] else ''})"
    lines.append(f"# {title}" if fmt == "markdown" else title)
    if m["synthesized"]:
        lines.append("NOTE: no safetensors were read; the inventory is SYNTHESIZED from config.json structure.")
    lines.append(f"structure: {'; '.join(m['structure'])}")
    plan = (f"TP{p['tp']} DP{p['dp']} " + (f"EP{p['ep']} " if p['ep'] > 1 else "EP off ")
            + (f"PP{p['pp']} " if p['pp'] > 1 else "") + ("SP " if p['sp'] else "")
            + f"role={p['role']} {switches}")
    lines.append(f"plan: {plan} | engine: {e['label']} | {count(p['world'], 'rank')}")
    w = rep["worst_rank"]
    lines.append(f"worst rank {w['rank']}: {gib(w['bytes'])} {u.name} resident "
                 f"(naive {gib(rep['naive']['bytes'])} {u.name}, imbalance {gib(rep['imbalance_bytes'])} {u.name})")
    if rep.get("answer"):
        lines.append(f"answer: {rep['answer']}")

    lines.append(h(f"Per-rank resident weights, worst first ({u.name})"))
    head = ["ranks", "stage", "total"] + list(CATEGORIES) + ["naive", "vs naive"]
    body = []
    for ranks, r in _rank_groups(rep["ranks"]):
        body.append([_ranks_label(ranks), r["pp_stage"], gib(r["bytes"])]
                    + [gib(r["by_category"][c]) for c in CATEGORIES]
                    + [gib(r["naive_bytes"]), signed_gib(r["bytes"] - r["naive_bytes"])])
    lines.append(tabulate(body, head, tablefmt=tf, disable_numparse=True))

    lines.append(h(f"Bridge: naive estimate -> engine-resident, rank {w['rank']} ({u.name})"))
    body = []
    for step in rep["bridge"]:
        if step["step"] in ("naive estimate", "resident"):
            body.append([("= " if step["step"] == "resident" else "") + step["step"], gib(step["bytes"])])
        else:
            body.append([f"  {step['step']}", signed_gib(step["bytes"])])
    lines.append(tabulate(body, ["step", u.name], tablefmt=tf, disable_numparse=True, colalign=("left", "right")))

    worst = rep["ranks"][0]
    lines.append(h(f"By block, rank {w['rank']} ({u.name})"))
    body = [[b, gib(v), f"{100 * v / max(worst['bytes'], 1):.1f}%"]
            for b, v in sorted(worst["by_block"].items(), key=lambda kv: -kv[1])]
    lines.append(tabulate(body, ["block", u.name, "share"], tablefmt=tf, disable_numparse=True))

    if "layers" in rep:
        lines.append(h(f"By layer, rank {w['rank']} ({u.name})"))
        body = [[x["layer"] if x["layer"] is not None else "-", x["kind"], gib(x["bytes"])] for x in rep["layers"]]
        lines.append(tabulate(body, ["layer", "kind", u.name], tablefmt=tf, disable_numparse=True))
    if "tensors" in rep:
        lines.append(h(f"By tensor, rank {w['rank']}, shapes as this rank holds them, grouped over identical "
                       f"layers ({u.name})"))
        rows = rep["tensors"] if max_tensor_rows is None else rep["tensors"][:max_tensor_rows]
        body = [[t["block"], t["module"], t["tensor"], t["category"], t["dtype"], "x".join(map(str, t["shape"])),
                 t["layers"], t["count"], gib.cell(t["bytes"]), t["source"], t["cause"] or "-"] for t in rows]
        lines.append(tabulate(body, ["block", "module", "tensor", "category", "dtype", "shape", "layers", "n",
                                     u.name, "source", "cause"], tablefmt=tf, disable_numparse=True))
    if "observed" in rep:
        o = rep["observed"]
        lines.append(h("Observed vs modeled (worst rank)"))
        lines.append(f"observed {gib(o['observed_bytes'])} {u.name}, modeled {gib(o['modeled_bytes'])} {u.name}, "
                     f"delta {signed_gib(o['delta_bytes'])} {u.name}"
                     + (f" ({100 * o['relative']:+.1f}%)" if o["relative"] is not None else ""))
        close = o.get("closest_configurations") or []
        if close:
            lines.append("the same plan under other engine versions and roles, closest first: "
                         + "; ".join(f"{c['engine']} role {c['role']} {gib(c['worst_rank_bytes'])} {u.name} "
                                     f"({100 * c['relative']:+.1f}%)" for c in close))
            lines.append("for a rank-by-rank explanation from the engine's log: audit align MODEL --log LOG "
                         "(searches version, role, SP, recipe, DP, ...)")
        body = [[c["category"], gib(c["modeled_bytes"]),
                 gib(c["needed_bytes"]) if c["needed_bytes"] >= 0 else "impossible",
                 f"x{c['factor']:.2f}" if c["factor"] is not None and c["needed_bytes"] >= 0 else "-"]
                for c in o["by_category"]]
        lines.append(tabulate(body, ["if the gap were all in", f"modeled {u.name}", f"would need {u.name}", "factor"],
                              tablefmt=tf, disable_numparse=True))
        if o["closest_bridge_steps"]:
            lines.append("bridge steps closest in size to the gap: "
                         + "; ".join(f"{s['step']} ({signed_gib(s['bytes'])} {u.name})" for s in o["closest_bridge_steps"]))
    if "budget" in rep:
        b = rep["budget"]
        verdict = "EXCEEDED" if b["exceeded"] else "fits"
        lines.append(f"\nbudget {gib(b['bytes'])} {u.name} per rank: {verdict} (headroom {signed_gib(b['headroom_bytes'])} {u.name})")

    lines.extend(findings_section(rep, h, tf))
    if rep["assumptions"]:
        lines.append(h("Assumptions"))
        lines.extend(f"- {a}" for a in rep["assumptions"])
    return "\n".join(lines) + "\n"


def render_memory_csv(rep: dict) -> str:
    """CSV: per-tensor rows with --by tensor, per-layer rows with --by layer, else per-rank rows."""
    import csv
    import io
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    if "tensors" in rep:
        w.writerow(["rank", "block", "module", "tensor", "category", "dtype", "shape", "layers", "count", "bytes",
                    "naive_bytes", "source", "cause"])
        r = rep["worst_rank"]["rank"]
        for t in rep["tensors"]:
            w.writerow([r, t["block"], t["module"], t["tensor"], t["category"], t["dtype"],
                        "x".join(map(str, t["shape"])), t["layers"], t["count"], t["bytes"], t["naive_bytes"],
                        t["source"], t["cause"] or ""])
    elif "layers" in rep:
        w.writerow(["rank", "layer", "kind", "bytes"])
        for x in rep["layers"]:
            w.writerow([rep["worst_rank"]["rank"], "" if x["layer"] is None else x["layer"], x["kind"], x["bytes"]])
    else:
        from .hbm_budget import CSV_COLUMNS, csv_values
        rt = rep.get("runtime")
        blocks = sorted({b for r in rep["ranks"] for b in r["by_block"]})
        w.writerow(["rank", "pp_stage", "dp_rank", "tp_rank", "bytes", "naive_bytes"]
                   + [f"category_{c}" for c in CATEGORIES] + [f"block_{b}" for b in blocks]
                   + (CSV_COLUMNS if rt else []))
        for r in sorted(rep["ranks"], key=lambda r: r["rank"]):
            w.writerow([r["rank"], r["pp_stage"], r["dp_rank"], r["tp_rank"], r["bytes"], r["naive_bytes"]]
                       + [r["by_category"][c] for c in CATEGORIES] + [r["by_block"].get(b, 0) for b in blocks]
                       + (csv_values(rt, r["bytes"]) if rt else []))
    return buf.getvalue()


__all__ = ["render_memory", "render_memory_csv"]
