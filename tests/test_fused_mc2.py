"""VLLM_ASCEND_ENABLE_FUSED_MC2=1: the dispatch_ffn_combine MoE path and its workspace in the profile peak.

Expected values are worked by hand from the engine's code at 182b75ea: the A3 selector
(``ascend_forward_context.py:242-258``: FUSED_MC2 at every T when EP <= 32), the kernel's workspace
(``csrc/mc2/dispatch_ffn_combine/op_host/dispatch_ffn_combine_tiling.cpp:296-308``: 16 MiB + M-rows
term + EP^2 x E_r x 8 + max_output_size x (8 + 2H + H) + counters), its ``max_output_size`` default
(``ascend_config.py:283``: 131072; 65536 in v0.23.0's ``ascend_config.py:306``) and that
``EXEC_NPU_CMD`` takes the workspace from the caching allocator (``op_api_common.h:725``)."""
from __future__ import annotations

import math

import pytest

from auditor.cli import main
from auditor.devices.profiles import load_device
from auditor.engines.registry import as_engine
from auditor.engines.vllm_ascend import activation as A
from auditor.engines.vllm_ascend.hccl import non_torch_terms
from auditor.model.presets import preset_spec
from auditor.parallel import ParallelPlan
from auditor.runtime.budget import rank_budget

MiB = 1 << 20
# GLM-5.1: H 6144, I 2048 (moe_intermediate_size), 256 routed experts, top-8, vocab 154880
H, I, E, K, V = 6144, 2048, 256, 8, 154880


def hand_workspace(M: int, ep: int, slots: int, slot_bytes: int, pair_bytes: int = 8) -> int:
    er = E // ep
    coc = (math.ceil(M / 256) * 256 * K * 4 + ep * ep * er * pair_bytes + slots * slot_bytes
           + ep * 4 * 16 + (er + ep) * 4 * 16)
    return 16 * MiB + coc


@pytest.fixture(scope="module")
def glm():
    return preset_spec("glm-5.1")


def test_n9_profile_peak_holds_the_combine_workspace(glm):
    """N9 (P8's deployment): TP4 DP8 EP32 DSA-CP, T = 4096, 6 sequences, MTP 3, W8A8 experts. Each rank
    feeds M = 4096 / 4 = 1024 rows to the fused op; the peak is the main pass (residual + drafter hidden +
    the MoE), 2.37 GiB instead of the ALLTOALL layer's ~0.2 GiB."""
    eng = as_engine("vllm-ascend@main")
    t = eng.activation_terms(glm, expert_scheme="W8A8_DYNAMIC", tokens=4096, seqs=6, mtp=3, tp=4, dp=8, ep=32,
                             sp=False, dsa_cp=True, soc="a3", fused_mc2=1)
    M = 1024
    moe = M * H * 2 + hand_workspace(M, 32, 131072, 8 + 3 * H) + M * E * 4      # out + workspace + router logits
    assert float(t["moe"]) == pytest.approx(moe, abs=1)
    residual = 4 * M * H * 2
    assert float(A.activation_peak(t)) == pytest.approx(residual + residual + moe, abs=1)
    unfused = eng.activation_terms(glm, expert_scheme="W8A8_DYNAMIC", tokens=4096, seqs=6, mtp=3, tp=4, dp=8,
                                   ep=32, sp=False, dsa_cp=True, soc="a3")
    assert float(unfused["moe"]) < 0.3 * (1 << 30) < 2.2 * (1 << 30) < float(t["moe"])


@pytest.mark.parametrize("soc, ep, tokens, fused, path", [
    ("a3", 32, 4096, 1, A.FUSED_MC2),          # prefill-sized T: fused anyway
    ("a3", 32, 16, 1, A.FUSED_MC2),            # decode-sized T too
    ("a3", 64, 4096, 1, A.ALLTOALL),           # EP above 32: dispatch_ffn_combine is not selected
    ("a3", 32, 4096, 0, A.ALLTOALL),
    ("a2", 16, 4096, 1, A.ALLGATHER),          # A2 has no fused path (_select_a2_moe_comm_method)
])
def test_selector(soc, ep, tokens, fused, path):
    assert int(A.comm_path(soc, tokens, 64, ep=ep, experts=E, fused_mc2=fused)) == path


def test_the_ep_group_is_untouched_and_mc2_is(glm):
    """The fused op runs on the mc2 group's communicator; no EP all-to-all runs in the profile pass."""
    plan = ParallelPlan(tp=4, dp=8, ep=32, sp=True)
    state = dict(tokens=4096, seqs=6, mtp=3, soc="a3")
    plain = non_torch_terms(plan, hccl_buffsize_mb=400, spec=glm, **state)
    fused = non_torch_terms(plan, hccl_buffsize_mb=400, spec=glm, fused_mc2=1, **state)
    assert "hccl ep (32 ranks, 2 x 200 MB)" in plain and "hccl ep (32 ranks, 2 x 200 MB)" not in fused
    assert fused["hccl mc2 (32 ranks, 2 x 400 MB)"] == 2 * 400 * MiB
    assert sum(plain.values()) - sum(fused.values()) == 2 * 200 * MiB


def test_budget_moves_by_the_activation_and_the_ep_buffer(glm):
    """rank_budget with and without the switch: the KV budget differs by exactly the two changes."""
    dev = load_device("a3-752t")
    kw = dict(weights_bytes=30 * (1 << 30), device=dev, util=0.9, recipe="w8a8", max_model_len=133120,
              max_num_seqs=6, max_num_batched_tokens=4096, kv_cache_dtype="c8-indexer", hccl_buffsize_mb=400, mtp=3)
    base = ParallelPlan(tp=4, dp=8, ep=32, sp=True, mtp=True, max_num_batched_tokens=4096)
    b0 = rank_budget(glm, base, "vllm-ascend@main", **kw)
    b1 = rank_budget(glm, base.with_(fused_mc2=1), "vllm-ascend@main", **kw)
    d_act = b1.activation_peak_bytes - b0.activation_peak_bytes
    assert d_act > 1.9 * (1 << 30)
    assert b0.kv_available_bytes - b1.kv_available_bytes == pytest.approx(d_act - 2 * 200 * MiB, abs=2)
    assert b1.num_blocks < b0.num_blocks


def test_versions_size_the_workspace(glm):
    """v0.23.0 defaults max_output_size to 65536; v0.18.0 hard-codes 65536 and its slots also hold the
    int16 gate/up output (2N bytes) and the int8 SwiGLU output (N/2), N = 2I, and 3 x 4-byte pair counts."""
    kw = dict(expert_scheme="W8A8_DYNAMIC", tokens=4096, seqs=6, mtp=3, tp=4, dp=8, ep=32, dsa_cp=True, soc="a3",
              fused_mc2=1)
    moe = {v: float(as_engine(f"vllm-ascend@{v}").activation_terms(glm, **kw)["moe"]) for v in ("main", "0.23", "0.18")}
    N = 2 * I
    assert moe["main"] - moe["0.23"] == pytest.approx((131072 - 65536) * (8 + 3 * H), abs=1)
    v18 = hand_workspace(1024, 32, 65536, 8 + 2 * N + 3 * H + N // 2, pair_bytes=12)
    assert moe["0.18"] - moe["0.23"] == pytest.approx(v18 - hand_workspace(1024, 32, 65536, 8 + 3 * H), abs=1)


def test_w4a8_and_bf16_experts_use_their_kernels_layout(glm):
    """w1 int4 -> aclnnDispatchFFNCombineW4A8 (slot 8 + 4 max(N, H) + max(H, N/2)); bf16 ->
    aclnnDispatchFFNCombineBF16 (slot 8 + 2N + 4H + N, pair counts x 12)."""
    N = 2 * I
    kw = dict(tokens=4096, seqs=6, mtp=0, tp=4, dp=8, ep=32, dsa_cp=True, soc="a3", fused_mc2=1)
    eng = as_engine("vllm-ascend@main")
    w4 = float(eng.activation_terms(glm, expert_scheme="W4A8_DYNAMIC", **kw)["moe"])
    bf = float(eng.activation_terms(glm, expert_scheme="FLOAT", **kw)["moe"])
    rest = 1024 * H * 2 + 1024 * E * 4
    assert w4 == pytest.approx(rest + hand_workspace(1024, 32, 131072, 8 + 4 * max(N, H) + max(H, N // 2)), abs=1)
    assert bf == pytest.approx(rest + hand_workspace(1024, 32, 131072, 8 + 2 * N + 4 * H + N, 12), abs=1)


def test_launch_env_is_read_and_bad_values_are_one_line(tmp_path, capsys):
    """The launch's env var reaches the plan; a value the engine rejects is a one-line error naming it."""
    from auditor.launch import read_launch, to_options
    ok = tmp_path / "ok.sh"
    ok.write_text("export VLLM_ASCEND_ENABLE_FUSED_MC2=1\nvllm serve /m --tensor-parallel-size 4 "
                  "--data-parallel-size 8 --enable-expert-parallel\n")
    assert to_options(read_launch(ok)).plan().fused_mc2 == 1
    bad = tmp_path / "bad.sh"
    bad.write_text("export VLLM_ASCEND_ENABLE_FUSED_MC2=3\nvllm serve /m --tensor-parallel-size 4\n")
    assert main(["memory", "glm-5.1", "--launch", str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "VLLM_ASCEND_ENABLE_FUSED_MC2 must be 0, 1 or 2, got 3" in err[0]


def test_planned_launch_carries_the_switch():
    from auditor.deployment import InstancePlan
    inst = InstancePlan("aggregated", 1, 4, 8, 32, True, 6, 4096, 133120, 0.9, mtp=3, fused_mc2=1)
    out = as_engine("vllm-ascend@main").launch("/m", inst, quantized=True)
    assert out["env"]["VLLM_ASCEND_ENABLE_FUSED_MC2"] == "1"


def test_a_small_hccl_window_stops_the_profile_run(glm, capsys):
    """dispatch_ffn_combine needs M x topK x H x 3 + 10 MiB of HCCL window. TP4 without SP at T = 16384:
    M = 16384 / 4 = 4096 rows, 4096 x 8 x 6144 x 3 = 603,979,776 B + 10 MiB = 586 MiB > the 400 MB given.
    DSA-CP at T = 4096 feeds M = 1024 rows: 144 + 10 = 154 MiB, which fits."""
    dev = load_device("a3-752t")
    kw = dict(weights_bytes=30 * (1 << 30), device=dev, util=0.9, recipe="w8a8", max_model_len=8192, max_num_seqs=6,
              hccl_buffsize_mb=400, mtp=0)
    big = rank_budget(glm, ParallelPlan(tp=4, dp=8, ep=32, fused_mc2=1, max_num_batched_tokens=16384),
                      "vllm-ascend@main", max_num_batched_tokens=16384, **kw)
    need = 4096 * 8 * 6144 * 3 + 10 * MiB
    assert not big.fits and big.error() == (
        f"HCCL_BUFFSIZE is too SMALL, m = 4096, k = 6144, topK = 8 expected HCCL_BUFFSIZE is "
        f"((m * k * topK * sizeof(int8_t)) * 3 + 3MB)= {-(-need // MiB)}MB, HCCL_BUFFSIZE=400MB.")
    assert big.uncertainty()["verdict"] == "fails either way"
    ok = rank_budget(glm, ParallelPlan(tp=4, dp=8, ep=32, sp=True, fused_mc2=1, max_num_batched_tokens=4096),
                     "vllm-ascend@main", max_num_batched_tokens=4096, **kw)
    assert ok.fits and ok.startup_error is None
    # the same plan without the switch runs ALLTOALL: no window check
    plain = rank_budget(glm, ParallelPlan(tp=4, dp=8, ep=32, max_num_batched_tokens=16384), "vllm-ascend@main",
                        max_num_batched_tokens=16384, **kw)
    assert plain.startup_error is None
    args = ["memory", "glm-5.1", "--tp", "4", "--dp", "8", "--ep", "32", "--max-num-batched-tokens", "16384",
            "--max-model-len", "8192", "--max-num-seqs", "6", "--hccl-buffsize", "400", "--fused-mc2", "1"]
    assert main(args) == 3
    assert "HCCL_BUFFSIZE is too SMALL, m = 4096" in capsys.readouterr().out


def test_mega_moe_max_tokens_sizes_the_workspace(glm, tmp_path):
    """additional_config.mega_moe_max_tokens (read from a launch, or --mega-moe-max-tokens) replaces the
    version's max_output_size: 32768 slots instead of 131072 shrink the peak by 98304 x (8 + 3H)."""
    from auditor.launch import read_launch, to_options
    f = tmp_path / "l.sh"
    f.write_text("export VLLM_ASCEND_ENABLE_FUSED_MC2=1\nvllm serve /m --tensor-parallel-size 4 --data-parallel-size 8 "
                 "--enable-expert-parallel --additional-config '{\"mega_moe_max_tokens\": 32768}'\n")
    plan = to_options(read_launch(f)).plan()
    assert plan.combine_max_tokens == 32768 and plan.fused_mc2 == 1
    dev = load_device("a3-752t")
    kw = dict(weights_bytes=30 * (1 << 30), device=dev, util=0.9, recipe="w8a8", max_model_len=8192, max_num_seqs=6,
              max_num_batched_tokens=4096, hccl_buffsize_mb=400)
    small = rank_budget(glm, plan.with_(max_num_batched_tokens=4096), "vllm-ascend@main", **kw)
    default = rank_budget(glm, plan.with_(max_num_batched_tokens=4096, combine_max_tokens=0), "vllm-ascend@main", **kw)
    assert default.activation_peak_bytes - small.activation_peak_bytes == pytest.approx((131072 - 32768) * (8 + 3 * H),
                                                                                          abs=2)
    bad = tmp_path / "bad.sh"
    bad.write_text("vllm serve /m --additional-config '{\"mega_moe_max_tokens\": -1}'\n")
    assert main(["memory", "glm-5.1", "--launch", str(bad)]) == 2


def test_a_400_digit_mega_moe_max_tokens_is_one_short_line(tmp_path, capsys):
    f = tmp_path / "l.sh"
    f.write_text("vllm serve /m --additional-config '{\"mega_moe_max_tokens\": 1" + "0" * 400 + "}'\n")
    assert main(["memory", "glm-5.1", "--launch", str(f)]) == 2
    (err,) = capsys.readouterr().err.strip().splitlines()
    assert err.endswith("line 1: --additional-config: not valid JSON: a 401-digit number")   # refused at parse
    assert len(err) < 250
