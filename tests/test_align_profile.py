"""Real-format profiles (issue 18): the kernel Type table of vLLM-Ascend 0.18 / CANN 8.5, N/A rows,
msprof column names, ranks of a multi-node job, MLAPO layer anchoring; and the #9422-like log, the
OOM-only log and the bench serve text block. Column sets from research kernel-types.md §2.1-2.3."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings, strategies as st

from auditor.align.evidence.bench import read_bench
from auditor.align.evidence.logs import non_default_args, parse_log_text
from auditor.align.evidence.profile import read_profiles
from auditor.cli import main
from auditor.engines.vllm_ascend.profiler import EXTRA_TYPES, PUBLIC_TYPES, kernel_class
from auditor.errors import AuditInputError

# kernel_details.csv as torch_npu v2.9.0-7.3.0 writes it with aic_metrics=PipeUtilization (research §2.1)
KD = ("Step Id,Device_id,Model ID,Task ID,Stream ID,Name,Type,OP State,Accelerator Core,Start Time(us),"
      "Duration(us),Wait Time(us),Block Dim,Mix Block Dim,HF32 Eligible,Input Shapes,Input Data Types,"
      "Input Formats,Output Shapes,Output Data Types,Output Formats,Context ID,aicore_time(us),aic_total_cycles")


def kd_row(dev, typ, start, dur, shapes='"4,6144;6144,2048"', state="dynamic", core="AI_CORE", block="24",
           name=None):
    return (f"1,{dev},4294967295,12,2,{name or 'aclnn' + typ},{typ},{state},{core},{start},{dur},0.1,{block},N/A,"
            f"NO,{shapes},DT_BF16;INT8,ND;FRACTAL_NZ,\"4,2048\",DT_BF16,ND,N/A,{dur},1000")


# one W8A8 DSA decoder layer with MLAPO: fused add+norm+quant (input norm), mla_preprocess (q_a and kv_a
# norms inside), indexer, SFA, W_UV bmm, o_proj, all-reduce (N/A shapes), MoE, AICPU companion (N/A)
LAYER = [("AddRmsNormDynamicQuant", 3.0), ("mla_preprocess_0_mix_aic", 20.0), ("LightningIndexer", 8.0),
         ("SparseFlashAttention", 30.0), ("batch_matmul_transpose_0", 5.0), ("QuantBatchMatmulV3", 10.0),
         ("hcom_allReduce_", 12.0), ("AddRmsNormDynamicQuant", 3.0), ("MoeGatingTopK", 2.0),
         ("DispatchFFNCombine", 40.0), ("reduce_scatterAicpuKernel", 1.0), ("MemSet", 0.5)]


def write_kd(path: Path, dev: int, layers: int, scale: float = 1.0) -> Path:
    rows, t = [KD], 100.0
    rows.append(kd_row(dev, "GatherV2", t, 4.0 * scale, shapes='"9680,6144;4"'))     # the embedding table
    t += 10
    for _ in range(layers):
        for typ, dur in LAYER:
            comm = typ.startswith("hcom") or "Aicpu" in typ
            rows.append(kd_row(dev, typ, t, dur * scale, shapes="N/A" if comm else '"4,6144;6144,2048"',
                               state="N/A" if comm else "dynamic", core="AI_CPU" if "Aicpu" in typ else "AI_CORE",
                               block="N/A" if comm else "24"))
            t += dur * scale + 1
    rows.append(kd_row(dev, "RmsNorm", t, 2.0 * scale))
    rows.append(kd_row(dev, "ApplyTopKTopPCustom", t + 5, 6.0 * scale))
    rows.append(f"1,{dev},4294967295,12,2,x,MatMulV2,dynamic,AI_CORE,{t + 20},N/A,0,N/A,N/A,NO,N/A,,,,,,,,")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("\n".join(rows) + "\n")
    return path


def test_every_public_type_is_placed_or_ignored():
    assert len(PUBLIC_TYPES) == 108
    missing = [t for t in PUBLIC_TYPES + EXTRA_TYPES if kernel_class(t) is None]
    assert missing == []


@pytest.mark.parametrize("typ,cls", [
    ("ApplyTopKTopPCustom", "sampler"), ("AddRmsNormDynamicQuant", "add_rms_norm"),
    ("AddRmsNormDynamicQuantAiCore", "add_rms_norm"), ("KvRmsNormRopeCache", "kv_norm_rope_cache"),
    ("DispatchFFNCombine", "moe_fused"), ("mla_preprocess_0_mix_aic", "mla_preprocess"),
    ("reshape_and_cache_200000000", "cache_write"), ("split_qkv_rmsnorm_rope_kernel_0", "qk_norm_rope"),
    ("batch_matmul_transpose_0", "bmm"), ("hcom_broadcast_", "broadcast"),
    ("RINGMLAPrefillBF16Kernel", "attention"), ("_triton_rope", "rope"), ("muls_add_kernel_1", "add"),
    ("hcom_alltoAll_", "all_to_all"), ("FusedInferAttentionScore", "attention")])
def test_substring_order_bugs_fixed(typ, cls):
    assert kernel_class(typ) == cls


@pytest.mark.parametrize("typ", ["reduce_scatterAicpuKernel", "allgatherAicpuKernel", "MemSet", "HistogramV2"])
def test_ignored_types_say_why(typ):
    assert kernel_class(typ).startswith("ignore: ")


def test_multi_node_ranks_from_ascend_pt_dirs_with_na_rows(tmp_path):
    """Two nodes x two chips: Device_id 0/1 repeats on both nodes; ranks come from the *_rank{r}_* directory
    names, so four ranks are averaged (file index + Device_id would have folded them into three)."""
    paths = []
    for node in range(2):
        for dev in range(2):
            r = node * 2 + dev
            d = tmp_path / f"node{node}" / f"dp0_pp0_tp{r}_dcp0_ep{r}_rank{r}_4242_20260327101112123_ascend_pt"
            paths.append(write_kd(d / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv", dev, 2, scale=1 + r))
    ev = read_profiles(paths, n_layers=2, hidden=6144)
    assert ev.ranks == [0, 1, 2, 3] and ev.steps == 1 and ev.layers == 2
    assert all("directory dp0_pp0" in v for v in ev.rank_source.values())
    # SFA: 2 layers x 30 us x mean scale (1+2+3+4)/4 = 2.5 -> 150 us per rank per step
    assert ev.by_class_us["sfa"] == pytest.approx(150.0)
    assert ev.by_class_us["embedding"] == pytest.approx(4.0 * 2.5)       # [9680, 6144] table: the embedding
    assert ev.by_class_us["all_reduce"] == pytest.approx(2 * 12.0 * 2.5)  # N/A shapes read
    assert ev.by_class_us["sampler"] == pytest.approx(6.0 * 2.5)         # not indexer_topk
    assert {i["type"] for i in ev.ignored} == {"reduce_scatterAicpuKernel", "MemSet"}
    assert ev.skipped_rows == 4                                           # N/A durations
    # MLAPO anchoring: the layer starts at the fused input norm (mla_preprocess counts the q_a and kv_a norms)
    r0 = [k for k in ev.kernels if k.rank == 0]
    first = next(k for k in r0 if k.type == "AddRmsNormDynamicQuant")
    assert first.layer == 0 and next(k for k in r0 if k.type == "GatherV2").layer is None


def test_profiler_info_rank_and_ambiguous_files(tmp_path):
    a = write_kd(tmp_path / "a" / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv", 0, 1)
    (tmp_path / "a" / "profiler_info_7.json").write_text(json.dumps({"rank_id": 7}))
    b = write_kd(tmp_path / "b" / "ASCEND_PROFILER_OUTPUT" / "kernel_details.csv", 0, 1)
    (tmp_path / "b" / "profiler_info_3.json").write_text(json.dumps({"rank_id": 3}))
    assert read_profiles([a, b], n_layers=1).ranks == [3, 7]
    c, d = write_kd(tmp_path / "c.csv", 0, 1), write_kd(tmp_path / "d.csv", 0, 1)
    ev = read_profiles([c, d], n_layers=1)
    assert ev.ranks == [0, 1] and any("ambiguous" in n for n in ev.notes)


def test_layer_mismatch_is_flagged(tmp_path):
    ev = read_profiles([write_kd(tmp_path / "k.csv", 0, 3)], n_layers=2)
    assert any("LAYER MISMATCH" in n for n in ev.notes)


def test_op_summary_and_op_statistic_columns(tmp_path):
    p = tmp_path / "op_summary_0_1.csv"
    p.write_text("Device_id,Model ID,Task ID,Stream ID,Op Name,OP Type,OP State,Task Type,Task Start Time(us),"
                 "Task Duration(us),Task Wait Time(us),Block Num,Mix Block Num,HF32 Eligible,Input Shapes\n"
                 '0,1,1,1,a,SparseFlashAttention,dynamic,AI_CORE,10,30,0,24,N/A,NO,"1,2"\n'
                 "0,N/A,N/A,N/A,b,hcom_allReduce_,N/A,HCCL,50,12,0,N/A,N/A,N/A,N/A\n")
    ev = read_profiles([p])
    assert ev.by_class_us == {"sfa": 30.0, "all_reduce": 12.0}
    s = tmp_path / "op_statistic_0_1.csv"
    s.write_text("Device_id,OP Type,Core Type,Count,Total Time(us),Min Time(us),Avg Time(us),Max Time(us),Ratio(%)\n"
                 "0,QuantBatchMatmulV3,AI_CORE,10,500.5,40,50.05,60,70\n0,Cast,AI_VECTOR_CORE,3,9,3,3,3,1\n")
    ev = read_profiles([s])
    assert ev.aggregated and ev.by_class_us == {"linear": 500.5, "misc_vector": 9.0}


@pytest.mark.parametrize("cell,needle", [("-5", "duration"), ("１２", "duration"), ('"3,,,8"', "duration"),
                                         ("1" * 400, "duration"), ("1e300", "duration")])
def test_profile_numbers_are_checked(tmp_path, cell, needle):
    p = tmp_path / "k.csv"
    p.write_text(KD + "\n" + kd_row(0, "MatMulV2", 1, cell) + "\n")
    with pytest.raises(AuditInputError, match=f"line 2: {needle}"):
        read_profiles([p])


@settings(max_examples=80, deadline=None)
@given(cells=st.lists(st.text(max_size=12), min_size=1, max_size=8))
def test_profile_rows_never_crash(tmp_path_factory, cells):
    p = tmp_path_factory.mktemp("h") / "k.csv"
    try:
        p.write_bytes(("Type,Duration(us),Input Shapes,Device_id\n" + ",".join(cells) + "\n")
                      .encode("utf-8", "replace"))
        read_profiles([p])
    except AuditInputError:
        pass


# -------------------------------------------------------------------- logs: #9422, OOM-only, text bench
ISSUE_9422 = [(10, "35.9682"), (3, "35.9682"), (4, "35.9682"), (9, "35.9682"), (15, "35.9370"), (0, "35.9682"),
              (12, "35.9682"), (8, "35.9682"), (14, "35.9370"), (2, "35.9682")]


def test_9422_like_log_is_explained_or_flagged(tmp_path, capsys):
    """GLM-5.1 w8a8 on TP16+EP, 10 workers shown, DP and recipe unknown, MLAPO disabled (vllm-ascend #9422)."""
    lines = [f"(Worker_DP0_TP{t}_EP{t} pid={577000 + t}) INFO 05-20 09:50:58 [model_runner_v1.py:3150] "
             f"Loading model weights took {v} GB" for t, v in ISSUE_9422]
    lines.insert(5, "(Worker_DP0_TP0_EP0 pid=577534) WARNING 05-20 09:51:01 [sfa_v1.py:566] Currently mlapo does not "
                    "support SFA with CP,thus mlapo is disabled for these layers.")
    log = tmp_path / "9422.log"
    log.write_text("\n".join(lines) + "\n")
    out = tmp_path / "t"
    assert main(["align", "glm-5.1", "--log", str(log), "--output-dir", str(out), "--no-png"]) in (0, 4)
    t = json.loads((out / "ticket.json").read_text())
    v = t["verdict"]
    assert {"recipe", "dp"} <= set(t["memory"]["search"]["dimensions"])
    if v["explained"]:
        assert all(abs(g["relative"]) <= 0.01 for g in t["memory"]["groups"])
    else:
        assert any("CANN" in r for r in v["reasons"])
    md = (out / "ticket.md").read_text()
    assert md.split("\n## ")[1].startswith("Verdict")
    assert "MLAPO disabled warning" in md and any("MLAPO disabled by the engine" in a for a in t["assumptions"])
    # ranks 14-15 print less: the ticket says why in words
    assert any("ranks 14-15 hold" in n for n in v["rank_notes"])
    assert "seconds" not in json.dumps(t["memory"]["search"])


def test_oom_only_log_with_a_pinned_plan_gets_a_prediction(tmp_path):
    log = tmp_path / "oom.log"
    log.write_text("(Worker_DP0_TP3_EP3 pid=1) ERROR 05-20 09:51:01 [worker.py:1] RuntimeError: NPU out of memory. "
                   "Tried to allocate 450.00 MiB (NPU 3; 60.96 GiB total capacity; 60.30 GiB already allocated; "
                   "12.00 MiB free; 60.50 GiB reserved in total by PyTorch)\n")
    out = tmp_path / "t"
    rc = main(["align", "glm-5.1", "--tp", "16", "--dp", "2", "--ep", "32", "--sp", "--recipe", "w8a8",
               "--log", str(log), "--output-dir", str(out), "--no-png", "--max-model-len", "4096"])
    assert rc == 0
    t = json.loads((out / "ticket.json").read_text())
    assert 25 * 2 ** 30 < t["kv"]["predicted"]["weights_bytes"] < 40 * 2 ** 30
    assert t["kv"]["predicted"]["settings"]["max_model_len"] == 4096
    oom = t["kv"]["observed"]["oom"][0]
    assert oom["device"] == 3 and oom["reserved_bytes"] == round(60.5 * 2 ** 30) and oom["free_bytes"] == 12 * 2 ** 20
    md = (out / "ticket.md").read_text()
    assert "NPU OOM (device 3)" in md and "reserved 60.500 GiB" in md and "max len None" not in md


BENCH_TEXT = """INFO 05-20 10:00:00 [serve.py:1] Starting
============ Serving Benchmark Result ============
Successful requests:                     64
Failed requests:                         0
Benchmark duration (s):                  120.50
Total input tokens:                      224000
Total generated tokens:                  64000
Request throughput (req/s):              0.53
Output token throughput (tok/s):         531.10
Peak output token throughput (tok/s):    700.00
Peak concurrent requests:                8.00
Total token throughput (tok/s):          2390.00
---------------Time to First Token----------------
Mean TTFT (ms):                          1600.20
Median TTFT (ms):                        1550.00
P99 TTFT (ms):                           2900.50
-----Time per Output Token (excl. 1st token)------
Mean TPOT (ms):                          70.10
Median TPOT (ms):                        69.80
P99 TPOT (ms):                           90.00
---------------Inter-token Latency----------------
Mean ITL (ms):                           68.00
Median ITL (ms):                         66.00
P99 ITL (ms):                            120.00
==================================================
"""


def test_bench_text_block_and_inf_rate(tmp_path):
    p = tmp_path / "bench.txt"
    p.write_text(BENCH_TEXT)
    (s,) = read_bench([p]).serve
    assert s.latency_ms["ttft"] == {"mean": 1600.2, "median": 1550.0, "p99": 2900.5}
    assert s.latency_ms["itl"]["p99"] == 120.0 and s.mean_input_len == 3500 and s.mean_output_len == 1000
    j = tmp_path / "b.json"
    j.write_text(json.dumps({"request_rate": "inf", "max_concurrency": None, "mean_ttft_ms": 10.0}))
    (s,) = read_bench([j]).serve
    assert s.workload["request_rate"] == float("inf")
    j.write_text(json.dumps({"mean_ttft_ms": 10.0}) + "\n" + json.dumps({"mean_ttft_ms": 20.0}) + "\n")
    assert [x.latency_ms["ttft"]["mean"] for x in read_bench([j]).serve] == [10.0, 20.0]
    j.write_text('{"mean_ttft_ms": -3}')
    with pytest.raises(AuditInputError, match="plausible"):
        read_bench([j])


def test_log_config_lines_and_wrapped_shortfall():
    text = "\n".join([
        "(APIServer pid=1) INFO 03-27 10:11:12 [utils.py:233] non-default args: {'model': '/m', "
        "'tensor_parallel_size': 16, 'data_parallel_size': 2, 'enable_expert_parallel': True, "
        "'max_model_len': 8192, 'gpu_memory_utilization': 0.92, 'compilation_config': {'level': 3, 'x': [1, 2]}, "
        "'speculative_config': {'method': 'mtp', 'num_speculative_tokens': 1}}",
        "(EngineCore_DP0 pid=2) INFO 03-27 10:11:12 [core.py:104] Initializing a V1 LLM engine (v0.18.0) with config: "
        "model='/m', speculative_config=SpeculativeConfig(method='mtp', model='/m', num_spec_tokens=1), "
        "tensor_parallel_size=16, data_parallel_size=2, max_seq_len=8192",
        "ValueError: To serve at least one request with the models's max seq len (131072), (13.58 GiB KV cache is",
        "needed, which is larger than the available KV cache memory (1.25 GiB). Based on the available memory, the",
        "estimated maximum model length is 12032. Try increasing `gpu_memory_utilization`",
    ])
    ev = parse_log_text(text)
    nd = ev.non_default[0].args
    assert nd["tensor_parallel_size"] == 16 and nd["enable_expert_parallel"] is True
    assert nd["gpu_memory_utilization"] == 0.92 and nd["compilation_config"].startswith("{'level'")
    assert ev.configs[0].version == "v0.18.0" and ev.configs[0].fields["data_parallel_size"] == "2"
    (sf,) = ev.shortfalls
    assert sf.max_seq_len == 131072 and sf.estimated_max_len == 12032 and sf.where.line == 3


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=300))
def test_non_default_args_parser_never_raises(text):
    out = non_default_args("{" + text + "}")
    assert out is None or isinstance(out, dict)
