"""Property: every header we accept, ``safetensors.safe_open`` accepts with identical entries;
every header we refuse, it refuses too, or one of our documented rules does (docs/options.md,
bad input: duplicate keys, dimensions/offsets of 2**63 or more). Never a traceback: only AuditInputError. And the
accelerated reader agrees with the exact one, answer for answer.

Examples per run: AUDIT_FUZZ_EXAMPLES (default 150, a few seconds); benchmarks/bench_hostile.py
runs thousands.
"""
from __future__ import annotations

import json
import os
import struct
from pathlib import Path

from hypothesis import HealthCheck, given, settings, strategies as st
from safetensors import safe_open

import auditor.inventory.fast as fast
from auditor.errors import AuditInputError
from auditor.inventory.header import read_header
from auditor.inventory.shards import read_headers
from auditor.dtypes import DTYPE_BITS

EXAMPLES = int(os.environ.get("AUDIT_FUZZ_EXAMPLES", "150"))
# our documented rules beyond the library's (docs/options.md, bad input)
OUR_RULES = ("duplicate key", "2**63 or more", "are too large")

DTYPES = sorted(DTYPE_BITS) + ["I4", "C128", "f32", "", "F8_E4M3F"]
HUGE = [2 ** 31, 2 ** 32, 2 ** 61, 2 ** 62, 2 ** 63 - 1, 2 ** 63, 2 ** 64 - 1, 2 ** 64]


@st.composite
def headers(draw):
    """(header bytes, data length): mostly valid entries, then one or more breakages."""
    n = draw(st.integers(0, 6))
    names = draw(st.lists(st.one_of(
        st.text(st.characters(codec="utf-8"), min_size=0, max_size=12),
        st.sampled_from(["a", "b", "a:b", "__metadata__", "x" * 257, "é", "a\\b", 'q"q', "\x01"])),
        min_size=n, max_size=n))
    entries, offset = [], 0
    for name in names:
        dtype = draw(st.sampled_from(sorted(DTYPE_BITS))) if draw(st.integers(0, 9)) else draw(st.sampled_from(DTYPES))
        rank = draw(st.sampled_from([0, 1, 1, 2, 2, 3, 9, 12]))
        shape = [draw(st.integers(0, 5)) for _ in range(rank)]
        if draw(st.integers(0, 12)) == 0 and rank:
            shape[draw(st.integers(0, rank - 1))] = draw(st.sampled_from(HUGE))
        count = 1
        for d in shape:
            count *= d
        nbytes = count * DTYPE_BITS.get(dtype, 8) // 8
        off = [offset, offset + nbytes] if nbytes < 2 ** 40 else [offset, offset]
        if draw(st.integers(0, 15)) == 0:
            off = [off[0], off[1] + draw(st.sampled_from([-1, 1, 2 ** 63, 2 ** 64]))]
        offset = max(offset, off[1]) if off[1] < 2 ** 40 else offset
        entry = {"dtype": dtype, "shape": shape, "data_offsets": off}
        if draw(st.integers(0, 10)) == 0:
            depth = draw(st.sampled_from([1, 50, 124, 125, 126, 200, 1100]))
            entry["x"] = json.loads("[" * depth + "]" * depth)
        if draw(st.integers(0, 25)) == 0:
            del entry[draw(st.sampled_from(["dtype", "shape", "data_offsets"]))]
        if draw(st.integers(0, 25)) == 0:
            entry[draw(st.sampled_from(["shape", "data_offsets", "dtype"]))] = draw(
                st.sampled_from([None, 1.0, "3", [1.5], [-1], [True], {}]))
        entries.append((name, entry))
    doc: dict = {}
    if draw(st.integers(0, 4)) == 0:
        doc["__metadata__"] = draw(st.sampled_from([{"format": "pt"}, {}, {"k": 1}, None, "x", {"a:b": "c\\d"}]))
    for name, entry in entries:
        doc[name] = entry
    style = draw(st.sampled_from(["compact", "compact", "default", "indent", "ascii"]))
    if style == "compact":
        text = json.dumps(doc, separators=(",", ":"), ensure_ascii=False)
    elif style == "default":
        text = json.dumps(doc, ensure_ascii=False)
    elif style == "indent":
        text = json.dumps(doc, indent=1, ensure_ascii=False)
    else:
        text = json.dumps(doc)                       # \\u escapes for non-ASCII
    raw = text.encode("utf-8")
    if entries and draw(st.integers(0, 8)) == 0:     # a key written twice (the last one wins in JSON)
        name, entry = entries[draw(st.integers(0, len(entries) - 1))]
        spelled = json.dumps(name) if draw(st.booleans()) else json.dumps(name, ensure_ascii=True).replace(
            "a", "\\u0061")
        raw = raw[:-1] + (b"," if len(doc) else b"") + spelled.encode() + b":" + \
            json.dumps(entry, separators=(",", ":")).encode() + b"}"
    if draw(st.integers(0, 12)) == 0:                # byte damage
        if raw:
            i = draw(st.integers(0, len(raw) - 1))
            raw = raw[:i] + draw(st.sampled_from([b"\xff", b"}", b"{", b"\\", b'"', b" "])) + raw[i + 1:]
    raw += b" " * draw(st.sampled_from([0, 0, 0, 3, 7, 100]))
    data_len = offset + draw(st.sampled_from([0, 0, 0, 0, 1, -1]))
    return raw, max(data_len, 0)


def write(path: Path, raw: bytes, data_len: int) -> Path:
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(raw)) + raw)
        fh.truncate(8 + len(raw) + data_len)
    return path


def library(path: Path):
    try:
        with safe_open(str(path), "np") as f:
            return {k: (f.get_slice(k).get_dtype(), list(f.get_slice(k).get_shape())) for k in f.keys()}
    except Exception as exc:          # safetensors raises several types: any means "refused"
        return exc


def ours(path: Path):
    try:
        h = read_header(path)
    except AuditInputError as exc:
        return exc
    return {name: (str(h.dtypes[i]), list(h.wide.get(i) or h.shape[i, :int(h.ndim[i])].tolist()))
            for i, name in enumerate(h.names)}


def accelerated(path: Path):
    try:
        b = read_headers([path])
    except AuditInputError as exc:
        return exc
    t = b.to_table([path.name], [True])
    return {t.name_spans.get(i): (str(t.dtype[i]), list(t.shape_of(i))) for i in range(len(t))}


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck), database=None)
@given(headers())
def test_we_accept_exactly_what_the_library_accepts(tmp_path_factory, case) -> None:
    raw, data_len = case
    p = write(tmp_path_factory.mktemp("h") / "x.safetensors", raw, data_len)
    lib = library(p)
    exact = ours(p)                   # a traceback here fails the test: only AuditInputError
    if isinstance(exact, AuditInputError):
        assert isinstance(lib, Exception) or any(r in exact.problem for r in OUR_RULES), \
            f"we refuse ({exact.problem}) what the library accepts: {raw[:300]!r}"
        assert "\n" not in exact.one_line()
    else:
        assert not isinstance(lib, Exception), f"we accept what the library refuses ({lib}): {raw[:300]!r}"
        assert exact == lib
    fast.FAILED.clear()
    quick = accelerated(p)
    assert not fast.FAILED, fast.FAILED          # no accelerator fell over on the way
    if isinstance(exact, AuditInputError):
        assert isinstance(quick, AuditInputError) and quick.one_line() == exact.one_line()
    else:
        assert quick == exact
