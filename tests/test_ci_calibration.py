"""The DSA-CP prefill price (``cp_prefill_token_us``): the rows it is fitted on, the shipped value as their
optimum, and the CI rows read the way ``audit bench --launch`` reads them (auditor/ci_calibration.py)."""
from __future__ import annotations

import json

import numpy as np
import pytest

from auditor.cli import main


@pytest.fixture(scope="module")
def cp_rows(shared_dir):
    from auditor.ci_calibration import cp_evidence
    return cp_evidence(shared_dir / "data" / "published")


def _shipped_host():
    from auditor.devices.profiles import load_device
    from auditor.perf.host import host_params
    return host_params(load_device("a3-752t"))


def test_cp_rows_are_the_ci_rows_that_run_dsa_cp(cp_rows):
    """Every row fitted runs a rank that splits its prefill tokens over TP; the plain-TP rows, the A2 row and
    the DeepSeek-V4 rows without DSA-CP (one A3 node; the Pro 1M P/D) are not among them."""
    names = {e.name for e in cp_rows}
    assert {"E-A3-20", "E-A3-64k", "F-PD1024", "F-PD100"} <= names
    assert not names & {"P1", "P4", "P5", "P6", "P3a", "F-A3", "F-Pro1M", "E-DS16-4"}
    assert [e.name for e in cp_rows if e.edge] == ["P8"]        # at the KV edge: predicted, not fitted


def test_shipped_cp_price_is_the_optimum_of_its_rows(cp_rows):
    """No other price improves the objective of the rows not at the edge: not the floor, not a few us more,
    and not the plain-TP per-token price a DSA-CP rank paid before the stage existed."""
    from auditor.serving.calibrate import CP_KEY, cp_msle
    from auditor.devices.profiles import load_device
    used = [e for e in cp_rows if not e.edge]
    blk = load_device("a3-752t").serving
    host = _shipped_host()
    at = cp_msle(used, host, blk[CP_KEY])
    for other in (0.01, blk[CP_KEY] + 5.0, blk["prefill_token_us"]):
        assert at <= cp_msle(used, host, other) + 1e-4, other
    # the record in the profile is of this value
    stage = load_device("a3-752t").calibration["cp_stage"]
    assert stage["fitted"][CP_KEY]["value"] == blk[CP_KEY]
    assert {r["id"] for r in stage["rows"]} == {e.name for e in cp_rows}


def test_a_ci_row_read_for_the_fit_is_what_audit_bench_prints(shared_dir, cp_rows, capsys):
    """The fit's prediction of a row (``cli.bench.bench_inputs`` plus the simulation) is the figure
    `audit bench --launch` prints for it with the shipped profile."""
    path = shared_dir / "data" / "published" / "deepseek-v4" / "DeepSeek-V4-flash-w8a8-PD-no-prefix.yaml"
    assert main(["bench", "--launch", str(path), "--case", "perf_TPOT20_3_5_1_5", "--format", "json"]) == 0
    printed = json.loads(capsys.readouterr().out)["output_throughput"]
    row = next(e for e in cp_rows if e.name == "F-PD100")
    assert row.predict(_shipped_host()) == pytest.approx(printed, rel=1e-9)


def test_the_price_applies_to_dsa_cp_ranks_only(cp_rows):
    """Moving the DSA-CP price moves a DSA-CP row and leaves a plain-TP row alone."""
    from auditor.serving.bench import metrics
    from auditor.serving.calibrate import deployment, load_rows, with_cp, workload
    from auditor.serving.sim import simulate
    from pathlib import Path
    host = _shipped_host()
    row = next(e for e in cp_rows if e.name == "F-PD1024")
    assert row.predict(with_cp(host, 150.0)) < 0.9 * row.predict(with_cp(host, 0.01))
    rows = load_rows(Path(__file__).parent / "data" / "serving_published.json")["rows"]
    p4 = next(r for r in rows if r["id"] == "P4")          # TP16, no DSA-CP
    dep, wl = deployment(p4), workload(p4)
    a = metrics(simulate(dep, wl, with_cp(host, 0.01)))["output_throughput"]
    b = metrics(simulate(dep, wl, with_cp(host, 150.0)))["output_throughput"]
    assert a == b
    assert np.isfinite(a)
