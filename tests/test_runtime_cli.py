"""`audit memory` HBM budget through the CLI: JSON schema, log lines, CSV columns, exit 3."""
from __future__ import annotations

import csv
import io
import json

from auditor.cli import main

GLM_PLAN = ["--tp", "16", "--dp", "2", "--ep", "32", "--sp", "--dsa-cp"]
GiB = 1 << 30
RUNTIME_KEYS = {"total_bytes", "requested_bytes", "weights_bytes", "activation_peak_bytes", "non_torch_bytes",
                "kv_available_bytes", "kv_bytes_per_token", "kv_bytes_per_token_layer", "block_size", "num_blocks",
                "kv_tokens", "max_model_len", "kv_bytes_per_request", "max_concurrency", "unbudgeted",
                "headroom_bytes"}


def run_json(args, tmp_path) -> dict:
    out = tmp_path / "r.json"
    assert main(args + ["--format", "json", "-o", str(out)]) == 0
    return json.loads(out.read_text())


def test_memory_json_runtime_schema_and_formula(tmp_path):
    rep = run_json(["memory", "glm-5.1"] + GLM_PLAN + ["--max-model-len", "131072"], tmp_path)
    rt = rep["runtime"]
    assert RUNTIME_KEYS <= set(rt)
    assert all(set(u) == {"name", "bytes"} for u in rt["unbudgeted"])
    # weights stay today's figure (main, TP16 DP2 EP32 SP: 29.218 GiB) and are the worst rank's
    assert rt["weights_bytes"] == rep["worst_rank"]["bytes"]
    assert round(rt["weights_bytes"] / GiB, 3) == 29.218
    # A3 die: 61.27 GiB usable; requested = 0.9 x that
    assert rt["total_bytes"] == round(61.27 * GiB)
    assert rt["requested_bytes"] == int(0.9 * rt["total_bytes"])
    assert rt["kv_available_bytes"] == (rt["requested_bytes"] - rt["weights_bytes"] - rt["activation_peak_bytes"]
                                       - rt["non_torch_bytes"])
    # no drafter: 78 cache layers x 1408 B, block = 128 tokens
    assert rt["kv_bytes_per_token"] == 78 * 1408 and rt["block_size"] == 128
    assert rt["num_blocks"] == rt["kv_available_bytes"] // (128 * 78 * 1408)
    assert rt["kv_bytes_per_request"] == 1024 * 128 * 78 * 1408
    assert rt["max_concurrency"] == rt["num_blocks"] / 1024
    lines = rep["vllm_log_lines"]
    assert lines[1] == "Available KV cache memory: %.2f GiB" % (rt["kv_available_bytes"] / GiB)
    assert lines[2] == f"GPU KV cache size: {rt['kv_tokens']:,} tokens"
    assert lines[3] == "Maximum concurrency for 131,072 tokens per request: %.2fx" % (rt["num_blocks"] / 1024)


def test_memory_table_shows_budget_and_log_lines(capsys):
    assert main(["memory", "glm-5.1"] + GLM_PLAN + ["--max-model-len", "131072"]) == 0
    out = capsys.readouterr().out
    assert "HBM budget" in out and "vLLM would print" in out
    assert "Maximum concurrency for 131,072 tokens per request:" in out


def test_memory_defaults_keep_the_v018_weights(tmp_path):
    rep = run_json(["memory", "glm-5.1"] + GLM_PLAN + ["--engine", "vllm-ascend@0.18", "--role", "prefill"], tmp_path)
    assert round(rep["worst_rank"]["bytes"] / GiB, 3) == 38.234
    # a P node has a kv_transfer_config: 3 KV tensors per layer x 78 layers x 2 MiB outside the budget
    slack = [u for u in rep["runtime"]["unbudgeted"] if u["name"].startswith("KV 2 MiB")]
    assert slack and slack[0]["bytes"] == 3 * 78 * 2 * 2**20


def test_shortfall_exits_3_with_the_engine_message(capsys):
    code = main(["memory", "glm-5.1"] + GLM_PLAN + ["--max-model-len", "1000000"])
    assert code == 3
    err = capsys.readouterr().err
    assert "To serve at least one request with the models's max seq len (1000000)" in err
    assert "the estimated maximum model length is" in err


def test_mtp_adds_a_cache_layer_and_c8_shrinks_it(tmp_path):
    rep = run_json(["memory", "glm-5.1"] + GLM_PLAN + ["--mtp", "1", "--kv-cache-dtype", "c8"], tmp_path)
    assert rep["runtime"]["kv_bytes_per_token"] == 79 * 786
    assert rep["plan"]["mtp_drafter"] is True


def test_csv_has_budget_columns(tmp_path):
    out = tmp_path / "r.csv"
    assert main(["memory", "glm-5.1"] + GLM_PLAN + ["--format", "csv", "-o", str(out)]) == 0
    rows = list(csv.DictReader(io.StringIO(out.read_text())))
    assert len(rows) == 32
    r = rows[0]
    assert int(r["kv_available_bytes"]) == (int(r["hbm_requested_bytes"]) - int(r["bytes"])
                                            - int(r["activation_peak_bytes"]) - int(r["non_torch_bytes"]))


def test_bad_utilization_is_one_line(capsys):
    assert main(["memory", "glm-5.1", "--gpu-memory-utilization", "1.5"]) == 2
    assert "--gpu-memory-utilization" in capsys.readouterr().err


def test_perf_tp4_warns_that_weights_exceed_the_die(capsys, tmp_path):
    # TP4 DP1, EP off: every rank holds 1/4 of all 256 experts x 75 layers x 3 x 6144 x 2048 B
    # = 1/4 x 675 GiB = 169 GiB of experts alone, past the 61.27 GiB an A3 die offers
    assert main(["perf", "glm-5.1", "--tp", "4", "--phase", "decode"]) == 0
    cap = capsys.readouterr()
    assert "WARNING" in cap.out and "weights alone" in cap.out and "61.27 GiB" in cap.out
    assert "audit: warning: does not fit" in cap.err
    out = tmp_path / "p.json"
    assert main(["perf", "glm-5.1", "--tp", "16", "--dp", "2", "--ep", "32", "--sp", "--dsa-cp", "--format", "json",
                 "-o", str(out)]) == 0
    hbm = json.loads(out.read_text())["hbm"]
    assert hbm["fits"] is True and hbm["runtime"]["weights_bytes"] > 29 * GiB
