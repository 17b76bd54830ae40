"""``audit align`` KV figures: the log's available KV, KV tokens and concurrency against the runtime
budget of the best candidate, checked against the spec formula worked by hand.

engine-vllm-ascend-runtime.md §3.2 / §1.4:
    A_kv = int(util x M_total) - W - P_act - N_nontorch      (v0.18: the graph pool is not deducted)
    num_blocks = floor(A_kv / page_block); concurrency(L) = num_blocks / cdiv(L, 128)
    GPU KV cache size = int(concurrency x L)
The log's warm-up breakdown gives P_act and N_nontorch (injected instead of the model's estimates),
so every figure below is arithmetic on numbers written in this file.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

from auditor.cli import main

GiB = 2 ** 30
PLAN = ["glm-5.1", "--tp", "16", "--dp", "2", "--ep", "32", "--sp", "--engine", "vllm-ascend@0.18", "--role",
        "prefill", "--nz-mode", "1"]
# a3-752t's usable total (auditor/devices/a3-752t.json, hbm_usable_bytes: 61.27 GiB as torch_npu reports it)
M_TOTAL = 65_788_161_556
UTIL = 0.9
P_ACT, N_NT = round(2.50 * GiB), round(1.25 * GiB)
MAX_LEN = 8192
# v0.18 combined DSA spec: head_size Lkv + Dr + ID = 512 + 64 + 128 = 704 bf16 = 1408 B per token per
# layer; 78 cache layers (no MTP drafter); block size 128
PAGE = 128 * 78 * 1408


def _weights_lines() -> list[str]:
    return [f"(Worker_DP{r // 16}_TP{r % 16}_EP{r} pid={100 + r}) INFO 05-20 09:50:58 [model_runner_v1.py:3150] "
            "Loading model weights took 38.2 GB" for r in range(32)]


def _run(tmp_path: Path, name: str, lines: list[str], *extra: str) -> tuple[int, dict, str]:
    log = tmp_path / f"{name}.log"
    log.write_text("\n".join(lines) + "\n")
    out = tmp_path / name
    rc = main(["align", *PLAN, "--log", str(log), "--output-dir", str(out), "--no-png", *extra])
    return rc, json.loads((out / "ticket.json").read_text()), (out / "ticket.md").read_text()


def test_kv_lines_against_the_runtime_budget_by_hand(tmp_path):
    # W: the best candidate's ledger (38.234 GiB, the v0.18 P node docs/memory.md works out by hand)
    _, t0, _ = _run(tmp_path, "w", _weights_lines())
    W = t0["memory"]["groups"][0]["predicted_bytes"]
    assert abs(W / GiB - 38.234) < 5e-4
    a_kv = int(M_TOTAL * UTIL) - W - P_ACT - N_NT
    blocks = a_kv // PAGE
    conc = blocks / math.ceil(MAX_LEN / 128)
    tokens = int(conc * MAX_LEN)
    assert tokens == blocks * 128                      # 8192 is a whole number of blocks
    lines = _weights_lines() + [
        "(EngineCore_DP0 pid=9) INFO 05-20 09:49:00 [core.py:1] Initializing a V1 LLM engine (v0.11.0) with config: "
        f"model='/models/glm-5.1', max_seq_len={MAX_LEN}, kv_cache_dtype=auto, tensor_parallel_size=16",
        "(Worker_DP0_TP0_EP0 pid=100) INFO 05-20 09:50:59 [worker.py:1] Free memory on device (60.80/61.27 GiB) on "
        "startup. Desired GPU memory utilization is (0.9, 55.14 GiB). Actual usage: 38.23 GiB for weights, 2.50 GiB "
        "for peak activation, 1.25 GiB for non-torch memory, 0.00 GiB for NPU graph memory.",
        f"(Worker_DP0_TP0_EP0 pid=100) INFO 05-20 09:51:00 [worker.py:1] Available KV cache memory: {a_kv / GiB:.2f} GiB",
        f"(EngineCore_DP0 pid=9) INFO 05-20 09:51:01 [kv_cache_utils.py:1] GPU KV cache size: {tokens:,} tokens",
        f"(EngineCore_DP0 pid=9) INFO 05-20 09:51:01 [kv_cache_utils.py:1] Maximum concurrency for {MAX_LEN:,} "
        f"tokens per request: {conc:.2f}x",
    ]
    rc, t, md = _run(tmp_path, "kv", lines, "--tolerance", "0.1%")
    assert rc == 0, t["tolerance"]
    pred = t["kv"]["predicted"]
    assert pred["weights_bytes"] == W and pred["available_kv_bytes"] == a_kv
    assert pred["num_blocks"] == blocks and pred["kv_tokens"] == tokens
    assert pred["settings"]["max_model_len"] == MAX_LEN and pred["settings"]["kv_cache_dtype"] == "bf16"
    cmp = {c["figure"]: c for c in t["kv"]["compared"]}
    assert cmp["available KV rank 0"]["predicted"] == a_kv
    assert cmp["KV tokens"]["predicted"] == tokens and cmp["KV tokens"]["relative"] == 0
    assert abs(cmp[f"concurrency @ {MAX_LEN:,} tokens"]["predicted"] - conc) < 1e-12
    assert sum(f.startswith("kv ") for f in [e["figure"] for e in t["tolerance"]["exceeded"]]) == 0
    assert t["tolerance"]["compared"] >= 1 + 3               # memory group + the three KV figures
    assert any("max_model_len 8,192 from the log's non-default args / config line" in a for a in t["assumptions"])
    assert any("warm-up breakdown" in a for a in t["assumptions"])
    squeezed = "\n".join("|".join(c.strip() for c in ln.split("|")) for ln in md.splitlines())
    assert "|figure|observed|predicted|deviation|" in squeezed

    # the engine printing 10% more tokens than the budget allows is a KV deviation that gates CI
    bad = lines[:-2] + [lines[-2].replace(f"{tokens:,}", f"{int(tokens * 1.1):,}"), lines[-1]]
    rc, t, _ = _run(tmp_path, "bad", bad, "--tolerance", "5%")
    assert rc == 4
    assert [e["figure"] for e in t["tolerance"]["exceeded"]] == ["kv KV tokens"]


def test_kv_only_log_is_predicted_from_the_pinned_plan(tmp_path):
    """No weights line: the prediction uses the ledger of the pinned plan (issue 18 item 3)."""
    rc, t, md = _run(tmp_path, "only", ["(EngineCore_DP0 pid=9) INFO 05-20 09:51:01 [kv_cache_utils.py:1] "
                                        "GPU KV cache size: 1,000 tokens"])
    assert rc == 0 and t["memory"] is None
    assert t["kv"]["predicted"] is not None and t["kv"]["predicted"]["weights_bytes"] > 0
    assert [c["figure"] for c in t["kv"]["compared"]] == ["KV tokens"]
    assert any("the log has no weights line" in a for a in t["assumptions"])
    # 1,000 logged KV tokens against a pool of many thousands: the figure contradicts the pinned plan (issue 29)
    assert t["verdict"]["explained"] is False and t["verdict"]["level"] == "unexplained"
    assert t["verdict"]["contradictions"][0].startswith("KV tokens observed 1,000 vs predicted")


# -- honest verdicts (issue 29): EXPLAINED needs every observed figure -----------------------------------

def test_weights_explained_but_kv_off_is_partly_explained(tmp_path):
    """The weights match (38.2 GB on every rank, the hand-checked P node above) but the log's KV token count is
    a third of any pool the budget allows: the ticket names that figure and does not say EXPLAINED."""
    _, t, md = _run(tmp_path, "kvoff", _weights_lines() + [
        "(EngineCore_DP0 pid=9) INFO 05-20 09:51:01 [kv_cache_utils.py:1] GPU KV cache size: 40,000 tokens"])
    v = t["verdict"]
    assert v["level"] == "partly explained" and v["explained"] is False
    assert v["summary"].startswith("PARTLY EXPLAINED") and "KV tokens observed 40,000" in v["summary"]
    assert "PARTLY EXPLAINED" in md and "EXPLAINED:" not in md.replace("PARTLY EXPLAINED", "")


def test_out_of_memory_contradicts_a_fitting_candidate(tmp_path):
    _, t, _ = _run(tmp_path, "oom", _weights_lines() + [
        "(Worker_DP0_TP0_EP0 pid=100) ERROR 05-20 09:51:00 [worker.py:1] RuntimeError: NPU out of memory. Tried to "
        "allocate 4.00 GiB (NPU 0; 61.27 GiB total capacity; 58.00 GiB already allocated; 0.50 GiB free)"])
    v = t["verdict"]
    assert v["level"] == "partly explained"
    assert any("runs out of memory (4.00 GiB allocation" in c and "where the best candidate fits" in c
               for c in v["contradictions"])


def test_a_cause_outside_the_model_is_one_it_cannot_tell(tmp_path):
    """The thread blames a CANN regression: the weights match, but the ticket says audit cannot tell."""
    _, t, md = _run(tmp_path, "cann", _weights_lines() + [
        "after upgrading to CANN 9.0 the same launch regressed: weights grew per rank"])
    v = t["verdict"]
    assert v["level"] == "partly explained" and not v["contradictions"]
    assert "cannot tell whether that is the cause" in v["reasons"][0] and "CANN 9.0" in v["reasons"][0]
    _, t2, _ = _run(tmp_path, "plain", _weights_lines())
    assert t2["verdict"]["level"] == "explained" and t2["verdict"]["explained"] is True
