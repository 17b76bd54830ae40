"""Measured kernel tables: import from a synthetic Ascend kernel_details.csv, exact / interpolated /
missed lookups with hand-computed values, our CSV format round trip, and one-line errors."""
from __future__ import annotations

import csv

import pytest
from click.testing import CliRunner

from auditor.errors import AuditInputError
from auditor.perf.measured import (KernelTable, import_kernel_details, load_kernel_table, matmul_key,
                                   parse_shapes)
from auditor.cli.kernels import kernels_group

HEADER = ["Step Id", "Name", "Type", "OP State", "Accelerator Core", "Start Time(us)", "Duration(us)",
          "Wait Time(us)", "Block Dim", "Input Shapes", "Input Data Types", "Input Formats"]


def _write_details(path, rows):
    with path.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(HEADER)
        for i, (typ, dur, shapes, fmts) in enumerate(rows):
            w.writerow([1, f"op{i}", typ, "dynamic", "AI_CORE", 1000.0 + 50 * i, dur, 0.1, 24, shapes,
                        "INT8;INT8;FLOAT", fmts])


@pytest.fixture
def details(tmp_path):
    p = tmp_path / "kernel_details.csv"
    _write_details(p, [
        # x[16,6144] x NZ int8 weight [N/32=64, K/16=384, 16, 32] -> (M, K, N) = (16, 6144, 2048)
        ("QuantBatchMatmulV3", 10.0, "16,6144;64,384,16,32;2048", "ND;FRACTAL_NZ;ND"),
        ("QuantBatchMatmulV3", 14.0, "16,6144;64,384,16,32;2048", "ND;FRACTAL_NZ;ND"),   # averaged: 12
        ("QuantBatchMatmulV3", 52.0, "4,64,6144;64,384,16,32;2048", "ND;FRACTAL_NZ;ND"),  # M = 256
        ("MatMulV2", 7.5, "4,6144;128,6144", "ND;ND"),                                   # [N, K]: N = 128
        ("AddRmsNormBias", 3.0, "4,6144;6144", "ND;ND"),                                 # unmapped
        # SFA: q (4, 4, 512), cache (blocks, 128, 1, 512), topk (4, 1, 2048), block table (1, 28)
        ("SparseFlashAttention", 40.0, "4,4,512;1766,128,1,512;1766,128,1,512;4,1,2048;1,28;1;1;4,4,64;"
                                       "1766,128,1,64", "ND;ND;ND;ND;ND;ND;ND;ND;ND"),
        # indexer: q (4, 32, 128), cache (blocks, 128, 1, 128), weights (4, 32), block table (1, 28)
        ("LightningIndexer", 30.0, "4,32,128;1766,128,1,128;4,32;1,28;1;1", "ND;ND;ND;ND;ND;ND"),
    ])
    return p


MAPPING = {"QuantBatchMatmulV3": "matmul_w8a8", "MatMulV2": "matmul_bf16",
           "SparseFlashAttention": "sfa", "LightningIndexer": "indexer"}


def test_import_keys_and_averaging(details):
    stats: dict = {}
    t = import_kernel_details(details, MAPPING, stats)
    assert stats == {"used": 6, "skipped": 1}
    assert t.points("matmul_w8a8") == {(16.0, 6144.0, 2048.0): 12.0, (256.0, 6144.0, 2048.0): 52.0}
    assert t.points("matmul_bf16") == {(4.0, 6144.0, 128.0): 7.5}
    # SFA attended length min(28 blocks x 128 = 3584, top-k 2048) = 2048
    assert t.points("sfa") == {(4.0, 4.0, 2048.0): 40.0}
    # indexer scores the whole addressable context: 28 x 128 = 3584
    assert t.points("indexer") == {(4.0, 32.0, 3584.0): 30.0}


def test_lookup_exact_interpolated_miss(details):
    t = import_kernel_details(details, MAPPING)
    assert t.lookup("matmul_w8a8", (16, 6144, 2048)) == (12.0, "measured")
    # M = 136 is halfway between 16 (12 us) and 256 (52 us): 32 us
    time_us, how = t.lookup("matmul_w8a8", (136, 6144, 2048))
    assert how == "interpolated" and time_us == pytest.approx(32.0)
    assert t.lookup("matmul_w8a8", (512, 6144, 2048)) is None      # no extrapolation
    assert t.lookup("matmul_w8a8", (136, 6144, 4096)) is None      # other N never measured
    assert t.lookup("matmul_w8a8", (16, 6144)) is None             # wrong key length
    assert t.lookup("nope", (1, 2, 3)) is None


def _grid_2d() -> KernelTable:
    """(a, b, 7) on the box a in {0, 4}, b in {0, 10}; not a plane (10 + 5a + b + 1.25ab)."""
    t = KernelTable()
    for (a, b), v in {(0, 0): 10.0, (4, 0): 30.0, (0, 10): 20.0, (4, 10): 80.0}.items():
        t.add("k", (a, b, 7), v)
    return t


def test_bilinear_from_box_corners():
    t = _grid_2d()
    # a = 1: weights 3/4 (a=0), 1/4 (a=4); b = 6: weights 0.4 (b=0), 0.6 (b=10)
    # 10*.75*.4 + 30*.25*.4 + 20*.75*.6 + 80*.25*.6 = 3 + 3 + 9 + 12 = 27
    time_us, how = t.lookup("k", (1, 6, 7))
    assert how == "interpolated" and time_us == pytest.approx(27.0)
    # on an edge it is 1-D: a = 4, b = 6 -> 30*.4 + 80*.6 = 60; b = 0, a = 1 -> 10*.75 + 30*.25 = 15
    assert t.lookup("k", (4, 6, 7)) == (pytest.approx(60.0), "interpolated")
    assert t.lookup("k", (1, 0, 7)) == (pytest.approx(15.0), "interpolated")
    assert t.lookup("k", (1, 11, 7)) is None                        # outside the measured b range
    assert t.lookup("k", (1, 6, 8)) is None                         # fixed axis not matched


def test_missing_corner_gives_none():
    t = KernelTable()
    for (a, b), v in {(0, 0): 10.0, (4, 0): 30.0, (0, 10): 20.0}.items():   # (4, 10) never measured
        t.add("k", (a, b, 7), v)
    assert t.lookup("k", (1, 6, 7)) is None
    assert t.lookup("k", (1, 0, 7)) == (pytest.approx(15.0), "interpolated")   # the measured edge still works


def test_unrelated_point_does_not_displace_the_box():
    # a point at b = 50 has a = 2 between the box's a values; it is not on b = 0 or b = 10,
    # so the box stays a in {0, 4}, b in {0, 10} and the answer stays 27
    t = _grid_2d()
    t.add("k", (2, 50, 7), 1000.0)
    assert t.lookup("k", (1, 6, 7)) == (pytest.approx(27.0), "interpolated")
    # a point ON the box's b = 0 line at a = 2 does narrow the box: a in {0, 2} then needs (2, 10)
    t.add("k", (2, 0, 7), 18.0)
    assert t.lookup("k", (1, 6, 7)) is None


def test_trilinear_from_cube_corners():
    # v = 8a + 4b + 2c + 16abc on the unit cube's corners (v(1,1,1) = 30)
    t = KernelTable()
    for a in (0, 1):
        for b in (0, 1):
            for c in (0, 1):
                t.add("k", (a, b, c), 8 * a + 4 * b + 2 * c + 16 * a * b * c)
    # trilinear reproduces the abc term exactly: 4 + 1 + 1.5 + 16 * 0.5 * 0.25 * 0.75 = 8.0
    assert t.lookup("k", (0.5, 0.25, 0.75)) == (pytest.approx(8.0), "interpolated")
    assert t.lookup("k", (0.5, 0.25, 1.5)) is None                  # no extrapolation


def test_table_csv_round_trip(details, tmp_path):
    t = import_kernel_details(details, MAPPING)
    out = tmp_path / "table.csv"
    t.write(out)
    header = out.read_text().splitlines()[0]
    assert header == "kernel,key0,key1,key2,time_us,source_note"
    back = load_kernel_table(out)
    for k in t.kernels():
        assert back.points(k) == pytest.approx(t.points(k))
    assert "mean of 2" in out.read_text()


def test_parse_shapes_and_matmul_orientation():
    assert parse_shapes('"4096,6144;6144,2048;;"') == [(4096, 6144), (6144, 2048), (), ()]
    assert parse_shapes("") == []
    assert matmul_key([(2, 8, 64), (64, 32)], ["ND", "ND"]) == (16.0, 64.0, 32.0)
    assert matmul_key([(8, 64), (32, 64)], ["ND", "ND"]) == (8.0, 64.0, 32.0)


@pytest.mark.parametrize("content, needle", [
    ("Name,Type,Start Time(us)\nx,MatMulV2,1\n", "missing column(s) Duration(us), Input Shapes"),
    ("Type,Duration(us),Input Shapes\nMatMulV2,fast,\"4,8;8,2\"\n", "line 2 (MatMulV2): cannot read row"),
    ("Type,Duration(us),Input Shapes\nMatMulV2,1.0,\"4,x;8,2\"\n", "line 2 (MatMulV2): cannot read row"),
    ("Type,Duration(us),Input Shapes\nMatMulV2,1.0,\"4\"\n", "line 2 (MatMulV2)"),
])
def test_malformed_kernel_details(tmp_path, content, needle):
    p = tmp_path / "kd.csv"
    p.write_text(content)
    with pytest.raises(AuditInputError) as ei:
        import_kernel_details(p, {"MatMulV2": "mm"})
    msg = ei.value.one_line()
    assert str(p) in msg and needle in msg and "\n" not in msg


@pytest.mark.parametrize("content, needle", [
    ("kernel,time_us\nmm,1\n", "header must have kernel, key0"),
    ("kernel,key0,key1,time_us\nmm,1,,2\nmm,,3,4\n", "line 3: bad number"),
    ("# c\nkernel,key0,time_us\nmm,1,-2\n", "line 3: bad number"),
])
def test_malformed_table(tmp_path, content, needle):
    p = tmp_path / "t.csv"
    p.write_text(content)
    with pytest.raises(AuditInputError, match=needle):
        load_kernel_table(p)


def test_unknown_type_in_mapping(details):
    with pytest.raises(AuditInputError, match="no key function for kernel type 'Foo'"):
        import_kernel_details(details, {"Foo": "foo"})


def test_cli_import_and_lookup(details, tmp_path):
    out = tmp_path / "table.csv"
    r = CliRunner().invoke(kernels_group, ["import", str(details), "-o", str(out),
                                           "--map", "QuantBatchMatmulV3=mm"])
    assert r.exit_code == 0, r.output
    assert load_kernel_table(out).points("mm")[(16.0, 6144.0, 2048.0)] == 12.0
    r = CliRunner().invoke(kernels_group, ["lookup", str(out), "mm", "136,6144,2048"])
    assert r.exit_code == 0 and "32.000 us (interpolated)" in r.output
