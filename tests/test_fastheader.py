"""The vectorised header/index parser against the orjson path it stands in for.

Ground truth is ``header.entries_from_raw`` (orjson + per-entry validation) and ``orjson.loads``;
every generated header is parsed both ways and must give identical columns, and every
non-canonical one must be refused by the fast path (None) yet still parse through the fallback.
"""
from __future__ import annotations

import json
import random
import struct
from pathlib import Path

import numpy as np
import orjson
import pytest
from safetensors.numpy import save_file

from auditor.inventory.fast.header import parse_entries, split_header
from auditor.inventory.fast.jsonspans import parse_index
from auditor.inventory.header import DTYPE_BITS, DTYPE_NAMES, read_header
from auditor.inventory.scan import scan_model_dir
from auditor.inventory.shards import read_headers
from auditor.inventory.table import TensorTable

NAME_PARTS = ["model", "layers", "0", "17", "245", "mlp", "experts", "w13", "fp8", "ß", "名前", "x" * 40,
              "weight", "weight_scale", "q_a_proj", "007", "a:b", "{}", "é"]


# dtype names the fast parser matches as one 8-byte word; longer ones (F8_E4M3FNUZ) go exact
ONE_WORD_DTYPES = [d for d in DTYPE_NAMES if len(d) <= 8]


def random_entries(rng: random.Random, n: int) -> dict:
    """n tensors with sizes that tile the data buffer, in a shuffled header order."""
    names = set()
    while len(names) < n:
        names.add(".".join(rng.choice(NAME_PARTS) for _ in range(rng.randint(1, 6))))
    entries = {}
    offset = 0
    for name in sorted(names):
        dt = rng.choice(ONE_WORD_DTYPES)
        ndim = rng.choice([0, 1, 1, 2, 2, 3, 4, 8])
        shape = [rng.choice([0, 1, 2, 3, 8, 64, 1000]) if rng.random() < 0.2 else rng.randint(1, 6)
                 for _ in range(ndim)]
        if ndim == 1 and rng.random() < 0.1:
            shape = [123456789]                   # a 9-digit dim and multi-digit offsets
        numel = int(np.prod(shape)) if shape else 1
        if numel * DTYPE_BITS[dt] % 8:
            shape = shape + [4] if ndim < 8 else [4] * 8   # whole bytes for 4- and 6-bit dtypes
            numel = int(np.prod(shape))
        nbytes = numel * DTYPE_BITS[dt] // 8
        entries[name] = {"dtype": dt, "shape": shape, "data_offsets": [offset, offset + nbytes]}
        offset += nbytes
    items = list(entries.items())
    rng.shuffle(items)
    return dict(items)


def canonical(header: dict, pad_to: int = 8) -> bytes:
    text = json.dumps(header, separators=(",", ":"), ensure_ascii=False).encode()
    return text + b" " * (-len(text) % pad_to)


def write(path: Path, header_bytes: bytes, data_len: int) -> Path:
    with open(path, "wb") as fh:                 # sparse: the data is never read
        fh.write(struct.pack("<Q", len(header_bytes)) + header_bytes)
        fh.truncate(8 + len(header_bytes) + data_len)
    return path


def data_len(header: dict) -> int:
    return max([v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"], default=0)


def assert_same(batch, expected: list) -> None:
    assert batch.names.strings().tolist() == [n for e in expected for n in e.names]
    assert batch.counts.tolist() == [len(e) for e in expected]
    assert batch.metadata == [e.metadata for e in expected]
    for col in ("dtype_code", "ndim", "shape"):
        assert np.array_equal(getattr(batch, col), np.concatenate([getattr(e, col) for e in expected]))
    assert np.array_equal(batch.begin, np.concatenate([e.begin + e.data_start for e in expected]))
    assert np.array_equal(batch.end, np.concatenate([e.end + e.data_start for e in expected]))


@pytest.mark.parametrize("seed", range(25))
def test_fast_equals_slow_on_generated_headers(seed: int, tmp_path: Path) -> None:
    rng = random.Random(seed)
    paths, headers = [], []
    for k in range(rng.randint(1, 4)):
        header = random_entries(rng, rng.randint(0, 40))
        if rng.random() < 0.5:
            header = {"__metadata__": {"format": "pt", "k:1": "v,[2]"} if rng.random() < 0.7 else {}, **header}
        raw = canonical(header, pad_to=rng.choice([1, 8]))
        split = split_header(raw)
        assert split is not None
        paths.append(write(tmp_path / f"s{k}.safetensors", raw, data_len(header)))
        headers.append(raw)
    expected = [read_header(p) for p in paths]
    parts = [raw[s[0]:s[1]] for raw, s in zip(headers, map(split_header, headers))]
    parsed = parse_entries(parts, DTYPE_NAMES)
    assert parsed is not None                       # canonical input must take the fast path
    assert parsed.names.strings().tolist() == [n for e in expected for n in e.names]
    assert_same(read_headers(paths), expected)


@pytest.mark.parametrize("seed", range(8))
def test_parse_shared_by_two_threads_equals_the_exact_path(seed: int, tmp_path: Path, monkeypatch) -> None:
    """Large batches are parsed in two halves on two threads; force that on small files, with an
    odd (non-canonical) file among them, and compare with the exact reader file by file."""
    import auditor.inventory.fast.shards as shards
    monkeypatch.setattr(shards, "_SPLIT_FROM", 0)
    rng = random.Random(100 + seed)
    paths = []
    for k in range(rng.randint(2, 6)):
        header = random_entries(rng, rng.randint(0, 30))
        if rng.random() < 0.3:
            header = {"__metadata__": {"format": "pt"}, **header}
        raw = canonical(header, pad_to=8) if k != 1 else json.dumps(header, indent=1).encode()
        paths.append(write(tmp_path / f"s{k}.safetensors", raw, data_len(header)))
    batch = read_headers(paths)
    assert_same(batch, [read_header(p) for p in paths])


def test_library_written_files_take_the_fast_path(tmp_path: Path) -> None:
    tensors = {"model.layers.0.w": np.ones((3, 4), np.float32), "scalar": np.array(1.5, np.float64),
               "empty": np.zeros((0, 5), np.int8), "model.layers.10.mlp.experts.7.b": np.ones(7, np.uint8)}
    p = tmp_path / "a.safetensors"
    save_file(tensors, str(p), metadata={"format": "np"})
    raw = p.read_bytes()[8:8 + struct.unpack("<Q", p.read_bytes()[:8])[0]]
    start, end, meta = split_header(raw)
    assert meta == {"format": "np"}
    parsed = parse_entries([raw[start:end]], DTYPE_NAMES)
    ref = read_header(p)
    assert parsed is not None and parsed.names.strings().tolist() == ref.names
    assert parsed.ndim.tolist() == ref.ndim.tolist() and ref.ndim.tolist().count(0) == 1
    assert np.array_equal(parsed.shape, ref.shape)


NON_CANONICAL = {
    "space_after_colon": b'{"x": {"dtype":"F32","shape":[3],"data_offsets":[0,12]}}',
    "space_in_shape": b'{"x":{"dtype":"F32","shape":[3, 1],"data_offsets":[0,12]}}',
    "key_order": b'{"x":{"shape":[3],"dtype":"F32","data_offsets":[0,12]}}',
    "escaped_quote": b'{"x\\"y":{"dtype":"F32","shape":[3],"data_offsets":[0,12]}}',
    "escaped_unicode": b'{"\\u00e9":{"dtype":"F32","shape":[3],"data_offsets":[0,12]}}',
    "newline_padding": b'{"x":{"dtype":"F32","shape":[3],"data_offsets":[0,12]}}\n',
    "metadata_last": b'{"x":{"dtype":"F32","shape":[3],"data_offsets":[0,12]},"__metadata__":{"a":"b"}}',
    "metadata_spaced": b'{"__metadata__": {"a":"b"},"x":{"dtype":"F32","shape":[3],"data_offsets":[0,12]}}',
}


@pytest.mark.parametrize("name", sorted(NON_CANONICAL))
def test_non_canonical_headers_fall_back_and_still_parse(name: str, tmp_path: Path) -> None:
    raw = NON_CANONICAL[name]
    split = split_header(raw)
    fast = None if split is None else parse_entries([raw[split[0]:split[1]]], DTYPE_NAMES)
    assert fast is None
    p = write(tmp_path / "x.safetensors", raw, 12)
    ref = read_header(p)
    assert len(ref) == 1
    assert_same(read_headers([p]), [ref])


REFUSED_ENTRIES = {   # canonical-looking bytes the fast path must not vouch for
    "leading_zero": b'"x":{"dtype":"F32","shape":[03],"data_offsets":[0,12]}',
    "float": b'"x":{"dtype":"F32","shape":[3],"data_offsets":[0,12.0]}',
    "negative": b'"x":{"dtype":"F32","shape":[-3],"data_offsets":[0,12]}',
    "bool": b'"x":{"dtype":"F32","shape":[true],"data_offsets":[0,4]}',
    "unknown_dtype": b'"x":{"dtype":"Q7","shape":[3],"data_offsets":[0,12]}',
    "nested_shape": b'"x":{"dtype":"F32","shape":[[3]],"data_offsets":[0,12]}',
    "three_offsets": b'"x":{"dtype":"F32","shape":[3],"data_offsets":[0,6,12]}',
    "reversed_offsets": b'"x":{"dtype":"F32","shape":[3],"data_offsets":[12,0]}',
    "too_many_dims": b'"x":{"dtype":"F32","shape":[1,1,1,1,1,1,1,1,3],"data_offsets":[0,12]}',
    "huge_number": b'"x":{"dtype":"F32","shape":[3],"data_offsets":[0,12345678901234567]}',
    "control_char": b'"x\ty":{"dtype":"F32","shape":[3],"data_offsets":[0,12]}',
    "empty_dim": b'"x":{"dtype":"F32","shape":[3,],"data_offsets":[0,12]}',
    "metadata_name": b'"__metadata__":{"dtype":"F32","shape":[3],"data_offsets":[0,12]}',
    "bad_utf8": b'"x\xff":{"dtype":"F32","shape":[3],"data_offsets":[0,12]}',
    "trailing_comma": b'"x":{"dtype":"F32","shape":[3],"data_offsets":[0,12]},',
}


@pytest.mark.parametrize("name", sorted(REFUSED_ENTRIES))
def test_fast_path_refuses_what_orjson_must_judge(name: str) -> None:
    good = b'"ok":{"dtype":"I8","shape":[2],"data_offsets":[0,2]}'
    assert parse_entries([good], DTYPE_NAMES) is not None
    assert parse_entries([REFUSED_ENTRIES[name]], DTYPE_NAMES) is None
    assert parse_entries([good, REFUSED_ENTRIES[name]], DTYPE_NAMES) is None


@pytest.mark.parametrize("name", ["x,y", "a{b}", "{", "a:{b", "[x", "x}", "a,{}:[1"])
def test_fast_path_reads_punctuation_in_names(name: str) -> None:
    """Names are free text apart from quotes, escapes and control bytes: ',', '{', '}', '[' and ':'
    inside one must not confuse the anchors, and the result must be what orjson reads."""
    entries = {name: {"dtype": "F32", "shape": [3], "data_offsets": [0, 12]},
               "ok": {"dtype": "I8", "shape": [2, 1], "data_offsets": [12, 14]}}
    raw = orjson.dumps(entries)[1:-1]
    parsed = parse_entries([raw], DTYPE_NAMES)
    assert parsed is not None
    ref = orjson.loads(b"{" + raw + b"}")
    assert parsed.names.strings().tolist() == list(ref)
    assert [parsed.shape[i, :parsed.ndim[i]].tolist() for i in range(2)] == [v["shape"] for v in ref.values()]
    assert parsed.begin.tolist() == [v["data_offsets"][0] for v in ref.values()]
    assert parsed.end.tolist() == [v["data_offsets"][1] for v in ref.values()]


def test_bracket_in_name_goes_the_exact_way(tmp_path: Path) -> None:
    """']' anchors the shape and offsets lists: a name holding one is left to orjson, and the
    scan still reads the file exactly."""
    entries = {"x]": {"dtype": "F32", "shape": [3], "data_offsets": [0, 12]}}
    assert parse_entries([orjson.dumps(entries)[1:-1]], DTYPE_NAMES) is None
    save_file({"x]": np.ones(3, np.float32), "y": np.ones(2, np.int8)}, str(tmp_path / "m.safetensors"))
    t = scan_model_dir(tmp_path, progress=False).table
    assert sorted(t.name.tolist()) == ["x]", "y"]


def test_mixed_batch_uses_fast_and_exact_paths(tmp_path: Path) -> None:
    """One odd file among canonical ones: every file still comes back identical, in order."""
    rng = random.Random(7)
    paths = []
    for k in range(4):
        header = random_entries(rng, 10)
        raw = canonical(header) if k != 2 else json.dumps(header).encode()   # spaced JSON
        paths.append(write(tmp_path / f"m{k}.safetensors", raw, data_len(header)))
    assert_same(read_headers(paths), [read_header(p) for p in paths])


@pytest.mark.parametrize("keep_open", [256, 0])
def test_first_damaged_file_is_reported_first(keep_open: int, tmp_path: Path, monkeypatch) -> None:
    """With the shards kept open between the two read passes, and reopened (many shards)."""
    import auditor.inventory.shards as shards
    from auditor.errors import AuditInputError
    monkeypatch.setattr(shards, "_KEEP_OPEN", keep_open)

    good = canonical({"x": {"dtype": "F32", "shape": [3], "data_offsets": [0, 12]}})
    a = write(tmp_path / "a.safetensors", good, 10)             # truncated: canonical but wrong size
    b = tmp_path / "b.safetensors"
    b.write_bytes(b"\x01")                                      # unreadable
    with pytest.raises(AuditInputError) as info:
        read_headers([a, b])
    assert info.value.where == str(a) and "truncated" in info.value.problem
    c = write(tmp_path / "c.safetensors", good, 12)
    assert read_headers([c, c]).counts.tolist() == [1, 1]       # both passes read each file


def test_duplicate_inside_a_header_still_named(tmp_path: Path) -> None:
    from auditor.errors import AuditInputError

    raw = (b'{"x":{"dtype":"I8","shape":[2],"data_offsets":[0,2]},'
           b'"x":{"dtype":"I8","shape":[2],"data_offsets":[2,4]}}')
    assert parse_entries([raw[1:-1]], DTYPE_NAMES) is not None    # structurally canonical
    p = write(tmp_path / "d.safetensors", raw, 4)
    with pytest.raises(AuditInputError, match="duplicate key 'x'"):
        read_headers([p])


@pytest.mark.parametrize("indent", [None, 2, 4, "\t"])
def test_index_fast_parse_equals_orjson(indent) -> None:
    wm = {f"model.layers.{i}.w{j}": f"model-{i % 3:05d}-of-00003.safetensors" for i in range(30) for j in range(3)}
    wm["ünï"] = "model-00000-of-00003.safetensors"
    doc = {"metadata": {"total_size": 123, "nested": {"a": [1, 2]}}, "weight_map": wm, "after": "x"}
    raw = json.dumps(doc, indent=indent, ensure_ascii=False).encode()
    fast = parse_index(raw)
    assert fast is not None
    assert fast == orjson.loads(raw)
    assert list(fast["weight_map"]) == list(wm)


@pytest.mark.parametrize("raw", [
    b'{"weight_map": {"a": "x", "b": 5}}',                  # a non-string value
    b'{"weight_map": {"a\\"b": "x", "c": "y"}}',            # an escape
    b'{"weight_map": {"a": "x" ,"b": "y", "c" : "z"}}',      # irregular whitespace
    b'{"weight_map": {}}',
    b'{"metadata": {"weight_map": {"a": "x", "b": "y"}}}',   # not at the top level
    b'{"weight_map": {"a": "x", "b": "y"}',                 # truncated
])
def test_index_fast_parse_refuses_the_unusual(raw: bytes) -> None:
    assert parse_index(raw) is None


def test_index_duplicate_keys_behave_like_orjson() -> None:
    raw = b'{"weight_map": {"a": "x", "b": "y", "a": "z"}}'
    assert parse_index(raw) == orjson.loads(raw)
    assert list(parse_index(raw)["weight_map"]) == ["a", "b"]


def test_concat_keeps_names_and_spans() -> None:
    a = TensorTable.from_rows([("a", "F32", (1,)), ("bé", "F32", (2,))])
    b = TensorTable.from_rows([("c", "I8", (3,))])
    t = TensorTable.concat([a, b])
    assert t.name.tolist() == ["a", "bé", "c"]
    spans = t.name_spans
    assert [spans.buf[x:x + n].decode() for x, n in zip(spans.start.tolist(), spans.length.tolist())] == ["a", "bé", "c"]


def test_scan_table_names_are_spans_until_asked(tmp_path: Path) -> None:
    save_file({"b.w": np.ones(2, np.float32), "a.ü": np.ones(1, np.int8)}, str(tmp_path / "m.safetensors"))
    t = scan_model_dir(tmp_path, progress=False).table
    spans = t.name_spans
    assert spans._strings is None                   # the scan itself made no name strings
    raw = [spans.buf[x:x + n] for x, n in zip(spans.start.tolist(), spans.length.tolist())]
    assert sorted(raw) == sorted(["b.w".encode(), "a.ü".encode()])
    assert [r.decode() for r in raw] == t.name.tolist()


def test_long_dtype_names_are_left_to_the_exact_reader(tmp_path: Path) -> None:
    """F8_E4M3FNUZ does not fit the parser's 8-byte dtype word: the file is declined (read
    exactly), and a truncated spelling is never mistaken for it."""
    long = [d for d in DTYPE_NAMES if len(d) > 8]
    assert long                                   # the library's FNUZ dtypes
    header = {"a": {"dtype": long[0], "shape": [2], "data_offsets": [0, 2]}}
    raw = canonical(header, pad_to=8)
    start, end, _ = split_header(raw)
    assert parse_entries([raw[start:end]], DTYPE_NAMES) is None
    p = write(tmp_path / "l.safetensors", raw, 2)
    assert read_headers([p]).dtype_code.tolist() == [DTYPE_NAMES.index(long[0])]
    cut = canonical({"a": {"dtype": long[0][:8], "shape": [2], "data_offsets": [0, 2]}}, pad_to=8)
    start, end, _ = split_header(cut)
    assert parse_entries([cut[start:end]], DTYPE_NAMES) is None
