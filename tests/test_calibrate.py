"""Calibration: the fitter recovers known constants from a synthetic model, reports honest
leave-one-out errors, writes a re-loadable profile, and reads the measurement CSV format."""
from __future__ import annotations

from pathlib import Path

import pytest

from auditor.context import DeploymentContext
from auditor.devices.profiles import load_device, write_device
from auditor.errors import AuditInputError
from auditor.perf.calibrate import (DEFAULT_FIT, Scenario, fit, load_scenarios, minimize_restarted, nelder_mead,
                                    perf_evaluator, uncalibrated)

SHARED_CSV = Path(__file__).resolve().parents[2] / "shared" / "data" / "glm-5.1-a3-latency-calibration.csv"

BASE = uncalibrated(load_device("a3-752t"))     # TensorCast defaults: static 5 us mma, 2 us gp
# synthetic per-scenario work: FLOPs, dense bytes, indexer-cache bytes, kernel launches
WORK = {
    "p1": (4.0e14, 3.0e10, 1.0e9, 3000),
    "p2": (6.0e14, 3.2e10, 9.0e9, 3000),
    "d1": (2.0e12, 4.0e10, 2.0e8, 2400),
    "d2": (2.0e12, 4.1e10, 1.9e9, 2400),
    "d3": (8.0e12, 3.5e10, 5.0e8, 1800),
    "p3": (1.0e14, 2.0e10, 3.0e9, 2000),
}


def synthetic_ms(dev, s: Scenario) -> float:
    """A roofline-shaped model whose time depends on four profile constants."""
    flops, dense, cache, launches = WORK[s.name]
    bw = dev.hbm_bytes_per_s * dev.efficiency["memory"]
    return 1e3 * (flops / (dev.mma_flops["I8"] * dev.efficiency["compute"]) + dense / bw
                  + cache / (bw * dev.efficiency["indexer_cache"]) + launches * dev.static_us["mma"] * 1e-6)


TRUE = BASE.with_efficiency(compute=0.42, memory=0.83, indexer_cache=0.31).with_static(mma=8.0, gp=3.2)


def _scenarios(names):
    return [Scenario(n, "prefill" if n[0] == "p" else "decode", 1, 0, synthetic_ms(TRUE, Scenario(n, "", 1, 0, 1)))
            for n in names]


def test_fitter_recovers_known_constants():
    scen = _scenarios(["p1", "p2", "d1", "d2", "d3"])
    res = fit(scen, synthetic_ms, BASE, ("compute", "memory", "indexer_cache", "static"), leave_one_out=False)
    assert res.fitted["compute"] == pytest.approx(0.42, rel=1e-3)
    assert res.fitted["memory"] == pytest.approx(0.83, rel=1e-3)
    assert res.fitted["indexer_cache"] == pytest.approx(0.31, rel=1e-3)
    assert res.fitted["static"] == pytest.approx(8.0 / 5.0, rel=1e-3)     # 5 us -> 8 us
    assert res.device.static_us["gp"] == pytest.approx(2.0 * 1.6, rel=1e-3)
    assert res.mape_before > 10.0 and res.mape_after < 0.05


def test_nelder_mead_rosenbrock_and_bounds():
    # Rosenbrock (1 - x)^2 + 100 (y - x^2)^2: minimum 0 at (1, 1), from the classic start (-1.2, 1)
    rosen = lambda x: (1 - x[0]) ** 2 + 100 * (x[1] - x[0] ** 2) ** 2      # noqa: E731
    r = nelder_mead(rosen, [-1.2, 1.0], [-2, -2], [2, 2])
    assert r.converged and r.x == pytest.approx([1.0, 1.0], abs=1e-6) and r.fun < 1e-12
    assert nelder_mead(rosen, [-1.2, 1.0], [-2, -2], [2, 2]).x.tolist() == r.x.tolist()   # deterministic
    # (x - 1)^2 + (y + 2)^2 with y >= 0: the bounded minimum is (1, 0), value 0 + 2^2 = 4
    bowl = lambda x: (x[0] - 1) ** 2 + (x[1] + 2) ** 2                  # noqa: E731
    r = minimize_restarted(bowl, [3.0, 3.0], [-5, 0], [5, 5])
    assert r.x == pytest.approx([1.0, 0.0], abs=1e-6) and r.fun == pytest.approx(4.0)
    # max_iter stops an unconverged search and says so
    assert not nelder_mead(rosen, [-1.2, 1.0], [-2, -2], [2, 2], max_iter=5).converged


def test_leave_one_out_and_block():
    scen = _scenarios(list(WORK))
    res = fit(scen, synthetic_ms, BASE, ("compute", "memory", "static"),
              provenance={"source": "synthetic"})
    # the model family cannot express indexer_cache = 0.31 with three knobs: fits are good, not exact
    assert len(res.loo_ms) == len(scen)
    assert res.mape_after < res.mape_before
    assert res.mape_loo >= res.mape_after - 1e-9
    block = res.device.calibration
    assert block["status"] == "calibrated" and block["source"] == "synthetic"
    assert [r["scenario"] for r in block["scenarios"]] == list(WORK)
    assert block["mape_after_pct"] == pytest.approx(res.mape_after, abs=0.01)
    assert set(block["fitted"]) == {"compute", "memory", "static"}


def test_calibrated_profile_round_trip(tmp_path):
    scen = _scenarios(["p1", "p2", "d1", "d2", "d3"])
    res = fit(scen, synthetic_ms, BASE, ("compute", "memory", "indexer_cache", "static"), leave_one_out=False)
    p = tmp_path / "cal.json"
    write_device(res.device, p)
    back = load_device(p)
    assert back.efficiency["compute"] == pytest.approx(0.42, rel=1e-3)
    assert back.calibration["scenarios"][0]["scenario"] == "p1"
    assert [synthetic_ms(back, s) for s in scen] == pytest.approx([s.measured_ms for s in scen], rel=1e-3)


def test_bounds_respected():
    # measured far faster than any efficiency <= 1 allows: the fit stops at the bound
    scen = [Scenario(n, "prefill", 1, 0, 1e-3) for n in ("p1", "p2", "p3")]
    res = fit(scen, synthetic_ms, BASE, ("compute", "memory"), leave_one_out=False)
    assert res.fitted["compute"] <= 1.0 + 1e-9 and res.fitted["memory"] <= 1.0 + 1e-9


def test_more_constants_than_scenarios_refused():
    with pytest.raises(AuditInputError, match="fit fewer constants"):
        fit(_scenarios(["p1", "p2"]), synthetic_ms, BASE, ("compute", "memory"))


def test_uncalibrated_restores_tensorcast_defaults():
    shipped = load_device("a3-752t")
    base = uncalibrated(shipped)
    assert base.efficiency["comm"] == 0.7 and base.efficiency["compute"] == 0.7
    assert base.efficiency["memory"] == 0.6
    assert base.static_us["mma"] == 5.0 and base.static_us["gp"] == 2.0
    from auditor.perf.host import DEFAULT_HOST
    assert {k: base.serving[k] for k in ("launch_us", "prefill_token_us", "step_ms")} == \
        {k: DEFAULT_HOST[k] for k in ("launch_us", "prefill_token_us", "step_ms")}
    assert uncalibrated(load_device("a2-313t")) == load_device("a2-313t")    # nothing recorded


def test_unknown_parameter():
    with pytest.raises(AuditInputError, match="unknown constant"):
        fit(_scenarios(["p1"]), synthetic_ms, BASE, ("compute", "flux"))


def test_load_scenarios_and_errors(tmp_path):
    p = tmp_path / "m.csv"
    p.write_text("# comment\nscenario,phase,query_len,context_len,measured_ms\na,prefill,10,0,5.5\nb,decode,4,100,1\n")
    assert load_scenarios(p) == [Scenario("a", "prefill", 10, 0, 5.5), Scenario("b", "decode", 4, 100, 1.0)]
    p.write_text("scenario,phase,query_len,context_len,measured_ms\na,train,10,0,5.5\n")
    with pytest.raises(AuditInputError, match="line 2: phase must be prefill or decode"):
        load_scenarios(p)
    p.write_text("scenario,phase,query_len\na,prefill,1\n")
    with pytest.raises(AuditInputError, match="missing column"):
        load_scenarios(p)
    p.write_text("scenario,phase,query_len,context_len,measured_ms\na,prefill,x,0,5.5\n")
    with pytest.raises(AuditInputError, match=r"m.csv: line 2: bad row"):
        load_scenarios(p)


@pytest.mark.skipif(not SHARED_CSV.is_file(), reason=f"shared calibration data absent ({SHARED_CSV})")
def test_shared_csv_reads_as_four_scenarios():
    scen = load_scenarios(SHARED_CSV)
    assert [s.name for s in scen] == ["3.5k-prefill", "3.5k-decode", "32k-prefill", "32k-decode"]
    assert scen[2] == Scenario("32k-prefill", "prefill", 4096, 28000, 2295.99)
    assert scen[1].query_len == 4       # 1 + MTP 3


# -- the real model on the shared measurements -----------------------------------------------------

TENSORCAST_MAPE = 28.7      # TensorCast's analytic model on this family of scenarios (anchor §6)


def _glm_evaluator():
    from auditor.cli.options import DEFAULT_ENGINE
    from auditor.model.presets import preset_spec
    from auditor.parallel import ParallelPlan

    plan = ParallelPlan(tp=16, dp=1, ep=16, mtp=True).validate()
    return perf_evaluator(DeploymentContext(preset_spec("glm-5.1"), plan, DEFAULT_ENGINE, "w4a8"), mtp=3, batch=1)


@pytest.mark.skipif(not SHARED_CSV.is_file(), reason=f"shared calibration data absent ({SHARED_CSV})")
def test_calibration_on_shared_glm51_measurements():
    scen = load_scenarios(SHARED_CSV)
    ev = _glm_evaluator()
    base = uncalibrated(load_device("a3-752t"))
    res = fit(scen, ev, base, DEFAULT_FIT)
    assert res.mape_after < res.mape_before
    assert res.mape_after < TENSORCAST_MAPE
    assert res.mape_loo is not None and res.mape_loo < TENSORCAST_MAPE


@pytest.mark.skipif(not SHARED_CSV.is_file(), reason=f"shared calibration data absent ({SHARED_CSV})")
def test_shipped_a3_profile_is_calibrated_for_current_model():
    """The shipped constants must reproduce, with today's perf model, the 'after' latencies their
    calibration block recorded (within 0.5 % of each measurement) and stay within 10 % mean error;
    a perf-model change that moves these scenarios makes this fail until the profile is refitted."""
    scen = load_scenarios(SHARED_CSV)
    ev = _glm_evaluator()
    shipped = load_device("a3-752t")
    rows = shipped.calibration["scenarios"]
    assert [r["scenario"] for r in rows] == [s.name for s in scen]
    now = [ev(shipped, s) for s in scen]
    drift = [abs(m - r["after_ms"]) / s.measured_ms * 100 for m, r, s in zip(now, rows, scen)]
    mape = sum(abs(m / s.measured_ms - 1) * 100 for m, s in zip(now, scen)) / len(scen)
    rerun = ("re-run: python -m auditor.serving.calibrate --write (the joint fit of the serving host block; "
             f"fitted on {shipped.calibration.get('fitted_on_commit')})")
    assert max(drift) < 0.5, f"perf model moved the calibration scenarios by up to {max(drift):.2f} %; {rerun}"
    assert mape < 10.0, f"shipped a3-752t constants give {mape:.1f} % mean error; {rerun}"
    from auditor.serving.calibrate import FIT_KEYS
    fitted = shipped.calibration["fitted"]
    assert set(fitted) == set(FIT_KEYS) == {"launch_us", "prefill_token_us", "step_ms", "draft_launch_us",
                                            "async_overlap"}
    for name, entry in fitted.items():
        assert shipped.serving[name] == pytest.approx(entry["value"], rel=1e-4)


@pytest.mark.skipif(not SHARED_CSV.is_file(), reason=f"shared calibration data absent ({SHARED_CSV})")
def test_leave_one_out_within_ten_percent_on_every_row():
    """Issue 11: each measured row predicted by a fit that never saw it stays within 10 %; only host
    constants flat in context are fitted (per prefill token, per step), so the 3.5k -> 32k growth is the op
    model's plus the host cost of the 596 more tokens of the 32k row's chunk (4096 vs 3500)."""
    scen = load_scenarios(SHARED_CSV)
    res = fit(scen, _glm_evaluator(), uncalibrated(load_device("a3-752t")), DEFAULT_FIT)
    assert len(res.errors_loo) == 4
    assert max(abs(e) for e in res.errors_loo) <= 10.0, res.errors_loo
    # the growth of prefill from 3.5k to 32k context is predicted, not absorbed: both host constants
    # are flat, so the modelled difference of the two prefill rows equals the device-side difference
    pre = [s for s in scen if s.phase == "prefill"]
    measured_growth = pre[1].measured_ms - pre[0].measured_ms
    modelled_growth = res.after_ms[2] - res.after_ms[0]
    host_growth = (4096 - 3500) * res.fitted["prefill_token_us"] * 1e-3
    assert modelled_growth - host_growth == pytest.approx(measured_growth, rel=0.10)


@pytest.mark.skipif(not SHARED_CSV.is_file(), reason=f"shared calibration data absent ({SHARED_CSV})")
def test_calibrate_command_writes_loadable_profile(tmp_path):
    from click.testing import CliRunner

    from auditor.cli.calibrate import calibrate_command

    out = tmp_path / "a3.json"
    r = CliRunner().invoke(calibrate_command, [str(SHARED_CSV), "--tp", "16", "--ep", "16", "--mtp", "3",
                                               "--no-loo", "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert "3.5k-prefill" in r.output and "mean |error|" in r.output
    dev = load_device(out)
    assert dev.calibration["status"] == "calibrated" and dev.calibration["plan"].startswith("TP16 DP1 EP16")
    assert dev.calibration["mape_after_pct"] < TENSORCAST_MAPE
    r = CliRunner().invoke(calibrate_command, [str(SHARED_CSV), "--fit", "compute,memory,comm,static",
                                               "--tp", "16", "--ep", "16", "-o", str(out)])
    assert r.exit_code != 0 and "fit fewer constants" in str(r.exception)


def test_the_dsa_cp_price_reads_as_the_host_model_reads_it():
    """``audit calibrate``'s view of cp_prefill_token_us is host_params': the profile's value, or the plain-TP
    prefill_token_us where a profile has none (and setting it writes the key)."""
    from dataclasses import replace

    import numpy as np

    from auditor.perf.calibrate import PARAMS
    from auditor.perf.host import HOST_KEYS, host_params
    dev = load_device("a3-752t")
    p = PARAMS["cp_prefill_token_us"]
    assert p.get(dev, dev) == dev.serving["cp_prefill_token_us"]
    bare = replace(dev, serving={k: v for k, v in dev.serving.items() if k != "cp_prefill_token_us"})
    assert p.get(bare, bare) == bare.serving["prefill_token_us"]
    i = HOST_KEYS.index("cp_prefill_token_us")
    assert host_params(bare)[i] == np.float64(bare.serving["prefill_token_us"] * 1e-6)
    assert p.set(bare, 42.0, bare).serving["cp_prefill_token_us"] == 42.0
