"""``audit perf`` through the CLI: JSON schema, the contract again, phases, graphs, trace, PNG,
formats, measured tables and bad input."""
from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from auditor.cli import main

CONTRACT = ["perf", "--tp", "16", "--dp", "2", "--ep", "32", "--sp", "--dsa-cp", "--phase", "prefill", "--tokens", "4096"]


def run_json(tmp_path: Path, *args: str) -> dict:
    out = tmp_path / "out.json"
    assert main([*args, "--format", "json", "-o", str(out)]) == 0
    return json.loads(out.read_text())


@pytest.mark.parametrize("graph", ["expanded", "repetition"])
def test_contract_via_cli(tmp_path, graph):
    js = run_json(tmp_path, *CONTRACT, "--graph", graph)
    assert js["phase"] == "prefill" and js["graph"] == graph
    assert set(js["totals"]) >= {"time_ms", "flops", "bytes"}
    for o in js["ops"]:
        assert set(o) >= {"layer", "name", "kind", "tokens", "layout", "flops", "bytes", "time_us", "source"}
        assert o["source"] in ("measured", "interpolated", "analytic")
        assert o["layout"] in ("full", "local", "full->local", "local->full")
    for c in js["collectives"]:
        assert set(c) >= {"layer", "kind", "group", "bytes", "time_us"}
        assert c["kind"] in ("all_gather", "reduce_scatter", "all_reduce", "all_to_all")
        assert c["group"] in ("tp", "dp", "ep")
    sfa = [o for o in js["ops"] if o["name"] == "self_attn.sfa"]
    assert len(sfa) == 78 and {o["tokens"] for o in sfa} == {256}     # DSA-CP: this rank's query shard
    assert {o["tokens"] for o in js["ops"] if o["name"] == "self_attn.o_proj"} == {256}
    assert {o["tokens"] for o in js["ops"] if o["name"].startswith("mlp.") and o["layer"] >= 3} == {256}
    gathers = Counter(c["layer"] for c in js["collectives"]
                      if c["kind"] == "all_gather" and c["tensor"] == "input_layernorm.out")
    assert gathers == Counter(range(78))
    assert max(o["tokens"] for o in js["ops"]) == 4096
    # layer null outside the decoder layers
    assert {o["name"] for o in js["ops"] if o["layer"] is None} == {"embed_tokens", "norm", "logits.select",
                                                                      "lm_head"}


def test_both_phases_and_mtp(tmp_path):
    js = run_json(tmp_path, "perf", "glm-5.1", "--tp", "16", "--ep", "16", "--phase", "both", "--tokens", "1024",
                  "--context", "2000", "--mtp", "3", "--quant", "w4a8")
    assert set(js) >= {"prefill", "decode"}
    dec = js["decode"]
    # GLM's default acceptance is vLLM-Ascend #9803's GLM-5 MTP 3 figure, 3.16 tokens per step
    assert dec["workload"] == {"phase": "decode", "tokens": 1024, "context": 2000, "batch": 1, "mtp": 3,
                               "acceptance": pytest.approx(0.8445, abs=1e-4)}
    # decode verifies 1 + 3 tokens; the MTP layer runs 3 times (pass 1 on 4 tokens, then 1 each)
    assert {o["tokens"] for o in dec["ops"] if o["name"] == "self_attn.sfa" and o["layer"] < 78} == {4}
    mtp_sfa = sorted((o["pass"], o["tokens"]) for o in dec["ops"] if o["name"] == "self_attn.sfa"
                     and o["layer"] == 78)
    assert mtp_sfa == [(1, 4), (2, 1), (3, 1)]
    # W4A8 recipe: MTP layer float, main-layer experts W4A8 on the int8 unit
    assert {o["dtype"] for o in dec["ops"] if o["name"] == "mlp.experts" and o["layer"] == 78} == {"BF16"}
    assert {o["dtype"] for o in dec["ops"] if o["name"] == "mlp.experts" and o["layer"] == 5} == {"I8"}
    assert dec["totals"]["tokens"] == pytest.approx(3.16)                # GLM-5 MTP 3, issue #9803
    pre = js["prefill"]
    assert pre["totals"]["time_ms"] > dec["totals"]["time_ms"] > 0
    # prefill MTP pass 1 sees the prompt; lm_head rows are one per request
    assert [o["tokens"] for o in pre["ops"] if o["name"] == "lm_head" and o["layer"] is None] == [1]


def test_trace_and_png(tmp_path):
    trace, png = tmp_path / "t.json", tmp_path / "t.png"
    assert main(["perf", "--tp", "4", "--dp", "8", "--ep", "32", "--phase", "both", "--tokens", "512",
                 "--trace", str(trace), "--png", str(png), "-o", str(tmp_path / "r.txt")]) == 0
    ev = json.loads(trace.read_text())["traceEvents"]
    x = [e for e in ev if e["ph"] == "X"]
    assert {e["pid"] for e in x} == {0, 1}
    first = [e for e in x if e["pid"] == 0]
    assert first[0]["name"] == "embed_tokens"
    assert all(b["ts"] >= a["ts"] for a, b in zip(first, first[1:]))      # serial timeline
    assert any(e["tid"] == 1 and "all_to_all(mlp.dispatch)" in e["name"] for e in first)
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    text = (tmp_path / "r.txt").read_text()
    assert "== prefill" in text and "== decode" in text and "self_attn.sfa" in text


@pytest.mark.parametrize("fmt,marker", [("table", "collective"), ("markdown", "|"), ("csv", "phase,layer")])
def test_formats(tmp_path, fmt, marker):
    out = tmp_path / f"r.{fmt}"
    assert main(["perf", "--tp", "8", "--phase", "decode", "--batch", "4", "--format", fmt, "-o", str(out)]) == 0
    text = out.read_text()
    assert marker in text
    if fmt == "csv":
        assert len(text.splitlines()) > 78 * 20


def test_measured_table_tags_ops(tmp_path):
    """A measured matmul row for q_b_proj's key (M, K, N) replaces its time and tags it."""
    table = tmp_path / "k.csv"
    table.write_text("kernel,key0,key1,key2,time_us,source_note\n"
                     "matmul_w8a8,256,2048,16384,123.0,test\n"
                     "matmul_w8a8,256,16384,6144,50.0,test\n"
                     "matmul_w8a8,256,16384,6144,50.0,test\n"
                     "matmul_w8a8,1024,2048,4096,10.0,a\n"
                     "matmul_w8a8,16,2048,4096,1.0,b\n")
    js = run_json(tmp_path, *CONTRACT, "--measured", str(table))
    qb = [o for o in js["ops"] if o["name"] == "self_attn.q_b_proj"]
    assert {o["source"] for o in qb} == {"measured"}
    assert [o["time_us"] for o in qb] == pytest.approx([123.0] * 78)
    # wq_b on 256 local queries: (256, 2048, 4096) lies between the 16- and 1024-row points
    wq = [o for o in js["ops"] if o["name"] == "self_attn.indexer.wq_b"]
    assert {o["source"] for o in wq} == {"interpolated"}
    assert wq[0]["time_us"] == pytest.approx(1.0 + (256 - 16) / (1024 - 16) * 9.0)
    assert {o["source"] for o in js["ops"] if o["name"] == "self_attn.sfa"} == {"analytic"}
    t = sum(o["time_us"] for o in js["ops"]) + sum(c["time_us"] for c in js["collectives"])
    assert js["totals"]["time_ms"] == pytest.approx(t / 1e3 + js["totals"]["host_ms"])  # + host of the step


def test_config_dir_model(tmp_path, shared_dir):
    cfg_dir = shared_dir / "data" / "configs" / "glm-5.1"
    js = run_json(tmp_path, "perf", str(cfg_dir), "--tp", "16", "--dp", "2", "--ep", "32", "--sp", "--dsa-cp",
                  "--phase", "prefill", "--tokens", "4096", "--quant", "w8a8")
    assert {o["tokens"] for o in js["ops"] if o["name"] == "self_attn.o_proj"} == {256}


def test_dense_model_runs(tmp_path):
    js = run_json(tmp_path, "perf", "dense-32b", "--tp", "8", "--phase", "both", "--tokens", "2048")
    att = [o for o in js["prefill"]["ops"] if o["name"] == "self_attn.attention"]
    assert len(att) == 64 and att[0]["shape_in"] == [[2048, 8, 128]]
    assert not [o for o in js["prefill"]["ops"] if "indexer" in o["name"]]


@pytest.mark.parametrize("args,needle", [
    (["perf", "no-such-model"], "not a built-in preset"),
    (["perf", "--tp", "16", "--ep", "8"], "--ep"),
    (["perf", "dense-32b", "--mtp", "2"], "no MTP layer"),
    (["perf", "--tokens", "0"], "--tokens"),
])
def test_bad_input_is_one_line(capsys, args, needle):
    assert main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and needle in err[0]


def test_perf_models_fp8_directory_as_inventory_classifies_it(tmp_path):
    """One opener: a DeepSeek-V3.2 FP8 directory (config.json carries quantization_config fp8, no
    quant description) is fp8-block for perf, as inventory classifies its tensors FP8_BLOCK."""
    from auditor.model.presets import preset_config

    cfg = preset_config("deepseek-v3.2")
    assert cfg["quantization_config"]["quant_method"] == "fp8"      # the real release's config shape
    model = tmp_path / "dsv32"
    model.mkdir()
    (model / "config.json").write_text(json.dumps(cfg))
    js = run_json(tmp_path, "perf", str(model), "--tp", "16", "--phase", "decode")
    assert js["quant"] == "fp8-block"
    linears = [o for o in js["ops"] if o["kind"] == "linear" and o["name"] == "self_attn.q_b_proj"]
    assert linears and {o["dtype"] for o in linears if o["layer"] < 61} == {"F8"}
    # --recipe (or its alias --quant) still overrides what the directory says
    assert run_json(tmp_path, "perf", str(model), "--tp", "16", "--phase", "decode", "--quant", "bf16")["quant"] == "bf16"
