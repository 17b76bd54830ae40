"""Speculative acceptance as measured (``auditor.perf.acceptance``) and the async-scheduling host overlap.

Hand figures: GLM-5 MTP 3's mean acceptance length 3.16 (vLLM-Ascend issue #9803) is 1 + a + a^2 + a^3 with
a = 0.8445 (0.8445 + 0.7132 + 0.6023 = 2.1600); the DSpark goldens [0.88, 0.74, 0.58, 0.49, 0.40, 0.30,
0.18] give 1 + 3.57 = 4.57 tokens per step at K = 7."""
from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given as hgiven
from hypothesis import settings
from hypothesis import strategies as st

from auditor.cli import main
from auditor.errors import AuditInputError
from auditor.perf.acceptance import DSPARK, GLM_MTP, default_acceptance, geometric, given, resolve


def test_defaults_are_the_published_measurements():
    assert GLM_MTP.tokens_per_step(3) == pytest.approx(3.16, abs=1e-9)
    assert GLM_MTP.per_draft == pytest.approx(0.8445, abs=1e-4)
    assert DSPARK.tokens_per_step(7) == pytest.approx(4.57)
    np.testing.assert_allclose(DSPARK.conditional(3), [0.88, 0.74 / 0.88, 0.58 / 0.74])
    assert default_acceptance("glm-5.1") is GLM_MTP and default_acceptance("deepseek-v3.2").per_draft == 0.7
    assert default_acceptance("deepseek-v4-flash", "dspark") is DSPARK


def test_given_values():
    assert resolve("glm-5.1", 0.7).tokens_per_step(3) == pytest.approx(1 + 0.7 + 0.49 + 0.343)
    rates = given((0.9, 0.6, 0.3))
    assert rates.tokens_per_step(3) == pytest.approx(2.8) and rates.tokens_per_step(2) == pytest.approx(2.5)
    np.testing.assert_allclose(rates.conditional(3), [0.9, 0.6 / 0.9, 0.5])
    for bad in ((0.5, 0.6), (0.0,), ()):
        with pytest.raises(AuditInputError):
            given(bad)


@settings(max_examples=80, deadline=None)
@hgiven(st.integers(1, 8), st.floats(0.01, 1.0))
def test_geometric_inverts_the_series(k, a):
    tokens = sum(a ** i for i in range(k + 1))
    if tokens <= 1.0 + 1e-9:
        return
    assert sum(geometric(tokens, k) ** i for i in range(k + 1)) == pytest.approx(tokens, rel=1e-9)


BENCH = ["bench", "glm-5.1", "--tp", "16", "--ep", "on", "--mtp", "3", "--max-num-seqs", "4", "--max-model-len", "8192",
         "--concurrency", "1", "--num-prompts", "2", "--isl", "1024", "--osl", "256", "--format", "json"]


def test_bench_reports_and_takes_acceptance(capsys):
    assert main(BENCH) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["mtp_acceptance"]["tokens_per_step"] == pytest.approx(3.16) and "#9803" in doc["mtp_acceptance"]["source"]
    assert main(BENCH + ["--mtp-acceptance", "0.7"]) == 0
    low = json.loads(capsys.readouterr().out)
    assert low["mtp_acceptance"]["per_position"] == pytest.approx([0.7, 0.49, 0.343])
    assert low["mean_tpot_ms"] > doc["mean_tpot_ms"]                  # fewer tokens per step
    assert main(BENCH + ["--mtp-acceptance", "0.9,0.6,0.3"]) == 0
    assert json.loads(capsys.readouterr().out)["mtp_acceptance"]["tokens_per_step"] == pytest.approx(2.8)
    assert main(BENCH + ["--mtp-acceptance", "0.5,0.9"]) == 2
    assert "non-increasing" in capsys.readouterr().err
    assert main(BENCH + ["--mtp-acceptance", "x"]) == 2


def test_async_scheduling_hides_the_step_host_term_behind_the_device():
    """One decode request, flat tables: a 10 ms device step and a 4 ms step_ms host term. Serial: 14 ms per
    step; async: the 4 ms run while the device does, 10 ms per step (and a 12 ms host term: 12 - 10 = 2 ms
    left over)."""
    from test_serving import _core
    for step, async_sched, want in ((0.004, 0, 0.014), (0.004, 1, 0.010), (0.012, 1, 0.012), (0.012, 0, 0.022)):
        _, first, done, log = _core(isl=10, osl=11, budget=100, hp=[0.0, 0.0, 0.0, step, 0.0, 1.0], async_sched=async_sched)
        dec = log[log[:, 4] == 0]
        assert dec[:, 1] == pytest.approx(np.full(len(dec), want)), (step, async_sched)


def _per_draft_by_hand(length: float, k: int) -> float:
    """The positive real root of a + a^2 + ... + a^K = length - 1 (numpy's polynomial roots, not the code's
    bisection): GPU-19's 1.64 at K = 3 gives a = 0.40697 (0.40697 + 0.16562 + 0.06740 = 0.63999)."""
    roots = np.roots([1.0] * k + [1.0 - length])
    return float(next(r.real for r in roots if abs(r.imag) < 1e-12 and r.real > 0))


def test_the_cuda_default_for_glm_is_gpu19(shared_dir):
    """vLLM-Ascend's 3.16 is that engine's measurement; on upstream vLLM the GLM default is GPU-19's acceptance
    length (GLM-5.1-FP8, 8 x H200, MTP 3, vLLM 0.19), and other families keep the assumption."""
    from auditor.engines.registry import as_engine
    obs = json.loads((shared_dir / "data" / "published" / "gpu" / "vllm-cuda-observations.json").read_text())
    length = next(o for o in obs if o["id"] == "GPU-19")["figures"]["acceptance_length"]
    cuda = resolve("glm-5.1", None, engine=as_engine("vllm@0.28"))
    assert cuda.tokens_per_step(3) == pytest.approx(length, abs=1e-9) and "GPU-19" in cuda.source
    assert cuda.per_draft == pytest.approx(_per_draft_by_hand(length, 3), rel=1e-9)
    assert resolve("glm-5.1", None, engine=as_engine("vllm-ascend@main")) is GLM_MTP
    assert resolve("deepseek-v3.2", None, engine=as_engine("vllm@0.28")).per_draft == 0.7


def test_cuda_bench_without_acceptance_is_the_gpu19_value_given(shared_dir, capsys):
    obs = json.loads((shared_dir / "data" / "published" / "gpu" / "vllm-cuda-observations.json").read_text())
    a = _per_draft_by_hand(next(o for o in obs if o["id"] == "GPU-19")["figures"]["acceptance_length"], 3)
    argv = ["bench", str(shared_dir / "data" / "configs" / "glm-5.1-fp8"), "--engine", "vllm@0.19", "--device",
            "h200", "--tp", "8", "--mtp", "3", "--concurrency", "4", "--num-prompts", "8", "--isl", "2048",
            "--osl", "256", "--format", "json"]
    assert main(argv) == 0
    default = json.loads(capsys.readouterr().out)
    assert main(argv + ["--mtp-acceptance", repr(a)]) == 0
    explicit = json.loads(capsys.readouterr().out)
    assert "#9803" not in default["mtp_acceptance"]["source"] and "GPU-19" in default["mtp_acceptance"]["source"]
    for key in ("output_throughput", "mean_tpot_ms", "mean_ttft_ms"):
        assert default[key] == pytest.approx(explicit[key], rel=1e-9), key
    assert default["mtp_acceptance"]["tokens_per_step"] == pytest.approx(1.64)
