"""Hostile EVIDENCE files (issue 18): engine logs, profiles, bench JSON and text, calibration CSVs,
workload CSVs, device JSON, measured kernel tables and kernels-import CSVs, each through the CLI with the
bad-input contract of tests/hostile_harness.py (one ``audit: error:`` line or a clean run, never a
traceback, a hang or an invalid acceptance), and an existing output left as it was on failure."""
from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Callable

import pytest

from hostile_harness import check_contract, run_in_process, run_out_of_process

W = "(Worker_DP0_TP0_EP0 pid=1) INFO 05-20 09:50:58 [model_runner_v1.py:3150] Loading model weights took {} GB\n"
KD = "Type,Duration(us),Input Shapes,Device_id\n"
CAL = "scenario,phase,query_len,context_len,measured_ms\n"
ALIGN = ["align", "glm-5.1", "--tp", "16", "--dp", "2", "--ep", "32", "--sp", "--recipe", "w8a8", "--no-png"]

# name -> (file name, content bytes or builder, argv(tmp, file) , expect, needles)
CASES: dict[str, tuple] = {}


def case(name, fname, content, argv: Callable[[Path, Path], list], expect="error", needles=(), oop=False):
    assert name not in CASES
    CASES[name] = (fname, content, argv, expect, tuple(needles), oop)


def align_log(t, f):
    return ALIGN + ["--log", f, "--output-dir", t / "out"]


def align_prof(t, f):
    return ALIGN + ["--profile", f, "--output-dir", t / "out"]


def align_bench(t, f):
    return ALIGN + ["--bench", f, "--output-dir", t / "out"]


def kernels_import(t, f):
    return ["kernels", "import", f, "-o", t / "table.csv"]


def calibrate(t, f):
    return ["calibrate", f, "--no-loo", "-o", t / "dev.json"]


def plan_workload(t, f):
    return ["plan", "glm-5.1", "--workload", f, "--ttft-ms", "2000", "--tpot-ms", "50", "--dies", "16",
            "--tp", "16", "--batch", "1", "--mtp", "0", "--no-disagg"]


def evidence_corpus(t, f):
    return ["evidence", "--corpus", f]


def corpus(flags: str = "--tp 16 --dp 2 --ep 32 --sp", observed: str = '{"runs": true}', extra: str = "") -> bytes:
    """An evidence file of one row (the shape of auditor/evidence/published.json)."""
    return ('{"rows": [{"id": "r", "model": "glm-5.1", "engine": "main", "flags": ' + json.dumps(flags)
            + ', "observed": ' + observed + extra + "}]}").encode()


def perf_device(t, f):
    return ["perf", "glm-5.1", "--device", f]


def perf_measured(t, f):
    return ["perf", "glm-5.1", "--measured", f]


# ---- logs
case("log-negative-weights", "l.log", W.format("-38.2").encode(), align_log, needles=("weights",))
case("log-fullwidth-digits", "l.log", W.format("３８.２").encode(), align_log, needles=("no engine memory lines",))
case("log-commas-garbage", "l.log", W.format("3,,,8.2").encode(), align_log, needles=("no engine memory lines",))
case("log-10e26-bytes", "l.log", W.format("1" * 20).encode(), align_log, needles=("plausible",))
case("log-400-digits", "l.log", W.format("9" * 400).encode(), align_log, needles=("no engine memory lines",))
case("log-bad-utf8", "l.log", b"ok\n" + W.format("38.2").encode()[:-5] + b"\xff\xfe GB\n", align_log,
     needles=("line 2", "UTF-8"))
case("log-digit-line-4kB", "l.log", (("1" * 4000 + " ") * 3 + "\n" + W.format("38.2")).encode(), align_log, "any")
case("log-space-line-64kB", "l.log", (" " * 65536 + "\n" + "Available KV cache memory: " + " " * 4000 + "\n"
                                     + W.format("38.2")).encode(), align_log, "any")
case("log-many-took", "l.log", ("Loading model weights took " * 2000 + "\n" + W.format("38.2")).encode(), align_log,
     "any")
case("log-form-feed-u2028", "l.log", ("a\x0cb\u2028c\n" + W.format("-1")).encode(), align_log,
     needles=("line 2",))
case("log-empty", "l.log", b"", align_log, needles=("no engine memory lines",))
case("log-line-over-cap", "l.log", b"x" * (2 << 20), align_log, needles=("longer than",))
case("log-shortfall-huge", "l.log", (W.format("38.2") + "To serve at least one request with the models's max seq "
                                    "len (99999999999999999999), (1.0 GiB KV cache is needed, which is larger than the "
                                    "available KV cache memory (1.0 GiB).\n").encode(), align_log,
     needles=("max seq len",))
case("log-nondefault-deep", "l.log", (W.format("38.2") + "non-default args: " + "{'a': " * 5000 + "1" + "}" * 5000
                                     + "\n").encode(), align_log, "any")
case("log-concurrency-negative", "l.log", (W.format("38.2") + "Maximum concurrency for 8,192 tokens per request: "
                                          "-1.00x\n").encode(), align_log, needles=("concurrency",))
case("log-config-tp-zero", "l.log", (W.format("38.2") + "INFO [core.py:1] Initializing a V1 LLM engine (v0.18.0) with "
                                     "config: model='/m', tensor_parallel_size=0, data_parallel_size=2\n").encode(),
     align_log, needles=("l.log: line 2: engine config tensor_parallel_size: 0 is outside",))
case("log-config-max-seq-len-1e30", "l.log", (W.format("38.2") + "INFO [core.py:1] Initializing a V1 LLM engine "
                                              "(v0.18.0) with config: model='/m', max_seq_len=" + "1" + "0" * 30
                                              + "\n").encode(), align_log, needles=("line 2", "max_seq_len: 1000"))
case("log-nondefault-util-7", "l.log", (W.format("38.2") + "non-default args: {'gpu_memory_utilization': 7.0}\n")
     .encode(), align_log, needles=("l.log: line 2: non-default args gpu_memory_utilization: 7.0 is outside",))
case("log-nondefault-tp-nan", "l.log", (W.format("38.2") + "non-default args: {'tensor_parallel_size': nan}\n")
     .encode(), align_log, needles=("tensor_parallel_size: not a number: 'nan'",))
# ---- profiles
case("prof-na-everything", "k.csv", (KD + "N/A,N/A,N/A,N/A\n").encode(), align_prof, needles=("no kernel rows",))
case("prof-negative-dim", "k.csv", (KD + 'MatMulV2,5,"4,-6144",0\n').encode(), align_prof, needles=("Input Shapes",))
case("prof-huge-duration", "k.csv", (KD + "MatMulV2,1e26,,0\n").encode(), align_prof, needles=("plausible",))
case("prof-device-overflow", "k.csv", (KD + "MatMulV2,1,,99999999\n").encode(), align_prof, needles=("Device_id",))
case("prof-bad-quote", "k.csv", (KD + 'MatMulV2,1,"4,6\n').encode(), align_prof, needles=("malformed CSV",))
case("prof-text-after-quote", "k.csv", (KD + 'MatMulV2,1,"4,6"x,0\n').encode(), align_prof, needles=("malformed CSV",))
case("workload-bad-quote", "w.csv", b'isl,osl\n"10,10\n', plan_workload, needles=("malformed CSV",))
case("prof-header-only", "k.csv", KD.encode(), align_prof, needles=("no kernel rows",))
case("prof-not-csv", "k.csv", b"\x00\x01\x02", align_prof, needles=("missing column",))
# ---- bench
case("bench-deep-json", "b.json", b"[" * 100000 + b"]" * 100000, align_bench, needles=("nests",))
case("bench-400-digit", "b.json", b'{"mean_ttft_ms": ' + b"9" * 400 + b"}", align_bench, needles=("digit",))
case("bench-nan", "b.json", b'{"mean_ttft_ms": NaN}', align_bench, needles=("JSON",))
case("bench-negative-latency", "b.json", b'{"mean_ttft_ms": -5}', align_bench, needles=("plausible",))
case("bench-text-garbage-number", "b.txt", b"== Serving Benchmark Result ==\nMean TTFT (ms):   1..2\n", align_bench,
     needles=("Mean TTFT",))
case("bench-inf-rate", "b.json", b'{"request_rate": "inf", "mean_ttft_ms": 5.0}', align_bench, "ok")
# ---- audit evidence --corpus
case("corpus-ok", "e.json", corpus(observed='{"runs": true, "weights_gib": 30.2}'), evidence_corpus, "ok")
case("corpus-deep", "e.json", b"[" * 100000 + b"]" * 100000, evidence_corpus, needles=("nests",))
case("corpus-deep-in-row", "e.json", corpus(extra=', "hf_overrides": ' + '{"a": ' * 40 + "1" + "}" * 40),
     evidence_corpus, needles=("nests",))
case("corpus-5000-digits", "e.json", corpus(observed='{"weights_gib": ' + "9" * 5000 + "}"), evidence_corpus,
     needles=("5000-digit",))
case("corpus-nan", "e.json", corpus(observed='{"weights_gib": NaN}'), evidence_corpus, needles=("NaN",))
case("corpus-1e400", "e.json", corpus(observed='{"weights_gib": 1e400}'), evidence_corpus, needles=("out of range",))
case("corpus-text-number", "e.json", corpus(observed='{"weights_gib": "thirty"}'), evidence_corpus,
     needles=("observed.weights_gib must be a number",))
case("corpus-negative-weights", "e.json", corpus(observed='{"weights_gib": -3}'), evidence_corpus,
     needles=("plausible range",))
case("corpus-runs-text", "e.json", corpus(observed='{"runs": "yes"}'), evidence_corpus, needles=("runs",))
case("corpus-observed-unknown", "e.json", corpus(observed='{"wieghts_gib": 3}'), evidence_corpus,
     needles=("wieghts_gib",))
case("corpus-flag-nan-util", "e.json", corpus("--tp 16 --gpu-memory-utilization nan"), evidence_corpus,
     needles=("--gpu-memory-utilization",))
case("corpus-flag-5000-digit-tp", "e.json", corpus("--tp " + "7" * 5000), evidence_corpus, needles=("--tp",))
case("corpus-flag-tp-zero", "e.json", corpus("--tp 0"), evidence_corpus, needles=("--tp 0 is outside",))
case("corpus-flag-open-quote", "e.json", corpus("--tp '16"), evidence_corpus, needles=("cannot split",))
case("corpus-model-list", "e.json", corpus(extra=', "model2": 1').replace(b'"model": "glm-5.1"', b'"model": [1]'),
     evidence_corpus, needles=("'model' must be a string",))
case("corpus-2000-rows", "e.json", ('{"rows": [' + ",".join(['{"id": "r", "flags": "--tp 1"}'] * 2000) + "]}").encode(),
     evidence_corpus, needles=("2,000 rows",))
case("corpus-not-utf8", "e.json", corpus().replace(b'"r"', b'"\xff"'),
     evidence_corpus, needles=("UTF-8",))
# ---- kernels import / measured table
case("kimport-na-duration", "k.csv", b'Type,Duration(us),Input Shapes\nMatMulV2,N/A,"4,8;8,2"\n', kernels_import,
     needles=("duration",))
case("kimport-2pow70-dim", "k.csv", ('Type,Duration(us),Input Shapes\nMatMulV2,5,"' + str(2 ** 70) + ',8;8,2"\n')
     .encode(), kernels_import, "any")
case("kimport-block-num-op-summary", "k.csv", b'OP Type,Task Duration(us),Input Shapes,Block Num\nMatMulV2,5,"4,8;8,2",'
     b"24\n", kernels_import, "ok")
case("measured-fullwidth", "m.csv", "kernel,key0,time_us\nmm,１,2\n".encode(), perf_measured, needles=("line 2",))
# ---- calibration / workload / device
case("cal-query-2pow70", "c.csv", (CAL + f"a,prefill,{2 ** 70},0,5\n").encode(), calibrate, needles=("query_len",))
case("cal-negative-ms", "c.csv", (CAL + "a,prefill,10,0,-5\n").encode(), calibrate, needles=("measured_ms",))
case("cal-bad-utf8", "c.csv", CAL.encode() + b"a,prefill,10,0,\xff\n", calibrate, needles=("line 2", "UTF-8"))
case("workload-isl-1e12", "w.csv", b"isl,osl\n1000000000000,10\n", plan_workload, needles=("isl",))
case("workload-fullwidth", "w.csv", "isl,osl\n１０,10\n".encode(), plan_workload, needles=("line 2",))
case("device-deep", "d.json", b"[" * 50000 + b"]" * 50000, perf_device, needles=("nests",))
case("device-1e26", "d.json", json.dumps({"name": "x", "mma_flops": {"BF16": 1e26}}).encode(), perf_device)


def _params():
    return [pytest.param(n, id=n) for n in sorted(CASES)]


def test_case_count():
    assert len(CASES) >= 35


@pytest.mark.parametrize("name", _params())
def test_hostile_evidence(name: str, tmp_path: Path, capfd) -> None:
    fname, content, argv, expect, needles, oop = CASES[name]
    f = tmp_path / fname
    f.write_bytes(content)
    run = run_in_process(argv(tmp_path, f), capfd, timeout=60)
    check_contract(run, expect, needles)


@pytest.mark.parametrize("special", ["dev-zero", "fifo", "dir", "big-sparse"])
def test_special_evidence_files_out_of_process(special: str, tmp_path: Path) -> None:
    """Never read /dev/zero, never block on a FIFO, never read a 300 MB file into memory."""
    f = tmp_path / "e.log"
    if special == "dev-zero":
        os.symlink("/dev/zero", f)
    elif special == "fifo":
        os.mkfifo(f)
    elif special == "dir":
        f.mkdir()
    else:
        with open(f, "wb") as h:
            h.truncate(300 << 20)
    for argv in (align_log(tmp_path, f), align_prof(tmp_path, f), align_bench(tmp_path, f), calibrate(tmp_path, f),
                 evidence_corpus(tmp_path, f)):
        run = run_out_of_process(argv, timeout=30, memory_bytes=768 << 20)
        check_contract(run, "error")


def test_failed_align_leaves_the_existing_ticket(tmp_path: Path, capfd) -> None:
    out = tmp_path / "out"
    out.mkdir()
    (out / "ticket.md").write_text("old ticket\n")
    (out / "ticket.json").write_text("{}\n")
    bad = tmp_path / "l.log"
    bad.write_text(W.format("-3"))
    run = run_in_process(ALIGN + ["--log", bad, "--output-dir", out], capfd)
    check_contract(run, "error")
    assert (out / "ticket.md").read_text() == "old ticket\n" and (out / "ticket.json").read_text() == "{}\n"
    run = run_in_process(ALIGN + ["--log", bad, "--output-dir", ""], capfd)
    check_contract(run, "error")


@pytest.mark.parametrize("tol", ["inf", "nan", "-1%", "1e400", "５%"])
def test_tolerance_is_range_checked(tol: str, tmp_path: Path, capfd) -> None:
    log = tmp_path / "l.log"
    log.write_text(W.format("38.2"))
    run = run_in_process(ALIGN + ["--log", log, "--output-dir", tmp_path / "o", "--tolerance", tol], capfd)
    check_contract(run, "error", ("--tolerance",))


def test_calibrate_scales_to_thousands_of_rows(monkeypatch) -> None:
    """Leave-one-out is K-fold beyond 20 rows: 1,500 rows refit K + 1 times, not 1,501 times."""
    import auditor.perf.calibrate as C
    from auditor.devices.profiles import load_device
    refits = []
    real = C._fit_params

    def counting(*a, **k):
        refits.append(1)
        return real(*a, **k)

    monkeypatch.setattr(C, "_fit_params", counting)

    def ev(dev, s):
        return s.query_len * 1e-3 + dev.serving.get("step_ms", 1.0)

    scen = [C.Scenario(f"s{i}", "prefill", 100 + i, 0, 2.0 + i * 1e-3) for i in range(1500)]
    res = C.fit(scen, ev, load_device(), fit_names=("step_ms",), leave_one_out=True)
    assert len(res.loo_ms) == 1500 and len(refits) == C.MAX_LOO_FOLDS + 1
