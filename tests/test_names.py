"""Name parsing: the grouped (masked-word) path must give every name what parsing it alone gives."""
from __future__ import annotations

import random
import re

import numpy as np
import pytest

from auditor.inventory.namespans import NameSpans
from auditor.model.names import parse_names

PARTS = ["mlp", "experts", "w1", "w3", "w13", "w#", "#", "fp8", "gate_proj", "weight", "weight_scale", "é", "x" * 30]


def random_names(rng: random.Random, n: int) -> list[str]:
    names = set()
    while len(names) < n:
        layer = rng.choice([0, 3, 9, 10, 77, 78, 123])
        tail = ".".join(rng.choice(PARTS) for _ in range(rng.randint(1, 4)))
        if rng.random() < 0.5:
            tail = f"mlp.experts.{rng.randint(0, 300)}.{tail}"
        head = rng.choice(["model.layers", "layers", "model.other"])
        names.add(f"{head}.{layer}.{tail}" if rng.random() < 0.9 else tail)
    return sorted(names, key=lambda _: rng.random())


def columns(addr, i: int) -> tuple:
    return (int(addr.layer[i]), int(addr.expert[i]), int(addr.block[i]), addr.module[i], addr.projection[i],
            addr.suffix[i], addr.modules[addr.modcode[i]], addr.suffixes[addr.sufcode[i]])


@pytest.mark.parametrize("seed", range(12))
def test_grouped_parse_equals_one_by_one(seed: int) -> None:
    rng = random.Random(seed)
    names = random_names(rng, 300)
    together = parse_names(NameSpans.from_strings(names), 78)
    for i, name in enumerate(names):
        alone = parse_names(NameSpans.from_strings([name]), 78)
        assert columns(together, i) == columns(alone, 0), name


def test_layer_and_expert_numbers_come_from_whole_components() -> None:
    names = ["model.layers.12.mlp.experts.7.w13.weight", "model.layers.3.mlp.w1.weight",
             "model.layers.3.mlp.w#.weight", "model.layers.40.mlp.experts.255.w2.weight_scale",
             "model.embed_tokens.weight"]
    addr = parse_names(NameSpans.from_strings(names), 78)
    for i, name in enumerate(names):
        m = re.match(r"model\.layers\.(\d+)\.", name)
        assert int(addr.layer[i]) == (int(m.group(1)) if m else -1)
        e = re.search(r"\.experts\.(\d+)\.", name)
        assert int(addr.expert[i]) == (int(e.group(1)) if e else -1)
    # a literal '#' is not a masked digit: w# and w1 are different modules
    assert addr.modules[addr.modcode[1]] != addr.modules[addr.modcode[2]]


def test_names_as_spans_of_a_foreign_buffer() -> None:
    """The scanner hands over spans inside the header bytes, not a newline-joined blob."""
    names = ["model.layers.1.mlp.w1.weight", "model.layers.22.mlp.w1.weight", "lm_head.weight"]
    buf = b"".join(b'"' + n.encode() + b'":{}, ' for n in names)
    starts = np.array([buf.index(n.encode()) for n in names])
    spans = NameSpans(buf + b" " * 32, starts, np.array([len(n) for n in names]))
    a, b = parse_names(spans, 78), parse_names(NameSpans.from_strings(names), 78)
    assert [columns(a, i) for i in range(3)] == [columns(b, i) for i in range(3)]


def test_adopted_hashes_equal_hashing_the_whole() -> None:
    """Two halves hashed on their own (different widths) then adopted == hashing all at once."""
    short = ["a.1", "b.22", "c"]
    long = ["model.layers.70.mlp.experts.255.down_proj.weight_offset", "x" * 40, "lm_head.weight"]
    buf = ("\n".join(short + long) + "\n").encode() + b" " * 32
    starts, at = [], 0
    for n in short + long:
        starts.append(at)
        at += len(n) + 1
    lengths = np.array([len(n) for n in short + long])
    whole = NameSpans(buf, np.array(starts), lengths)
    a, b = NameSpans(buf, np.array(starts[:3]), lengths[:3]), NameSpans(buf, np.array(starts[3:]), lengths[3:])
    a.masked_words_and_hash(1)                   # the plain hash comes with it
    b.masked_words_and_hash(7)
    merged = NameSpans(buf, np.array(starts), lengths)
    merged.adopt_hashes(a, b)
    k = (int(lengths.max()) + 7) // 8
    for slot, fresh in (("_hashed", whole.words_and_hash), ("_masked", whole.masked_words_and_hash)):
        cached = getattr(merged, slot)
        assert cached is not None and cached[0] == k                   # adopted, not recomputed
        cols, h = fresh(k)
        assert np.array_equal(cached[1], cols) and np.array_equal(cached[2], h)


def test_masked_hash_ignores_only_digits() -> None:
    names = ["layers.1.w1", "layers.2.w3", "layers.1.wx", "layers.12.w1"]
    spans = NameSpans.from_strings(names)
    _, h = spans.masked_words_and_hash(2)
    assert h[0] == h[1] and h[0] != h[2] and h[0] != h[3]    # same length and letters, digits aside


def _schemes_row_by_row(table, addr) -> tuple[list[str], list[str]]:
    """Reference for scheme inference without a description, written out per row: a module
    instance (layer, expert, module) takes the scheme its (last) weight's dtype and the sibling
    suffixes present in the instance imply; names in order of first appearance."""
    from auditor.model.classify import infer_scheme
    inst = list(zip(addr.layer.tolist(), addr.expert.tolist(), addr.modcode.tolist()))
    sib = {}
    for key, suffix in zip(inst, (addr.suffixes[c] for c in addr.sufcode.tolist())):
        if suffix in ("deq_scale", "scale_bias", "weight_scale", "weight_scale_inv"):
            sib.setdefault(key, set()).add(suffix)
    names, of_inst = [""], {}
    for i, key in enumerate(inst):
        if addr.suffixes[addr.sufcode[i]] == "weight":
            scheme = infer_scheme(str(table.dtype[i]), sib.get(key, set()))
            if scheme not in names:
                names.append(scheme)
            of_inst[key] = scheme
    return [of_inst.get(key, "") for key in inst], names


@pytest.mark.parametrize("preset,recipe", [("deepseek-v3.2", "fp8-block"), ("glm-5.1", "w4a8"),
                                           ("glm-5.1", "w8a8-dynamic"), ("glm-5.1", "bf16")])
def test_scheme_inference_matches_the_row_by_row_rule(preset: str, recipe: str) -> None:
    from dataclasses import replace
    from auditor.inventory.table import TensorTable
    from auditor.model.classify import _infer_schemes
    from auditor.model.config import spec_from_config
    from auditor.model.expected import expected_tensors
    from auditor.model.presets import preset_config
    spec = spec_from_config(preset_config(preset), name=preset)
    spec = replace(spec, E=4, Lyr=min(spec.Lyr, 5))
    rows = expected_tensors(spec, recipe)
    rows.append(("model.layers.0.mlp.gate_proj.weight", "I8", (2, 2)))     # a weight stored twice:
    table = TensorTable.from_rows(rows)                                     # its last row decides
    addr = parse_names(table.name_spans, spec.Lyr)
    code, names = _infer_schemes(table, addr)
    want, want_names = _schemes_row_by_row(table, addr)
    assert names == want_names
    assert [names[c] for c in code.tolist()] == want
