"""Property-based hostile input (issue 8): generated configs, directory layouts and safetensors
headers, run through the CLI in process (and a few out of process), checked against the contract
in ``hostile_harness`` and, for headers, against the installed safetensors library.

CI keeps the example counts modest (AUDIT_HOSTILE_EXAMPLES, default 25); the full generated run is
``python benchmarks/hostile_full.py`` (thousands of examples, the slow bound cases included).
"""
from __future__ import annotations

import json
import math
import os
import struct
import tempfile
from pathlib import Path

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from safetensors.numpy import save_file

from auditor.limits import CONFIG_INT_CAPS, MAX_EXPERT_LAYERS, MAX_ROPE_FACTOR
from hostile_harness import (DENSE_CONFIG, DSA_CONFIG, check_contract, fingerprint, run_in_process,
                             run_out_of_process)
from test_hostile_readers import DTYPE_BITS, library_verdict, raw_st, refused_by_documented_rule

EXAMPLES = int(os.environ.get("AUDIT_HOSTILE_EXAMPLES", "25"))
SETTINGS = settings(max_examples=EXAMPLES, deadline=None, derandomize=not os.environ.get("AUDIT_HOSTILE_RANDOM"),
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                           HealthCheck.data_too_large])

# ---------------------------------------------------------------------------- configs
ANY_JSON = st.one_of(
    st.integers(-10, 300), st.integers(-2 ** 70, 2 ** 70), st.sampled_from([0, 1, 2 ** 31, 10 ** 9, 10 ** 30]),
    st.floats(allow_nan=True, allow_infinity=True), st.sampled_from([64.0, 1e309, -1e309, 1.5]),
    st.text(max_size=6), st.booleans(), st.none(), st.lists(st.integers(-3, 3), max_size=3),
    st.dictionaries(st.text(max_size=3), st.integers(-3, 3), max_size=2),
)
CONFIG_KEYS = [k for k in CONFIG_INT_CAPS if "." not in k] + [
    "model_type", "torch_dtype", "dtype", "topk_method", "tie_word_embeddings", "indexer_rope_interleave",
    "indexer_types", "mlp_layer_types", "rope_scaling"]
ROPE = st.one_of(ANY_JSON, st.fixed_dictionaries({}, optional={"factor": ANY_JSON,
                                                               "original_max_position_embeddings": ANY_JSON}))


@st.composite
def configs(draw) -> dict:
    cfg = dict(draw(st.sampled_from([DENSE_CONFIG, DSA_CONFIG])))
    for key in draw(st.lists(st.sampled_from(CONFIG_KEYS), max_size=4, unique=True)):
        cfg[key] = draw(ROPE if key == "rope_scaling" else ANY_JSON)
    for key in draw(st.lists(st.sampled_from(sorted(cfg)), max_size=1)):
        del cfg[key]
    return cfg


def _as_int(v):
    if isinstance(v, bool):
        return None
    if isinstance(v, int):
        return v
    if isinstance(v, float) and math.isfinite(v) and v.is_integer():
        return int(v)
    return None


def accepted_config_is_plausible(cfg: dict) -> list[str]:
    """The documented rules an accepted config must satisfy (an independent restatement of the
    caps in docs/options.md, checked on what audit accepted)."""
    bad = []
    for key, cap in CONFIG_INT_CAPS.items():
        parent, _, leaf = key.rpartition(".")
        holder = cfg.get(parent) if parent else cfg
        if not isinstance(holder, dict) or holder.get(leaf) is None:
            continue
        v = _as_int(holder[leaf])
        if v is None or not cap.lo <= v <= cap.hi:
            bad.append(f"{key}={holder[leaf]!r}")
    e = _as_int(cfg.get("n_routed_experts") or cfg.get("num_experts") or 0) or 0
    if (_as_int(cfg.get("num_hidden_layers")) or 0) * e > MAX_EXPERT_LAYERS:
        bad.append("layers x experts")
    rope = cfg.get("rope_scaling")
    if rope is not None and not isinstance(rope, dict):
        bad.append("rope_scaling")
    if isinstance(rope, dict) and rope.get("factor") is not None:
        f = rope["factor"]
        if isinstance(f, bool) or not isinstance(f, (int, float)) or not (math.isfinite(f) and 0 < f <= MAX_ROPE_FACTOR):
            bad.append(f"rope_scaling.factor={f!r}")
    return bad


def _write_cfg(d: Path, cfg: dict) -> Path:
    d.mkdir(parents=True, exist_ok=True)
    (d / "config.json").write_text(json.dumps(cfg))      # NaN / Infinity spelled as Python's json reads them
    return d


@SETTINGS
@given(cfg=configs())
def test_generated_configs(cfg: dict, capfd) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        d = _write_cfg(Path(tmp) / "model", cfg)
        before = fingerprint(d)
        run = run_in_process(["memory", d, "--format", "json"], capfd)
        check_contract(run, "any")
        assert run.rc != 3
        assert fingerprint(d) == before
        if run.rc == 0:
            assert accepted_config_is_plausible(cfg) == [], f"ACCEPTED-INVALID config: {cfg}"
            worst = json.loads(run.out)["worst_rank"]["bytes"]
            assert 0 <= worst < 2 ** 60, f"astronomical figure {worst} for {cfg}"


@settings(max_examples=max(3, EXAMPLES // 8), deadline=None, derandomize=True,
          suppress_health_check=[HealthCheck.too_slow])
@given(cfg=configs())
def test_generated_configs_out_of_process(cfg: dict) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        d = _write_cfg(Path(tmp) / "model", cfg)
        before = fingerprint(d)
        run = run_out_of_process(["inventory", d])
        check_contract(run, "any")
        assert fingerprint(d) == before


# ---------------------------------------------------------------------------- directory layouts
CONFIG_KINDS = ["valid", "missing", "not-json", "directory", "dangling-link", "loop", "empty"]
SHARD_KINDS = ["valid", "truncated", "huge-header-length", "empty-file", "garbage", "directory", "dangling-link",
               "link-to-first", "hidden"]
INDEX_KINDS = ["none", "valid", "missing-shard", "escapes", "not-json", "list", "absolute"]
DESC_KINDS = ["none", "valid", "not-json", "list", "wrong-values"]
OPTIONAL_KINDS = ["none", "valid", "file", "empty-dir"]


def _shard(d: Path, i: int, kind: str) -> str | None:
    name = f"model-{i:05d}.safetensors"
    p = d / name
    if kind == "valid":
        save_file({f"layer{i}.weight": np.ones((2, 2), np.float32)}, str(p))
    elif kind == "truncated":
        save_file({f"layer{i}.weight": np.ones((2, 2), np.float32)}, str(p))
        p.write_bytes(p.read_bytes()[:-5])
    elif kind == "huge-header-length":
        p.write_bytes(struct.pack("<Q", 2 ** 62) + b"{}")
    elif kind == "empty-file":
        p.write_bytes(b"")
    elif kind == "garbage":
        p.write_bytes(os.urandom(64))
    elif kind == "directory":
        p.mkdir()
    elif kind == "dangling-link":
        os.symlink("nowhere.safetensors", p)
    elif kind == "link-to-first":
        os.symlink(f"model-{0:05d}.safetensors", p)
    elif kind == "hidden":
        name = f".hidden-{i}.safetensors"
        save_file({f"hidden{i}.weight": np.ones((2,), np.float32)}, str(d / name))
        return None
    return name


@st.composite
def layouts(draw) -> dict:
    return {"config": draw(st.sampled_from(CONFIG_KINDS)),
            "shards": draw(st.lists(st.sampled_from(SHARD_KINDS), max_size=3)),
            "index": draw(st.sampled_from(INDEX_KINDS)), "desc": draw(st.sampled_from(DESC_KINDS)),
            "optional": draw(st.sampled_from(OPTIONAL_KINDS))}


def build_layout(d: Path, lay: dict) -> None:
    d.mkdir(parents=True)
    cfg = d / "config.json"
    {"valid": lambda: cfg.write_text(json.dumps(DENSE_CONFIG)), "missing": lambda: None,
     "not-json": lambda: cfg.write_text("{nope"), "directory": lambda: cfg.mkdir(),
     "dangling-link": lambda: os.symlink("gone.json", cfg), "loop": lambda: os.symlink("config.json", cfg),
     "empty": lambda: cfg.write_text("")}[lay["config"]]()
    names = [n for n in (_shard(d, i, k) for i, k in enumerate(lay["shards"])) if n]
    wm = {f"layer{i}.weight": n for i, n in enumerate(names)}
    idx = d / "model.safetensors.index.json"
    kind = lay["index"]
    if kind == "valid":
        idx.write_text(json.dumps({"weight_map": wm}))
    elif kind == "missing-shard":
        idx.write_text(json.dumps({"weight_map": {**wm, "ghost.weight": "model-99999.safetensors"}}))
    elif kind == "escapes":
        idx.write_text(json.dumps({"weight_map": {"x.weight": "../outside.safetensors"}}))
    elif kind == "absolute":
        idx.write_text(json.dumps({"weight_map": {"x.weight": "/etc/passwd"}}))
    elif kind == "not-json":
        idx.write_text("[[[")
    elif kind == "list":
        idx.write_text("[]")
    desc = d / "quant_model_description.json"
    kind = lay["desc"]
    if kind == "valid":
        desc.write_text(json.dumps({"model_quant_type": "FLOAT", **{k: "FLOAT" for k in wm}}))
    elif kind == "not-json":
        desc.write_text("{")
    elif kind == "list":
        desc.write_text("[1]")
    elif kind == "wrong-values":
        desc.write_text(json.dumps({k: 7 for k in wm} or {"a": None}))
    opt = d / "optional"
    if lay["optional"] == "valid":
        opt.mkdir()
        save_file({"quarot.weight": np.ones((2,), np.float32)}, str(opt / "quarot.safetensors"))
    elif lay["optional"] == "file":
        opt.write_text("not a directory")
    elif lay["optional"] == "empty-dir":
        opt.mkdir()


@SETTINGS
@given(lay=layouts(), command=st.sampled_from(["inventory", "memory", "perf"]))
def test_generated_layouts(lay: dict, command: str, capfd) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp) / "model"
        build_layout(d, lay)
        before = fingerprint(d)
        run = run_in_process([command, d], capfd)
        check_contract(run, "any")
        assert fingerprint(d) == before
        damaged = lay["config"] != "valid" or any(k in ("truncated", "huge-header-length", "empty-file", "garbage",
                                                        "directory", "dangling-link", "link-to-first")
                                                   for k in lay["shards"])
        if command != "perf" and damaged:
            assert run.rc == 2, f"ACCEPTED-INVALID layout {lay}"


# ---------------------------------------------------------------------------- headers vs safetensors
NAMES = st.one_of(st.text(min_size=1, max_size=12), st.text(alphabet="ab.:\\\"/0129é", min_size=1, max_size=300),
                  st.sampled_from(["x", "a" * 257, "model.layers.0.mlp.weight", "1" * 40, "__metadata__"]))
DIMS = st.one_of(st.integers(0, 4), st.sampled_from([2 ** 31, 2 ** 61, 2 ** 63, 2 ** 64 - 1]))


@st.composite
def headers(draw) -> tuple[bytes, bytes]:
    """(header JSON bytes, data bytes): mostly consistent (contiguous offsets, right sizes), with
    one perturbation drawn from the classes of issue 8."""
    entries = draw(st.dictionaries(NAMES, st.tuples(st.sampled_from(sorted(DTYPE_BITS)), st.lists(DIMS, max_size=10)),
                                   min_size=1, max_size=4))
    header: dict = {}
    off = 0
    for name, (dtype, shape) in entries.items():
        n = 1
        for s in shape:
            n *= s
        nbytes = (n * DTYPE_BITS[dtype] + 7) // 8 if n < 2 ** 20 else 0
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [off, off + nbytes]}
        off += nbytes
    if draw(st.booleans()):
        header["__metadata__"] = draw(st.dictionaries(st.text(max_size=4), st.text(max_size=4), max_size=2))
    text = json.dumps(header, ensure_ascii=draw(st.booleans()), indent=draw(st.sampled_from([None, 0, 1])))
    perturb = draw(st.sampled_from(["none", "none", "gap", "short-data", "nest", "spaces"]))
    data = b"\0" * off
    if perturb == "gap":
        data += b"\0"
    elif perturb == "short-data" and data:
        data = data[:-1]
    elif perturb == "nest":
        depth = draw(st.integers(1, 300))
        text = text[:-1] + ', "zz": {"dtype": "F32", "shape": [], "data_offsets": [%d, %d], "x": %s}}' % (
            off, off + 4, "[" * depth + "]" * depth)
        data += b"\0" * 4
    elif perturb == "spaces":
        text = " " * draw(st.integers(0, 5000)) + text
    return text.encode(), data


@SETTINGS
@given(hd=headers())
def test_generated_headers_match_safetensors(hd: tuple[bytes, bytes], capfd) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        d = Path(tmp) / "model"
        d.mkdir()
        (d / "config.json").write_text(json.dumps(DENSE_CONFIG))
        p = raw_st(d / "model.safetensors", hd[0], hd[1])
        before = fingerprint(d)
        run = run_in_process(["inventory", d, "--by", "tensor", "--format", "json"], capfd)
        check_contract(run, "any")
        assert fingerprint(d) == before
        accepted, entries = library_verdict(p)
        if run.rc == 0:
            assert accepted, "ACCEPTED-INVALID header"
            ours = {r["name"]: (r["dtype"], list(r["shape"])) for r in json.loads(run.out)["tensor_rows"]}
            assert ours == entries
        else:
            assert not accepted or refused_by_documented_rule(run.err), f"VALID-REFUSED: {run.err.strip()}"
