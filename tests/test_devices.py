"""Device profiles: the shipped JSON files load, carry the anchor §4 figures, and bad files fail
with one line that names the file."""
from __future__ import annotations

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from auditor.devices.profiles import DEFAULT_DEVICE, device_names, load_device, write_device
from auditor.errors import AuditInputError

GiB = 1024 ** 3


def test_builtin_profiles_present_and_loadable():
    names = device_names()
    for required in ("a3-752t", "a3-560t", "a2-376t", "a2-313t", "a2-280t", "h200", "b200", "h20", "gh200", "rtx-pro-6000"):
        assert required in names
    for n in names:
        dev = load_device(n)
        assert dev.name == n
        assert len(dev.tiers) == len(dev.grid) == len(dev.tier_topologies)


def test_default_is_a3_752t_with_anchor_figures():
    dev = load_device(None)
    assert DEFAULT_DEVICE == "a3-752t" and dev.name == "a3-752t"
    assert dev.mma_flops["BF16"] == pytest.approx(353.9e12)
    assert dev.mma_flops["I8"] == pytest.approx(752e12)
    assert "F8" not in dev.mma_flops          # A3 has no FP8 MMA unit
    assert dev.vector_flops["F16"] == pytest.approx(22e12)
    assert dev.hbm_bytes_per_s == pytest.approx(1.759e12, rel=1e-3)   # 1.6 TiB/s
    assert dev.hbm_capacity_bytes == 64 * GiB
    assert dev.grid == (48, 8, 2)
    assert dev.tiers[0] == pytest.approx((196e9, 5.5e-6))
    assert dev.tiers[1] == pytest.approx((196e9, 0.5e-6))
    assert dev.tiers[2] == pytest.approx((224e9, 0.2e-6))
    assert set(dev.static_us) >= {"mma", "gp", "comm"}
    for k in ("compute", "memory", "sfa_kv", "indexer_cache", "comm"):
        assert dev.efficiency[k] > 0


def test_a2_full_mesh_and_h200_fp8():
    a2 = load_device("a2-313t")
    assert a2.grid == (128, 8) and a2.tier_topologies[1] == "FULL_MESH"
    assert a2.mma_flops["F16"] == pytest.approx(313e12)
    h = load_device("h200")
    assert h.mma_flops["F8"] == pytest.approx(1979e12)
    assert h.hbm_bytes_per_s == pytest.approx(4.8e12)
    assert h.tiers[1][0] == pytest.approx(450e9)          # NVLink per direction


def test_custom_path_round_trip(tmp_path):
    dev = load_device("a2-280t").with_efficiency(compute=0.5)
    p = tmp_path / "mine.json"
    write_device(dev, p)
    back = load_device(p)
    assert back.efficiency["compute"] == 0.5
    assert len(back.tiers) == len(dev.tiers)
    for got, want in zip(back.tiers, dev.tiers):
        assert list(got) == pytest.approx(list(want))
    assert back.grid == dev.grid and back.mma_flops == dev.mma_flops
    assert load_device(str(p)).path == str(p)


def _profile_doc() -> dict:
    return json.loads(json.dumps(load_device("a3-752t").to_json()))


@pytest.mark.parametrize("mutate, needle", [
    (lambda d: d.pop("efficiency"), "missing efficiency"),
    (lambda d: d["efficiency"].pop("sfa_kv"), "missing sfa_kv"),
    (lambda d: d["mma_flops"].update(FP64=1.0), "unknown key 'FP64'"),
    (lambda d: d.update(hbm_bytes_per_s="fast"), "'hbm_bytes_per_s' must be a number"),
    (lambda d: d["tiers"].pop(), "one entry per grid dimension"),
    (lambda d: d["tiers"][0].update(topology="torus"), "topology 'TORUS' unknown"),
    # every number of the serving block (the host model's constants) is checked, not the first four only
    (lambda d: d["serving"].update(async_overlap=2.0), "'serving.async_overlap' must be a number from 0 to 1"),
    (lambda d: d["serving"].update(draft_launch_us="fast"), "'serving.draft_launch_us' must be a number"),
    (lambda d: d["serving"].update(cp_prefill_token_us=-1), "'serving.cp_prefill_token_us' must be a number"),
    (lambda d: d["serving"].update(launch_us=True), "'serving.launch_us' must be a number"),
])
def test_bad_profiles_one_line_naming_file(tmp_path, mutate, needle):
    doc = _profile_doc()
    mutate(doc)
    p = tmp_path / "bad.json"
    p.write_text(json.dumps(doc))
    with pytest.raises(AuditInputError) as ei:
        load_device(p)
    msg = ei.value.one_line()
    assert str(p) in msg and needle in msg and "\n" not in msg


def test_invalid_json_and_unknown_name(tmp_path):
    p = tmp_path / "broken.json"
    p.write_text("{ not json")
    with pytest.raises(AuditInputError, match="broken.json: not valid JSON"):
        load_device(p)
    with pytest.raises(AuditInputError, match="unknown device 'z9000'"):
        load_device("z9000")
    with pytest.raises(AuditInputError, match="not found"):
        load_device(tmp_path / "absent.json")


def test_a3_calibration_stays_physically_plausible():
    """The shipped fit must not buy its error with implausible constants: every efficiency in
    (0.05, 1] and the per-kernel fixed cost within 5x TensorCast's 5 us (an earlier comm+static
    fit had comm 0.10 and 27.7 us); the note must say what the fitted constants absorb."""
    dev = load_device("a3-752t")
    cal = dev.calibration
    assert cal["status"] == "calibrated"
    for k in ("compute", "memory", "comm"):
        assert 0.05 < dev.efficiency[k] <= 1.0, k
    assert dev.static_us["mma"] <= 5 * 5.0 and dev.static_us["gp"] <= 5 * 2.0
    assert all(name in cal["note"] for name in cal["fitted"])
    assert "absorb" in cal["note"]


@pytest.mark.parametrize("name, usable_gib, fp8_sparse_tflops, bw_tb_s, link_gb_s_per_dir", [
    # the total vLLM prints at start-up ("Free memory on device (F/T GiB)"), the data sheet's sparse FP8
    # figure (halved for the dense peak), HBM/GDDR bandwidth and the intra-node link per direction
    ("h200", 139.80, 3958, 4.8, 450),
    ("b200", 178.35, 9000, 7.7, 900),
    ("h20", 95.0, 592, 4.0, 450),
    ("gh200", 96.0, 3958, 4.0, None),
    ("rtx-pro-6000", 94.97, 2000, 1.792, 64),
])
def test_nvidia_profiles_carry_data_sheet_and_engine_figures(name, usable_gib, fp8_sparse_tflops, bw_tb_s,
                                                             link_gb_s_per_dir):
    d = load_device(name)
    assert d.hbm_usable_bytes == pytest.approx(usable_gib * GiB, abs=GiB / 200)
    assert d.hbm_usable_bytes <= d.hbm_capacity_bytes
    assert d.mma_flops["F8"] == pytest.approx(fp8_sparse_tflops / 2 * 1e12)
    assert d.mma_flops["BF16"] == pytest.approx(d.mma_flops["F8"] / 2, rel=1e-3)   # sheets round (989 vs 1979)
    assert d.hbm_bytes_per_s == pytest.approx(bw_tb_s * 1e12)
    if link_gb_s_per_dir is not None:
        assert d.tiers[-1][0] == pytest.approx(link_gb_s_per_dir * 1e9)
    assert "NVIDIA" in d.source and "sparsity" in d.source      # names the vendor figure and its sparsity


def test_h200_is_what_the_engine_sees_not_nvidia_smi():
    # nvidia-smi's 143,771 MiB is 140.40 GiB; torch and vLLM's own start-up line on an H200 say 139.80-139.81
    h = load_device("h200")
    assert 143_771 * 2 ** 20 / GiB == pytest.approx(140.40, abs=0.005)
    assert h.hbm_usable_bytes < 143_771 * 2 ** 20 - GiB // 2
    assert 139.795 <= h.hbm_usable_bytes / GiB < 139.815


_SERVING_VALUES = st.one_of(st.none(), st.booleans(), st.integers(-10**7, 10**7),
                            st.floats(allow_nan=False, allow_infinity=False, width=64), st.text(max_size=5),
                            st.lists(st.integers(), max_size=2), st.dictionaries(st.text(max_size=3), st.integers(), max_size=1))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(key=st.sampled_from(["launch_us", "prefill_token_us", "decode_token_us", "step_ms", "draft_launch_us",
                            "async_overlap", "cp_prefill_token_us"]), value=_SERVING_VALUES)
def test_a_serving_block_number_is_taken_in_range_or_refused_in_one_line(tmp_path, key, value):
    """Whatever a profile's serving block holds (a profile is user input): the host constant is loaded as a
    float within its range and read by the host model, or the profile is refused with one line naming the
    file and the key; never another error."""
    from auditor.perf.host import HOST_KEYS, host_params
    doc = _profile_doc()
    doc["serving"][key] = value
    p = tmp_path / "serving.json"
    p.write_text(json.dumps(doc))
    top = 1.0 if key == "async_overlap" else 1e6
    ok = (not isinstance(value, bool) and isinstance(value, (int, float)) and 0 <= value <= top)
    if ok:
        dev = load_device(p)
        assert dev.serving[key] == float(value)
        scale = {"step_ms": 1e-3, "async_overlap": 1.0}.get(key, 1e-6)
        assert host_params(dev)[HOST_KEYS.index(key)] == pytest.approx(float(value) * scale)
    else:
        with pytest.raises(AuditInputError) as ei:
            load_device(p)
        msg = ei.value.one_line()
        assert str(p) in msg and f"serving.{key}" in msg and "\n" not in msg
