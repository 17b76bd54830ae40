"""Report content (issue 7, "Reports"): per-rank expert shapes and the cause column of
`memory --by tensor`, findings grouped with layer ranges, `--strict`, and the fast per-tensor
inventory table (same layout as tabulate, same rows as the JSON)."""
from __future__ import annotations

import csv
import io
import json
import re
import shutil
import struct
from pathlib import Path

import pytest
from tabulate import tabulate

from auditor.cli import main
from auditor.report.findings import group_findings
from auditor.report.text_table import fixed_width_table

GIB = 2 ** 30
# GLM-5.1 config (spec anchor-tensorcast.md table): hidden 6144, moe_intermediate 2048,
# 256 routed experts, layers 3-77 are MoE (first_k_dense_replace 3, 78 layers).
H, I_MOE, E_ROUTED, MOE_LAYERS = 6144, 2048, 256, 75


def run_json(args: list[str], tmp_path: Path) -> dict:
    out = tmp_path / "r.json"
    assert main(args + ["--format", "json", "-o", str(out)]) == 0
    return json.loads(out.read_text())


def _expert_rows(rep: dict) -> dict[str, dict]:
    return {t["tensor"]: t for t in rep["tensors"] if t["module"] == "mlp.experts"}


@pytest.mark.parametrize("plan, ep", [(["--tp", "16", "--dp", "2", "--ep", "32"], 32),
                                      (["--tp", "8", "--dp", "2", "--ep", "16"], 16)])
def test_routed_expert_shapes_are_per_rank(tmp_path, plan, ep):
    rep = run_json(["memory", "glm-5.1", *plan, "--sp", "--by", "tensor"], tmp_path)
    e_local = E_ROUTED // ep                    # 8 under EP32, 16 under EP16
    rows = _expert_rows(rep)
    w13, w2 = rows["w13_weight"], rows["w2_weight"]
    assert w13["shape"] == [e_local, H, 2 * I_MOE]          # gate+up fused, transposed: E_local x K x N
    assert w2["shape"] == [e_local, I_MOE, H]
    for row in (w13, w2):                                  # int8: one byte per element, per MoE layer
        assert row["count"] == MOE_LAYERS and row["layers"] == "3-77"
    assert w13["bytes"] == e_local * H * 2 * I_MOE * MOE_LAYERS
    assert w2["bytes"] == e_local * I_MOE * H * MOE_LAYERS
    # every expert-placed tensor's leading dimension is the rank's local expert count
    assert all(t["shape"][0] == e_local for t in rows.values() if len(t["shape"]) > 1)


def test_redundant_experts_change_the_worst_rank_shape(tmp_path):
    # 256 + 16 redundant over EP32: the first 16 EP ranks hold 9 experts, the others 8
    rep = run_json(["memory", "glm-5.1", "--tp", "16", "--dp", "2", "--ep", "32", "--sp",
                    "--redundant-experts", "16", "--by", "tensor"], tmp_path)
    assert _expert_rows(rep)["w13_weight"]["shape"] == [9, H, 2 * I_MOE]


def test_by_tensor_text_has_cause_column_and_gib(capsys):
    assert main(["memory", "glm-5.1", "--tp", "16", "--dp", "2", "--ep", "32", "--sp", "--engine",
                 "vllm-ascend@0.18", "--role", "prefill", "--by", "tensor"]) == 0
    out = capsys.readouterr().out
    table = out.split("By tensor", 1)[1].split("\n\n", 1)[0].splitlines()
    header = table[2].split()
    assert header[-3:] == ["GiB", "source", "cause"] and "MiB" not in header
    o_proj = next(ln for ln in table if "self_attn.o_proj" in ln and " weight " in ln)
    assert o_proj.rstrip().endswith("o_proj replicated (P node)")
    # 16384 x 6144 int8 per layer, 78 layers, replicated: 7.3125 GiB, printed with 3 decimals
    assert f"{16384 * 6144 * 78 / GIB:.3f}" in o_proj.split()


def test_findings_grouped_by_message_and_template():
    refuse = "kv_b_proj is FP8_BLOCK; the SFA backend asserts an unquantized kv_b_proj (engine refuses to start)"
    wk = "stored as FP8_BLOCK, but the engine builds this projection with quant_config=None (bf16)"
    findings = [{"severity": "warning", "tensor": None, "message": "FP8 linears: no FP8 linear method"}]
    for layer in [0, 1, 2, 3, 7, 8, 9]:
        findings.append({"severity": "warning", "tensor": f"model.layers.{layer}.self_attn.indexer.wk.weight",
                         "message": wk})
        findings.append({"severity": "error", "tensor": f"model.layers.{layer}.self_attn.kv_b_proj.weight",
                         "message": refuse})
    # same message, different module: its own row; expert numbers are masked too
    findings.append({"severity": "error", "tensor": "model.layers.5.mlp.experts.17.down_proj.weight",
                     "message": refuse})
    findings.append({"severity": "error", "tensor": "model.layers.6.mlp.experts.3.down_proj.weight",
                     "message": refuse})
    assert group_findings(findings) == [
        {"severity": "error", "message": refuse, "module": "model.layers.#.self_attn.kv_b_proj.weight",
         "layers": "0-3,7-9", "count": 7},
        {"severity": "error", "message": refuse, "module": "model.layers.#.mlp.experts.#.down_proj.weight",
         "layers": "5-6", "count": 2},
        {"severity": "warning", "message": "FP8 linears: no FP8 linear method", "module": "-", "layers": "-",
         "count": 1},
        {"severity": "warning", "message": wk, "module": "model.layers.#.self_attn.indexer.wk.weight",
         "layers": "0-3,7-9", "count": 7},
    ]


def test_61_refusals_print_as_one_row(capsys, tmp_path):
    rep = run_json(["memory", "deepseek-v3.2", "--recipe", "fp8-block", "--tp", "16", "--dp", "2", "--ep", "32", "--sp"],
                   tmp_path)
    refusals = [f for f in rep["findings"] if "refuses to start" in f["message"]]
    assert len(refusals) == 61                                # DeepSeek-V3.2: 61 decoder layers
    groups = [g for g in rep["finding_groups"] if "refuses to start" in g["message"]]
    assert len(groups) == 1 and groups[0]["layers"] == "0-60" and groups[0]["count"] == 61
    assert main(["memory", "deepseek-v3.2", "--recipe", "fp8-block", "--tp", "16", "--dp", "2", "--ep", "32",
                 "--sp"]) == 0
    out = capsys.readouterr().out
    # one findings row for the 61 layers (the answer line leads with the same refusal, once)
    rows = [ln for ln in out.splitlines() if "refuses to start" in ln and not ln.startswith("answer:")]
    assert len(rows) == 1 and rows[0].split()[:2] == ["error", "61"]
    assert out.splitlines()[[i for i, ln in enumerate(out.splitlines()) if ln.startswith("answer:")][0]].startswith(
        "answer: ENGINE CANNOT START")


def test_strict_exit_code_memory():
    plan = ["--tp", "16", "--dp", "2", "--ep", "32", "--sp"]
    fp8 = ["--recipe", "fp8-block"]                                       # the HF release's FP8 kv_b_proj
    assert main(["memory", "deepseek-v3.2", *fp8, *plan]) == 0             # errors reported, exit 0
    assert main(["memory", "deepseek-v3.2", *fp8, *plan, "--strict"]) == 4  # FP8 kv_b_proj: engine refuses
    assert main(["memory", "glm-5.1", *plan, "--strict"]) == 0            # no error findings


def test_strict_exit_code_inventory(ckpts, tmp_path, capsys):
    ck = tmp_path / "ck"
    shutil.copytree(ckpts / "glm5-tiny-w8a8", ck)
    assert main(["inventory", str(ck), "--strict"]) == 0
    desc_path = ck / "quant_model_description.json"
    desc = json.loads(desc_path.read_text())
    name = "model.layers.0.self_attn.q_a_proj.weight"
    assert desc[name] == "W8A8"
    desc[name] = "FLOAT"                       # stored I8 but described FLOAT: an error finding
    desc_path.write_text(json.dumps(desc))
    capsys.readouterr()
    assert main(["inventory", str(ck)]) == 0
    assert main(["inventory", str(ck), "--strict"]) == 4
    assert "description says FLOAT" in capsys.readouterr().out


def test_fixed_width_table_is_tabulates_layout():
    headers = ["name", "dtype", "shape", "x"]
    rows = [["model.layers.0.mlp.experts.0.gate_proj.weight", "I8", "2048x6144", ""],
            ["lm_head.weight", "BF16", "154880x6144", "yes"], ["a", "b", "c", "d"]]
    cols = [[r[i] for r in rows] for i in range(len(headers))]
    for fmt, tf in (("table", "simple"), ("markdown", "github")):
        assert fixed_width_table(headers, cols, fmt) == tabulate(rows, headers, tablefmt=tf, disable_numparse=True)
        assert fixed_width_table(headers, [[] for _ in headers], fmt) == tabulate(
            [], headers, tablefmt=tf, disable_numparse=True)


def test_inventory_by_tensor_table_csv_and_json_agree(ckpts, tmp_path, capsys):
    ck = ckpts / "glm5-tiny-w8a8"
    js = run_json(["inventory", str(ck), "--by", "tensor"], tmp_path)
    rows = js["tensor_rows"]
    assert len(rows) == js["tensors"]
    # independent: the shard header itself
    shard = ck / "quant_model_weights-00001-of-00001.safetensors"
    with open(shard, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
    by_name = {r["name"]: r for r in rows}
    for name, v in header.items():
        if name == "__metadata__":
            continue
        assert by_name[name]["shape"] == v["shape"] and by_name[name]["dtype"] == v["dtype"]
    capsys.readouterr()
    assert main(["inventory", str(ck), "--by", "tensor", "--format", "csv"]) == 0
    parsed = list(csv.DictReader(io.StringIO(capsys.readouterr().out)))
    assert [r["name"] for r in parsed] == [r["name"] for r in rows]
    for c, j in zip(parsed, rows):
        assert c["shape"] == "x".join(map(str, j["shape"])) and int(c["nbytes"]) == j["nbytes"]
        assert c["layer"] == ("" if j["layer"] is None else str(j["layer"]))
    assert main(["inventory", str(ck), "--by", "tensor"]) == 0
    text = capsys.readouterr().out
    table = text.split("\nTensors\n", 1)[1].splitlines()
    assert table[1].split()[:3] == ["name", "dtype", "shape"]
    body = table[3:3 + len(rows)]
    assert [ln.split()[0] for ln in body] == [r["name"] for r in rows]
    assert all(ln.split()[2] == "x".join(map(str, r["shape"])) for ln, r in zip(body, rows) if r["shape"])


def test_inventory_by_tensor_progress_only_when_asked_or_on_a_terminal(ckpts, capsys):
    ck = ckpts / "glm5-tiny-w8a8"
    assert main(["inventory", str(ck), "--by", "tensor", "-o", "/dev/null"]) == 0
    assert "formatting tensor rows" not in capsys.readouterr().err        # captured stderr is no terminal
    assert main(["inventory", str(ck), "--by", "tensor", "--progress", "-o", "/dev/null"]) == 0
    err = capsys.readouterr().err
    m = re.search(r"formatting tensor rows (\d+)/(\d+) rows", err)
    assert m and m.group(1) == m.group(2)                                  # reached the end
    with open(ck / "quant_model_weights.safetensors.index.json") as f:
        indexed = len(json.load(f)["weight_map"])
    assert int(m.group(2)) >= indexed                                     # every tensor (index + unindexed)
