"""Bounds on a command's own cost and on what it writes (issue 31, earlier surfaces): a sweep with plans as its
axis, a denormal calibration measurement, a non-finite device profile, an empty --contexts and an unknown
option, each a named case with the contract of tests/hostile_harness.py."""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from auditor.errors import AuditInputError
from auditor.limits import MAX_SWEEP_PLANS
from hostile_harness import check_contract, fingerprint, run_in_process

CAL = "scenario,phase,query_len,context_len,measured_ms\n"


def test_a_sweep_of_more_plans_than_it_builds_is_refused_up_front(capfd) -> None:
    """4,096 (TP, DP) plans took 35-82 s (a program build each) though the grid was far under 10^7 points."""
    tps = ",".join(str(i) for i in range(1, 65))
    run = run_in_process(["sweep", "glm-5.1", "--tp", tps, "--dp", tps, "--batch", "1"], capfd, timeout=30)
    check_contract(run, "error", ("--tp/--dp", "4,096 parallel plans", f"{MAX_SWEEP_PLANS:,}"))


@pytest.mark.parametrize("value", ["5e-324", "1e-310", "1e-7", "0.0000009"])
def test_a_denormal_measurement_is_refused(value: str, tmp_path: Path, capfd) -> None:
    """A measured_ms of 5e-324 made every relative error infinite and wrote Infinity into the profile."""
    csv = tmp_path / "c.csv"
    csv.write_text(CAL + f"a,prefill,100,0,{value}\nb,prefill,200,0,3\nc,prefill,400,0,5\n")
    before = fingerprint(tmp_path)
    run = run_in_process(["calibrate", csv, "--no-loo", "-o", tmp_path / "dev.json"], capfd)
    check_contract(run, "error", ("line 2", "measured_ms", "below"))
    assert fingerprint(tmp_path) == before


@settings(max_examples=50, deadline=None)
@given(bad=st.sampled_from([float("nan"), float("inf"), -float("inf")]),
       field=st.sampled_from(["hbm_bytes_per_s", "vector_sort_ops_per_s"]))
def test_a_non_finite_profile_is_never_written(tmp_path_factory, bad: float, field: str) -> None:
    """Whatever produced it, a profile holding NaN or Infinity is refused in one line, not written (load_json
    would refuse to read it back)."""
    from auditor.devices.profiles import load_device, write_device
    d = tmp_path_factory.mktemp("dev")
    broken = replace(load_device(), **{field: bad})
    with pytest.raises(AuditInputError, match="non-finite"):
        write_device(broken, d / "dev.json")
    assert not any(d.iterdir())


def test_an_empty_contexts_list_is_refused(capfd) -> None:
    run = run_in_process(["perf", "glm-5.1", "--contexts", ""], capfd)
    check_contract(run, "error", ("--contexts",))


@pytest.mark.parametrize("argv, option", [(["perf", "glm-5.1", "--bogus"], "--bogus"),
                                          (["bench", "glm-5.1", "--nonsense", "1"], "--nonsense"),
                                          (["memory", "glm-5.1", "--tp=16", "--tpx", "2"], "--tpx")])
def test_an_unknown_option_is_named_first(argv: list[str], option: str, capfd) -> None:
    run = run_in_process(argv, capfd)
    check_contract(run, "error")
    assert run.err_lines[0].startswith(f"audit: error: {option}: no such option")


def test_calibrate_refuses_more_rows_than_it_can_fit_in_bounded_time(tmp_path, capsys):
    """calibrate's cost grows with rows x folds (100 rows took 149 s): past 64 rows it refuses up front,
    in one line naming the file, before any fit runs; 64 rows are read."""
    from auditor.cli import main
    from auditor.perf.calibrate import MAX_SCENARIOS, load_scenarios
    head = "scenario,phase,query_len,context_len,measured_ms\n"
    ok = tmp_path / "ok.csv"
    ok.write_text(head + "".join(f"s{i},decode,1,{1024 * (i + 1)},{50 + i}\n" for i in range(MAX_SCENARIOS)))
    assert len(load_scenarios(ok)) == MAX_SCENARIOS == 64
    big = tmp_path / "big.csv"
    big.write_text(head + "".join(f"s{i},decode,1,{1024 * (i + 1)},{50 + i}\n" for i in range(MAX_SCENARIOS + 1)))
    out = tmp_path / "dev.json"
    assert main(["calibrate", str(big), "-o", str(out)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and str(big) in err[0] and "at most 64" in err[0]
    assert not out.exists()
