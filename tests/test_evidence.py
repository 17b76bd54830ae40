"""The HBM budget against the engine's own deployments (issue 16), from the project's own corpus
(auditor/evidence/published.json), so these tests never need files outside the project; plus the
breakdown-line parser (hand-written lines, hypothesis for arbitrary text)."""
from __future__ import annotations

import json
import time

import pytest
from hypothesis import given, settings, strategies as st

from auditor.cli import main
from auditor.engines.vllm_ascend.loglines import parse_available_kv_line, parse_breakdown, parse_weights_line
from auditor.errors import AuditInputError
from auditor.evidence import KV_AVAILABLE_REL_TOL, load_corpus, evaluate, parse_flags

SECTION_A = ["N1", "N2", "N3p", "N3d", "N4", "N5", "N6", "N7", "N9", "N10", "N13p", "N13d", "N14p",
             "T1", "T2", "T3", "T5", "T7"]
EXTRA = ["X1p", "X1d", "X2", "X3"]       # DSV3.2 64k P/D (both nodes), GLM-5.2 1M DCP16, GLM-5.2 C8 on 0.23.0rc1


@pytest.fixture(scope="module")
def results():
    return {r["id"]: r for r in evaluate()}


def test_corpus_holds_every_published_deployment():
    ids = [r.id for r in load_corpus()]
    assert set(SECTION_A + EXTRA + ["B1", "C1"]) <= set(ids)
    assert len(ids) == len(set(ids))


@pytest.mark.parametrize("rid", SECTION_A + EXTRA)
def test_every_deployment_that_runs_is_predicted_to_fit(results, rid):
    p = results[rid]["predicted"]
    assert results[rid]["observed"]["runs"] is True
    assert p["fits"], f"{rid}: {p['error']}"
    assert p["kv_tokens"] > 0


def test_available_kv_within_tolerance_where_logged(results):
    # issue #10700: 0.92 x 60.96 - 30.16 - 2.0 - 2.07 - 0.59 = 21.26 GiB logged
    e = results["B1"]["error"]
    assert abs(e["kv_available_rel"]) <= KV_AVAILABLE_REL_TOL
    assert abs(e["activation_abs_gib"]) <= 0.1           # profile-run activation model vs 2.0 GiB measured


def test_breakdown_row_arithmetic_and_non_torch_magnitude(results):
    r = results["C1"]
    p = r["breakdown"]["parsed"]
    # 54.86 - 47.4 - 0.21 - 0.22 = 7.03: v0.23 deducts no graph memory (0.79 GiB only logged)
    assert r["breakdown"]["kv_from_terms_gib"] == pytest.approx(7.03, abs=0.005)
    assert p["graph_gib"] == 0.79
    # only the DP all-gather's 2 x 50 MB is touched by a TP1 ALLGATHER profile run; + ACL runtime
    assert abs(r["error"]["non_torch_abs_gib"]) < 0.1


def test_glm52_c8_on_the_rc_uses_the_023_row(results):
    assert results["X3"]["predicted"]["engine"] == "vllm-ascend@0.23"


def test_cli_prints_one_table_and_json(capsys, tmp_path):
    assert main(["evidence"]) == 0
    out = capsys.readouterr().out
    assert out.count("row ") == 1 and "N14p" in out and "X2" in out
    assert main(["evidence", "--format", "json"]) == 0
    js = json.loads(capsys.readouterr().out)
    assert {r["id"] for r in js} >= set(SECTION_A)


def test_bad_corpus_is_one_line_naming_the_file(tmp_path, capsys):
    bad = tmp_path / "bad.json"
    bad.write_text('{"rows": [{"id": "x", "flags": "--tp two"}]}')
    assert main(["evidence", "--corpus", str(bad)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "bad.json" in err[0]
    with pytest.raises(AuditInputError):
        parse_flags("--tp 4 --frobnicate")


# ------------------------------------------------------------------ the breakdown line
SECTION_C = ("(Worker_DP1_EP1 pid=158388) INFO 08-05 01:45:32 [worker.py:758] Free memory on device (60.61/60.96 GiB) "
             "on startup. Desired GPU memory utilization is (0.9, 54.86 GiB). Actual usage: 47.4 GiB for weights, 0.21 "
             "GiB for peak activation, 0.22 GiB for non-torch memory, 0.79 GiB for NPU graph memory. Replace "
             "gpu_memory_utilization with `--kv-cache-memory=6552110080` (6.1 GiB) to fit into requested memory, or "
             "`--kv-cache-memory=12726715392` (11.85 GiB) to fully utilize NPU free memory. Current KV cache memory: "
             "7.03 GiB.")


def test_parse_section_c_line():
    p = parse_breakdown(SECTION_C)
    assert p == {"form": "breakdown", "free_gib": 60.61, "total_gib": 60.96, "util": 0.9, "requested_gib": 54.86,
                 "weights_gib": 47.4, "activation_gib": 0.21, "non_torch_gib": 0.22, "graph_gib": 0.79,
                 "kv_cache_memory_fit_bytes": 6552110080, "kv_cache_memory_full_bytes": 12726715392,
                 "kv_cache_gib": 7.03}


def test_parse_after_warmup_suffix_and_older_forms():
    p = parse_breakdown(SECTION_C + " After warmup: torch reserved memory 50.12 GiB, torch allocated memory 49.8 GiB.")
    assert p["reserved_after_warmup_gib"] == 50.12 and p["allocated_after_warmup_gib"] == 49.8
    old = ("Memory profiling takes 7.41 seconds. Total non KV cache memory: 34.23GiB; torch peak memory increase: "
           "2.00GiB; non-torch forward increase memory: 2.07GiB; weights memory: 30.16GiB.")
    assert parse_breakdown(old) == {"form": "profiling", "non_kv_gib": 34.23, "activation_gib": 2.0,
                                    "non_torch_gib": 2.07, "weights_gib": 30.16}
    v0 = ("Memory profiling takes 5.01 seconds\nthe current vLLM instance can use total_gpu_memory (60.96GiB) x "
          "gpu_memory_utilization (0.90) = 54.86GiB\nmodel weights take 47.40GiB; non_torch_memory takes 0.22GiB; "
          "PyTorch activation peak memory takes 0.21GiB; the rest of the memory reserved for KV Cache is 7.03GiB.")
    p = parse_breakdown(v0)
    assert (p["form"], p["weights_gib"], p["non_torch_gib"], p["activation_gib"], p["kv_cache_gib"],
            p["total_gib"]) == ("profiling-v0", 47.4, 0.22, 0.21, 7.03, 60.96)
    assert parse_weights_line("INFO [model_runner_v1.py:3571] Loading model weights took 30.1600 GB") == 30.16
    assert parse_available_kv_line("Available KV cache memory: 21.26 GiB") == 21.26


@pytest.mark.parametrize("line", ["", "Free memory on device", "Actual usage: 1 GiB for weights",
                                  "Free memory on device (x/y GiB) Actual usage: nothing", "Memory profiling takes"])
def test_not_a_breakdown_line(line):
    assert parse_breakdown(line) is None


@settings(max_examples=200, deadline=None)
@given(st.text(max_size=400))
def test_parser_never_raises_on_arbitrary_text(text):
    p = parse_breakdown(text)
    assert p is None or isinstance(p, dict)
    p = parse_breakdown("Free memory on device (1/2 GiB) on startup. Actual usage: " + text)
    assert p is None or p["form"] == "breakdown"


@settings(max_examples=100, deadline=None)
@given(w=st.floats(0, 200), a=st.floats(0, 50), n=st.floats(0, 20), g=st.floats(0, 5), kv=st.floats(0, 100),
       u=st.floats(0.05, 1))
def test_parser_round_trips_the_engine_format(w, a, n, g, kv, u):
    line = (f"Free memory on device (60.61/61.27 GiB) on startup. Desired GPU memory utilization is ({u:.2f}, "
            f"{u * 61.27:.2f} GiB). Actual usage: {w:.2f} GiB for weights, {a:.2f} GiB for peak activation, "
            f"{n:.2f} GiB for non-torch memory, {g:.2f} GiB for NPU graph memory. Current KV cache memory: {kv:.2f} GiB.")
    p = parse_breakdown(line)
    assert (p["weights_gib"], p["activation_gib"], p["non_torch_gib"], p["graph_gib"], p["kv_cache_gib"]) == (
        round(w, 2), round(a, 2), round(n, 2), round(g, 2), round(kv, 2))


def test_parser_is_linear_on_hostile_text():
    # backtracking-prone shapes: many repeated keys and digits; must stay far under a second
    hostile = ("Free memory on device (" + "9" * 30000 + " GiB for weights, " * 1000 + "Actual usage:"
               + " 1" * 20000)
    t = time.perf_counter()
    parse_breakdown(hostile[:60000])
    assert time.perf_counter() - t < 0.5


def test_calibrate_breakdown_fits_the_terms(tmp_path, capsys):
    log = tmp_path / "engine.log"
    log.write_text(
        "# audit: glm-5.1 --recipe w4a8 --tp 8 --dp 2 --ep 16 --sp --device a2-313t --engine 0.21.0rc1 "
        "--max-num-batched-tokens 4096 --max-num-seqs 8 --max-model-len 200000 --gpu-memory-utilization 0.92\n"
        "Memory profiling takes 7.41 seconds. Total non KV cache memory: 34.23GiB; torch peak memory increase: "
        "2.00GiB; non-torch forward increase memory: 2.07GiB; weights memory: 30.16GiB.\n")
    out = tmp_path / "fit.json"
    assert main(["calibrate", "--breakdown", str(log), "-o", str(out)]) == 0
    res = json.loads(out.read_text())
    # one row: the fit reproduces it exactly; the scale is 2.0 GiB over audit's 1.961 GiB (hand value in
    # test_runtime_budget: 2,106,064,896 B; W4A8, as the row's 30.16 GiB of weights say: unfused gate/up)
    assert res["activation_scale"] == pytest.approx(2.0 * (1 << 30) / 2_106_064_896, rel=1e-3)
    assert res["rows"][0]["non_torch_pred_gib"] == pytest.approx(2.07)
    bad = tmp_path / "bad.log"
    bad.write_text("Memory profiling takes 1 seconds. torch peak memory increase: 1GiB; non-torch forward increase "
                   "memory: 1GiB; weights memory: 1GiB.\n")
    assert main(["calibrate", "--breakdown", str(bad)]) == 2
    assert "bad.log" in capsys.readouterr().err
