"""Damaged checkpoints: every failure is one clear AuditInputError naming the file, the CLI turns it
into one ``audit: error:`` line with exit code 2, and the model directory is never modified.

Each case builds a small model directory in tmp_path and returns (directory, offending file,
expected problem text, which loader should fail).
"""
from __future__ import annotations

import json
import os
import struct
from pathlib import Path
from typing import Callable

import numpy as np
import pytest
from safetensors.numpy import save_file

from auditor.errors import AuditInputError
from auditor.inventory.quantdesc import load_quant_description
from auditor.inventory.scan import scan_model_dir
from auditor.model.config import load_spec

VALID_CONFIG = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 128,
                "intermediate_size": 128, "torch_dtype": "bfloat16"}


def raw_st(path: Path, header, data: bytes | int = 0, n_override: int | None = None) -> Path:
    """A safetensors file written byte by byte, so it can be wrong in exactly one way."""
    hb = header if isinstance(header, bytes) else json.dumps(header).encode()
    body = bytes(data) if isinstance(data, int) else data
    n = len(hb) if n_override is None else n_override
    path.write_bytes(struct.pack("<Q", n) + hb + body)
    return path


def good_dir(d: Path) -> Path:
    """A valid little model directory the cases then damage."""
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text(json.dumps(VALID_CONFIG))
    save_file({"a.weight": np.ones((4, 4), np.float32)}, str(d / "model-00001-of-00002.safetensors"))
    save_file({"b.weight": np.ones((2, 8), np.int8)}, str(d / "model-00002-of-00002.safetensors"))
    return d


def F(name: str, dtype: str = "F32", shape=(3,), offsets=(0, 12)) -> dict:
    return {name: {"dtype": dtype, "shape": list(shape), "data_offsets": list(offsets)}}


# ---------------------------------------------------------------------------- cases
Case = tuple[Path, Path, str, str]


def case_truncated(d: Path) -> Case:
    good_dir(d)
    p = d / "model-00001-of-00002.safetensors"
    data = p.read_bytes()
    p.write_bytes(data[:-10])
    return d, p, "file is truncated", "scan"


def case_header_len_past_eof(d: Path) -> Case:
    good_dir(d)
    p = raw_st(d / "model-00003.safetensors", F("x"), 12, n_override=12345678)
    return d, p, "header length 12345678 is past the end of the file", "scan"


def case_header_len_over_cap(d: Path) -> Case:
    good_dir(d)
    p = raw_st(d / "model-00003.safetensors", F("x"), 12, n_override=2 ** 40)
    return d, p, "exceeds the safetensors limit of 100000000 bytes", "scan"


def case_too_short(d: Path) -> Case:
    good_dir(d)
    p = d / "tiny.safetensors"
    p.write_bytes(b"\x01\x02\x03")
    return d, p, "too short", "scan"


def case_not_json(d: Path) -> Case:
    good_dir(d)
    p = raw_st(d / "model-00003.safetensors", b'{"x": {"dtype": "F32",, }', 0)
    return d, p, "header is not valid JSON", "scan"


def case_not_utf8(d: Path) -> Case:
    good_dir(d)
    p = raw_st(d / "model-00003.safetensors", b'{"x\xff\xfe": {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]}}')
    return d, p, "header is not valid UTF-8", "scan"


def case_header_is_list(d: Path) -> Case:
    good_dir(d)
    p = raw_st(d / "model-00003.safetensors", [F("x")], 12)
    return d, p, "header is a JSON array, not an object", "scan"


def case_overlap(d: Path) -> Case:
    good_dir(d)
    p = raw_st(d / "model-00003.safetensors", {**F("x", offsets=(0, 12)), **F("y", offsets=(8, 20))}, 20)
    return d, p, "tensors 'x' and 'y' overlap", "scan"


def case_gap(d: Path) -> Case:
    good_dir(d)
    p = raw_st(d / "model-00003.safetensors", {**F("x", offsets=(0, 12)), **F("y", offsets=(16, 28))}, 28)
    return d, p, "gap of 4 bytes between tensors 'x'", "scan"


def case_offsets_out_of_bounds(d: Path) -> Case:
    good_dir(d)
    p = raw_st(d / "model-00003.safetensors", {**F("x", offsets=(0, 12)), **F("y", offsets=(12, 24))}, 12)
    return d, p, "file is truncated: tensor data ends at byte", "scan"


def case_trailing_bytes(d: Path) -> Case:
    good_dir(d)
    p = raw_st(d / "model-00003.safetensors", F("x"), 20)
    return d, p, "8 unexpected trailing bytes", "scan"


def case_unknown_dtype(d: Path) -> Case:
    good_dir(d)
    p = raw_st(d / "model-00003.safetensors", F("x", dtype="Q7"), 12)
    return d, p, "tensor 'x': unknown dtype 'Q7'", "scan"


def case_bytes_mismatch(d: Path) -> Case:
    good_dir(d)
    p = raw_st(d / "model-00003.safetensors", F("x", offsets=(0, 10)), 10)
    return d, p, "tensor 'x': data_offsets [0, 10] (10 bytes) do not match dtype F32 x shape [3] = 12 bytes", "scan"


def case_negative_dim(d: Path) -> Case:
    good_dir(d)
    p = raw_st(d / "model-00003.safetensors", F("x", shape=(-3,)), 12)
    return d, p, "tensor 'x': shape [-3] is not a list of non-negative integers", "scan"


def case_metadata_not_strings(d: Path) -> Case:
    good_dir(d)
    p = raw_st(d / "model-00003.safetensors", {"__metadata__": {"format": 1}, **F("x")}, 12)
    return d, p, "'__metadata__' value for 'format' is a JSON number", "scan"


def case_duplicate_key_in_header(d: Path) -> Case:
    good_dir(d)
    hb = (b'{"x": {"dtype": "F32", "shape": [3], "data_offsets": [0, 12]}, '
          b'"x": {"dtype": "F32", "shape": [3], "data_offsets": [12, 24]}}')
    p = raw_st(d / "model-00003.safetensors", hb, 24)
    return d, p, "duplicate key 'x' in header", "scan"


def case_duplicate_across_shards(d: Path) -> Case:
    good_dir(d)
    save_file({"a.weight": np.ones((4, 4), np.float32)}, str(d / "model-00003.safetensors"))
    # the message names both files: the later one as the location, the earlier one in the text
    return d, d / "model-00003.safetensors", f"tensor 'a.weight' is also stored in '{d / 'model-00001-of-00002.safetensors'}'", "scan"


def case_bool_in_shape(d: Path) -> Case:
    good_dir(d)
    p = raw_st(d / "model-00003.safetensors", {"x": {"dtype": "F32", "shape": [True], "data_offsets": [0, 4]}}, 4)
    return d, p, "tensor 'x': shape [true] is not a list of non-negative integers", "scan"


def case_float_offsets(d: Path) -> Case:
    good_dir(d)
    p = raw_st(d / "model-00003.safetensors", {"x": {"dtype": "F32", "shape": [1], "data_offsets": [0, 4.0]}}, 4)
    return d, p, "tensor 'x': data_offsets [0, 4.0] must be two non-negative integers", "scan"


def case_duplicate_key_non_object_first(d: Path) -> Case:
    """The dropped duplicate carries no '"dtype"' at all: only the ':' count can notice it."""
    good_dir(d)
    hb = b'{"x": 5, "x": {"dtype": "F32", "shape": [3], "data_offsets": [0, 12]}}'
    p = raw_st(d / "model-00003.safetensors", hb, 12)
    return d, p, "duplicate key 'x' in header", "scan"


def case_duplicate_across_shards_with_index(d: Path) -> Case:
    good_dir(d)
    save_file({"a.weight": np.ones((4, 4), np.float32)}, str(d / "model-00003.safetensors"))
    _index(d, {"a.weight": "model-00001-of-00002.safetensors", "b.weight": "model-00002-of-00002.safetensors"})
    return d, d / "model-00003.safetensors", "tensor 'a.weight' is also stored in", "scan"


def case_duplicate_key_in_canonical_header_with_index(d: Path) -> Case:
    """Canonical bytes (the fast parser takes them) and a plain index that lists every name:
    the index check must not stand in for the duplicate-key rule."""
    good_dir(d)
    hb = (b'{"x":{"dtype":"F32","shape":[3],"data_offsets":[0,12]},'
          b'"x":{"dtype":"F32","shape":[3],"data_offsets":[12,24]}}')
    p = raw_st(d / "model-00003.safetensors", hb, 24)
    _index(d, {"a.weight": "model-00001-of-00002.safetensors", "b.weight": "model-00002-of-00002.safetensors",
               "x": "model-00003.safetensors"})
    return d, p, "duplicate key 'x' in header", "scan"


def _index(d: Path, weight_map) -> Path:
    p = d / "model.safetensors.index.json"
    p.write_text(json.dumps({"metadata": {}, "weight_map": weight_map}))
    return p


def case_index_missing_shard(d: Path) -> Case:
    good_dir(d)
    p = _index(d, {"a.weight": "model-00001-of-00002.safetensors", "b.weight": "model-00002-of-00002.safetensors",
                   "c.weight": "model-00009-of-00009.safetensors"})
    return d, p, "weight_map shard 'model-00009-of-00009.safetensors' (tensor 'c.weight') does not exist", "scan"


def case_index_escapes_dir(d: Path) -> Case:
    good_dir(d)
    save_file({"c.weight": np.ones(2, np.float32)}, str(d.parent / "x.safetensors"))   # it exists, still refused
    p = _index(d, {"a.weight": "model-00001-of-00002.safetensors", "c.weight": "../x.safetensors"})
    return d, p, "points outside the model directory: '../x.safetensors'", "scan"


def case_index_absolute_path(d: Path) -> Case:
    good_dir(d)
    p = _index(d, {"a.weight": str(d / "model-00001-of-00002.safetensors")})
    return d, p, "points outside the model directory", "scan"


def case_index_not_json(d: Path) -> Case:
    good_dir(d)
    p = d / "model.safetensors.index.json"
    p.write_text('{"weight_map": {"a.weight": ')
    return d, p, "index is not valid JSON", "scan"


def case_index_weight_map_not_object(d: Path) -> Case:
    good_dir(d)
    p = d / "model.safetensors.index.json"
    p.write_text(json.dumps({"weight_map": ["model-00001-of-00002.safetensors"]}))
    return d, p, "'weight_map' is not a JSON object", "scan"


def case_shard_is_directory(d: Path) -> Case:
    good_dir(d)
    p = d / "x.safetensors"
    p.mkdir()
    return d, p, "is a directory", "scan"


def case_shard_broken_symlink(d: Path) -> Case:
    good_dir(d)
    p = d / "model-00003.safetensors"
    os.symlink(d.parent / "blobs" / "does-not-exist", p)
    return d, p, "cannot read shard: is a broken symlink", "scan"


def case_quantdesc_not_object(d: Path) -> Case:
    good_dir(d)
    p = d / "quant_model_description.json"
    p.write_text('["W8A8"]')
    return d, p, "quant description is not a JSON object", "quantdesc"


def case_quantdesc_not_json(d: Path) -> Case:
    good_dir(d)
    p = d / "quant_model_description.json"
    p.write_text('{"a.weight": W8A8}')
    return d, p, "quant description is not valid JSON", "quantdesc"


def case_config_missing_keys(d: Path) -> Case:
    good_dir(d)
    p = d / "config.json"
    p.write_text(json.dumps({k: v for k, v in VALID_CONFIG.items() if k != "hidden_size"}))
    return d, p, "missing required key 'hidden_size'", "config"


CASES: dict[str, Callable[[Path], Case]] = {
    name[len("case_"):]: fn for name, fn in sorted(globals().items()) if name.startswith("case_")
}


def build(name: str, tmp_path: Path) -> Case:
    return CASES[name](tmp_path / "model")


def run_loader(kind: str, d: Path, offending: Path) -> None:
    if kind == "scan":
        scan_model_dir(d, progress=False)
    elif kind == "quantdesc":
        load_quant_description(offending)
    else:
        load_spec(offending)


def test_case_count() -> None:
    assert len(CASES) >= 15


@pytest.mark.parametrize("name", sorted(CASES))
def test_library_error(name: str, tmp_path: Path, snapshot) -> None:
    d, offending, problem, kind = build(name, tmp_path)
    before = snapshot(tmp_path)
    with pytest.raises(AuditInputError) as info:
        run_loader(kind, d, offending)
    err = info.value
    assert err.where == str(offending)
    assert problem in err.problem
    line = err.one_line()
    assert "\n" not in line and line.startswith(str(offending))
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("name", sorted(CASES))
def test_cli_inventory_error(name: str, tmp_path: Path, snapshot, capsys) -> None:
    from auditor.cli import main

    d, offending, problem, _ = build(name, tmp_path)
    before = snapshot(tmp_path)
    rc = main(["inventory", str(d)])
    out, err = capsys.readouterr()
    assert rc == 2, (out, err)
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("audit: error:")
    assert offending.name in lines[0] and problem in lines[0]
    assert "Traceback" not in out + err
    assert snapshot(tmp_path) == before


def test_valid_base_directory_scans_clean(tmp_path: Path) -> None:
    """The undamaged base really is valid, so each case fails because of its one defect."""
    d = good_dir(tmp_path / "model")
    res = scan_model_dir(d)
    assert sorted(res.table.name) == ["a.weight", "b.weight"]
    assert load_spec(d / "config.json").H == 64
