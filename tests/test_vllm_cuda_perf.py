"""audit perf on upstream vLLM (CUDA): the op program runs on the GPU kernels the engine picks, and one op's
time is the roofline worked by hand from the device profile's own figures.

The hand figures use only GLM-5.1's dimensions (hidden 6144, 64 heads of v_head_dim 256, TP 8: engine-vllm-cuda.md
§2.2), the FP8 block layout (fp8 weight [N, K] + fp32 scales [ceil(N/128), ceil(K/128)], Part B §2.1) and the
h200 profile's data-sheet peaks and efficiencies (read from the JSON file, not from the code under test).
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from auditor.cli import main

H200 = json.loads((Path(__file__).resolve().parents[1] / "auditor" / "devices" / "h200.json").read_text())
H, NH, DV, TP = 6144, 64, 256, 8
GLM = ["glm-5.1", "--recipe", "fp8-block", "--engine", "vllm", "--device", "h200", "--tp", str(TP)]


def _perf(capsys, *extra):
    assert main(["perf", *GLM, *extra, "--format", "json"]) == 0
    cap = capsys.readouterr()
    return json.loads(cap.out), cap.err


def _op(doc, name, layer=5):
    return next(o for o in doc["ops"] if o["name"] == name and o["layer"] == layer and o.get("pass") is None)


def _o_proj_by_hand(tokens: int) -> tuple[float, float]:
    """(seconds of compute, seconds of memory) of o_proj on one rank: y[T, H] = x[T, NH/TP x DV] @ W, DeepGEMM FP8
    with per-token 1x128 activation quantization (reads the bf16 input once more, 4 vector ops per element)."""
    k, n = NH // TP * DV, H
    w = n * k + 4 * math.ceil(n / 128) * math.ceil(k / 128)            # fp8 payload + fp32 block scales (Hopper)
    moved = tokens * k * 1 + w + tokens * n * 2 + tokens * k * 2       # fp8 in, weight, bf16 out, bf16 in (quant)
    eff = H200["efficiency"]
    t_mem = moved / (H200["hbm_bytes_per_s"] * eff["memory"])
    t_cmp = (2 * tokens * k * n / H200["mma_flops"]["F8"] + 4 * tokens * k / H200["vector_flops"]["BF16"]) / eff["compute"]
    return t_cmp, t_mem


def test_decode_o_proj_is_its_weight_stream_by_hand(capsys):
    doc, _ = _perf(capsys, "--phase", "decode", "--batch", "1", "--context", "1000")
    o = _op(doc, "self_attn.o_proj")
    t_cmp, t_mem = _o_proj_by_hand(1)
    assert t_mem > t_cmp and o["bound"] == "memory"
    assert o["weight_bytes"] == 6144 * 2048 + 4 * 48 * 16
    assert o["time_us"] == pytest.approx((t_mem + H200["static_us"]["mma"] * 1e-6) * 1e6, rel=1e-9)
    assert o["kernel"] == "deep_gemm.fp8_gemm_nt" and o["dtype"] == "F8"


def test_prefill_o_proj_is_fp8_tensor_core_time_by_hand(capsys):
    doc, _ = _perf(capsys, "--phase", "prefill", "--tokens", "8192", "--batch", "1")
    o = _op(doc, "self_attn.o_proj")
    t_cmp, t_mem = _o_proj_by_hand(8192)
    assert t_cmp > t_mem and o["bound"] == "compute"
    assert o["time_us"] == pytest.approx((t_cmp + H200["static_us"]["mma"] * 1e-6) * 1e6, rel=1e-9)


def test_the_op_program_names_the_gpu_kernels(capsys):
    """Hopper, fp8 KV: FlashMLA sparse over the 656 B fp8_ds_mla entries, DeepGEMM's fp8 indexer logits, and
    the routed experts on the backend select_fp8_moe_backend picks (Triton on SM90 without EP)."""
    doc, err = _perf(capsys, "--phase", "decode", "--batch", "4", "--context", "4096", "--kv-cache-dtype", "fp8")
    kern = {o["name"]: o["kernel"] for o in doc["ops"] if o["layer"] == 5}
    assert kern["self_attn.sfa"] == "flash_mla_sparse"
    assert kern["self_attn.indexer.score"] == "deep_gemm.fp8_mqa_logits"
    assert kern["mlp.experts"] == "fused_moe[TRITON]"
    assert doc["hbm"]["runtime"]["kv_spec"]["variant"] == "fp8_ds_mla"
    # nothing of vLLM-Ascend: no DSA-CP token slice, no SFA refusal for the FP8 kv_b_proj
    assert not any(o["name"] == "self_attn.token_slice" for o in doc["ops"])
    assert "kv_b_proj" not in err
    doc, _ = _perf(capsys, "--phase", "decode", "--batch", "4", "--context", "4096", "--ep", "on")
    assert _op(doc, "mlp.experts")["kernel"] == "fused_moe[FLASHINFER_CUTLASS]"


def test_blackwell_plain_fp8_runs_on_flashinfer_mla_sparse(capsys):
    assert main(["perf", "glm-5.2", "--recipe", "fp8-block", "--engine", "vllm@0.28", "--device", "b200", "--tp", "8",
                 "--kv-cache-dtype", "fp8", "--max-model-len", "32768", "--phase", "decode", "--batch", "8",
                 "--context", "8192", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert _op(doc, "self_attn.sfa", layer=3)["kernel"] == "flashinfer_mla_sparse"
    assert _op(doc, "mlp.experts", layer=3)["kernel"] == "fused_moe[FLASHINFER_TRTLLM]"
    # plain e4m3: every selected entry is 576 B (Lkv + Dr at one byte), the sfa's gather bytes say so
    sfa = _op(doc, "self_attn.sfa", layer=3)
    pairs = 8 * min(8192 + 1, 2048)                                  # top-2048 capped, one query per request
    q_out = 8 * (64 // 8) * (576 + 512) * 2 + 8 * 2048 * 4           # q/out bf16 + top-k indices
    assert sfa["bytes"] == pytest.approx(pairs * 576 + q_out)


def test_decode_on_cuda_replays_a_graph_and_the_drafter_with_it(capsys):
    """A decode step of max_num_seqs x (1 + K) tokens is under upstream's default capture size (x 2), so it pays
    the graph step's host time only: no eager launches, no eager-drafter launches (that is vLLM-Ascend's GLM rule)."""
    doc, _ = _perf(capsys, "--phase", "decode", "--batch", "32", "--context", "8000", "--mtp", "3")
    assert doc["totals"]["host_ms"] == pytest.approx(H200["serving"]["step_ms"])


@pytest.mark.parametrize("model", ["glm-5.1", "glm-5.2", "deepseek-v3.2"])
def test_perf_runs_on_each_dsa_preset(model, capsys):
    for dev in ("h200", "b200"):
        # fp8 KV: DeepSeek-V3.2's attention on v0.28 asserts a quantized cache (tests/test_vllm_cuda_v32_kv.py)
        assert main(["perf", model, "--recipe", "fp8-block", "--engine", "vllm", "--device", dev, "--tp", "8",
                     "--max-model-len", "32768", "--phase", "decode", "--batch", "8", "--context", "4096",
                     "--kv-cache-dtype", "fp8", "--format", "json"]) == 0
        doc = json.loads(capsys.readouterr().out)
        assert doc["totals"]["time_ms"] > 0 and doc["engine"] == "vllm@0.28"


def test_the_ascend_refusal_stays_on_ascend(capsys):
    """The same FP8 kv_b_proj is refused on vLLM-Ascend (its SFA asserts an unquantized one), not on CUDA."""
    rc = main(["perf", "deepseek-v3.2", "--tp", "16", "--dp", "2", "--ep", "32", "--recipe", "fp8-block",
               "--phase", "decode"])
    cap = capsys.readouterr()
    assert rc == 0 and "asserts an unquantized kv_b_proj" in cap.err
    rc = main(["perf", "deepseek-v3.2", "--tp", "8", "--engine", "vllm", "--device", "h200", "--recipe", "fp8-block",
               "--phase", "decode", "--max-model-len", "32768", "--kv-cache-dtype", "fp8"])
    cap = capsys.readouterr()
    assert rc == 0 and "kv_b_proj" not in cap.err and "cannot start" not in cap.out
