"""The span fast path of load_quant_description against an independent reference: every
expected value comes from orjson.loads + plain dict logic here, never from the code under test."""
from __future__ import annotations

import json
import random

import numpy as np
import orjson
import pytest

from auditor.errors import AuditInputError
from auditor.inventory.namespans import NameSpans
from auditor.inventory.quantdesc import GLOBAL_KEYS, load_quant_description

WRITERS = {
    "indent2": lambda d: json.dumps(d, indent=2, ensure_ascii=False),
    "spaced": lambda d: json.dumps(d, ensure_ascii=False),
    "compact": lambda d: json.dumps(d, separators=(",", ":"), ensure_ascii=False),
    "indent4": lambda d: json.dumps(d, indent=4, ensure_ascii=False),
    "indent2_ascii": lambda d: json.dumps(d, indent=2),      # \u escapes: whole-document path
}
SPAN_WRITERS = ["indent2", "spaced", "compact", "indent4"]
SPAN_CASES = ["msmodelslim", "string_globals_first", "no_globals", "non_ascii", "single", "long_names"]
SCHEMES = ["W8A8", "FLOAT", "W8A8_DYNAMIC", "W4A8_DYNAMIC"]


def tensors(n: int, seed: int = 0) -> dict[str, str]:
    rng = random.Random(seed)
    out = {}
    for i in range(n):
        for proj in ("q_proj", "k_proj", "o_proj"):
            out[f"model.layers.{i}.self_attn.{proj}.weight"] = rng.choice(SCHEMES)
        out[f"model.layers.{i}.input_layernorm.weight"] = "FLOAT"
    return out


MSMODELSLIM = {**tensors(12), "lm_head.weight": "FLOAT", "version": "1.0.0",
               "model_quant_type": "W8A8", "metadata": {}, "group_size": 0,
               "optional": {"a": {"b": [1, "x", {"c": "d"}]}, "s": "t"}, "is_rot_used": True}
DOCS = {
    "msmodelslim": MSMODELSLIM,
    "globals_first": {"version": "1.0.0", "model_quant_type": "W8A8", "group_size": 0,
                      "metadata": {}, **tensors(5, 1)},
    "string_globals_first": {"model_quant_type": "W8A8", "version": "1.0.0", **tensors(5, 2),
                             "is_rot_used": False},
    "no_globals": tensors(7, 3),
    "non_ascii": {"layer.é.weight": "W8A8", "层.0.weight": "FLOAT", "x.😀.weight": "W8A8_DYNAMIC",
                  **tensors(2, 4), "version": "1"},
    "single": {"a.weight": "W8A8"},
    "only_string_global": {"version": "1.0.0"},
    "long_names": {("n" * 300) + ".weight": "W8A8", "b" * 9: "FLOAT", "version": "1"},
}


def reference(raw: bytes) -> tuple[dict, dict]:
    doc = orjson.loads(raw)
    per = {k: v for k, v in doc.items() if k not in GLOBAL_KEYS and isinstance(v, str)}
    return per, {k: v for k, v in doc.items() if k in GLOBAL_KEYS}


def write(tmp_path, raw: bytes | str, name: str = "quant_model_description.json"):
    path = tmp_path / name
    path.write_bytes(raw.encode("utf-8") if isinstance(raw, str) else raw)
    return path


def ref_codes(per: dict, names: list[str]):
    scheme_names = sorted({per[n] for n in names if n in per})
    scode = [scheme_names.index(per[n]) if n in per else len(scheme_names) for n in names]
    return np.array(scode, dtype=np.int64), scheme_names, np.array([n in per for n in names], dtype=bool)


def check_codes(got, want) -> None:
    assert got[1] == want[1]
    assert np.asarray(got[0]).tolist() == want[0].tolist()
    assert np.asarray(got[2], dtype=bool).tolist() == want[2].tolist()


# --------------------------------------------------------------------------- 1. equivalence

@pytest.mark.parametrize("writer", list(WRITERS))
@pytest.mark.parametrize("case", list(DOCS))
def test_load_matches_reference(tmp_path, case, writer):
    raw = WRITERS[writer](DOCS[case]).encode("utf-8")
    assert orjson.loads(raw) == DOCS[case]
    per, glob = reference(raw)
    desc = load_quant_description(write(tmp_path, raw))
    if writer in SPAN_WRITERS and case in SPAN_CASES:      # fails if the fast path stops applying
        assert desc._run is not None and desc._per_tensor is None
    assert len(desc) == len(per)
    assert desc.globals == glob
    assert desc.per_tensor == per
    assert desc.findings == []


# --------------------------------------------------------------------------- 2. scheme_codes

def _table_cases():
    base = {k: v for k, v in MSMODELSLIM.items() if k not in GLOBAL_KEYS}
    names = list(base)
    rng = random.Random(7)
    shuffled = names[:]
    rng.shuffle(shuffled)
    extra = ["model.layers.0.mlp.gate_proj.weight", "lm_head.weight_scale", "lm_head", "version"]
    superset = shuffled + extra
    rng.shuffle(superset)
    return {
        "all_described": (MSMODELSLIM, shuffled[::-1]),
        "stored_not_described": (MSMODELSLIM, superset),
        "described_not_stored": (MSMODELSLIM, shuffled[: len(shuffled) // 2]),
        "both": (MSMODELSLIM, shuffled[5:] + extra),
        "duplicate_table_names": (MSMODELSLIM, shuffled + shuffled[:3]),
        "non_ascii": (DOCS["non_ascii"], ["x.😀.weight", "zz", "layer.é.weight", "层.0.weight",
                                           *tensors(2, 4)]),
        "long_names": (DOCS["long_names"], ["b" * 9, ("n" * 300) + ".weight", "c"]),
        "only_string_global": (DOCS["only_string_global"], ["version", "a"]),
        "empty_table": (MSMODELSLIM, []),
    }


@pytest.mark.parametrize("writer", ["indent2", "compact"])
@pytest.mark.parametrize("case", list(_table_cases()))
def test_scheme_codes_match_reference(tmp_path, case, writer):
    doc, names = _table_cases()[case]
    raw = WRITERS[writer](doc).encode("utf-8")
    per, _ = reference(raw)
    desc = load_quant_description(write(tmp_path, raw))
    check_codes(desc.scheme_codes(NameSpans.from_strings(names)), ref_codes(per, names))
    assert len(desc) == len(per)
    assert desc.per_tensor == per
    check_codes(desc.scheme_codes(NameSpans.from_strings(names)), ref_codes(per, names))


@pytest.mark.parametrize("raw", [
    b'{"a": "W8A8", "a": "FLOAT"}',
    b'{"a": "W8A8", "b": "W8A8", "a": "FLOAT"}',
    b'{\n  "a": "FLOAT",\n  "b": "W8A8",\n  "a": "W8A8",\n  "version": "1"\n}',
    b'{"a":"W8A8","a":"FLOAT","group_size":0}',
])
@pytest.mark.parametrize("names", [["a"], ["b", "a"], ["a", "b", "c"]])
def test_duplicate_key_last_wins(tmp_path, raw, names):
    per, glob = reference(raw)
    desc = load_quant_description(write(tmp_path, raw))
    check_codes(desc.scheme_codes(NameSpans.from_strings(names)), ref_codes(per, names))
    assert len(desc) == len(per)
    fresh = load_quant_description(write(tmp_path, raw, "again.json"))
    assert len(fresh) == len(per)
    assert fresh.per_tensor == per and fresh.globals == glob


# --------------------------------------------------------------------------- 3. in / any_key_contains

PROBE_DOC = {"model.layers.0.self_attn.q_proj.weight": "W8A8", "lm_head.weight_scale": "FLOAT",
             "model.norm.weight": "norm.bias", "layer.é.weight": "W8A8", "a": "W8A8",
             "version": "1.0.0", "model_quant_type": "W8A8", "group_size": 0, "metadata": {}}
IN_PROBES = [*PROBE_DOC, "lm_head.weight", "lm_head.weight_scal", "W8A8", "norm.bias", "", "layer.é",
             "model.layers.0", "weight", "q_proj.weight", "1.0.0", '"a"', 'a": "W8A8']
CONTAINS_PROBES = ["norm.bias", "norm.weight", "lm_head.weight", "weight_scale", "version",
                   "model_quant", "quant_type", "W8A8", "é", "é.weight", '"', ': "', "1.0.0",
                   "q_proj.weight", "weight_scale_x", "a", "group", "FLOAT", ""]


@pytest.mark.parametrize("writer", list(WRITERS))
def test_membership_and_substring(tmp_path, writer):
    raw = WRITERS[writer](PROBE_DOC).encode("utf-8")
    per, _ = reference(raw)
    path = write(tmp_path, raw)
    if writer in SPAN_WRITERS:
        assert load_quant_description(path)._run is not None
    for probe in IN_PROBES:      # a fresh load each time: the spans, not a cached dict, answer
        assert (probe in load_quant_description(path)) == (probe in per), probe
    for probe in CONTAINS_PROBES:
        want = any(probe in k for k in per)
        assert load_quant_description(path).any_key_contains(probe) == want, probe
    desc = load_quant_description(path)
    desc.per_tensor                                        # the dict path must agree too
    assert [p in desc for p in IN_PROBES] == [p in per for p in IN_PROBES]
    assert [desc.any_key_contains(p) for p in CONTAINS_PROBES] == \
        [any(p in k for k in per) for p in CONTAINS_PROBES]


# --------------------------------------------------------------------------- 4. bad input stays exact

BAD_OR_ODD = {
    "trailing_comma": b'{"a": "W8A8", "b": "FLOAT",}',
    "trailing_comma_rest": b'{"a": "W8A8", "group_size": 0,}',
    "missing_comma": b'{"a": "W8A8" "b": "FLOAT"}',
    "missing_comma_later": b'{"a": "W8A8", "b": "FLOAT" "c": "W8A8"}',
    "missing_colon": b'{"a": "W8A8", "b" "FLOAT"}',
    "comma_for_colon": b'{"a", "W8A8"}',
    "ctrl_in_key": b'{"a\x01b": "W8A8", "c": "FLOAT"}',
    "tab_in_key": b'{"a": "W8A8", "b\tc": "FLOAT"}',
    "newline_in_value": b'{"a": "W8\nA8", "b": "FLOAT"}',
    "escape_in_key": b'{"a\\u00e9": "W8A8", "b": "FLOAT"}',
    "escaped_quote": b'{"a\\"b": "W8A8", "c": "FLOAT"}',
    "escape_in_rest": b'{"a": "W8A8", "optional": {"k\\n": 1}}',
    "invalid_utf8_key": b'{"a\xff": "W8A8", "b": "FLOAT"}',
    "invalid_utf8_rest": b'{"a": "W8A8", "optional": {"\xc3": 1}}',
    "surrogate_utf8": b'{"a\xed\xa0\x80": "W8A8"}',
    "array": b'["a", "W8A8"]',
    "array_of_object": b'[{"a": "W8A8"}]',
    "trailing_garbage": b'{"a": "W8A8"} x',
    "extra_brace": b'{"a": "W8A8"}}',
    "unclosed": b'{"a": "W8A8", "b": "FLOAT"',
    "bom": b'\xef\xbb\xbf{"a": "W8A8"}',
    "empty_key_value": b'{"": "", "a": "W8A8"}',
    "mixed_gaps": b'{"a": "W8A8",  "b": "FLOAT", "c":"W8A8"}',
    "crlf_tabs": b'{\r\n\t"a" :\t"W8A8" ,\r\n\t"b" :\t"FLOAT"\r\n}',
}


@pytest.mark.parametrize("case", list(BAD_OR_ODD))
def test_bad_input_stays_exact(tmp_path, case):
    raw = BAD_OR_ODD[case]
    path = write(tmp_path, raw)
    try:
        raw.decode("utf-8")
        doc = orjson.loads(raw)
    except UnicodeDecodeError:
        problem = "not valid UTF-8"
    except orjson.JSONDecodeError:
        problem = "not valid JSON"
    else:
        problem = None if isinstance(doc, dict) else "not a JSON object"
    if problem is not None:
        with pytest.raises(AuditInputError, match=problem):
            load_quant_description(path)
        return
    per, glob = reference(raw)
    desc = load_quant_description(path)
    assert len(desc) == len(per)
    assert desc.per_tensor == per and desc.globals == glob


# --------------------------------------------------------------------------- 5. entries after a non-string

AFTER_NON_STRING = [
    {"a": "W8A8", "group_size": 0, "b": "FLOAT"},
    {"version": "1", "a": "W8A8", "metadata": {}, "b": "FLOAT", "is_rot_used": True},
    {"a": "W8A8", "b": "W8A8", "optional": {"x": "y"}, "c": "W8A8_DYNAMIC", "d": "FLOAT"},
    {"a": "W8A8", "bad": 5, "b": "FLOAT"},
]


@pytest.mark.parametrize("writer", list(WRITERS))
@pytest.mark.parametrize("index", range(len(AFTER_NON_STRING)))
def test_entries_after_non_string_member(tmp_path, index, writer):
    raw = WRITERS[writer](AFTER_NON_STRING[index]).encode("utf-8")
    per, glob = reference(raw)
    desc, names = load_quant_description(write(tmp_path, raw)), sorted(per) + ["zz"]
    assert desc.per_tensor == per and desc.globals == glob
    check_codes(desc.scheme_codes(NameSpans.from_strings(names)), ref_codes(per, names))


@pytest.mark.parametrize("raw", [
    b'{"a": "W8A8", "group_size": 0, "a": "FLOAT"}',            # later string duplicate wins
    b'{"a": "W8A8", "group_size": 0, "a": 1}',                  # later non-string duplicate wins
    b'{"version": "1", "a": "W8A8", "version": "2"}',
    b'{"version": "1", "a": "W8A8", "group_size": 0, "version": 2}',
])
def test_duplicate_across_run_and_rest(tmp_path, raw):
    per, glob = reference(raw)
    desc = load_quant_description(write(tmp_path, raw))
    assert desc.globals == glob
    assert desc.per_tensor == per
    assert len(desc) == len(per)
    assert ("a" in load_quant_description(write(tmp_path, raw, "b.json"))) == ("a" in per)
