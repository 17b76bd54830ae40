"""Hostile inputs at the reader level (issue 8): special files, caps, long names, nesting, empty
weight_map, sizes/dtypes/ranks against the installed safetensors library, duplicate keys.

Every refusal is one ``audit: error: <file>: <problem>`` line with exit 2, never a traceback or a
hang, and the model directory is left untouched. Where the library is the judge, the test asks
``safetensors.safe_open`` itself instead of writing its answer down.
"""
from __future__ import annotations

import json
import os
import re
import signal
import struct
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import pytest
from safetensors import safe_open
from safetensors.numpy import save_file

import auditor.inventory.fast as fast
from auditor.cli import main
from auditor.errors import AuditInputError
from auditor.inputs import CONFIG_CAP, CONFIG_MAX_DEPTH, DESCRIPTION_CAP, INDEX_CAP
from auditor.inventory.header import MAX_DEPTH, read_header
from auditor.dtypes import DTYPE_BITS
from conftest import unix_socket_at

CONFIG = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 128,
          "intermediate_size": 128, "torch_dtype": "bfloat16", "max_position_embeddings": 4096}


@contextmanager
def deadline(seconds: int = 20):
    """A hang is a failure, not a stuck CI job."""
    def boom(*_):
        raise TimeoutError(f"still running after {seconds} s (a hang)")
    old = signal.signal(signal.SIGALRM, boom)
    signal.alarm(seconds)
    try:
        yield
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)


def snapshot(root: Path) -> dict:
    return {str(p.relative_to(root)): (p.is_symlink(), os.lstat(p).st_size, os.lstat(p).st_mtime_ns)
            for p in sorted(root.rglob("*"))}


def write_st(path: Path, header: bytes | dict, data_len: int = 0) -> Path:
    raw = header if isinstance(header, bytes) else json.dumps(header, separators=(",", ":")).encode()
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(raw)) + raw)
        fh.truncate(8 + len(raw) + data_len)        # sparse zeros: big data costs no disk
    return path


def model_dir(d: Path, names=("a.weight", "b.weight")) -> Path:
    """config.json, two shards and their index."""
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text(json.dumps(CONFIG))
    wm = {}
    for k, name in enumerate(names):
        rel = f"model-0000{k + 1}-of-0000{len(names)}.safetensors"
        save_file({name: np.ones((4, 4), np.float32)}, str(d / rel))
        wm[name] = rel
    (d / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": wm}, indent=2))
    return d


def cli_error(args: list[str], capsys, where: Path | None = None) -> str:
    """Run the CLI in process; it must exit 2 with exactly one stderr line naming ``where``."""
    with deadline():
        code = main(args)
    err = capsys.readouterr().err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert code == 2, err
    assert len(lines) == 1 and lines[0].startswith("audit: error: "), err
    if where is not None:
        assert str(where) in lines[0], lines[0]
    return lines[0]


def cli_ok(args: list[str], capsys) -> str:
    with deadline(60):
        code = main(args)
    out, err = capsys.readouterr()
    assert code == 0, err
    return out


# ----------------------------------------------------------------------------- 1. special files

def _fifo(p: Path) -> None:
    os.mkfifo(p)


def _devzero(p: Path) -> None:
    os.symlink("/dev/zero", p)


def _socket(p: Path) -> None:
    unix_socket_at(p)


def _directory(p: Path) -> None:
    p.mkdir()


SPECIALS = {"fifo": (_fifo, "FIFO"), "dev-zero": (_devzero, "character device"),
            "socket": (_socket, "socket"), "directory": (_directory, "directory")}
ROLES = {
    "shard": lambda d: d / "model-00001-of-00002.safetensors",
    "extra-shard": lambda d: d / "zz.safetensors",
    "optional-shard": lambda d: d / "optional" / "quarot.safetensors",
    "index": lambda d: d / "model.safetensors.index.json",
    "config": lambda d: d / "config.json",
    "description": lambda d: d / "quant_model_description.json",
}


@pytest.mark.parametrize("kind", sorted(SPECIALS))
@pytest.mark.parametrize("role", sorted(ROLES))
def test_special_file_is_refused_by_name(role: str, kind: str, tmp_path: Path, capsys) -> None:
    d = model_dir(tmp_path / "m")
    target = ROLES[role](d)
    if target.exists():
        target.unlink()
    target.parent.mkdir(exist_ok=True)
    make, word = SPECIALS[kind]
    make(target)
    before = snapshot(d)
    for command in (["inventory", str(d)], ["memory", str(d)]):
        line = cli_error(command, capsys, where=target)
        if kind == "directory" and role in ("shard", "extra-shard", "optional-shard", "index"):
            assert "directory" in line
        else:
            assert word in line and "not a regular file" in line
    assert snapshot(d) == before


@pytest.mark.parametrize("what,cap,name", [("config", CONFIG_CAP, "config.json"),
                                           ("index", INDEX_CAP, "model.safetensors.index.json"),
                                           ("quant description", DESCRIPTION_CAP, "quant_model_description.json")])
def test_side_files_over_their_cap_are_refused(what: str, cap: int, name: str, tmp_path: Path, capsys) -> None:
    d = model_dir(tmp_path / "m")
    p = d / name
    p.touch()
    with open(p, "r+b") as fh:          # sparse: costs no disk
        fh.truncate(cap + 1)
    line = cli_error(["inventory", str(d)], capsys, where=p)
    assert f"{cap + 1:,} bytes, over the {cap >> 20} MiB cap" in line
    assert what in line


def test_side_file_at_its_cap_is_read(tmp_path: Path, capsys) -> None:
    d = model_dir(tmp_path / "m")
    p = d / "config.json"
    text = json.dumps(CONFIG).encode()
    p.write_bytes(text + b" " * (CONFIG_CAP - len(text)))
    assert os.path.getsize(p) == CONFIG_CAP
    cli_ok(["inventory", str(d)], capsys)


# ----------------------------------------------------------------------------- 2. long names

@pytest.mark.parametrize("length", [255, 256, 257, 258, 1000, 70_000])
def test_names_of_any_length_work(length: int, tmp_path: Path, capsys, monkeypatch) -> None:
    """A 257-byte name used to crash the name templates (unhashable bytearray)."""
    long = "model.layers.0.mlp." + "x" * (length - len("model.layers.0.mlp.") - len(".weight")) + ".weight"
    assert len(long.encode()) == length
    d = model_dir(tmp_path / "m", names=(long, "model.layers.1.mlp.down_proj.weight"))
    for mode in ("0", "1"):
        monkeypatch.setenv(fast.EXACT_ENV, mode)
        out = cli_ok(["inventory", str(d), "--by", "tensor", "--format", "json"], capsys)
        rows = json.loads(out)["tensor_rows"]
        assert long in {r["name"] for r in rows}
        cli_ok(["memory", str(d), "--format", "json"], capsys)


# ----------------------------------------------------------------------------- 3. nesting

def _with_member(depth: int) -> bytes:
    """One valid F32 tensor whose entry carries an extra member nested ``depth`` arrays deep
    (so the whole header nests depth + 2 levels)."""
    return (b'{"t":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":' + b"[" * depth + b"]" * depth + b"}}")


def _library(path: Path):
    try:
        with safe_open(str(path), "np") as f:
            return {k: (f.get_slice(k).get_dtype(), list(f.get_slice(k).get_shape())) for k in f.keys()}
    except Exception as exc:        # the library raises several types; any means "refused"
        return exc


@pytest.mark.parametrize("depth", [1, 100, MAX_DEPTH - 3, MAX_DEPTH - 2, MAX_DEPTH - 1, 200, 1_000, 5_000])
def test_header_nesting_matches_the_library(depth: int, tmp_path: Path) -> None:
    p = write_st(tmp_path / "n.safetensors", _with_member(depth), 4)
    lib = _library(p)
    try:
        ours = read_header(p)
    except AuditInputError as exc:
        assert isinstance(lib, Exception), f"we refuse ({exc}) what the library accepts"
        assert "nests deeper" in exc.problem or "not valid JSON" in exc.problem
    else:
        assert not isinstance(lib, Exception), f"we accept what the library refuses ({lib})"
        assert ours.names == ["t"]
    assert (depth + 2 <= MAX_DEPTH) == (not isinstance(lib, Exception))   # the limit is the library's


@pytest.mark.parametrize("depth", [CONFIG_MAX_DEPTH + 1, 1_000, 100_000])
def test_deep_config_is_refused_cleanly(depth: int, tmp_path: Path, capsys) -> None:
    d = model_dir(tmp_path / "m")
    cfg = json.dumps(CONFIG)[:-1] + ', "deep": ' + "[" * depth + "]" * depth + "}"
    (d / "config.json").write_text(cfg)
    line = cli_error(["inventory", str(d)], capsys, where=d / "config.json")
    assert f"nests {depth + 1} levels deep" in line


def test_config_at_the_depth_limit_is_read(tmp_path: Path, capsys) -> None:
    d = model_dir(tmp_path / "m")
    depth = CONFIG_MAX_DEPTH - 1                    # + the top-level object
    (d / "config.json").write_text(json.dumps(CONFIG)[:-1] + ', "deep": ' + "[" * depth + "]" * depth + "}")
    cli_ok(["inventory", str(d)], capsys)


# ----------------------------------------------------------------------------- 5. empty weight_map

@pytest.mark.parametrize("index", [
    '{"weight_map": {}}', '{"metadata": {"total_size": 0}, "weight_map": {}}',
    '{"a": "b", "weight_map": {}}', '{"metadata": {"x": "y"}, "weight_map": {}}',
    '{"weight_map": {}, "metadata": {}}', '{\n  "metadata": {},\n  "weight_map": {}\n}'])
def test_empty_weight_map_is_a_finding_not_a_crash(index: str, tmp_path: Path, capsys, monkeypatch) -> None:
    d = model_dir(tmp_path / "m")
    (d / "model.safetensors.index.json").write_text(index)
    for mode in ("0", "1"):
        monkeypatch.setenv(fast.EXACT_ENV, mode)
        fast.FAILED.clear()
        rep = json.loads(cli_ok(["inventory", str(d), "--format", "json"], capsys))
        assert rep["tensors"] == 2
        assert any("not referenced by" in f["message"] for f in rep["findings"])
        assert not fast.FAILED


# ----------------------------------------------------------------------------- 6. sizes, dtypes, ranks

def _entry(dtype: str, shape: list[int], nbytes: int) -> bytes:
    return json.dumps({"t": {"dtype": dtype, "shape": shape, "data_offsets": [0, nbytes]}},
                      separators=(",", ":")).encode()


def library_dtypes(tmp_path: Path) -> set[str]:
    """The dtype names the installed library knows, from its own error for an unknown one."""
    p = write_st(tmp_path / "probe.safetensors", _entry("NOT_A_DTYPE", [1], 1), 1)
    err = str(_library(p))
    listed = err.split("expected one of", 1)[1]
    return set(re.findall(r"`([A-Z0-9_]+)`", listed))


def test_dtype_table_is_the_library_set(tmp_path: Path) -> None:
    assert set(DTYPE_BITS) == library_dtypes(tmp_path)


@pytest.mark.parametrize("dtype", sorted(set(DTYPE_BITS) | {"I4", "U4", "C128", "F8_E4M3FN", "f32", "Q4_0"}))
def test_each_dtype_is_accepted_exactly_when_the_library_accepts_it(dtype: str, tmp_path: Path) -> None:
    bits = DTYPE_BITS.get(dtype, 8)
    n = 8                                           # 8 elements: whole bytes for every width
    p = write_st(tmp_path / "d.safetensors", _entry(dtype, [2, 4], n * bits // 8), n * bits // 8)
    lib = _library(p)
    try:
        ours = read_header(p)
    except AuditInputError as exc:
        assert isinstance(lib, Exception), f"{dtype}: we refuse ({exc.problem}), the library accepts"
        assert "unknown dtype" in exc.problem
    else:
        assert not isinstance(lib, Exception), f"{dtype}: we accept, the library refuses"
        assert lib["t"] == (dtype, [2, 4]) and ours.dtypes.tolist() == [dtype]


@pytest.mark.parametrize("shape", [[1] * 9, [2] * 12, [1] * 64 + [3], [3, 1, 1, 1, 1, 1, 1, 1, 1, 5], [0] * 20])
def test_ranks_over_eight_are_accepted_with_their_shape(shape: list[int], tmp_path: Path, capsys, monkeypatch) -> None:
    numel = int(np.prod(shape))
    d = model_dir(tmp_path / "m")
    p = write_st(d / "wide.safetensors", _entry("F32", shape, 4 * numel), 4 * numel)
    assert _library(p)["t"] == ("F32", shape)
    assert list(read_header(p).shape[0].prod(keepdims=True)) == [numel]     # element count kept
    for mode in ("0", "1"):
        monkeypatch.setenv(fast.EXACT_ENV, mode)
        rows = json.loads(cli_ok(["inventory", str(d), "--by", "tensor", "--format", "json"], capsys))["tensor_rows"]
        row = next(r for r in rows if r["name"] == "t")
        assert row["shape"] == shape and row["nbytes"] == 4 * numel
        text = cli_ok(["inventory", str(d), "--by", "tensor", "--format", "csv"], capsys)
        assert "x".join(map(str, shape)) in text


# (dtype, shape, offsets): what int64 arithmetic would wrap or the library's checked u64 refuses
SIZE_CASES = {
    "f32-2**61-as-0-bytes": ("F32", [2 ** 61], [0, 0]),
    "f32-2**62-as-0-bytes": ("F32", [2 ** 62], [0, 0]),
    "u8-2**32-squared-wraps": ("U8", [2 ** 32, 2 ** 32], [0, 0]),
    "bf16-2**63-elements": ("BF16", [2 ** 31, 2 ** 32], [0, 0]),
    "f64-wraps-to-4": ("F64", [2 ** 61 + 1, 1], [0, 8]),
    "overflow-before-a-zero": ("U8", [2 ** 40, 2 ** 40, 0], [0, 0]),
    "f4-numel-times-bits": ("F4", [2 ** 62], [0, 2 ** 61]),
    "zero-first-then-huge": ("U8", [0, 2 ** 62, 2 ** 62], [0, 0]),
    "zero-then-dim-2**63": ("U8", [0, 2 ** 63, 4], [0, 0]),
    "plain-big-but-honest": ("U8", [2 ** 20, 2 ** 10], [0, 2 ** 30]),
}


@pytest.mark.parametrize("name", sorted(SIZE_CASES))
def test_sizes_never_wrap_and_follow_the_library(name: str, tmp_path: Path) -> None:
    dtype, shape, off = SIZE_CASES[name]
    raw = json.dumps({"t": {"dtype": dtype, "shape": shape, "data_offsets": off}}, separators=(",", ":")).encode()
    data = off[1] if off[1] < 2 ** 31 else 0
    p = write_st(tmp_path / "s.safetensors", raw, data)
    lib = _library(p)
    try:
        ours = read_header(p)
    except AuditInputError as exc:
        documented = "2**63 or more" in exc.problem         # our int64 rule (documented)
        assert isinstance(lib, Exception) or documented, f"we refuse ({exc.problem}), the library accepts"
    else:
        assert not isinstance(lib, Exception), f"we accept, the library refuses: {lib}"
        numel = int(np.prod([int(x) for x in shape], dtype=object))
        assert int(ours.end[0] - ours.begin[0]) == numel * DTYPE_BITS[dtype] // 8   # no wrap


def test_wrapping_tensor_inside_a_real_checkpoint_is_refused(tmp_path: Path, capsys) -> None:
    d = model_dir(tmp_path / "m")
    p = write_st(d / "zz.safetensors", json.dumps({"w": {"dtype": "F32", "shape": [2 ** 61], "data_offsets": [0, 0]}}).encode())
    line = cli_error(["memory", str(d)], capsys, where=p)
    assert "overflows 64 bits" in line


# ----------------------------------------------------------------------------- 7. duplicate keys

_T = '{"dtype":"F32","shape":[1],"data_offsets":[0,4]}'
_T2 = '{"dtype":"F32","shape":[1],"data_offsets":[4,8]}'
DUPLICATES = {
    "plain": '{"b":' + _T + ',"b":' + _T2 + '}',
    "escaped-colons-elsewhere": '{"a\\u003a\\u003a\\u003a\\u003a":' + _T + ',"b":' + _T2 + ',"b":' + _T2 + '}',
    "escaped-name": '{"b":' + _T + ',"\\u0062":' + _T2 + '}',
    "escaped-metadata-colon": '{"__metadata__":{"k":"\\u003a"},"b":' + _T + ',"b":' + _T2 + '}',
    "metadata-key": '{"__metadata__":{"k":"a","k":"b"},"b":' + _T + '}',
    "metadata-twice": '{"__metadata__":{},"__metadata__":{},"b":' + _T + '}',
    "field": '{"b":{"dtype":"F32","dtype":"F32","shape":[1],"data_offsets":[0,4]}}',
    "inside-extra-member": '{"b":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":{"y":1,"y":2}}}',
    "escaped-field": '{"b":{"dtype":"F32","\\u0064type":"F32","shape":[1],"data_offsets":[0,4]}}',
}


@pytest.mark.parametrize("name", sorted(DUPLICATES))
def test_duplicate_keys_are_refused_in_every_spelling(name: str, tmp_path: Path, capsys, monkeypatch) -> None:
    """Our rule (docs/options.md, bad input): a key twice anywhere in a header is an error, though the library keeps
    the last tensor of a repeated name. Both scan modes agree."""
    d = model_dir(tmp_path / "m")
    (d / "model.safetensors.index.json").unlink()
    p = write_st(d / "dup.safetensors", DUPLICATES[name].encode(), 8)
    for mode in ("0", "1"):
        monkeypatch.setenv(fast.EXACT_ENV, mode)
        line = cli_error(["inventory", str(d)], capsys, where=p)
        assert "duplicate key" in line
