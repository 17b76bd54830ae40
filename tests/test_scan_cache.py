"""The scan cache (auditor/inventory/scancache.py): a hit gives exactly the scan a fresh parse gives,
anything changed or damaged is a miss, errors are never stored, and a cache that cannot be written
changes nothing but speed.

The reference is always the same directory scanned with the cache off (the suite's default, see
conftest.py); the real safetensors library writes every checkpoint here.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from safetensors.numpy import save_file

from auditor.inventory import scancache
from auditor.inventory import scan as scan_mod
from auditor.inventory.scan import scan_model_dir
from auditor.errors import AuditInputError


def _checkpoint(d: Path, seed: int = 0, shards: int = 3, with_index: bool = True) -> dict[str, str]:
    rng = np.random.default_rng(seed)
    wm: dict[str, str] = {}
    d.mkdir(parents=True, exist_ok=True)
    for s in range(shards):
        rel = f"model-{s + 1:05d}-of-{shards:05d}.safetensors"
        tensors = {f"model.layers.{s}.mlp.w{j}.weight": rng.standard_normal((s + 2, j + 1)).astype(np.float32)
                   for j in range(4)}
        tensors[f"model.layers.{s}.mlp.w0.weight_scale"] = np.ones(s + 2, np.float32)
        tensors[f"model.layers.{s}.mlp.q.weight"] = rng.integers(-8, 8, (3, 4), dtype=np.int8)
        save_file(tensors, str(d / rel), metadata={"format": "pt"})
        wm.update({k: rel for k in tensors})
    if with_index:
        (d / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": wm}))
    return wm


def _columns(res) -> dict:
    t = res.table
    return {"names": t.name.tolist(), "file": t.file.tolist(), "dtype": t.dtype.tolist(), "ndim": t.ndim.tolist(),
            "shape": t.shape.tolist(), "nbytes": t.nbytes.tolist(), "begin": t.begin.tolist(), "end": t.end.tolist(),
            "loaded": t.loaded.tolist(), "files": list(t.files), "wide": dict(t.wide),
            "findings": [tuple(f) for f in res.index_findings], "shard_files": res.shard_files,
            "index_path": res.index_path, "config_path": res.config_path, "quant_desc_path": res.quant_desc_path}


def _reference(d: Path, monkeypatch) -> dict:
    with monkeypatch.context() as m:
        m.setenv(scancache.ENV, "0")
        return _columns(scan_model_dir(d))


@pytest.fixture
def cache_on(tmp_path: Path, monkeypatch) -> Path:
    root = tmp_path / "cache-root"
    monkeypatch.setenv("AUDIT_CACHE", str(root))
    monkeypatch.setenv(scancache.ENV, "1")
    monkeypatch.delenv("AUDIT_EXACT", raising=False)
    return root / "scan"


@pytest.fixture
def parses(monkeypatch) -> list[int]:
    """Counts header parses (a hit makes none)."""
    calls: list[int] = []
    real = scan_mod.parse_header_bytes

    def counting(hb, **kw):
        calls.append(len(hb))
        return real(hb, **kw)

    monkeypatch.setattr(scan_mod, "parse_header_bytes", counting)
    return calls


def test_hit_gives_the_fresh_scan_and_parses_nothing(tmp_path: Path, cache_on: Path, parses, monkeypatch) -> None:
    d = tmp_path / "ckpt"
    _checkpoint(d)
    (d / "config.json").write_text("{}")
    ref = _reference(d, monkeypatch)
    parses.clear()
    first = _columns(scan_model_dir(d))               # a miss: parsed, then stored
    assert parses == [3] and len(list(cache_on.glob("*.scan"))) == 1
    second = scan_model_dir(d)                          # a hit: no parse at all
    assert parses == [3]
    assert first == ref and _columns(second) == ref
    # the table carries its key, which the classification cache keys on
    assert second.table.cache_key is not None and second.table.cache_dir == d
    # the directory itself is untouched: nothing written beside the checkpoint
    assert sorted(p.name for p in d.iterdir()) == sorted(
        ["config.json", "model.safetensors.index.json"] + [f"model-{s:05d}-of-00003.safetensors" for s in (1, 2, 3)])


def test_index_findings_survive_the_cache(tmp_path: Path, cache_on: Path, parses, monkeypatch) -> None:
    d = tmp_path / "ckpt"
    wm = _checkpoint(d)
    del wm["model.layers.0.mlp.w0.weight"]
    wm["ghost.weight"] = "model-00001-of-00003.safetensors"
    (d / "model.safetensors.index.json").write_text(json.dumps({"weight_map": wm}))
    ref = _reference(d, monkeypatch)
    assert len(ref["findings"]) == 2                    # one stored-but-unlisted, one listed-but-absent
    scan_model_dir(d)
    parses.clear()
    assert _columns(scan_model_dir(d)) == ref and parses == []


@pytest.mark.parametrize("change", ["shape", "metadata", "index", "new_shard", "removed_shard", "renamed_dir"])
def test_any_change_is_a_miss(tmp_path: Path, cache_on: Path, parses, monkeypatch, change: str) -> None:
    d = tmp_path / "ckpt"
    _checkpoint(d)
    scan_model_dir(d)
    if change == "shape":          # same names, one tensor's shape (and so its size) changed
        save_file({"model.layers.0.mlp.w0.weight": np.zeros((9, 9), np.float32)},
                  str(d / "model-00001-of-00003.safetensors"))
    elif change == "metadata":     # a header byte that changes no column: still a miss (bytes are the key)
        p = d / "model-00002-of-00003.safetensors"
        raw = bytearray(p.read_bytes())
        at = raw.index(b'"pt"')
        raw[at + 1:at + 3] = b"np"
        p.write_bytes(bytes(raw))
    elif change == "index":
        (d / "model.safetensors.index.json").write_text(json.dumps({"weight_map": {}}))
    elif change == "new_shard":
        save_file({"extra.weight": np.zeros(3, np.float32)}, str(d / "extra.safetensors"))
    elif change == "removed_shard":
        (d / "model-00003-of-00003.safetensors").unlink()
        (d / "model.safetensors.index.json").unlink()
    else:
        d = d.rename(tmp_path / "moved")
    ref = _reference(d, monkeypatch)
    parses.clear()
    assert _columns(scan_model_dir(d)) == ref
    assert parses, "a changed checkpoint must be parsed again"


def test_a_scan_that_fails_is_never_stored(tmp_path: Path, cache_on: Path, monkeypatch) -> None:
    d = tmp_path / "ckpt"
    _checkpoint(d, with_index=False)
    p = d / "model-00002-of-00003.safetensors"
    raw = p.read_bytes()
    p.write_bytes(raw[:-4])                             # the data no longer ends where the header says
    with monkeypatch.context() as m:
        m.setenv(scancache.ENV, "0")
        with pytest.raises(AuditInputError) as ref:
            scan_model_dir(d)
    for _ in range(2):
        with pytest.raises(AuditInputError) as got:
            scan_model_dir(d)
        assert str(got.value) == str(ref.value)
    assert not cache_on.exists() or not list(cache_on.glob("*.scan"))


def test_a_tensor_stored_twice_is_refused_on_every_run(tmp_path: Path, cache_on: Path) -> None:
    d = tmp_path / "ckpt"
    d.mkdir()
    save_file({"w": np.zeros(2, np.float32)}, str(d / "a.safetensors"))
    save_file({"w": np.zeros(2, np.float32)}, str(d / "b.safetensors"))
    for _ in range(2):
        with pytest.raises(AuditInputError, match="also stored in"):
            scan_model_dir(d)
    assert not list(cache_on.glob("*.scan")) if cache_on.exists() else True


@pytest.mark.parametrize("switch", [(scancache.ENV, "0"), (scancache.ENV, "off"), ("AUDIT_EXACT", "1")])
def test_switched_off_stores_nothing(tmp_path: Path, cache_on: Path, monkeypatch, switch) -> None:
    monkeypatch.setenv(*switch)
    d = tmp_path / "ckpt"
    _checkpoint(d)
    scan_model_dir(d)
    assert not cache_on.exists()


def test_an_unwritable_cache_changes_nothing(tmp_path: Path, monkeypatch) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the cache root should be")
    monkeypatch.setenv("AUDIT_CACHE", str(blocker))
    monkeypatch.setenv(scancache.ENV, "1")
    monkeypatch.delenv("AUDIT_EXACT", raising=False)
    d = tmp_path / "ckpt"
    _checkpoint(d)
    ref = _reference(d, monkeypatch)
    assert _columns(scan_model_dir(d)) == ref == _columns(scan_model_dir(d))
    assert blocker.read_text().startswith("a file")


def _entry(cache_on: Path) -> Path:
    (entry,) = cache_on.glob("*.scan")
    return entry


@pytest.mark.parametrize("damage", ["truncate", "payload_byte", "meta_byte", "meta_value", "garbage", "empty",
                                    "directory"])
def test_a_damaged_entry_is_a_miss(tmp_path: Path, cache_on: Path, parses, monkeypatch, damage: str) -> None:
    d = tmp_path / "ckpt"
    _checkpoint(d)
    scan_model_dir(d)
    entry = _entry(cache_on)
    raw = bytearray(entry.read_bytes())
    if damage == "truncate":
        entry.write_bytes(bytes(raw[: len(raw) // 2]))
    elif damage == "payload_byte":
        raw[-20] ^= 0x01
        entry.write_bytes(bytes(raw))
    elif damage == "meta_byte":
        at = raw.index(b'"rows": ') + len(b'"rows": ')     # inside the meta: its key still matches
        raw[at] = ord("9") if raw[at] != ord("9") else ord("8")
        entry.write_bytes(bytes(raw))
    elif damage == "meta_value":    # a factorized column's distinct value: still valid JSON, same length
        at = raw.index(b'"F32"') + 1
        raw[at] = ord("G")
        entry.write_bytes(bytes(raw))
    elif damage == "garbage":
        entry.write_bytes(os.urandom(4096))
    elif damage == "empty":
        entry.write_bytes(b"")
    else:
        entry.unlink()
        entry.mkdir()
    ref = _reference(d, monkeypatch)
    parses.clear()
    assert _columns(scan_model_dir(d)) == ref
    assert parses == [3]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_corruption_is_a_miss_or_the_same_scan(tmp_path: Path, data) -> None:
    """Arbitrary byte flips, cuts and insertions in a stored entry: the cache answers None or
    exactly the stored scan, and never raises."""
    root = tmp_path / "prop"
    d = root / "ckpt"
    if not d.exists():
        _checkpoint(d, seed=3, shards=2)
    os.environ["AUDIT_CACHE"] = str(root / "cache")
    try:
        key, shards, stored = _stored_entry(d)
        ref = scancache.load(d, key, shards)
        raw = bytearray(stored)
        for _ in range(data.draw(st.integers(1, 4))):
            op = data.draw(st.sampled_from(["flip", "cut", "insert"]))
            at = data.draw(st.integers(0, max(len(raw) - 1, 0)))
            if op == "flip" and raw:
                raw[at] ^= data.draw(st.integers(1, 255))
            elif op == "cut":
                del raw[at:at + data.draw(st.integers(1, 64))]
            else:
                raw[at:at] = data.draw(st.binary(min_size=1, max_size=16))
        scancache._entry_path(d).write_bytes(bytes(raw))
        got = scancache.load(d, key, shards)
        if got is not None:
            assert got[0].name.tolist() == ref[0].name.tolist()
            for col in ("file", "dtype", "ndim", "shape", "begin", "end", "nbytes", "loaded"):
                assert np.array_equal(getattr(got[0], col), getattr(ref[0], col)), col
            assert got[1] == ref[1]
    finally:
        os.environ.pop("AUDIT_CACHE", None)


def _stored_entry(d: Path) -> tuple[str, list[str], bytes]:
    """(key, shard list, entry bytes) of a fresh store of ``d``'s scan."""
    from auditor.inventory.shards import HeaderBytes
    shards = sorted(p.name for p in d.glob("*.safetensors"))
    index = sorted(d.glob("*.safetensors.index.json"))
    hb = HeaderBytes([d / s for s in shards])
    key = scancache.scan_key(d, shards, hb, scancache.index_digest(index, [p.read_bytes() for p in index]))
    prev = os.environ.get(scancache.ENV)
    os.environ[scancache.ENV] = "0"
    try:
        res = scan_model_dir(d)
    finally:
        os.environ[scancache.ENV] = prev if prev is not None else "0"
    scancache.store(d, key, res.table, res.index_findings)
    raw = scancache._entry_path(d).read_bytes()
    assert scancache.load(d, key, shards) is not None
    return key, shards, raw


def test_at_most_max_entries_are_kept(tmp_path: Path, cache_on: Path, monkeypatch) -> None:
    monkeypatch.setattr(scancache, "MAX_ENTRIES", 3)
    dirs = []
    for i in range(5):
        d = tmp_path / f"ckpt{i}"
        _checkpoint(d, seed=i, shards=1, with_index=False)
        scan_model_dir(d)
        dirs.append(d)
        # distinct mtimes, so "least recently written" is well defined on coarse clocks
        for j, p in enumerate(sorted(cache_on.glob("*.scan"), key=lambda p: p.stat().st_mtime)):
            os.utime(p, (1_000_000 + j, 1_000_000 + j))
        os.utime(scancache._entry_path(d), (2_000_000 + i, 2_000_000 + i))
    kept = {p.name for p in cache_on.glob("*.scan")}
    assert kept == {scancache._entry_path(d).name for d in dirs[-3:]}


def test_memory_report_is_the_same_from_the_cache(tmp_path: Path, cache_on: Path, monkeypatch) -> None:
    """The whole `audit memory` answer, cache off, first run and hit: byte-identical."""
    from auditor.cli import main
    from auditor.model.presets import preset_config
    from auditor.synth import synthesize
    d = tmp_path / "glm"
    cfg = dict(preset_config("glm-5.1"), num_hidden_layers=6)     # 3 dense + 3 MoE layers, and MTP
    synthesize(d, model="glm-5.1", recipe="w8a8", config=cfg, shard_bytes=1 << 30)
    outs = []
    for env in ("0", "1", "1"):
        monkeypatch.setenv(scancache.ENV, env)
        out = tmp_path / f"m{len(outs)}.json"
        assert main(["memory", str(d), "--tp", "16", "--dp", "2", "--ep", "32",
                     "--format", "json", "-o", str(out), "--no-progress"]) == 0
        outs.append(out.read_bytes())
    assert outs[0] == outs[1] == outs[2]
    assert len(list(cache_on.glob("*.scan"))) == 1


# --- the description and the classification, through the same cache ---------------------------

def _tiny_quantized(d: Path) -> Path:
    """A tiny msModelSlim W8A8 checkpoint with its description (and rot/optional files)."""
    from auditor.synth import synthesize
    tiny = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "torch_dtype": "bfloat16",
            "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
            "head_dim": 16, "intermediate_size": 128, "vocab_size": 256, "max_position_embeddings": 512,
            "tie_word_embeddings": False}
    synthesize(d, "tiny", "w8a8", config=tiny, shard_bytes=40_000)
    return d


def _classified_fields(ct) -> dict:
    a = ct.addr
    out = {f: getattr(a, f).tolist() for f in ("layer", "expert", "block", "module", "projection", "suffix",
                                              "modcode", "sufcode")}
    out.update(modules=list(a.modules), suffixes=list(a.suffixes), category=ct.category.tolist(),
               kind=ct.kind.tolist(), scheme=ct.scheme.tolist(), findings=[f.to_dict() for f in ct.findings],
               scheme_code=None if ct.scheme_code is None else ct.scheme_code.tolist(),
               scheme_names=list(ct.scheme_names), in_desc=None if ct.in_desc is None else ct.in_desc.tolist())
    return out


def _open_and_classify(d: Path):
    from auditor.model.classify import classify
    from auditor.source import open_model
    src = open_model(d, progress=False)
    return src, classify(src.table, src.spec.Lyr, src.desc)


def test_classification_hit_is_the_fresh_classification(tmp_path: Path, cache_on: Path, monkeypatch) -> None:
    from auditor.inventory.desccache import CachedDescription
    from auditor.model import classify as classify_mod
    d = _tiny_quantized(tmp_path / "tiny")
    with monkeypatch.context() as m:
        m.setenv(scancache.ENV, "0")
        ref_src, ref = _open_and_classify(d)
    assert ref_src.desc is not None and not isinstance(ref_src.desc, CachedDescription)
    calls: list[int] = []
    real = classify_mod._classify
    monkeypatch.setattr(classify_mod, "_classify", lambda *a: calls.append(1) or real(*a))
    _open_and_classify(d)                               # a miss: classified, then stored
    assert calls == [1] and {p.suffix for p in cache_on.iterdir()} == {".scan", ".desc", ".classified"}
    src, hit = _open_and_classify(d)
    assert calls == [1], "a hit classifies nothing"
    assert _classified_fields(hit) == _classified_fields(ref)
    # the description's summary came from the cache; what it answers is what the file says
    desc, fresh = src.desc, ref_src.desc
    assert isinstance(desc, CachedDescription) and desc._real is None
    assert desc.globals == fresh.globals and desc.findings == fresh.findings
    assert desc.scheme_values() == fresh.scheme_values()
    assert desc.any_key_contains("norm.bias") == fresh.any_key_contains("norm.bias")
    for key in ("model.embed_tokens.weight", "embed.weight", "lm_head.weight", "head.weight"):
        assert (key in desc) == (key in fresh)
    assert desc._real is None, "the summary answered every question a memory run asks"
    assert desc.per_tensor == fresh.per_tensor and len(desc) == len(fresh)      # parsed when asked
    assert [f.message for f in src.findings] == [f.message for f in ref_src.findings]


def test_a_changed_description_is_a_miss(tmp_path: Path, cache_on: Path, monkeypatch) -> None:
    d = _tiny_quantized(tmp_path / "tiny")
    _open_and_classify(d)
    (desc_path,) = d.glob("quant_model_description*.json")
    doc = json.loads(desc_path.read_text())
    first = next(k for k, v in doc.items() if v == "W8A8")
    doc[first] = "FLOAT"                                # one linear now described as float
    desc_path.write_text(json.dumps(doc))
    with monkeypatch.context() as m:
        m.setenv(scancache.ENV, "0")
        ref_src, ref = _open_and_classify(d)
    src, got = _open_and_classify(d)
    assert _classified_fields(got) == _classified_fields(ref)
    assert src.desc.per_tensor[first] == "FLOAT" and src.desc.scheme_values() == ref_src.desc.scheme_values()


def test_the_summary_knows_the_keys_the_engine_asks_for() -> None:
    from auditor.inventory.desccache import ASKED_KEYS
    from auditor.model.names import spellings
    assert set(ASKED_KEYS) == {s for m in ("model.embed_tokens", "lm_head") for s in spellings(f"{m}.weight")}


def test_a_damaged_classification_entry_is_a_miss(tmp_path: Path, cache_on: Path, monkeypatch) -> None:
    d = _tiny_quantized(tmp_path / "tiny")
    with monkeypatch.context() as m:
        m.setenv(scancache.ENV, "0")
        _, ref = _open_and_classify(d)
    _open_and_classify(d)
    for p in cache_on.iterdir():
        if p.suffix in (".classified", ".desc"):
            raw = bytearray(p.read_bytes())
            raw[len(raw) // 2] ^= 0xFF
            p.write_bytes(bytes(raw))
    _, got = _open_and_classify(d)
    assert _classified_fields(got) == _classified_fields(ref)


@settings(max_examples=300, deadline=None)
@given(buf=st.binary(min_size=0, max_size=120),
       spans=st.lists(st.tuples(st.integers(0, 119), st.integers(0, 40)), min_size=1, max_size=20),
       ordered=st.booleans())
def test_compacted_names_are_the_spans_bytes_in_row_order(buf: bytes, spans, ordered: bool) -> None:
    """The stored names buffer is every row's span, in row order, whatever the spans are: the byte-mask
    path (ordered, non-empty, non-overlapping spans, a scan's) and the gather path agree with slicing."""
    from auditor.inventory.namespans import PAD, NameSpans
    raw = buf.ljust(160, b"x") + PAD
    if ordered:                        # laid out like a scan's: in buffer order, gaps between
        at, rows = 0, []
        for gap, n in spans:
            rows.append((at + gap % 7, n))
            at += gap % 7 + n
        spans = [(s, n) for s, n in rows if s + n <= 160]
        if not spans:
            return
    start = np.array([s for s, _ in spans], dtype=np.int64)
    length = np.array([min(n, 160 - s) for s, n in spans], dtype=np.int64)
    names, new_start, new_length = scancache._compact_names(NameSpans(raw, start, length))
    want = [raw[s:s + n] for s, n in zip(start.tolist(), length.tolist())]
    assert names == b"".join(want) + PAD
    assert [names[a:a + n] for a, n in zip(new_start.tolist(), new_length.tolist())] == want


def test_dtype_codes_name_every_row() -> None:
    """The dtype column's codes decode to the column itself, for the reader's names and for any other."""
    col = np.array(["BF16", "F32", "I8", "BF16", "F8_E4M3", "I8"])
    names, codes = scancache._dtype_codes(col)
    assert np.array_equal(np.array(names)[codes], col)
    odd = np.array(["BF16", "Q4_K", "BF16"])          # not a safetensors dtype: factorized, still exact
    names, codes = scancache._dtype_codes(odd)
    assert np.array_equal(np.array(names)[codes], odd)
    names, codes = scancache._dtype_codes(np.array([], dtype=str))
    assert len(codes) == 0
