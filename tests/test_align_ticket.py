"""``audit align`` end to end: the ticket's structure (golden: section headings, table columns, JSON
keys), exit codes (--tolerance -> 4, bad input -> 2), and sizes that refuse a bare number."""
from __future__ import annotations

import json

import pytest

from auditor.align.ticket_md import SECTIONS
from auditor.cli import main

GiB = 2 ** 30
HEADER = ("Device_id,Name,Type,Accelerator Core,Start Time(us),Duration(us),Input Shapes,Input Data Types,"
          "Input Formats")
LAYER = ["RmsNorm", "QuantBatchMatmulV3", "RmsNorm", "RmsNorm", "QuantBatchMatmulV3", "SparseFlashAttention",
         "QuantBatchMatmulV3", "AddRmsNorm", "GroupedMatmul", "hcom_alltoAll_", "FutureKernelV9"]


@pytest.fixture(scope="module")
def evidence(tmp_path_factory):
    d = tmp_path_factory.mktemp("ev")
    log = d / "engine.log"
    lines = [f"vllm-1  | (Worker_DP{r // 16}_TP{r % 16}_EP{r} pid={100 + r}) INFO 05-20 09:50:58 "
             "[model_runner_v1.py:3150] Loading model weights took 38.2 GB" for r in range(32)]
    lines += ["(Worker_DP0_TP0_EP0 pid=100) INFO 05-20 09:51:00 [worker.py:1] Available KV cache memory: 12.40 GiB",
              "(EngineCore_DP0 pid=9) INFO 05-20 09:51:01 [kv_cache_utils.py:1] GPU KV cache size: 119,424 tokens",
              "(EngineCore_DP0 pid=9) INFO 05-20 09:51:01 [kv_cache_utils.py:1] Maximum concurrency for 131,072 "
              "tokens per request: 0.91x"]
    log.write_text("\n".join(lines) + "\n")
    prof = d / "kernel_details.csv"
    rows, t = [HEADER], 0.0
    for _ in range(78):
        for typ in LAYER:
            rows.append(f'0,{typ},{typ},AI_CORE,{t},100.0,"4096,6144;6144,2048",INT8;INT8,ND;ND')
            t += 101
    prof.write_text("\n".join(rows) + "\n")
    bench = d / "bench.json"
    bench.write_text(json.dumps({"mean_ttft_ms": 1600.0, "median_ttft_ms": 1550.0, "p99_ttft_ms": 2900.0,
                                 "mean_tpot_ms": 70.0, "median_tpot_ms": 69.0, "p99_tpot_ms": 90.0,
                                 "output_throughput": 500.0, "completed": 8, "total_input_tokens": 8 * 4096}))
    return log, prof, bench


PLAN = ["glm-5.1", "--tp", "16", "--dp", "2", "--ep", "32", "--sp"]


def test_ticket_structure(evidence, tmp_path, capsys):
    log, prof, bench = evidence
    out = tmp_path / "t"
    rc = main(["align", *PLAN, "--log", str(log), "--profile", str(prof), "--bench", str(bench),
               "--output-dir", str(out), "--top", "5"])
    assert rc == 0
    # the recipe is searched (a preset has no quant description): the default w8a8 explains it
    assert "best candidate: w8a8, vLLM-Ascend v0.18.0, role prefill, SP" in capsys.readouterr().out
    md = (out / "ticket.md").read_text()
    heads = [ln[3:] for ln in md.splitlines() if ln.startswith("## ")]
    assert heads == list(SECTIONS)
    assert md.startswith("# Alignment: glm-5.1")
    for columns in ("| kind | file | bytes | sha256 |", "| ranks | n | observed GiB | predicted GiB | delta GiB |",
                    "| # | configuration | predicted GiB / rank | max |residual| GiB |", "| figure | observed | where |",
                    "| op class | predicted ms | measured ms | delta ms | measured / predicted |",
                    "| # | layer | op class | predicted ms | measured ms | delta ms | constants |",
                    "| metric | stat | model phase | measured ms | predicted ms | delta ms | delta % |"):
        squeezed = "\n".join("|".join(c.strip() for c in ln.split("|")) for ln in md.splitlines())
        assert "|".join(c.strip() for c in columns.split("|")) in squeezed, columns
    t = json.loads((out / "ticket.json").read_text())
    assert set(t) == {"schema", "tool", "title", "configuration", "evidence", "memory", "kv", "time", "assumptions",
                      "findings", "tolerance", "figures", "verdict", "parsed"}
    assert set(t["memory"]) == {"observed", "candidates", "groups", "search"}
    assert set(t["memory"]["observed"][0]) == {"rank", "bytes", "where"}
    assert {"engine", "role", "options", "ranks_bytes", "max_abs_residual_bytes",
            "max_rel_residual"} <= set(t["memory"]["candidates"][0])
    assert t["memory"]["observed"][5]["bytes"] == round(38.2 * GiB)
    assert t["memory"]["candidates"][0]["engine"] == "vllm-ascend@0.18"
    assert len(t["memory"]["candidates"]) <= 5
    assert set(t["kv"]) == {"observed", "predicted", "compared", "predicted_note"}
    assert t["kv"]["observed"]["kv_tokens"][0]["tokens"] == 119424
    assert t["kv"]["predicted"]["weights_bytes"] == t["memory"]["groups"][0]["predicted_bytes"]
    assert {c["figure"] for c in t["kv"]["compared"]} == {"available KV rank 0", "KV tokens",
                                                         "concurrency @ 131,072 tokens"}
    tm = t["time"]
    assert {"by_class", "by_layer", "discrepancies", "unmapped", "bench", "predicted_total_ms"} <= set(tm)
    # measured per class: 78 layers x 3 linear kernels x 100 us = 23.4 ms; 78 SFA kernels = 7.8 ms
    cls = {r["class"]: r for r in tm["by_class"]}
    assert cls["linear"]["measured_us"] == pytest.approx(78 * 3 * 100.0)
    assert cls["sfa"]["measured_us"] == pytest.approx(78 * 100.0)
    assert tm["unmapped"][0]["type"] == "FutureKernelV9" and tm["unmapped"][0]["total_us"] == pytest.approx(7800.0)
    assert len(tm["discrepancies"]) <= 5 and all("constants" in d and d["assumption"] for d in tm["discrepancies"])
    # identical layers are one row: no two rows share class, predicted and measured time
    keys = [(d["class"], round(d["predicted_us"], 3), round(d["measured_us"], 3)) for d in tm["discrepancies"]]
    assert len(set(keys)) == len(keys) and sum(d["layers"] for d in tm["discrepancies"]) > len(keys)
    assert {b["metric"] for b in tm["bench"]} == {"ttft", "tpot"}
    assert t["evidence"][0]["sha256"] and len(t["evidence"]) == 3
    assert t["figures"] == ["memory_waterfall.png", "time_by_class.png"]
    for f in t["figures"]:
        assert (out / f).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_tolerance_exit_4(evidence, tmp_path):
    # the weights lines only: the fixture's KV lines are placeholders (KV tolerance: test_align_kv.py)
    log = tmp_path / "weights.log"
    log.write_text("\n".join(ln for ln in evidence[0].read_text().splitlines() if "Loading model weights" in ln))
    # 38.2 vs 38.234 GiB predicted is -0.09 %: within 1 %, beyond 0.01 %; pinned options are not searched
    pin = ["--engine", "vllm-ascend@0.18", "--role", "prefill", "--nz-mode", "1"]
    assert main(["align", *PLAN, *pin, "--log", str(log), "--output-dir", str(tmp_path / "a"), "--tolerance", "1%",
                 "--no-png"]) == 0
    assert main(["align", *PLAN, *pin, "--log", str(log), "--output-dir", str(tmp_path / "b"), "--tolerance",
                 "0.01%", "--no-png"]) == 4
    t = json.loads((tmp_path / "b" / "ticket.json").read_text())
    assert t["tolerance"]["exceeded"][0]["figure"] == "memory ranks 0-31"
    assert "engine" not in t["memory"]["search"]["dimensions"] and "role" not in t["memory"]["search"]["dimensions"]
    assert {"engine", "role", "nz_mode"} <= set(t["configuration"]["pinned"])


def test_bad_input_is_one_line(tmp_path, capsys):
    assert main(["align", *PLAN, "--output-dir", str(tmp_path)]) == 2
    assert main(["align", *PLAN, "--log", str(tmp_path / "nope.log"), "--output-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("audit: error: ") and "cannot read log" in err[-1]
    assert main(["align", *PLAN, "--log", str(tmp_path / "x"), "--tolerance", "lots", "--output-dir",
                 str(tmp_path)]) == 2


def test_sizes_refuse_a_bare_number(capsys):
    """--observed 38 used to mean 38 bytes (a delta of -82,560,362,110.5 %)."""
    assert main(["memory", "glm-5.1", "--observed", "38"]) == 2
    assert "no unit" in capsys.readouterr().err


def test_kv_rows_fold_identical_workers_into_rank_ranges():
    """32 workers printing the same figure make one row naming the ranks; a differing worker stays apart."""
    from auditor.align.ticket_md import _fold_ranks, _ranks_label

    items = [(r, (11.9,), f"log:{r}") for r in range(32) if r != 5] + [(5, (12.4,), "log:5"), (None, (11.9,), "log:x")]
    folded = _fold_ranks(items)
    assert [(v, w) for v, _, w in folded] == [((11.9,), "log:0"), ((12.4,), "log:5")]
    assert _ranks_label(folded[0][1]) == "ranks 0-4,6-31, 31 workers + 1 unplaced"
    assert _ranks_label(folded[1][1]) == "rank 5"
