"""Which files of a listing are read, and how: the same choice the local scan makes in a directory
holding those files (checked against scan.py itself), paths refused before anything is written,
and the first read's size estimated from the index."""
from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from auditor.errors import AuditInputError
from auditor.inputs import CONFIG_CAP, DESCRIPTION_CAP
from auditor.inventory.scan import _shard_files, find_quant_description
from auditor.remote import plan as planner
from auditor.remote.snapshot import listed_files

NAMES = ["config.json", "model.safetensors", ".hidden.safetensors", "model.safetensors.index.json",
         ".old.safetensors.index.json", "quant_model_weights.safetensors.index.json", "quant_model_description.json",
         "quant_model_description_w8a8.json", "quant_model_weights-00001-of-00002.safetensors",
         "quant_model_weights-00002-of-00002.safetensors", "optional/quarot.safetensors",
         "optional/deeper/x.safetensors", "sub/shard.safetensors", "sub/other.safetensors", "README.md",
         "tokenizer.json", "model.safetensors.bak", "rot.safetensors"]


@settings(max_examples=150, deadline=None)
@given(names=st.sets(st.sampled_from(NAMES[1:]), max_size=len(NAMES) - 1), indexed=st.sets(st.sampled_from(
    ["sub/shard.safetensors", "./sub/shard.safetensors", "quant_model_weights-00001-of-00002.safetensors",
     "absent.safetensors"]), max_size=3))
def test_the_choice_is_the_local_scans(tmp_path_factory, names, indexed):
    listing = {n: 10 for n in ["config.json", *names]}
    d = tmp_path_factory.mktemp("layout")
    for n in listing:
        (d / n).parent.mkdir(parents=True, exist_ok=True)
        (d / n).write_bytes(b"x" * 10)
    plan = planner.small_files(listing, "hf://a/b@x")
    index = {"weight_map": {f"t{i}": rel for i, rel in enumerate(sorted(indexed))}}
    parsed = planner.index_shards(json.dumps(index).encode())
    planner.add_shards(plan, listing, [parsed] if plan.indexes else [])
    norm = {rel.removeprefix("./") for rel in indexed}
    local_shards = set(_shard_files(d, norm if plan.indexes else set()))
    assert set(plan.shards) == {s for s in local_shards if s in listing}
    desc = find_quant_description(d)
    want = {"config.json"} | {n for n in listing if "/" not in n and n.endswith(".safetensors.index.json")
                               and not n.startswith(".")}
    assert set(plan.whole) == want | ({desc.name} if desc else set())


def test_over_cap_side_files_become_holes_and_config_is_required():
    listing = {"config.json": CONFIG_CAP + 1, "quant_model_description.json": DESCRIPTION_CAP + 1,
               "model.safetensors.index.json": 100}
    plan = planner.small_files(listing, "w")
    assert plan.holes == {"config.json": CONFIG_CAP + 1, "quant_model_description.json": DESCRIPTION_CAP + 1}
    assert plan.whole == {"model.safetensors.index.json": 100}
    with pytest.raises(AuditInputError, match="no config.json in the model directory"):
        planner.small_files({"model.safetensors": 5}, "w")


def test_first_read_estimate_from_the_index():
    names = {"model.layers.0.mlp.weight": "a.safetensors", "model.layers.0.mlp.weight_scale": "a.safetensors",
             "lm_head.weight": "b.safetensors", "é": "b.safetensors"}
    parsed = planner.index_shards(json.dumps({"weight_map": names}).encode())
    assert parsed == {"a.safetensors": (2, 25 + 31), "b.safetensors": (2, 14 + 2)}
    plan = planner.Plan()
    planner.add_shards(plan, {"a.safetensors": 10 ** 9, "b.safetensors": 10 ** 9, "c.safetensors": 10 ** 9}, [parsed])
    assert plan.guess == {"a.safetensors": 56 + 2 * planner.PER_TENSOR + planner.HEADER_SLACK,
                          "b.safetensors": 16 + 2 * planner.PER_TENSOR + planner.HEADER_SLACK,
                          "c.safetensors": planner.FIRST_READ}
    for bad in (b"[1]", b"{", b'{"weight_map": [1]}', b'{"weight_map": {"t": [1]}}'):
        assert planner.index_shards(bad) is None


@pytest.mark.parametrize("path", ["../x.safetensors", "/abs.safetensors", "a/../b.safetensors", "a//b.safetensors",
                                  "a\\b.safetensors", "a\x00.safetensors", "./a.safetensors", "a/" * 40 + "b.json",
                                  "x" * 256 + ".json", "a\n.safetensors"])
def test_unsafe_listed_paths_are_refused(path):
    assert planner.safe_path(path) is not None
    plan = planner.Plan(shards={path: 10})
    with pytest.raises(AuditInputError, match="refused"):
        planner.check_paths(plan, "hf://a/b@x")


def test_plain_paths_pass_and_sizes_are_checked():
    for path in ("config.json", "optional/quarot.safetensors", "a/b/c.safetensors", "é.json", "..a.safetensors"):
        assert planner.safe_path(path) is None
    assert listed_files([("a", 0), ("b", 2 ** 40)], "w") == {"a": 0, "b": 2 ** 40}
    for size in (-1, None, "12", 2 ** 60, True, 1.5):
        with pytest.raises(AuditInputError, match="the size"):
            listed_files([("a", size)], "w")
