"""The "HBM budget" section (table / markdown / CSV columns) from a report's ``runtime`` object
and ``vllm_log_lines``: the engine's available-memory formula, the KV spec, blocks, tokens,
concurrency, the items outside the budget and the lines vLLM would print."""
from __future__ import annotations


from ..engines.registry import DEFAULT_FAMILY, as_engine
from ..units import GiB, MiB
from ..units import gib as _g
from .text_table import tabulate


def budget_rows(rt: dict, engine: object = None) -> list[list[str]]:
    """(item, GiB, note) rows of the formula, sub-terms indented, in the engine's words."""
    eng = as_engine(engine if engine is not None else DEFAULT_FAMILY + "@main")
    docs, labels = eng.term_docs, eng.budget_labels
    rows = [["total seen by the worker (M_total)", _g(rt["total_bytes"]), ""],
            [f"requested = {rt['gpu_memory_utilization']:g} x M_total", _g(rt["requested_bytes"]), ""],
            ["- weights W (worst rank, ledger)", _g(rt["weights_bytes"]), labels["weights"]],
            ["- activation peak P_act (profile run)", _g(rt["activation_peak_bytes"]),
             f"T={rt['max_num_batched_tokens']:,} S={rt['max_num_seqs']} MTP={rt['mtp']}"]]
    for k, v in rt["activation_terms"].items():
        rows.append([f"· {k}", _g(v), docs.get(k, "given")])
    rows.append([f"- non-torch N ({labels['non_torch']})", _g(rt["non_torch_bytes"]), ""])
    for k, v in rt["non_torch_terms"].items():
        rows.append([f"· {k}", _g(v), ""])
    if rt["graph_deducted_bytes"]:
        rows.append([f"- {labels['graph']} (deducted)", _g(rt["graph_deducted_bytes"]), ""])
    rows.append(["= available KV cache memory A_kv", _g(rt["kv_available_bytes"]), ""])
    rows.append([f"KV pool ({rt['num_blocks']:,} blocks)", _g(rt["kv_pool_bytes"]), ""])
    return rows


def render_budget(rep: dict, fmt: str = "table") -> str:
    rt = rep["runtime"]
    kv = rt["kv_spec"]
    tf = "github" if fmt == "markdown" else "simple"
    h = (lambda s: f"\n## {s}\n") if fmt == "markdown" else (lambda s: f"\n{s}\n{'-' * len(s)}")
    dev = rep.get("device", {})
    out = [h(f"HBM budget per rank ({dev.get('name', 'device')}, GiB)")]
    out.append(tabulate(budget_rows(rt, rep.get("engine", {}).get("name")), headers=["item", "GiB", "note"], tablefmt=tf, disable_numparse=True))
    layers = f"{kv['cache_layers'] - kv['mtp_layers']}" + (f"+{kv['mtp_layers']} {kv.get('drafter', 'MTP')}" if kv["mtp_layers"] else "")
    per_tok = rt["kv_bytes_per_token"]
    out.append("")
    if "summary" in kv:                 # a pool of cache groups (engines/kv_interface.PooledKVSpec)
        out.append(f"KV cache: {kv['variant']}, {layers} decoder layers: {kv['summary']}")
    else:
        out.append(f"KV cache: {kv['variant']} ({kv['layout']} spec), {layers} cache layers x "
                   f"{rt['kv_bytes_per_token_layer']:g} B/token/layer (MLA {kv['mla_bytes_per_token_layer']} + "
                   f"indexer {kv['indexer_bytes_per_token_layer']}{', DCP' + str(kv['dcp']) if kv['dcp'] > 1 else ''})"
                   f" = {per_tok:,.0f} B/token; block {kv['tokens_per_block']} tokens = "
                   f"{kv['page_block_bytes'] / MiB:.2f} MiB")
    out.append(f"blocks {rt['num_blocks']:,} | KV tokens {rt['kv_tokens']:,} | max_model_len {rt['max_model_len']:,} "
               f"needs {rt['kv_bytes_per_request'] / GiB:.2f} GiB | max concurrency {rt['max_concurrency']:.2f}x")
    if rt.get("startup_error"):
        out.append(f"ENGINE CANNOT START: {rt['startup_error']}")
    elif rt["error"]:
        out.append(f"DOES NOT FIT: largest model length that fits {rt['estimated_max_model_len']:,}")
    unc = rt.get("uncertainty")
    if unc and unc["terms"]:
        spans = "; ".join(f"{n} {_g(t['low'])}-{_g(t['high'])}" for n, t in unc["terms"].items())
        out.append(f"over the UNCONFIRMED ranges ({spans} GiB): A_kv {_g(unc['kv_available_low_bytes'])}-"
                   f"{_g(unc['kv_available_high_bytes'])} GiB, {unc['verdict']}")
    head = rt["total_bytes"] - rt["requested_bytes"] - rt["others_at_start_bytes"]
    out.append(h(f"Outside the budget: must fit in (1 - util) x M_total - others at start = {_g(head)} GiB"))
    body = [[u["name"], _g(u["bytes"])] for u in rt["unbudgeted"]]
    body.append(["headroom left" if rt["headroom_bytes"] >= 0 else "SHORTFALL (OOM risk)", _g(rt["headroom_bytes"])])
    out.append(tabulate(body, headers=["item", "GiB"], tablefmt=tf, disable_numparse=True))
    out.append(h("vLLM would print"))
    lines = rep.get("vllm_log_lines", [])
    out.append("\n".join(("    " if fmt == "markdown" else "  ") + x for x in lines))
    return "\n".join(out) + "\n"


CSV_COLUMNS = ["hbm_total_bytes", "hbm_requested_bytes", "activation_peak_bytes", "non_torch_bytes",
               "kv_available_bytes", "kv_num_blocks"]


def csv_values(rt: dict, rank_bytes: int) -> list[int]:
    """Per-rank budget columns: this rank's own A_kv, and the DP engine's block count."""
    avail = rt["requested_bytes"] - rank_bytes - rt["activation_peak_bytes"] - rt["non_torch_bytes"] \
        - rt["graph_deducted_bytes"]
    return [rt["total_bytes"], rt["requested_bytes"], rt["activation_peak_bytes"], rt["non_torch_bytes"],
            int(avail), rt["num_blocks"]]
