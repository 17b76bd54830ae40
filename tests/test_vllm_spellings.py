"""vLLM's own spellings and launch scripts give the reports audit's short options give, byte for byte.

Each case writes the same deployment twice, once as a user of vLLM writes it and once in audit's
short options (derived by hand from vLLM's flag semantics: --enable-expert-parallel = EP of DP x TP,
the speculative config's num_speculative_tokens = --mtp with the drafter loaded, kv_role
kv_producer = --role prefill, additional_config.enable_dsa_cp = --dsa-cp), and compares outputs."""
from __future__ import annotations

import json

import pytest

from auditor.cli import main


def _run(args, capsys):
    code = main(args)
    cap = capsys.readouterr()
    return code, cap.out, cap.err


MEMORY_PAIRS = [
    (["--tensor-parallel-size", "16", "--data-parallel-size", "2", "--enable-expert-parallel",
      "--max-model-len", "128K"],
     ["--tp", "16", "--dp", "2", "--ep", "32", "--max-model-len", "131072"]),
    (["-tp", "8", "-dp", "2", "--enable-expert-parallel", "--max-model-len=67000", "--max-num-seqs", "8",
      "--gpu-memory-utilization", "0.95", "--speculative-config", '{"method": "deepseek_mtp", "num_speculative_tokens": 3}'],
     ["--tp", "8", "--dp", "2", "--ep", "16", "--max-model-len", "67000", "--max-num-seqs", "8",
      "--gpu-memory-utilization", "0.95", "--mtp", "3", "--mtp-drafter"]),
    (["--tensor-parallel-size", "16", "--data-parallel-size", "2", "--enable-expert-parallel",
      "--additional-config", '{"enable_dsa_cp": true}', "--kv-transfer-config",
      '{"kv_connector": "MooncakeConnectorV1", "kv_role": "kv_producer"}', "--max-model-len", "32K",
      "--max-num-batched-tokens", "8192"],
     ["--tp", "16", "--dp", "2", "--ep", "32", "--dsa-cp", "--role", "prefill", "--max-model-len", "32768",
      "--max-num-batched-tokens", "8192"]),
]


@pytest.mark.parametrize("vllm,short", MEMORY_PAIRS)
def test_memory_vllm_spellings_equal_short_options(vllm, short, capsys):
    c1, a, _ = _run(["memory", "glm-5.1", "--format", "json", *vllm], capsys)
    c2, b, _ = _run(["memory", "glm-5.1", "--format", "json", *short], capsys)
    assert c1 == c2 and c1 in (0, 3)          # 3: the engine's KV shortfall, said the same way
    assert a == b and a


def test_perf_vllm_spellings_equal_short_options(capsys):
    c1, a, _ = _run(["perf", "--format", "json", "--tensor-parallel-size", "16", "--enable-expert-parallel",
                     "--kv-cache-dtype", "auto", "--speculative-config", '{"method": "deepseek_mtp", "num_speculative_tokens": 2}'],
                    capsys)
    c2, b, _ = _run(["perf", "--format", "json", "--tp", "16", "--ep", "16", "--kv-cache-dtype", "bf16",
                     "--mtp", "2", "--mtp-drafter"], capsys)
    assert c1 == c2 == 0
    assert a == b


SCRIPT = r"""#!/bin/sh
# GLM-5.1 on one A3 node, tutorial style
export HCCL_BUFFSIZE=1024
export VLLM_ASCEND_ENABLE_FLASHCOMM1=1
export OMP_NUM_THREADS=1
TP=16
vllm serve glm-5.1 \
    --host 0.0.0.0 --port 8004 \
    --served-model-name glm \
    --tensor-parallel-size $TP \
    --data-parallel-size 1 \
    --enable-expert-parallel \
    --max-model-len 40960 --max-num-batched-tokens 4096 --max-num-seqs 16 \
    --gpu-memory-utilization 0.95 \
    --trust-remote-code \
    --speculative-config '{"num_speculative_tokens": 3, "method": "deepseek_mtp"}' \
    --additional-config '{"enable_dsa_cp": true}'
"""

SCRIPT_AS_FLAGS = ["--tp", "16", "--dp", "1", "--ep", "16", "--sp", "--dsa-cp", "--hccl-buffsize", "1024",
                   "--max-model-len", "40960", "--max-num-batched-tokens", "4096", "--max-num-seqs", "16",
                   "--gpu-memory-utilization", "0.95", "--mtp", "3", "--mtp-drafter"]


def test_launch_script_equals_its_flags(tmp_path, capsys):
    script = tmp_path / "serve.sh"
    script.write_text(SCRIPT)
    c1, a, err = _run(["memory", "--launch", str(script), "--format", "json"], capsys)
    c2, b, _ = _run(["memory", "glm-5.1", "--format", "json", *SCRIPT_AS_FLAGS], capsys)
    assert c1 == c2 and c1 in (0, 3)
    assert a == b and a
    # flags that change neither memory nor time are listed once, by name
    ignored = [ln for ln in err.splitlines() if "ignored (no effect on memory or time)" in ln]
    assert len(ignored) == 1 and "--port" in ignored[0] and "--served-model-name" in ignored[0]


def test_positional_model_overrides_the_script_and_command_line_wins(tmp_path, capsys):
    script = tmp_path / "serve.sh"
    script.write_text(SCRIPT.replace("vllm serve glm-5.1", "vllm serve /models/GLM-5.1-w8a8"))
    c1, a, _ = _run(["memory", "glm-5.1", "--launch", str(script), "--max-num-seqs", "4", "--format", "json"], capsys)
    flags = [x if x != "16" or i != SCRIPT_AS_FLAGS.index("--max-num-seqs") + 1 else "4"
             for i, x in enumerate(SCRIPT_AS_FLAGS)]
    c2, b, _ = _run(["memory", "glm-5.1", "--format", "json", *flags], capsys)
    assert c1 == c2 and c1 in (0, 3)
    assert json.loads(a)["runtime"]["max_num_seqs"] == 4
    assert a == b


def test_engine_environment_variable_counts_when_set(monkeypatch, capsys):
    monkeypatch.setenv("HCCL_BUFFSIZE", "512")
    c1, a, err = _run(["memory", "glm-5.1", "--tp", "16", "--ep", "16", "--max-model-len", "8K", "--format", "json"],
                      capsys)
    monkeypatch.delenv("HCCL_BUFFSIZE")
    c2, b, _ = _run(["memory", "glm-5.1", "--tp", "16", "--ep", "16", "--max-model-len", "8K", "--hccl-buffsize",
                     "512", "--format", "json"], capsys)
    assert c1 == c2 == 0 and a == b
    assert "from the environment: HCCL_BUFFSIZE" in err


def test_bad_launch_file_is_one_line(tmp_path, capsys):
    bad = tmp_path / "serve.sh"
    bad.write_text("echo no serve command here\n")
    code, out, err = _run(["memory", "--launch", str(bad)], capsys)
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and str(bad) in err and "Traceback" not in err


def test_unmodelled_setting_is_named(capsys):
    code, _, err = _run(["memory", "glm-5.1", "--tp", "16", "--max-model-len", "8K", "--num-gpu-blocks-override",
                         "100"], capsys)
    assert code == 0
    assert "NOT modelled" in err and "--num-gpu-blocks-override" in err


def test_launch_hf_overrides_reach_the_model(tmp_path, capsys):
    """GLM-5.1 run with IndexCache through --hf-overrides (the nightly C8 rows): the script's overrides
    give the report the option gives, and top-k runs on 21 of 78 layers (layers 0-2 and every fourth
    after, by hand: 3 + 75 // 4 = 21) instead of 78."""
    script = tmp_path / "serve.sh"
    script.write_text("vllm serve glm-5.1 -tp 16 --enable-expert-parallel --max-model-len 8192 \\\n"
                      "  --hf-overrides '{\"use_index_cache\": true, \"index_topk_freq\": 4}'\n")
    c1, a, err = _run(["perf", "--launch", str(script), "--format", "json"], capsys)
    c2, b, _ = _run(["perf", "glm-5.1", "--tp", "16", "--ep", "16", "--max-model-len", "8192", "--format", "json",
                     "--hf-overrides", '{"index_topk_freq": 4, "use_index_cache": true}'], capsys)
    assert c1 == c2 == 0 and a == b
    layers = {o["layer"] for o in json.loads(a)["prefill"]["ops"] if o["name"] == "self_attn.indexer.topk"}
    assert len([x for x in layers if x < 78]) == 3 + 75 // 4
    assert "hf_overrides" not in err


def test_negated_vllm_boolean_is_read_not_refused(capsys):
    """vLLM's --no-X form of a boolean flag (argparse BooleanOptionalAction) is recognised by the table,
    not passed on to click as an unknown option."""
    code, _, err = _run(["memory", "glm-5.1", "--tp", "16", "--max-model-len", "8K", "--no-enable-prefix-caching"],
                        capsys)
    assert code == 0 and "no such option" not in err


def test_a_launch_setting_the_command_does_not_take_is_named(tmp_path, capsys):
    """perf takes its batch from --batch, not max_num_seqs: a script's --max-num-seqs is named as not
    used by perf instead of disappearing."""
    script = tmp_path / "serve.sh"
    script.write_text("vllm serve glm-5.1 -tp 16 --enable-expert-parallel --max-num-seqs 16\n")
    code, _, err = _run(["perf", "--launch", str(script), "--format", "json"], capsys)
    assert code == 0
    assert "not used by `audit perf`: --max-num-seqs" in err
