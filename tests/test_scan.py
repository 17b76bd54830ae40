"""The checkpoint scanner against files written by the real safetensors library.

Ground truth comes from two independent sources: ``safetensors.safe_open`` (the library the
engine uses) and a deliberately naive reference parser below (struct + json + Python loops),
plus the tensor bytes themselves (reading [begin, end) must give back the saved array).
"""
from __future__ import annotations

import io
import json
import os
import struct
from pathlib import Path

import numpy as np
import pytest
from safetensors import safe_open
from safetensors.numpy import save_file

from auditor.inventory.header import read_header
from auditor.inventory.progress import ProgressLine, want_progress
from auditor.inventory.quantdesc import QuantDescription, load_quant_description
from auditor.inventory.scan import scan_model_dir

NP_TO_ST = {"float64": "F64", "float32": "F32", "float16": "F16", "int64": "I64", "int32": "I32",
            "int16": "I16", "int8": "I8", "uint8": "U8", "uint16": "U16", "uint32": "U32",
            "uint64": "U64", "bool": "BOOL"}


def reference_parse(path: Path) -> dict[str, tuple[str, list[int], int, int]]:
    """name -> (dtype, shape, abs_begin, abs_end), the obvious way."""
    with open(path, "rb") as fh:
        (n,) = struct.unpack("<Q", fh.read(8))
        header = json.loads(fh.read(n).decode("utf-8"))
    header.pop("__metadata__", None)
    return {k: (v["dtype"], list(v["shape"]), 8 + n + v["data_offsets"][0], 8 + n + v["data_offsets"][1])
            for k, v in header.items()}


def table_rows(table) -> dict[str, tuple[str, list[int], int, int, str, bool]]:
    return {r["name"]: (r["dtype"], r["shape"], r["data_offsets"][0], r["data_offsets"][1], r["file"], r["loaded"])
            for r in (table.row(i) for i in range(len(table)))}


def assert_matches_safe_open(model_dir: Path, table) -> None:
    """Every row agrees with safe_open and the reference parser; every listed file is covered."""
    rows = table_rows(table)
    seen = set()
    for rel in table.files:
        path = model_dir / rel
        ref = reference_parse(path)
        with safe_open(str(path), framework="numpy") as f:
            keys = list(f.keys())
            assert sorted(keys) == sorted(ref)
            for k in keys:
                sl = f.get_slice(k)
                dt, shp, b, e, file, _ = rows[k]
                assert file == rel
                assert dt == sl.get_dtype() == ref[k][0]
                assert shp == list(sl.get_shape()) == ref[k][1]
                assert (b, e) == (ref[k][2], ref[k][3])
                seen.add(k)
    assert seen == set(rows)
    assert len(rows) == len(table)   # no duplicate names hidden by the dict


def mixed_tensors(rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {
        "a.f32": rng.standard_normal((3, 5)).astype(np.float32),
        "a.f16": rng.standard_normal((7,)).astype(np.float16),
        "b.f64": rng.standard_normal((2, 2, 2)).astype(np.float64),
        "c.i8": rng.integers(-128, 127, (4, 6), dtype=np.int8),
        "c.i32": rng.integers(0, 1000, (9,), dtype=np.int32),
        "d.u8": rng.integers(0, 255, (1, 1, 1, 3), dtype=np.uint8),
        "d.bool": rng.integers(0, 2, (5,)).astype(bool),
        "e.i64": rng.integers(0, 10, (2, 3), dtype=np.int64),
        "e.u16": rng.integers(0, 10, (6,), dtype=np.uint16),
        "scalar": np.array(3.5, dtype=np.float32),
        "empty": np.zeros((0, 4), dtype=np.float32),
    }


def test_single_file_matches_library_and_bytes(tmp_path: Path) -> None:
    rng = np.random.default_rng(0)
    tensors = mixed_tensors(rng)
    save_file(tensors, str(tmp_path / "model.safetensors"), metadata={"format": "np"})
    res = scan_model_dir(tmp_path)
    t = res.table
    assert res.shard_files == ["model.safetensors"] and res.index_path is None and res.index_findings == []
    assert len(t) == len(tensors)
    assert_matches_safe_open(tmp_path, t)
    raw = (tmp_path / "model.safetensors").read_bytes()
    for i in range(len(t)):
        name = str(t.name[i])
        arr = tensors[name]
        assert t.dtype[i] == NP_TO_ST[arr.dtype.name]
        assert t.shape_of(i) == arr.shape
        assert int(t.nbytes[i]) == arr.nbytes
        assert int(t.numel[i]) == arr.size
        # absolute offsets point at exactly the saved bytes
        assert raw[int(t.begin[i]):int(t.end[i])] == np.ascontiguousarray(arr).tobytes()
    assert t.loaded.all()
    assert int(t.end.max()) == len(raw)
    assert t.shape.shape == (len(t), 8) and t.shape.dtype == np.int64
    assert read_header(tmp_path / "model.safetensors").metadata == {"format": "np"}


def test_unused_dims_are_one_and_ndim_kept(tmp_path: Path) -> None:
    save_file({"x": np.zeros((2, 3, 4), np.float32), "s": np.zeros((), np.int8)}, str(tmp_path / "m.safetensors"))
    t = scan_model_dir(tmp_path).table
    i = list(t.name).index("x")
    j = list(t.name).index("s")
    assert int(t.ndim[i]) == 3 and t.shape[i].tolist() == [2, 3, 4, 1, 1, 1, 1, 1]
    assert int(t.ndim[j]) == 0 and t.shape_of(j) == () and int(t.numel[j]) == 1


def _write_index(model_dir: Path, weight_map: dict[str, str], name: str = "model.safetensors.index.json") -> Path:
    p = model_dir / name
    p.write_text(json.dumps({"metadata": {"total_size": 0}, "weight_map": weight_map}))
    return p


def _three_shards(model_dir: Path, rng: np.random.Generator, root: Path | None = None) -> dict[str, str]:
    """Three shards with distinct tensors, written into ``root`` (default: the model dir)."""
    root = root or model_dir
    wm = {}
    for s in range(3):
        rel = f"model-{s + 1:05d}-of-00003.safetensors"
        tensors = {f"layers.{s}.w{j}": rng.standard_normal((s + 2, j + 1)).astype(np.float32) for j in range(4)}
        save_file(tensors, str(root / rel))
        wm.update({k: rel for k in tensors})
    return wm


def test_multi_shard_with_index(tmp_path: Path, snapshot) -> None:
    wm = _three_shards(tmp_path, np.random.default_rng(1))
    ip = _write_index(tmp_path, wm)
    (tmp_path / "config.json").write_text("{}")
    before = snapshot(tmp_path)
    res = scan_model_dir(tmp_path)
    assert snapshot(tmp_path) == before
    assert res.index_path == ip and res.index_findings == []
    assert res.config_path == tmp_path / "config.json" and res.quant_desc_path is None
    assert res.shard_files == sorted(set(wm.values())) == res.table.files
    assert len(res.table) == 12
    assert_matches_safe_open(tmp_path, res.table)
    assert {r[0]: r[1][4] for r in table_rows(res.table).items()} == wm


def test_symlinked_shards_read_through_links(tmp_path: Path) -> None:
    blobs = tmp_path / "blobs"
    snap_dir = tmp_path / "snapshot"
    blobs.mkdir()
    snap_dir.mkdir()
    wm = _three_shards(snap_dir, np.random.default_rng(2), root=blobs)
    for rel in set(wm.values()):
        os.symlink(blobs / rel, snap_dir / rel)   # absolute target outside the model dir: fine
    _write_index(snap_dir, wm)
    res = scan_model_dir(snap_dir)
    assert all((snap_dir / f).is_symlink() for f in res.table.files)
    assert res.table.files == sorted(set(wm.values()))
    assert len(res.table) == 12 and res.index_findings == []
    assert_matches_safe_open(snap_dir, res.table)


def test_rot_and_optional_are_inventoried_not_loaded(tmp_path: Path) -> None:
    save_file({"w": np.zeros((4, 4), np.int8)}, str(tmp_path / "quant_model_weights-00001-of-00001.safetensors"))
    save_file({"rot.weight": np.zeros((4, 4), np.float32)}, str(tmp_path / "rot.safetensors"))
    (tmp_path / "optional").mkdir()
    save_file({"global_rotation": np.zeros((4, 4), np.float32)}, str(tmp_path / "optional" / "quarot.safetensors"))
    _write_index(tmp_path, {"w": "quant_model_weights-00001-of-00001.safetensors", "rot.weight": "rot.safetensors"},
                 name="quant_model_weights.safetensors.index.json")
    res = scan_model_dir(tmp_path)
    rows = table_rows(res.table)
    assert {k: v[4:] for k, v in rows.items()} == {
        "w": ("quant_model_weights-00001-of-00001.safetensors", True),
        "rot.weight": ("rot.safetensors", False),
        "global_rotation": ("optional/quarot.safetensors", False),
    }
    assert res.index_path.name == "quant_model_weights.safetensors.index.json"
    # optional/ is out of the index by design: an info note, not a warning
    assert [(s, f) for s, f, _ in res.index_findings] == [("info", "optional/quarot.safetensors")]
    assert_matches_safe_open(tmp_path, res.table)


def test_index_cross_check_findings(tmp_path: Path) -> None:
    wm = _three_shards(tmp_path, np.random.default_rng(3))
    shard1, shard2 = sorted(set(wm.values()))[:2]
    bad = dict(wm)
    del bad["layers.0.w0"]                       # stored but not listed
    bad["ghost.weight"] = shard1                 # listed but stored nowhere
    bad["layers.1.w0"] = shard1                  # listed under the wrong shard (really in shard2)
    save_file({"extra.a": np.zeros(2, np.float32), "extra.b": np.zeros(3, np.float32)},
              str(tmp_path / "stray.safetensors"))   # a whole shard the index never mentions
    _write_index(tmp_path, bad)
    res = scan_model_dir(tmp_path)
    got = {(sev, what): msg for sev, what, msg in res.index_findings}
    assert set(got) == {("warning", "ghost.weight"), ("warning", "layers.1.w0"), ("warning", "layers.0.w0"),
                        ("warning", "stray.safetensors")}
    assert "stored in no shard" in got[("warning", "ghost.weight")]
    assert shard1 in got[("warning", "layers.1.w0")] and shard2 in got[("warning", "layers.1.w0")]
    assert "not listed" in got[("warning", "layers.0.w0")]
    assert "2 tensor(s)" in got[("warning", "stray.safetensors")]
    assert len(res.table) == 14   # the scanner still inventories everything


def test_many_index_disagreements_are_capped(tmp_path: Path) -> None:
    save_file({f"t{i}": np.zeros(1, np.int8) for i in range(50)}, str(tmp_path / "a.safetensors"))
    _write_index(tmp_path, {f"t{i}": "a.safetensors" for i in range(5)})   # 45 stored but unlisted
    findings = scan_model_dir(tmp_path).index_findings
    assert len(findings) == 21
    assert "25 more" in findings[-1][2] or "25 more" in findings[-1][1]


def test_empty_and_config_only_directories(tmp_path: Path) -> None:
    res = scan_model_dir(tmp_path)
    assert len(res.table) == 0 and res.table.files == [] and res.shard_files == []
    assert res.config_path is None and res.index_path is None
    (tmp_path / "config.json").write_text("{}")
    (tmp_path / "quant_model_description.json").write_text("{}")
    res = scan_model_dir(tmp_path)
    assert len(res.table) == 0
    assert res.config_path == tmp_path / "config.json"
    assert res.quant_desc_path == tmp_path / "quant_model_description.json"


def test_hand_built_subbyte_and_fp8_dtypes_agree_with_library(tmp_path: Path) -> None:
    """F4 (two per byte) and F8_E8M0 headers written by hand, accepted by safe_open too."""
    header = {"q": {"dtype": "F4", "shape": [2, 4], "data_offsets": [0, 4]},
              "s": {"dtype": "F8_E8M0", "shape": [3], "data_offsets": [4, 7]}}
    raw = json.dumps(header).encode()
    path = tmp_path / "m.safetensors"
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + bytes(7))
    t = scan_model_dir(tmp_path).table
    assert_matches_safe_open(tmp_path, t)
    rows = table_rows(t)
    assert rows["q"][:2] == ("F4", [2, 4]) and rows["q"][3] - rows["q"][2] == 4


def test_progress_line_and_policy() -> None:
    buf = io.StringIO()
    with ProgressLine(3, stream=buf, min_interval=0.0) as bar:
        for _ in range(3):
            bar.update(1_500_000)
    text = buf.getvalue()
    assert "3/3 files 4.5 MB" in text and "\n" not in text
    assert text.endswith("\r")          # line erased at the end
    assert want_progress(True, 1) and not want_progress(False, 100)
    assert not want_progress(None, 100, stream=io.StringIO())   # not a terminal

    class Tty(io.StringIO):
        def isatty(self) -> bool:
            return True

    assert want_progress(None, 100, stream=Tty()) and not want_progress(None, 8, stream=Tty())


def test_quant_description_split(tmp_path: Path) -> None:
    p = tmp_path / "quant_model_description.json"
    p.write_text(json.dumps({"version": "1.0.0", "group_size": 0, "is_rot_used": True,
                             "optional": {"quarot": {}}, "a.weight": "W8A8", "a.deq_scale": "W8A8",
                             "b.weight": 3}))
    q = load_quant_description(p)
    assert q.per_tensor == {"a.weight": "W8A8", "a.deq_scale": "W8A8"}
    assert q.globals == {"version": "1.0.0", "group_size": 0, "is_rot_used": True, "optional": {"quarot": {}}}
    assert [(s, k) for s, k, _ in q.findings] == [("warning", "b.weight")]
    # globals are recognized by name, so a string-valued global never becomes a tensor scheme
    q2 = QuantDescription.from_dict({"kv_cache_type": "C8", "fa_quant_type": "FAKQuant", "x.weight": "FLOAT"})
    assert q2.per_tensor == {"x.weight": "FLOAT"} and set(q2.globals) == {"kv_cache_type", "fa_quant_type"}


# --------------------------------------------------------------------------- real checkpoints

def test_shared_bf16_checkpoint(shared_dir: Path) -> None:
    d = shared_dir / "data" / "checkpoints" / "glm5-tiny-bf16"
    res = scan_model_dir(d)
    t = res.table
    assert len(t) == 149    # PROVENANCE.md; also 14+57+73+5 per-shard keys from safe_open below
    assert_matches_safe_open(d, t)
    assert res.index_findings == [] and res.index_path.name == "model.safetensors.index.json"
    assert len(res.shard_files) == 4 and t.loaded.all()
    index = json.loads((d / "model.safetensors.index.json").read_text())
    assert {n: v[4] for n, v in table_rows(t).items()} == index["weight_map"]
    assert int(t.nbytes.sum()) == index["metadata"]["total_size"]
    dtypes = dict(zip(t.name, t.dtype))
    assert {n for n, dt in dtypes.items() if dt != "BF16"} == {n for n in dtypes if n.endswith("e_score_correction_bias")}
    assert not any(str(n).startswith("model.layers.4.") for n in t.name)   # transformers writes no MTP


def test_shared_w8a8_checkpoint(shared_dir: Path) -> None:
    d = shared_dir / "data" / "checkpoints" / "glm5-tiny-w8a8"
    res = scan_model_dir(d)
    t = res.table
    assert len(t) == 448    # PROVENANCE.md: 446 quantized-model tensors + rot.weight + global_rotation
    assert_matches_safe_open(d, t)
    rows = table_rows(t)
    assert rows["rot.weight"][4:] == ("rot.safetensors", False)
    assert rows["global_rotation"][4:] == ("optional/quarot.safetensors", False)
    assert int(t.loaded.sum()) == 446
    index = json.loads((d / "quant_model_weights.safetensors.index.json").read_text())
    assert len(index["weight_map"]) == 447 and "rot.weight" in index["weight_map"]
    assert [(s, f) for s, f, _ in res.index_findings] == [("info", "optional/quarot.safetensors")]
    assert res.quant_desc_path == d / "quant_model_description.json"
    q = load_quant_description(res.quant_desc_path)
    loaded_names = {str(n) for n, ld in zip(t.name, t.loaded) if ld}
    assert set(q.per_tensor) == loaded_names          # description covers exactly the loaded tensors
    assert q.globals["is_rot_used"] is True and q.findings == []
    # msModelSlim's total_size counts the quantized model, not QuaRot's rot.weight
    assert int(t.nbytes[t.loaded].sum()) == index["metadata"]["total_size"]


def test_library_tolerances_are_matched(tmp_path: Path) -> None:
    """Things safe_open accepts must scan too: extra entry keys, ':' in names and metadata,
    whitespace before the JSON, a header with no tensors."""
    header = {"__metadata__": {"note": "a:b:c", "k:1": "v"},
              "ns:x": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8], "extra": {"deep": [1, 2.5]}},
              "y": {"dtype": "I8", "shape": [3], "data_offsets": [8, 11]}}
    raw = b"   " + json.dumps(header).encode()
    (tmp_path / "a.safetensors").write_bytes(struct.pack("<Q", len(raw)) + raw + bytes(11))
    raw2 = b"{}      "
    (tmp_path / "b.safetensors").write_bytes(struct.pack("<Q", len(raw2)) + raw2)
    res = scan_model_dir(tmp_path)
    assert_matches_safe_open(tmp_path, res.table)
    assert table_rows(res.table)["ns:x"][:4] == ("F32", [2], 8 + len(raw), 16 + len(raw))
    assert read_header(tmp_path / "a.safetensors").metadata == {"note": "a:b:c", "k:1": "v"}
    assert len(read_header(tmp_path / "b.safetensors")) == 0


def test_index_paths_normalized_and_multiple_indexes_merged(tmp_path: Path) -> None:
    wm = _three_shards(tmp_path, np.random.default_rng(4))
    _write_index(tmp_path, {k: "./" + v for k, v in wm.items()})
    res = scan_model_dir(tmp_path)
    assert res.index_findings == []          # './x' is the same file as 'x'
    _write_index(tmp_path, wm, name="other.safetensors.index.json")
    res = scan_model_dir(tmp_path)
    assert [(s, f) for s, f, _ in res.index_findings] == [("warning", "model.safetensors.index.json")]
    assert "2 index files" in res.index_findings[0][2]


def test_optional_tensor_listed_in_index_takes_the_exact_path(tmp_path: Path) -> None:
    save_file({"w": np.zeros(4, np.int8)}, str(tmp_path / "model.safetensors"))
    (tmp_path / "optional").mkdir()
    save_file({"g": np.zeros(4, np.float32)}, str(tmp_path / "optional" / "quarot.safetensors"))
    _write_index(tmp_path, {"w": "model.safetensors", "g": "optional/quarot.safetensors"})
    res = scan_model_dir(tmp_path)
    assert res.index_findings == []          # listed where it is stored: nothing to report
    assert table_rows(res.table)["g"][4:] == ("optional/quarot.safetensors", False)


def test_scan_restores_gc_state(tmp_path: Path) -> None:
    import gc

    save_file({"w": np.zeros(4, np.int8)}, str(tmp_path / "model.safetensors"))
    assert gc.isenabled()
    scan_model_dir(tmp_path)
    assert gc.isenabled()
    (tmp_path / "bad.safetensors").write_bytes(b"\x00" * 4)
    with pytest.raises(Exception):
        scan_model_dir(tmp_path)
    assert gc.isenabled()
