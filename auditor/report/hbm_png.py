"""PNG of a rank's HBM: one stacked bar (weights, activation peak, non-torch, KV pool, unused
budget, items outside the budget, free headroom) against the die total and the util line."""
from __future__ import annotations

from pathlib import Path

from .figure import new_figure, save_png
from ..units import GiB


def write_hbm_png(rep: dict, path: Path) -> None:
    rt = rep["runtime"]
    unused = max(0, rt["kv_available_bytes"] - rt["kv_pool_bytes"])
    parts = [("weights", rt["weights_bytes"]), ("activation peak", rt["activation_peak_bytes"]),
             ("non-torch (HCCL)", rt["non_torch_bytes"]), ("KV pool", rt["kv_pool_bytes"]),
             ("budget not in blocks", unused), ("outside budget", sum(u["bytes"] for u in rt["unbudgeted"])),
             ("others at start", rt["others_at_start_bytes"])]
    fig = new_figure((6.5, 6))
    ax = fig.add_subplot()
    bottom = 0.0
    for name, b in parts:
        v = max(0.0, b / GiB)
        ax.bar(["rank"], [v], bottom=bottom, label=f"{name} {b / GiB:.2f}")
        bottom += v
    ax.axhline(rt["total_bytes"] / GiB, color="k", lw=1.5, label=f"M_total {rt['total_bytes'] / GiB:.2f}")
    ax.axhline(rt["requested_bytes"] / GiB, color="r", ls="--", lw=1,
               label=f"util {rt['gpu_memory_utilization']:g} x M_total")
    m, p = rep["model"], rep["plan"]
    ax.set_title(f"{m['name']} HBM per rank, TP{p['tp']} DP{p['dp']} EP{p['ep']}"
                 f"{' SP' if p['sp'] else ''} ({p['role']})\nKV {rt['kv_cache_dtype']}: {rt['num_blocks']:,} blocks, "
                 f"{rt['kv_tokens']:,} tokens, {rt['max_concurrency']:.2f}x at {rt['max_model_len']:,}", fontsize=9)
    ax.set_ylabel("GiB")
    ax.set_ylim(0, max(bottom, rt["total_bytes"] / GiB) * 1.05)
    fig.legend(fontsize=7, loc="outside right center")
    save_png(fig, path, "--hbm-png")
