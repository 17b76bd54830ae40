"""Reading vLLM launches (auditor.launch): tutorial-style scripts -> audit's deployment options.

Each script below is written the way launch scripts are written in tutorials and CI (exports,
continuations, quotes, JSON in single quotes, comments, $VARS, nohup and redirections) and must
read to a hand-written expectation. Every error is one AuditInputError line naming the file and,
where there is one, the line. The published nightly configs must be fully covered by the table.
"""
from __future__ import annotations

import json
import os
import re
import shlex
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from auditor.errors import AuditInputError
from auditor.launch import DeploymentOptions, names, parse_launch_text, read_launch, to_options
from auditor.launch.flags import RULES
from auditor.launch.script import LAUNCH_CAP, WORD_CAP

DEFAULTS = DeploymentOptions().values()


def expect(**kw) -> dict:
    """audit's defaults with ``kw`` on top: the hand-written expectation of one launch."""
    out = dict(DEFAULTS)
    out.update(kw)
    return out


def options(text: str, engine: str = "vllm-ascend@main") -> DeploymentOptions:
    return to_options(parse_launch_text(text, "launch.sh"), engine)


def named(items) -> set[str]:
    return {s.name for s in items}


def messages(opts) -> str:
    return "\n".join(n.message for n in opts.notes)


# --------------------------------------------------------------------------- tutorial scripts

GLM51_NODE0 = r"""#!/bin/bash
# GLM-5.1 W8A8C8, 2 x A3 nodes, node 0 (the one with the API server).
# Don't forget: run the same script with NODE_RANK=1 on the other node.

export HCCL_OP_EXPANSION_MODE="AIV"
export OMP_PROC_BIND=false OMP_NUM_THREADS=1
export HCCL_BUFFSIZE=400
export PYTORCH_NPU_ALLOC_CONF="expandable_segments:True"
export VLLM_ASCEND_ENABLE_FLASHCOMM1=1
export VLLM_ASCEND_ENABLE_MLAPO=1
export VLLM_ASCEND_ENABLE_FUSED_MC2=1

MODEL_PATH=/mnt/weights/GLM-5.1-w8a8c8
LOCAL_IP=10.0.0.1          # this node
DP=8 DP_LOCAL=4
TP=4

nohup vllm serve ${MODEL_PATH} \
    --host 0.0.0.0 \
    --port 8077 \
    --data-parallel-size $DP \
    --data-parallel-size-local ${DP_LOCAL} \
    --data-parallel-start-rank 0 \
    --data-parallel-address $LOCAL_IP \
    --data-parallel-rpc-port 12981 \
    --enable-expert-parallel \
    --tensor-parallel-size "$TP" \
    --hf-overrides '{"use_index_cache": true, "index_topk_freq": 4}' \
    --seed 1024 \
    --tool-call-parser glm47 \
    --reasoning-parser glm45 \
    --enable-auto-tool-choice \
    --max-num-seqs 6 \
    --max-model-len 133120 \
    --max-num-batched-tokens 4096 \
    --trust-remote-code \
    --gpu-memory-utilization 0.92 \
    --quantization ascend \
    --enable-chunked-prefill \
    --enable-prefix-caching \
    --async-scheduling \
    --compilation-config '{"cudagraph_mode": "FULL_DECODE_ONLY"}' \
    --additional-config '{"enable_dsa_cp": true,
                          "enable_sparse_sfa_c8": false,
                          "enable_sparse_li_c8": true,
                          "enable_balance_scheduling": true,
                          "multistream_overlap_shared_expert": true}' \
    --speculative-config '{"num_speculative_tokens": 3, "method": "deepseek_mtp", "enforce_eager": true}' \
    > /var/log/vllm_node0.log 2>&1 &

echo "started"
"""


def test_glm51_two_node_script():
    launch = parse_launch_text(GLM51_NODE0, "glm.sh")
    assert launch.model == "/mnt/weights/GLM-5.1-w8a8c8"
    assert launch.program == "vllm serve" and launch.line == 18
    assert launch.env == {"HCCL_OP_EXPANSION_MODE": "AIV", "OMP_PROC_BIND": "false", "OMP_NUM_THREADS": "1",
                          "HCCL_BUFFSIZE": "400", "PYTORCH_NPU_ALLOC_CONF": "expandable_segments:True",
                          "VLLM_ASCEND_ENABLE_FLASHCOMM1": "1", "VLLM_ASCEND_ENABLE_MLAPO": "1",
                          "VLLM_ASCEND_ENABLE_FUSED_MC2": "1"}
    assert launch.env_lines["HCCL_BUFFSIZE"] == 7
    assert launch.argv[launch.argv.index("--tensor-parallel-size") + 1] == "4"
    # the multi-line JSON keeps its newlines and starts on its flag's line
    k = launch.argv.index("--additional-config")
    assert json.loads(launch.argv[k + 1])["enable_sparse_li_c8"] is True
    assert launch.arg_lines[k + 1] == 43
    assert "> /var/log" not in " ".join(launch.argv) and "2" not in launch.argv[-2:]
    opts = to_options(launch)
    assert opts.values() == expect(
        model="/mnt/weights/GLM-5.1-w8a8c8", tp=4, dp=8, ep=32, sp=True, dsa_cp=True, mtp=3, mtp_drafter=True,
        fused_mc2=True, max_num_batched_tokens=4096, util=0.92, max_model_len=133120, max_num_seqs=6,
        kv_cache_dtype="c8-indexer", hccl_buffsize=400, dp_local=4, quantization="ascend", prefix_caching=True,
        hf_overrides={"use_index_cache": True, "index_topk_freq": 4}, balance_scheduling=True,
        compilation={"cudagraph_mode": "FULL_DECODE_ONLY"}, async_scheduling=True, draft_eager=True)
    assert named(opts.ignored) >= {"--host", "--port", "--seed", "--data-parallel-start-rank",
                                   "--data-parallel-address", "--data-parallel-rpc-port", "--tool-call-parser",
                                   "--reasoning-parser", "--enable-auto-tool-choice", "--trust-remote-code",
                                   "--enable-chunked-prefill", "OMP_PROC_BIND", "OMP_NUM_THREADS"}
    # the drafter's "enforce_eager": true is read, not ignored (bench: llm_base_proposer.py:178@182b75ea)
    assert "speculative_config.enforce_eager" not in named(opts.ignored) and "draft_eager" in opts.explicit
    # IndexCache's --hf-overrides keys are applied to config.json (neither ignored nor unmodelled)
    assert not {"hf_overrides.use_index_cache", "hf_overrides.index_topk_freq"} & (named(opts.unmodelled)
                                                                                   | named(opts.ignored))
    # the shared experts' second stream: the engine turns it off under FUSED_MC2=1 (ascend_config.py:175@182b75ea)
    assert named(opts.unmodelled) == {"HCCL_OP_EXPANSION_MODE", "PYTORCH_NPU_ALLOC_CONF"}
    assert "additional_config.multistream_overlap_shared_expert" in named(opts.ignored)
    assert opts.async_scheduling                                        # bench's host overlap (issue 29)
    assert opts.unknown == ()
    assert {"tp", "dp", "ep", "sp", "dsa_cp", "kv_cache_dtype", "mtp", "util"} <= opts.explicit
    assert "max_num_seqs" in opts.explicit and "nz_mode" not in opts.explicit
    # what audit would run with
    plan = opts.plan()
    assert (plan.tp, plan.dp, plan.ep, plan.sp, plan.dsa_cp, plan.mtp, plan.fused_mc2) == (4, 8, 32, True, True,
                                                                                          True, True)
    assert opts.runtime() == {"util": 0.92, "max_model_len": 133120, "kv_cache_dtype": "c8-indexer", "dcp": 1,
                              "hccl_buffsize_mb": 400, "max_num_seqs": 6}
    assert "commands not run" in messages(opts) and "echo (line 51)" in messages(opts)


DSV32_DCP = r"""
# DeepSeek-V3.2 W8A8 on one A3 node, decode context parallel
export VLLM_ASCEND_ENABLE_NZ=1 HCCL_BUFFSIZE=768 VLLM_ASCEND_ENABLE_MLAPO=0
export ASCEND_LAUNCH_BLOCKING=0 TASK_QUEUE_ENABLE=1
python3 -m vllm.entrypoints.openai.api_server --model=/models/DeepSeek-V3.2-W8A8 \
  -tp 16 -dcp=16 --cp-kv-cache-interleave-size 1 --block-size 128 \
  --data_parallel_size 1 --pipeline-parallel-size=1 --enable-expert-parallel \
  --max-model-len 8K --max-num-batched-tokens 1024 --max-num-seqs 32 \
  --gpu-memory-utilization=0.95 --api-server-count 1 --safetensors-load-strategy prefetch \
  -cc '{"cudagraph_mode": "FULL_DECODE_ONLY", "cudagraph_capture_sizes": [4, 16, 64, 128]}' \
  --additional_config '{"enable_dsa_cp": true, "enable_sparse_sfa_c8": true, "enable_sparse_li_c8": true}' \
  --speculative-config '{"num_speculative_tokens": 1, "method": "mtp"}' \
  --no-enable-prefix-caching --enforce-eager | tee serve.log
"""


def test_deepseek_dcp_api_server_script():
    opts = options(DSV32_DCP)
    assert opts.values() == expect(
        model="/models/DeepSeek-V3.2-W8A8", tp=16, dcp=16, ep=16, dsa_cp=True, mlapo=False, hccl_buffsize=768,
        max_model_len=8192, max_num_batched_tokens=1024, max_num_seqs=32, util=0.95, kv_cache_dtype="c8",
        mtp=1, mtp_drafter=True, prefix_caching=False, eager=True, graph_tokens=0,     # eager: no graph at all
        compilation={"cudagraph_mode": "FULL_DECODE_ONLY", "cudagraph_capture_sizes": [4, 16, 64, 128]},
        block_size=128)
    # values equal to audit's assumption are ignored, others named
    assert {"ASCEND_LAUNCH_BLOCKING", "TASK_QUEUE_ENABLE", "--api-server-count"} <= named(opts.ignored)
    assert {"VLLM_ASCEND_ENABLE_MLAPO", "--enforce-eager", "--cp-kv-cache-interleave-size"} <= named(opts.unmodelled)
    assert opts.unknown == ()


@pytest.mark.parametrize("level,where", [("1", "ignored"), ("2", "unmodelled"), ("0", "unmodelled")])
def test_task_queue_level_other_than_the_default_is_named(level, where):
    """TASK_QUEUE_ENABLE=1 is torch_npu's default and the level the host model was fitted at; 0 (off) and 2
    (level 2) change the launch overhead, which audit does not model."""
    opts = options(DSV32_DCP.replace("TASK_QUEUE_ENABLE=1", f"TASK_QUEUE_ENABLE={level}"))
    assert "TASK_QUEUE_ENABLE" in named(getattr(opts, where))


@pytest.mark.parametrize("extra,where", [
    # read by no version at the top level (only ascend_compilation_config.fuse_muls_add is:
    # graph_fusion_pass_manager.py:64@182b75ea), whatever its value
    ('"fuse_muls_add": true', {"additional_config.fuse_muls_add": "ignored"}),
    ('"fuse_muls_add": false', {"additional_config.fuse_muls_add": "ignored"}),
    # the fusion pass's own switch: false changes kernel times
    ('"ascend_compilation_config": {"fuse_muls_add": false}',
     {"additional_config.ascend_compilation_config.fuse_muls_add": "unmodelled"}),
    # AscendCompilationConfig's defaults (ascend_config.py:726-729@182b75ea), as four DeepSeek-V4 CI configs set them
    ('"ascend_compilation_config": {"enable_npugraph_ex": true, "enable_static_kernel": false}',
     {"additional_config.ascend_compilation_config.enable_npugraph_ex": "ignored",
      "additional_config.ascend_compilation_config.enable_static_kernel": "ignored"}),
    ('"ascend_compilation_config": {"enable_static_kernel": true, "fuse_qknorm_rope": false, "new_pass": 1}',
     {"additional_config.ascend_compilation_config.enable_static_kernel": "unmodelled",
      "additional_config.ascend_compilation_config.fuse_qknorm_rope": "unmodelled",
      "additional_config.ascend_compilation_config.new_pass": "unmodelled"}),
    # CPU binding: true is every version's default (ascend_config.py:156@182b75ea), false is not; the worker
    # tests the value's truth (worker.py:801), so the string "true" of the DeepSeek-V4-Flash A3 config binds too
    ('"enable_cpu_binding": true', {"additional_config.enable_cpu_binding": "ignored"}),
    ('"enable_cpu_binding": "true"', {"additional_config.enable_cpu_binding": "ignored"}),
    ('"enable_cpu_binding": false', {"additional_config.enable_cpu_binding": "unmodelled"}),
])
def test_additional_config_keys_the_engine_does_not_read_or_defaults_are_ignored(extra, where):
    opts = options(DSV32_DCP.replace('"enable_sparse_li_c8": true}', '"enable_sparse_li_c8": true, ' + extra + "}"))
    for name, bucket in where.items():
        assert name in named(getattr(opts, bucket))
        assert name not in named(getattr(opts, "unmodelled" if bucket == "ignored" else "ignored"))


def test_an_ascend_compilation_config_that_is_not_an_object_is_refused():
    """The engine unpacks it as keyword arguments (``AscendCompilationConfig(**...)``, ascend_config.py:56)."""
    with pytest.raises(AuditInputError, match="ascend_compilation_config: must be a JSON object"):
        options(DSV32_DCP.replace('"enable_sparse_li_c8": true}', '"enable_sparse_li_c8": true, '
                                  '"ascend_compilation_config": [1]}'))


PD_PREFILL = r"""#!/usr/bin/env bash
set -e
DP_SIZE=${DP_SIZE:-2}
TP_SIZE=${TP_SIZE:-8}
export VLLM_ASCEND_ENABLE_FLASHCOMM1=1
export HCCL_BUFFSIZE
HCCL_BUFFSIZE=256
cat > ranktable.json <<'EOF'
{"note": "vllm serve inside a here-document is not a launch"}
EOF
exec env VLLM_ASCEND_ENABLE_NZ=2 vllm serve "/models/GLM 5.1" \
    --tensor_parallel_size=$TP_SIZE --data-parallel-size ${DP_SIZE} --enable-expert-parallel \
    --kv-transfer-config \
    '{"kv_connector": "MooncakeConnectorV1",
      "kv_role": "kv_producer",
      "kv_port": "30000",
      "kv_connector_extra_config": {"prefill": {"dp_size": '"$DP_SIZE"', "tp_size": '"$TP_SIZE"'}}}' \
    --additional-config '{"enable_dsa_cp": true, "layer_sharding": ["q_b_proj", "o_proj"],
                          "eplb_config": {"num_redundant_experts": 16, "dynamic_eplb": false},
                          "enable_shared_expert_dp": true}' \
    --max-num-seqs 1 --max-num-batched-tokens 16k
"""


def test_pd_prefill_script_on_v023():
    launch = parse_launch_text(PD_PREFILL, "p.sh")
    assert launch.model == "/models/GLM 5.1"
    assert launch.env == {"VLLM_ASCEND_ENABLE_FLASHCOMM1": "1", "HCCL_BUFFSIZE": "256", "VLLM_ASCEND_ENABLE_NZ": "2"}
    k = launch.argv.index("--kv-transfer-config")
    assert json.loads(launch.argv[k + 1])["kv_connector_extra_config"] == {"prefill": {"dp_size": 2, "tp_size": 8}}
    opts = to_options(launch, "vllm-ascend@0.23")
    assert opts.values() == expect(
        model="/models/GLM 5.1", tp=8, dp=2, ep=16, sp=True, dsa_cp=True, role="prefill",
        layer_sharding=("q_b_proj", "o_proj"), redundant_experts=16, shared_expert_dp=True, nz_mode=2,
        hccl_buffsize=256, max_num_seqs=1, max_num_batched_tokens=16000)
    assert "kv_transfer_config.kv_connector" in named(opts.unmodelled)
    assert {"kv_transfer_config.kv_port", "kv_transfer_config.kv_connector_extra_config",
            "additional_config.eplb_config.dynamic_eplb"} <= named(opts.ignored)
    assert opts.engine == "vllm-ascend@0.23"


def test_one_line_command_and_flag_spellings():
    opts = options("vllm serve zai-org/GLM-5.1 -tp 8 -dp=2 -ep --max-model-len=25.6k "
                   "--speculative-config.method deepseek_mtp --speculative-config.num_speculative_tokens 2 "
                   "--additional-config.enable_sparse_li_c8 true -O3 --served-model-name a b --seed -1")
    assert opts.values() == expect(model="zai-org/GLM-5.1", tp=8, dp=2, ep=16, max_model_len=25600, mtp=2,
                                   mtp_drafter=True, kv_cache_dtype="c8-indexer")
    assert "--optimization-level" in named(opts.unmodelled)
    assert {"--served-model-name", "--seed"} <= named(opts.ignored)


def test_duplicates_unknowns_and_strays_are_noted():
    opts = options("vllm serve m --tensor-parallel-size 2 --port 1 --tensor-parallel-size 4 "
                   "--frobnicate 7 --weird-switch")
    assert opts.tp == 4
    assert "given twice (lines 1 and 1): the last (4) wins" in messages(opts)
    assert {(s.name, s.value) for s in opts.unknown} == {("--frobnicate", "7"), ("--weird-switch", "")}
    opts = options("vllm serve m extra --tp 2")
    assert "stray argument 'extra'" in messages(opts) and "--tp" in named(opts.unknown)


def test_unset_variables_and_unexported_engine_settings_are_findings():
    opts = options("HCCL_BUFFSIZE=600\nVLLM_ASCEND_ENABLE_FLASHCOMM1=1 vllm serve $MODEL_DIR/x --port $1 "
                   "--data-parallel-address `hostname -I` --host $(hostname)")
    text = messages(opts)
    assert "$MODEL_DIR is not set" in text and "$1 is not set" in text and "positional parameter" in text
    assert "command substitution `hostname -I` is not run" in text and "$(hostname)" in text
    assert "HCCL_BUFFSIZE is assigned but not exported" in text
    assert opts.model == "$MODEL_DIR/x" and opts.sp and opts.hccl_buffsize == 200


def test_shell_details_read_as_bash_would():
    text = ("A='x y'; export B=\"$A\" C=$A\n"         # no word splitting in assignments
            "set -a\nD=1\nset +a\nE=2\n"
            "unset C\n"
            "X=${NOPE:-def}${B:+!}\n"
            "vllm serve \\\n  m --port \"$X\" --host \\$HOME --reasoning-parser \"a\\\"b\" # trailing comment\n")
    launch = parse_launch_text(text, "s.sh")
    assert launch.env == {"B": "x y", "D": "1"}
    assert launch.argv == ("--port", "def!", "--host", "$HOME", "--reasoning-parser", 'a"b')
    assert launch.arg_lines == (9, 9, 9, 9, 9, 9)


def test_crlf_and_bom_scripts():
    opts = options("\ufeffexport HCCL_BUFFSIZE=300\r\nvllm serve m \\\r\n  -tp 2\r\n")
    assert (opts.tp, opts.hccl_buffsize) == (2, 300)
    assert "CRLF" in messages(opts)


def test_engine_version_decides_c8_and_dsa_cp():
    old = "export VLLM_ASCEND_ENABLE_FLASHCOMM1=1\nvllm serve m -tp 4 --additional-config '{\"enable_sparse_c8\": true}'"
    assert options(old, "vllm-ascend@0.18").kv_cache_dtype == "c8-indexer"
    # the launch's switches are read as set (enable_dsa_cp not set: None); what they turn on is the
    # engine version's rule, applied where --dsa-cp is (tests/test_dsa_cp_switch.py)
    assert options(old, "vllm-ascend@0.18").dsa_cp is None
    on_main = options(old)
    assert on_main.kv_cache_dtype == "bf16" and "not a switch of vllm-ascend@main" in messages(on_main)
    assert (on_main.sp, on_main.dsa_cp) == (True, None)
    no_sp = options("vllm serve m -tp 4 --additional-config '{\"enable_dsa_cp\": true}'", "vllm-ascend@0.26")
    assert (no_sp.sp, no_sp.dsa_cp) == (False, True)
    sfa_only = options("vllm serve m --additional-config '{\"enable_sparse_sfa_c8\": true}'")
    assert sfa_only.kv_cache_dtype == "bf16"
    assert "additional_config.enable_sparse_sfa_c8" in named(sfa_only.unmodelled)


def test_fused_mc2_turns_the_shared_expert_stream_off_from_v023():
    """ascend_config.py:179-184@v0.23.0: fused MC2 and the shared experts' second stream cannot both be on; the
    engine turns the stream off and logs it. v0.22.1rc1 has no such rule, so the stream stays named."""
    ms = "'{\"multistream_overlap_shared_expert\": true}'"
    text = f"export VLLM_ASCEND_ENABLE_FUSED_MC2=1\nvllm serve m -tp 4 --additional-config {ms}"
    key = "additional_config.multistream_overlap_shared_expert"
    for engine in ("vllm-ascend@0.23", "vllm-ascend@main"):
        got = options(text, engine)
        assert key in named(got.ignored) and key not in named(got.unmodelled)
        assert "Setting multistream_overlap_shared_expert to False." in messages(got)
    assert key in named(options(text, "vllm-ascend@0.22").unmodelled)
    # without fused MC2 (or with the stream off) nothing changes
    assert key in named(options(f"vllm serve m -tp 4 --additional-config {ms}").unmodelled)
    off = options("export VLLM_ASCEND_ENABLE_FUSED_MC2=1\nvllm serve m -tp 4 --additional-config "
                  "'{\"multistream_overlap_shared_expert\": false}'")
    assert "Setting multistream_overlap_shared_expert to False." not in messages(off)


def test_other_speculative_methods_are_unmodelled():
    opts = options("vllm serve m --speculative-config '{\"method\": \"eagle3\", \"model\": \"d\", "
                   "\"num_speculative_tokens\": 2}'")
    assert (opts.mtp, opts.mtp_drafter) == (0, False)
    assert any("eagle3" in s.why for s in opts.unmodelled)


# --------------------------------------------------------------------------- errors


def one_line_error(fn, *args) -> str:
    with pytest.raises(AuditInputError) as info:
        fn(*args)
    msg = str(info.value)
    assert "\n" not in msg and msg.startswith(info.value.where)
    return msg


@pytest.mark.parametrize("text, needle", [
    ("export A=1\necho vllm serve m\n", "no vLLM launch found"),
    ("vllm serve a -tp 2\nvllm serve b -tp 4\n", "two vLLM launch commands (lines 1 and 2)"),
    ("vllm serve m --additional-config '{\"a\": 1}\n", "line 1: unterminated single quote"),
    ("\n\nvllm serve m --host \"x\n", "line 3: unterminated double quote"),
    ("vllm serve ${MODEL\n", "unterminated ${"),
    ("vllm serve m --hf-overrides $(cat x\n", "unterminated $("),
    ("vllm serve m \\\n --speculative-config '{\"method\": \"mtp\",}'\n",
     "line 2: --speculative-config: not valid JSON"),
    ("vllm serve m --additional-config '[1, 2]'", "--additional-config: must be a JSON object"),
    ("vllm serve m --tensor-parallel-size four", "--tensor-parallel-size: 'four' is not an integer"),
    ("vllm serve m -tp 0", "-tensor-parallel-size: 0 is outside audit's plausible range 1..65,536"),
    ("vllm serve m --gpu-memory-utilization 1.5", "--gpu-memory-utilization: 1.5 is outside (0, 1]"),
    ("vllm serve m --gpu-memory-utilization nan", "is not a finite number"),
    ("vllm serve m --max-model-len 12x", "--max-model-len: not a length: '12x'"),
    ("vllm serve m --max-num-batched-tokens 32M", "--max-num-batched-tokens: 33,554,432 is outside"),
    ("vllm serve m --enforce-eager=true", "--enforce-eager takes no value"),
    ("vllm serve m --max-num-seqs", "--max-num-seqs expects a value"),
    ("vllm serve m --kv-transfer-config '{\"kv_role\": \"kv_sideways\"}'", "kv_role: 'kv_sideways' is not one of"),
    ("vllm serve m --additional-config '{\"layer_sharding\": [\"mlp\"]}'", "unknown series 'mlp'"),
    ("vllm serve m --additional-config '{\"eplb_config\": 3}'", "eplb_config: must be a JSON object"),
    ("vllm serve m --speculative-config '{\"method\": \"mtp\", \"num_speculative_tokens\": 99}'",
     "num_speculative_tokens: 99 is outside"),
    ("export HCCL_BUFFSIZE=lots\nvllm serve m", "line 1: HCCL_BUFFSIZE: 'lots' is not an integer"),
    ("vllm serve m -tp 65536 -dp 2", "past the plausible 65,536"),
    ("python -m vllm.entrypoints.openai.api_server --port 1", "names no model"),
    ("vllm serve m --hf-overrides '" + "[" * 5000 + "]" * 5000 + "'", "nests 5000 levels deep"),
    ("vllm serve m --x '" + "a" * (WORD_CAP + 1) + "'", "longer than 16 KiB"),
    ("A=" + "x" * 9000 + "\nB=$A$A$A$A$A$A$A$A$A$A$A$A$A$A$A$A$A$A$A$A$A$A$A$A$A$A$A$A$A$A$A$A$A$A\nvllm serve m",
     "longer than 16 KiB"),
])
def test_bad_launches_are_one_line_errors(text, needle):
    def run():
        return to_options(parse_launch_text(text, "bad.sh"))
    msg = one_line_error(run)
    assert msg.startswith("bad.sh: ") and needle in msg


def test_operator_runs_and_huge_commands_are_refused():
    assert "unexpected operator ';;;;'" in one_line_error(parse_launch_text, "vllm serve m ;;;; echo", "op.sh")
    assert "more than 4,096 words" in one_line_error(parse_launch_text, "vllm serve m" + " --seed 1" * 3000, "w.sh")


def test_expansion_is_capped():
    lines = ["A=" + "x" * 8000] + [f"B{k}=$A$A" for k in range(400)] + ["vllm serve m"]
    assert "variable expansion past 2 MiB" in one_line_error(parse_launch_text, "\n".join(lines), "big.sh")


def test_file_errors(tmp_path: Path):
    p = tmp_path / "ok.sh"
    p.write_text("export HCCL_BUFFSIZE=300\nvllm serve m -tp 2\n")
    assert to_options(read_launch(p)).hccl_buffsize == 300
    binary = tmp_path / "bin.sh"
    binary.write_bytes(b"vllm serve m\n\x00\x01\x02")
    assert "binary file, not text: NUL byte at offset 13 (line 2)" in one_line_error(read_launch, binary)
    latin = tmp_path / "latin.sh"
    latin.write_bytes(b"# caf\xe9\nvllm serve m\n")
    assert "not UTF-8 text: byte 0xe9 at offset 5 (line 1)" in one_line_error(read_launch, latin)
    fifo = tmp_path / "fifo.sh"
    os.mkfifo(fifo)
    assert "FIFO" in one_line_error(read_launch, fifo)            # refused without blocking
    assert "directory" in one_line_error(read_launch, tmp_path)
    assert "does not exist" in one_line_error(read_launch, tmp_path / "missing.sh")
    big = tmp_path / "big.sh"
    big.write_text("#" * (LAUNCH_CAP + 1))
    assert "over the 1 MiB cap" in one_line_error(read_launch, big)


# --------------------------------------------------------------------------- the published configs


def _nightly_launches(path: Path) -> list[tuple[str, dict[str, str]]]:
    """(server command, envs) of each deployment of a nightly YAML, read with the two layouts the
    files use (a folded 'server_cmd: >' block, or a list of quoted arguments); no YAML library."""
    lines = path.read_text().splitlines()
    model = re.search(r'^\s*model:\s*"([^"]+)"', path.read_text(), re.M).group(1)
    env: dict[str, str] = {}
    out: list[tuple[str, dict[str, str]]] = []
    k = 0
    while k < len(lines):
        line = lines[k]
        m = re.match(r"^\s+([A-Z][A-Z0-9_]*):\s*(.*?)\s*$", line)
        if m:
            env[m.group(1)] = m.group(2).strip("'\"")
        if re.match(r"^\s*server_cmd:", line):
            indent = len(line) - len(line.lstrip())
            body = []
            k += 1
            while k < len(lines) and (not lines[k].strip() or len(lines[k]) - len(lines[k].lstrip()) > indent
                                      or lines[k].lstrip().startswith("- \"") or lines[k].lstrip().startswith("- '")):
                body.append(lines[k].strip())
                k += 1
            if line.rstrip().endswith(">"):
                cmd = " ".join(b for b in body if b)
            else:
                args = [shlex.split(b[2:])[0] for b in body if b.startswith("- ")]
                cmd = f"vllm serve {model} " + shlex.join(args)
            out.append((cmd, dict(env)))
            continue
        k += 1
    return out


def test_every_setting_of_the_published_configs_is_in_the_table(shared_dir: Path):
    files = sorted((shared_dir / "data" / "published" / "nightly").glob("*.yaml"))
    assert files
    seen = 0
    for f in files:
        launches = _nightly_launches(f)
        assert launches, f.name
        for cmd, env in launches:
            script = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items()) + cmd + "\n"
            opts = to_options(parse_launch_text(script, f.name))
            assert opts.unknown == (), (f.name, opts.unknown)
            seen += 1
    assert seen == 11


def test_published_128k_config_reads_as_expected(shared_dir: Path):
    f = shared_dir / "data" / "published" / "nightly" / "multi_node_internal_dp__GLM-5.1-W8A8C8-A3_128k_90_50.yaml"
    (cmd0, env), (cmd1, _) = _nightly_launches(f)
    script = "".join(f"export {k}={shlex.quote(v)}\n" for k, v in env.items())
    node0, node1 = (to_options(parse_launch_text(script + c, f.name)) for c in (cmd0, cmd1))
    want = expect(model="Eco-Tech/GLM-5.1-w8a8c8", tp=4, dp=8, ep=32, sp=True, dsa_cp=True, mtp=3, mtp_drafter=True,
                  fused_mc2=True, max_num_batched_tokens=4096, util=0.92, max_model_len=133120, max_num_seqs=6,
                  kv_cache_dtype="c8-indexer", hccl_buffsize=400, dp_local=4, quantization="ascend",
                  prefix_caching=True, hf_overrides={"use_index_cache": True, "index_topk_freq": 4},
                  balance_scheduling=True, compilation={"cudagraph_mode": "FULL_DECODE_ONLY"},
                  async_scheduling=True,          # the yaml's --async-scheduling (:45, :76)
                  draft_eager=True)               # its speculative_config "enforce_eager": true
    assert node0.values() == want
    assert node1.values() == dict(want, util=0.9)
    assert "--headless" in named(node1.ignored)


def test_the_table_lists_are_disjoint_and_named():
    mapped, ignored, unmodelled = (set(names(e)) for e in ("mapped", "ignored", "unmodelled"))
    assert not (mapped & ignored or mapped & unmodelled or ignored & unmodelled)
    assert {"--tensor-parallel-size", "--enable-expert-parallel", "VLLM_ASCEND_ENABLE_FLASHCOMM1",
            "additional_config.enable_sparse_li_c8", "kv_transfer_config.kv_role"} <= mapped
    assert {"--host", "--port", "--seed", "--served-model-name", "--trust-remote-code"} <= ignored
    assert {"--kv-cache-memory-bytes", "HCCL_OP_EXPANSION_MODE"} <= unmodelled
    assert {"--async-scheduling", "additional_config.finegrained_tp_config.lmhead_tensor_parallel_size"} <= mapped
    for r in RULES.values():
        # a row without a field is ignored or unmodelled; one with a field sets an option (a JSON row
        # such as --compilation-config is recorded whole and read by what uses it: bench's graph size)
        assert r.field is not None or r.effect != "mapped" or r.kind == "j_dict", r.name
        assert r.why or r.effect == "mapped", r.name


# --------------------------------------------------------------------------- properties

_SPELL = {"tp": ("--tensor-parallel-size", "-tp", "--tensor_parallel_size"),
          "dp": ("--data-parallel-size", "-dp"), "pp": ("--pipeline-parallel-size", "-pp"),
          "max_num_seqs": ("--max-num-seqs",), "max_model_len": ("--max-model-len",),
          "max_num_batched_tokens": ("--max-num-batched-tokens",), "util": ("--gpu-memory-utilization",),
          "dcp": ("--decode-context-parallel-size", "-dcp")}


@st.composite
def launches(draw):
    """(script text, expected option values) of a random but valid launch."""
    want = dict(DEFAULTS, model=draw(st.sampled_from(["m", "/data/GLM-5.1", "zai-org/GLM 5.1", "a'b\"c$d"])))
    args: list[str] = []
    env: dict[str, str] = {}
    for key, spellings in _SPELL.items():
        if not draw(st.booleans()):
            continue
        value = draw({"tp": st.integers(1, 16), "dp": st.integers(1, 8), "pp": st.integers(1, 4),
                      "max_num_seqs": st.integers(1, 512), "max_model_len": st.integers(1, 200_000),
                      "max_num_batched_tokens": st.integers(1, 65_536), "dcp": st.integers(1, 16),
                      "util": st.integers(1, 100).map(lambda x: x / 100)}[key])
        want[key] = value
        flag = draw(st.sampled_from(spellings))
        args += [f"{flag}={value}"] if draw(st.booleans()) and flag.startswith("--") else [flag, str(value)]
    if draw(st.booleans()):
        args.append("--enable-expert-parallel")
        want["ep"] = want["tp"] * want["dp"] if want["tp"] * want["dp"] > 1 else 1
    k = draw(st.integers(0, 4))
    if k:
        args += ["--speculative-config", json.dumps({"method": "deepseek_mtp", "num_speculative_tokens": k})]
        want.update(mtp=k, mtp_drafter=True)
    kv = draw(st.sampled_from(["bf16", "c8-indexer", "c8"]))
    extra = {"bf16": {}, "c8-indexer": {"enable_sparse_li_c8": True},
             "c8": {"enable_sparse_sfa_c8": True, "enable_sparse_li_c8": True}}[kv]
    want.update(kv_cache_dtype=kv)
    if draw(st.booleans()):
        extra["enable_dsa_cp"] = True
        want["dsa_cp"] = True
    if extra:
        args += ["--additional-config", json.dumps(extra, indent=draw(st.sampled_from([None, 2])))]
    role = draw(st.sampled_from([None, "kv_producer", "kv_consumer", "kv_both"]))
    if role:
        args += ["--kv-transfer-config", json.dumps({"kv_connector": "MooncakeConnectorV1", "kv_role": role})]
        want["role"] = {"kv_producer": "prefill", "kv_consumer": "decode", "kv_both": "mixed"}[role]
    if draw(st.booleans()):
        env["VLLM_ASCEND_ENABLE_FLASHCOMM1"] = "1"
        want["sp"] = True
    if draw(st.booleans()):
        hb = draw(st.integers(1, 4096))
        env["HCCL_BUFFSIZE"] = str(hb)
        want["hccl_buffsize"] = hb
    # render: exports in random forms, comments, the command with random continuations and quoting
    lines = ["#!/bin/bash", "# generated"]
    for name, value in env.items():
        form = draw(st.integers(0, 2))
        lines.append({0: f"export {name}={shlex.quote(value)}", 1: f"{name}={shlex.quote(value)}; export {name}",
                      2: f"export {name}=\"{value}\"  # why"}[form])
    via_var = draw(st.booleans())
    if via_var:
        lines.append(f"MODEL={shlex.quote(want['model'])}")
    words = ["vllm", "serve", '"$MODEL"' if via_var else shlex.quote(want["model"])]
    words += [shlex.quote(a) for a in args]
    seps = draw(st.lists(st.sampled_from([" ", "  ", " \\\n    ", " \\\n\t"]), min_size=len(words) - 1,
                         max_size=len(words) - 1))
    cmd = words[0] + "".join(s + w for s, w in zip(seps, words[1:]))
    if draw(st.booleans()):
        cmd = "nohup " + cmd + " > serve.log 2>&1 &"
    lines += [cmd, ""]
    return "\n".join(lines), want


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(launches())
def test_rendered_launches_read_back_to_their_options(case):
    text, want = case
    assert options(text).values() == want


_PIECES = list("vlm serve-tp=1 ${}()'\"\\`#;&|<>\n\t*x") + [
    "vllm serve m ", "--tp ", "<<EOF\n", "EOF\n", "export A=", "$(", "${A:-", "-O3 ", "--no-enforce-eager ",
    "--additional-config.x ", "'{\"a\": [1]}' ", "\\\n", "\r\n", "\x00", "--speculative-config ", "=", "$A"]
_SHELLISH = st.lists(st.sampled_from(_PIECES), max_size=80).map("".join)


@settings(max_examples=500, deadline=None)
@given(st.one_of(_SHELLISH, st.text(max_size=200)))
def test_arbitrary_text_never_raises_anything_but_audit_input_error(text):
    try:
        launch = parse_launch_text(text, "fuzz.sh")
        to_options(launch)
    except AuditInputError as exc:
        assert "\n" not in str(exc) and str(exc).startswith("fuzz.sh")


@pytest.mark.parametrize("flags, tokens", [
    ("", -1),                                                                         # every decode step captured
    ("--compilation-config '{\"cudagraph_mode\": \"FULL_DECODE_ONLY\"}'", -1),
    ("--compilation-config '{\"cudagraph_capture_sizes\": [8, 16, 24, 32, 40, 48]}'", 48),
    ("-cc '{\"cudagraph_capture_sizes\": [48, 8]}'", 48),                               # the largest, any order
    ("--compilation-config '{\"cudagraph_mode\": \"NONE\"}'", 0),
    ("--enforce-eager --compilation-config '{\"cudagraph_capture_sizes\": [4, 16]}'", 0),  # eager wins
    ("--compilation-config '{\"cudagraph_capture_sizes\": [\"8\", 16]}'", -1),         # not sizes: no limit
])
def test_graph_capture_sizes_set_the_largest_graph_step(flags, tokens):
    """vLLM replays a decode step from the captured graph of the next size up and runs a step larger than
    the largest captured size eager: the launch's largest size reaches bench as --graph-max-tokens."""
    opts = options(f"vllm serve m -tp 8 {flags}")
    assert opts.graph_tokens == tokens
    assert ("graph_tokens" in opts.explicit) == (tokens != -1)
