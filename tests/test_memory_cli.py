"""`audit memory` / `audit inventory` through the CLI: formats, schema, exit codes, read-only."""
from __future__ import annotations

import csv
import io
import json
import os
import struct
from pathlib import Path


from auditor.cli import main
from auditor.model.presets import preset_config

GLM_PLAN = ["--tp", "16", "--dp", "2", "--ep", "32", "--sp", "--dsa-cp"]


def run_json(args, tmp_path) -> dict:
    out = tmp_path / "r.json"
    assert main(args + ["--format", "json", "-o", str(out)]) == 0
    return json.loads(out.read_text())


def snapshot(d: Path) -> dict:
    return {str(p.relative_to(d)): (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(d.rglob("*"))}


def test_quick_start_example_prints_ledger(capsys):
    assert main(["memory", "glm-5.1"] + GLM_PLAN) == 0
    out = capsys.readouterr().out
    assert "worst rank" in out and "Bridge" in out and "SYNTHESIZED" in out


def test_json_schema_is_consistent(tmp_path):
    rep = run_json(["memory", "glm-5.1"] + GLM_PLAN, tmp_path)
    for key in ("worst_rank", "ranks", "naive", "inventory", "findings", "assumptions", "bridge"):
        assert key in rep
    ranks = rep["ranks"]
    assert len(ranks) == 32
    assert ranks[0]["rank"] == rep["worst_rank"]["rank"] and ranks[0]["bytes"] == rep["worst_rank"]["bytes"]
    assert [r["bytes"] for r in ranks] == sorted((r["bytes"] for r in ranks), reverse=True)
    for r in ranks:
        assert abs(sum(r["by_category"].values()) - r["bytes"]) <= 8
        assert abs(sum(r["by_block"].values()) - r["bytes"]) <= 8
    # the bridge starts at the naive figure and ends at the resident one
    assert rep["bridge"][0]["bytes"] == rep["naive"]["bytes"]
    assert rep["bridge"][-1]["bytes"] == rep["worst_rank"]["bytes"]
    assert abs(sum(s["bytes"] for s in rep["bridge"][1:-1]) + rep["naive"]["bytes"] - rep["worst_rank"]["bytes"]) < 64
    inv = rep["inventory"]
    assert sum(c["count"] for c in inv["by_category"].values()) == inv["tensors"]
    assert rep["model"]["synthesized"] is True


def test_by_tensor_and_by_layer_sum_to_the_rank(tmp_path):
    rep = run_json(["memory", "glm-5.1", "--by", "all"] + GLM_PLAN, tmp_path)
    total = rep["worst_rank"]["bytes"]
    assert abs(sum(t["bytes"] for t in rep["tensors"]) - total) < 1024
    assert abs(sum(x["bytes"] for x in rep["layers"]) - total) < 1024
    # W_UK_T under DSA-CP: 64 heads x 192 x 512 bf16 per layer, 78 layers (engine spec §3.1)
    wukt = [t for t in rep["tensors"] if t["tensor"] == "W_UK_T"]
    assert sum(t["bytes"] for t in wukt) == 78 * 64 * 192 * 512 * 2


def test_budget_exit_code(tmp_path):
    args = ["memory", "glm-5.1", "--engine", "vllm-ascend@0.18", "--role", "prefill", "--format", "json",
            "-o", str(tmp_path / "x.json")] + GLM_PLAN
    assert main(args + ["--budget", "30GiB"]) == 3      # 38.2 GiB > 30
    assert main(args + ["--budget", "60GiB"]) == 0
    rep = json.loads((tmp_path / "x.json").read_text())
    assert rep["budget"]["exceeded"] is False
    assert rep["budget"]["headroom_bytes"] == 60 * 2**30 - rep["worst_rank"]["bytes"]


def test_observed_delta(tmp_path):
    rep = run_json(["memory", "glm-5.1", "--observed", "38GiB"] + GLM_PLAN, tmp_path)
    o = rep["observed"]
    assert o["observed_bytes"] == 38 * 2**30
    assert o["delta_bytes"] == 38 * 2**30 - rep["worst_rank"]["bytes"]
    assert {c["category"] for c in o["by_category"]} == {"float", "int8", "scale", "offset", "derived"}


def test_csv_has_one_row_per_rank(tmp_path):
    out = tmp_path / "r.csv"
    assert main(["memory", "glm-5.1", "--format", "csv", "-o", str(out), "--pp", "2", "--tp", "8"]) == 0
    rows = list(csv.DictReader(io.StringIO(out.read_text())))
    assert len(rows) == 16
    assert {r["pp_stage"] for r in rows} == {"0", "1"}


def test_markdown_renders_tables(capsys):
    assert main(["memory", "glm-5.1", "--format", "markdown"] + GLM_PLAN) == 0
    out = capsys.readouterr().out
    assert out.startswith("# audit memory") and "| step" in out


def test_png(tmp_path):
    png = tmp_path / "m.png"
    assert main(["memory", "glm-5.1", "--png", str(png), "-o", str(tmp_path / "m.txt")] + GLM_PLAN) == 0
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_config_only_directory_is_marked_synthesized(tmp_path):
    d = tmp_path / "cfg"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(preset_config("glm-5.1")))
    before = snapshot(d)
    rep = run_json(["memory", str(d), "--recipe", "w8a8"] + GLM_PLAN, tmp_path)
    assert rep["model"]["source"] == "config-only" and rep["model"]["synthesized"]
    assert any("SYNTHESIZED" in a for a in rep["assumptions"])
    assert snapshot(d) == before


def test_refuses_to_write_into_model_dir(tmp_path, capsys):
    d = tmp_path / "cfg"
    d.mkdir()
    (d / "config.json").write_text(json.dumps(preset_config("glm-5.1")))
    before = snapshot(d)
    assert main(["memory", str(d), "-o", str(d / "report.txt")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("audit: error:")
    assert snapshot(d) == before


def test_unknown_preset_is_one_line_error(capsys):
    assert main(["memory", "no-such-model"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "preset" in err and "Traceback" not in err


def test_bad_ep_is_one_line_error(capsys):
    assert main(["memory", "glm-5.1", "--tp", "16", "--dp", "2", "--ep", "8"]) == 2
    assert "--ep" in capsys.readouterr().err


def test_deepseek_v32_fp8_block_structure_and_findings(tmp_path):
    rep = run_json(["memory", "deepseek-v3.2", "--recipe", "fp8-block", "--tp", "8", "--dp", "2", "--ep", "16", "--sp",
                    "--dsa-cp"], tmp_path)
    s = " ".join(rep["model"]["structure"])
    assert "DSA indexer (64x128" in s and "MLA (q_lora 1536" in s and "3 dense + 58 MoE" in s
    msgs = [f["message"] for f in rep["findings"] if f["severity"] == "error"]
    assert any("kv_b_proj is FP8_BLOCK" in m for m in msgs)        # SFA needs an unquantized kv_b_proj


def test_dense_model_falls_back_to_plain_tp(tmp_path):
    rep = run_json(["memory", "dense-32b", "--tp", "4"], tmp_path)
    assert rep["plan"]["dsa_cp"] is False
    H, NH, NKV, hd, Id, V, L = 5120, 64, 8, 128, 25600, 151936, 64
    per_layer = ((NH // 4 + 2 * (NKV // 4)) * hd * H + H * (NH * hd // 4) + 2 * Id // 4 * H + H * Id // 4) * 2 \
        + 2 * H * 2
    glob = 2 * (V // 4) * H * 2 + H * 2 + 3 * 40960 * hd * 2        # embed, lm_head, norm, rope caches
    assert rep["worst_rank"]["bytes"] == L * per_layer + glob


# ---------------------------------------------------------------- real checkpoints from ../shared

def _header(path: Path) -> dict:
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        h = json.loads(f.read(n))
    h.pop("__metadata__", None)
    return h


def test_inventory_of_real_w8a8_checkpoint(shared_dir, tmp_path):
    ck = shared_dir / "data" / "checkpoints" / "glm5-tiny-w8a8"
    before = snapshot(ck)
    rep = run_json(["inventory", str(ck)], tmp_path)
    # independent classification straight from the headers, by suffix and dtype
    tensors = {}
    for p in list(ck.glob("*.safetensors")) + list((ck / "optional").glob("*.safetensors")):
        tensors.update(_header(p))
    expect = {"float": 0, "int8": 0, "scale": 0, "offset": 0}
    for name, v in tensors.items():
        suf = name.rsplit(".", 1)[-1]
        if suf in ("weight_scale", "deq_scale", "input_scale"):
            expect["scale"] += 1
        elif suf in ("weight_offset", "input_offset", "quant_bias"):
            expect["offset"] += 1
        elif v["dtype"] == "I8":
            expect["int8"] += 1
        else:
            expect["float"] += 1
    assert {c: rep["by_category"][c]["count"] for c in expect} == expect
    assert rep["tensors"] == len(tensors)
    assert not [f for f in rep["findings"] if f["severity"] == "error"]
    assert snapshot(ck) == before


def test_memory_of_real_checkpoints(shared_dir, tmp_path):
    ck = shared_dir / "data" / "checkpoints"
    rep = run_json(["memory", str(ck / "glm5-tiny-w8a8"), "--tp", "2", "--sp", "--dsa-cp", "--mtp-drafter"], tmp_path)
    # tiny config: 4 heads, kv_lora 32, nope 32, v 32; W_UK_T + W_UV bf16 with full heads (DSA-CP), 4+1 layers
    rep_t = run_json(["memory", str(ck / "glm5-tiny-w8a8"), "--tp", "2", "--sp", "--dsa-cp", "--mtp-drafter", "--by", "tensor"],
                     tmp_path)
    derived = sum(t["bytes"] for t in rep_t["tensors"] if t["tensor"] in ("W_UK_T", "W_UV"))
    assert derived == 5 * (4 * 32 * 32 + 4 * 32 * 32) * 2
    assert rep["worst_rank"]["bytes"] > rep["naive"]["bytes"]
    bf = run_json(["memory", str(ck / "glm5-tiny-bf16"), "--tp", "2"], tmp_path)
    assert bf["model"]["source"] == "checkpoint"
    assert not [f for f in bf["findings"] if f["severity"] == "error"]
    assert any("schemes inferred" in a for a in bf["assumptions"])


def test_symlinked_hub_cache_layout(shared_dir, tmp_path):
    src = shared_dir / "data" / "checkpoints" / "glm5-tiny-bf16"
    blobs = tmp_path / "blobs"
    snap = tmp_path / "snapshots" / "abc"
    blobs.mkdir()
    snap.mkdir(parents=True)
    for p in src.iterdir():
        blob = blobs / (p.name + ".blob")
        blob.write_bytes(p.read_bytes())
        os.symlink(blob, snap / p.name)
    direct = run_json(["memory", str(src), "--tp", "2"], tmp_path)
    linked = run_json(["memory", str(snap), "--tp", "2"], tmp_path)
    assert linked["worst_rank"] == direct["worst_rank"]


def test_observed_names_the_engine_version_and_role_that_explain_it(capsys):
    """The seed RFC's ~38 GB: the figure a v0.18 P node holds, given to a main/mixed audit of the same
    plan, is explained by that version and role (the search finds the configuration exactly)."""
    plan = ["glm-5.1", "--tp", "16", "--dp", "2", "--ep", "32", "--sp", "--dsa-cp", "--max-model-len", "8K"]
    assert main(["memory", *plan, "--engine", "vllm-ascend@0.18", "--role", "prefill", "--format", "json"]) == 0
    p_node = json.loads(capsys.readouterr().out)["worst_rank"]["bytes"]
    assert main(["memory", *plan, "--observed", f"{p_node}B", "--format", "json"]) == 0
    close = json.loads(capsys.readouterr().out)["observed"]["closest_configurations"]
    assert close[0]["relative"] == 0.0 and close[0]["role"] == "prefill"
    assert (close[0]["engine"], close[0]["role"]) in {(c["engine"], c["role"]) for c in close
                                                      if c["worst_rank_bytes"] == p_node}
    assert any(c["engine"] == "vllm-ascend@0.18" for c in close if c["worst_rank_bytes"] == p_node)
