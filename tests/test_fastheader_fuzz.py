"""The fast header parser never vouches for bytes it misreads.

Every canonical header is damaged by one random byte edit (replace, insert or delete, biased to
the bytes that carry JSON structure). The fast path may refuse the result (None: the exact path
then judges it) or accept it; when it accepts, orjson must accept the same bytes and give, entry
by entry in order, exactly the names, dtypes, shapes and offsets the fast path read.
"""
from __future__ import annotations

import json
import random

import orjson
import pytest

from auditor.inventory.fast.header import parse_entries, split_header
from auditor.inventory.header import DTYPE_NAMES

from test_fastheader import canonical, random_entries

EDIT_BYTES = b'"{}[],:\\ 0123456789.-+eE\x00\x1f\x7f\xff'


def mutate(rng: random.Random, part: bytes) -> bytes:
    at = rng.randrange(len(part) + 1)
    byte = bytes([rng.choice(EDIT_BYTES)])
    op = rng.choice(("replace", "insert", "delete"))
    if op == "insert" or at == len(part):
        return part[:at] + byte + part[at:]
    if op == "replace":
        return part[:at] + byte + part[at + 1:]
    return part[:at] + part[at + 1:]


def reference(part: bytes) -> list | None:
    """The entries as (name, value) pairs in order, duplicates kept, or None if orjson refuses."""
    text = b"{" + part + b"}"
    try:
        orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    return json.loads(text.decode("utf-8"), object_pairs_hook=list)


@pytest.mark.parametrize("seed", range(12))
def test_one_byte_damage_is_refused_or_read_exactly(seed: int) -> None:
    rng = random.Random(1000 + seed)
    header = random_entries(rng, rng.randint(1, 12))
    raw = canonical(header, pad_to=1)
    start, end, _ = split_header(raw)
    part = raw[start:end]
    accepted = 0
    for _ in range(60):
        bad = mutate(rng, part)
        got = parse_entries([bad], DTYPE_NAMES)
        if got is None:
            continue
        accepted += 1
        ref = reference(bad)
        assert ref is not None, bad
        assert len(ref) == len(got.names), bad
        names = got.names.strings().tolist()
        for i, (name, value) in enumerate(ref):
            assert name == names[i], bad
            assert [k for k, _ in value] == ["dtype", "shape", "data_offsets"], bad
            v = dict(value)
            assert v["dtype"] == DTYPE_NAMES[int(got.dtype_code[i])], bad
            assert v["shape"] == got.shape[i, :int(got.ndim[i])].tolist(), bad
            assert v["data_offsets"] == [int(got.begin[i]), int(got.end[i])], bad
    # most single-byte damage must be refused; some (a digit for a digit, a name byte) is not
    assert accepted < 60


def flat_doc(rng: random.Random) -> tuple[dict, list]:
    pairs = [(f"model.layers.{rng.randint(0, 99)}.mlp.w{rng.randint(1, 3)}.{k}", rng.choice(["W8A8", "FLOAT", "é"]))
             for k in range(rng.randint(1, 8))]
    return dict(pairs), pairs


def dumps(rng: random.Random, doc: dict) -> bytes:
    style = rng.choice([{"indent": 2}, {"indent": 4}, {}, {"separators": (",", ":")}])
    return json.dumps(doc, ensure_ascii=False, **style).encode()


def pairs_of(text: bytes):
    try:
        orjson.loads(text)
    except orjson.JSONDecodeError:
        return None
    return json.loads(text.decode("utf-8"), object_pairs_hook=list)


def accepted(rng: random.Random, raw: bytes, reader, times: int = 80):
    """(damaged bytes, what ``reader`` made of them) for each edit the reader did not refuse."""
    for _ in range(times):
        bad = mutate(rng, raw)
        got = reader(bad)
        if got is not None:
            yield bad, got


def spans(buf: bytes, start, length) -> list[str]:
    return [buf[a:a + n].decode() for a, n in zip(start.tolist(), length.tolist())]


@pytest.mark.parametrize("seed", range(8))
def test_description_run_damage_is_refused_or_read_exactly(seed: int) -> None:
    from auditor.inventory.fast.jsonspans import leading_pairs
    rng = random.Random(2000 + seed)
    doc, _ = flat_doc(rng)
    doc.update({"version": "1.0.0", "group_size": 0, "optional": {"a": {"b": "c"}}})
    raw = dumps(rng, doc)
    for bad, run in accepted(rng, raw, leading_pairs):
        ref = pairs_of(bad)
        rest = pairs_of(run.rest)
        if ref is None:                     # the run may be fine and the damage in the rest:
            assert rest is None, bad        # then the rest must not parse either
            continue
        keys = spans(run.buf, run.key_start, run.key_length)
        values = spans(run.buf, run.value_start, run.value_length)
        assert list(zip(keys, values)) + [tuple(p) for p in rest] == [tuple(p) for p in ref], bad


@pytest.mark.parametrize("seed", range(8))
def test_index_damage_is_refused_or_read_exactly(seed: int) -> None:
    from auditor.inventory.fast.jsonspans import index_columns
    rng = random.Random(3000 + seed)
    _, pairs = flat_doc(rng)
    raw = dumps(rng, {"metadata": {"total_size": 12}, "weight_map": dict(pairs)})
    for bad, cols in accepted(rng, raw, index_columns):
        ref = pairs_of(bad)
        assert ref is not None, bad
        wm = [p for k, p in ref if k == "weight_map"]
        assert len(wm) == 1 and isinstance(wm[0], list), bad
        keys = spans(cols.buf, cols.key_start, cols.key_end - cols.key_start)
        values = spans(cols.buf, cols.value_start, cols.value_end - cols.value_start)
        assert list(zip(keys, values)) == [tuple(p) for p in wm[0]], bad
