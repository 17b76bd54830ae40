"""Profiler kernel_details.csv and benchmark readers, on files written here in the tools' layouts."""
from __future__ import annotations

import json

import pytest
from hypothesis import given, settings, strategies as st

from auditor.align.evidence.bench import read_bench
from auditor.align.evidence.profile import read_profiles
from auditor.engines.vllm_ascend.profiler import kernel_class
from auditor.errors import AuditInputError

HEADER = ("Device_id,Step Id,Model ID,Task ID,Stream ID,Name,Type,OP State,Accelerator Core,Start Time(us),"
          "Duration(us),Wait Time(us),Block Dim,Mix Block Dim,Input Shapes,Input Data Types,Input Formats,"
          "Output Shapes,Output Data Types,Output Formats")

# one decoder layer as the kernels run: input norm, q_a, q_a norm, kv_a norm, q_b, attention,
# o_proj, post-attention norm, experts, one all_to_all, an unmapped Cast
LAYER = [("RmsNorm", "RmsNorm", 5.0), ("QuantBatchMatmulV3", "QuantBatchMatmulV3", 20.0),
         ("RmsNorm", "RmsNorm", 3.0), ("RmsNorm", "RmsNorm", 2.0), ("QuantBatchMatmulV3", "QuantBatchMatmulV3", 30.0),
         ("SparseFlashAttention", "SparseFlashAttention", 100.0), ("QuantBatchMatmulV3", "QuantBatchMatmulV3", 40.0),
         ("AddRmsNorm", "AddRmsNorm", 6.0), ("GroupedMatmul", "GroupedMatmul", 200.0),
         ("hcom_alltoall_", "hcom_alltoAll_", 50.0), ("FutureKernelV9", "FutureKernelV9", 1.5)]


def _csv(tmp_path, name, rows, device=0):
    lines = [HEADER]
    t = 1000.0
    for typ, kname, dur in rows:
        lines.append(f'{device},1,1,1,1,{kname},{typ},dynamic,AI_CORE,{t},{dur},0,1,0,"4,6144;6144,2048",'
                     'INT8;INT8,ND;FRACTAL_NZ,"4,2048",BFLOAT16,ND')
        t += dur + 1
    p = tmp_path / name
    p.write_text("\n".join(lines) + "\n")
    return p


def test_kernel_classes():
    assert kernel_class("QuantBatchMatmulV3") == "linear"
    assert kernel_class("BatchMatMulV3") == "bmm"
    assert kernel_class("AddRmsNorm") == "add_rms_norm" and kernel_class("RmsNorm") == "rms_norm"
    assert kernel_class("MoeGatingTopK") == "router_topk"
    assert kernel_class("hcom_allGather_") == "all_gather"
    assert kernel_class("hcom_alltoAll_") == "all_to_all"
    assert kernel_class("FutureKernelV9") is None and kernel_class("Cast") == "misc_vector"


def test_two_layers_one_rank(tmp_path):
    rows = [("GatherV2", "GatherV2", 10.0)] + LAYER + LAYER + [("QuantBatchMatmulV3", "lm_head_MatMul", 70.0)]
    ev = read_profiles([_csv(tmp_path, "k.csv", rows)], n_layers=2)
    assert ev.layers == 2 and ev.steps == 1 and ev.ranks == [0]
    # by class, hand sums: linear = 2 x (20+30+40) + lm_head 70 = 250
    assert ev.by_class_us["linear"] == pytest.approx(250.0)
    assert ev.by_class_us["rms_norm"] == pytest.approx(2 * 10.0)
    assert ev.by_class_us["sfa"] == pytest.approx(200.0)
    assert ev.by_class_us["all_to_all"] == pytest.approx(100.0)
    # GatherV2 whose first input is [4, 6144] (not a [vocab/tp, hidden] table) is a gather, not the embedding
    assert ev.by_class_us["gather"] == pytest.approx(10.0)
    # the input layernorm (3 norms before attention) belongs to its layer; lm_head to no layer
    assert ev.by_layer_class_us[(0, "rms_norm")] == pytest.approx(10.0)
    assert ev.by_layer_class_us[(1, "linear")] == pytest.approx(90.0)
    assert ev.kernels[0].layer is None and ev.kernels[-1].layer is None
    assert ev.unmapped == [{"type": "FutureKernelV9", "count": 2, "total_us": 3.0}]


def test_many_ranks_average_and_steps(tmp_path):
    a = _csv(tmp_path, "r0.csv", LAYER * 4)               # 2 steps of a 2-layer model
    b = _csv(tmp_path, "r1.csv", [(t, n, d * 3) for t, n, d in LAYER * 4])
    ev = read_profiles([a, b], n_layers=2)
    assert ev.ranks == [0, 1] and ev.steps == 2
    # per step, mean over ranks: SFA 2 layers x (100 + 300) / 2 ranks = 400
    assert ev.by_class_us["sfa"] == pytest.approx(400.0)


def test_profile_errors(tmp_path):
    p = tmp_path / "bad.csv"
    p.write_text("Name,Start Time(us)\nx,1\n")
    with pytest.raises(AuditInputError, match="missing column"):
        read_profiles([p])
    p.write_text(HEADER + "\n0,1,1,1,1,X,MatMulV2,d,AI_CORE,1,abc,0,1,0,,,,,,\n")
    with pytest.raises(AuditInputError, match="line 2"):
        read_profiles([p])


@settings(max_examples=50, deadline=None)
@given(durs=st.lists(st.floats(0, 1e5, allow_nan=False), min_size=len(LAYER), max_size=len(LAYER)),
       n=st.integers(1, 4))
def test_profile_total_is_conserved(tmp_path_factory, durs, n):
    """Every kernel's time lands once: mapped classes plus unmapped equal the file total."""
    rows = [(t, k, d) for (t, k, _), d in zip(LAYER, durs)] * n
    ev = read_profiles([_csv(tmp_path_factory.mktemp("p"), "k.csv", rows)], n_layers=n)
    unm = sum(u["total_us"] for u in ev.unmapped)
    assert ev.total_us() * ev.steps + unm == pytest.approx(sum(durs) * n, rel=1e-9, abs=1e-6)


BENCH = {"date": "20260520-095058", "backend": "vllm", "num_prompts": 64, "completed": 64, "max_concurrency": 8,
         "duration": 120.5, "total_input_tokens": 64 * 3500, "total_output_tokens": 64 * 1000,
         "request_throughput": 0.531, "output_throughput": 531.1, "total_token_throughput": 2390.0,
         "mean_ttft_ms": 1600.2, "median_ttft_ms": 1550.0, "p99_ttft_ms": 2900.5, "std_ttft_ms": 300.0,
         "mean_tpot_ms": 70.1, "median_tpot_ms": 69.8, "p99_tpot_ms": 90.0,
         "mean_itl_ms": 68.0, "median_itl_ms": 66.0, "p99_itl_ms": 120.0}


def test_bench_serve_and_latency_csv(tmp_path):
    j = tmp_path / "bench.json"
    j.write_text(json.dumps(BENCH))
    c = tmp_path / "lat.csv"
    c.write_text("# comment\nscenario,phase,query_len,context_len,measured_ms\n3.5k-prefill,prefill,3500,0,1553.2\n")
    ev = read_bench([j, c])
    (s,) = ev.serve
    assert s.latency_ms["ttft"] == {"mean": 1600.2, "median": 1550.0, "p99": 2900.5}
    assert s.latency_ms["tpot"]["p99"] == 90.0 and s.latency_ms["itl"]["median"] == 66.0
    assert s.throughput["output_throughput"] == 531.1
    assert s.mean_input_len == 3500 and s.mean_output_len == 1000
    assert ev.latency[0][1].measured_ms == 1553.2 and ev.latency[0][1].phase == "prefill"


def test_bench_errors(tmp_path):
    j = tmp_path / "b.json"
    j.write_text("{\"mean_ttft_ms\": \"fast\"}")
    with pytest.raises(AuditInputError, match="mean_ttft_ms"):
        read_bench([j])
    j.write_text("{\"x\": 1}")
    with pytest.raises(AuditInputError, match="no bench serve metrics"):
        read_bench([j])
    j.write_text("{not json")
    with pytest.raises(AuditInputError, match="not valid JSON"):
        read_bench([j])
