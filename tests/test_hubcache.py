"""Hugging Face hub cache directories: a repository root resolves refs/main to its snapshot, a
snapshot is read as is, and reports name the repository, never the hash. The trees are built like
the real cache: snapshot files are relative symlinks into blobs/."""
from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from auditor.cli import main
from auditor.errors import AuditInputError
from auditor.hubcache import repo_id, resolve_hub_dir
from auditor.source import open_model
from auditor.synth import synthesize

REV = "0123456789abcdef0123456789abcdef01234567"
TINY = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "torch_dtype": "bfloat16",
        "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "head_dim": 16, "intermediate_size": 128, "vocab_size": 256, "max_position_embeddings": 512,
        "tie_word_embeddings": False}


def hub_tree(root: Path, files: dict[str, Path], rev: str = REV, ref: str | None = REV) -> Path:
    """models--acme--tiny-dense/{blobs, snapshots/<rev>/<file> -> ../../blobs/<blob>, refs/main}."""
    repo = root / "models--acme--tiny-dense"
    (repo / "blobs").mkdir(parents=True)
    snap = repo / "snapshots" / rev
    snap.mkdir(parents=True)
    for i, (name, src) in enumerate(sorted(files.items())):
        blob = repo / "blobs" / f"{i:064x}"
        os.replace(src, blob)
        os.symlink(os.path.join("..", "..", "blobs", blob.name), snap / name)
    if ref is not None:
        (repo / "refs").mkdir()
        (repo / "refs" / "main").write_text(ref)        # the hub writes the hash without a newline
    return repo


@pytest.fixture
def tiny_checkpoint(tmp_path: Path) -> dict[str, Path]:
    out = tmp_path / "written"
    synthesize(out, "tiny-dense", "bf16", config=TINY)
    return {p.name: p for p in out.iterdir()}


def test_repo_id_from_directory_name():
    assert repo_id("models--zai-org--GLM-5.1") == "zai-org/GLM-5.1"
    assert repo_id("models--gpt2") == "gpt2"
    assert repo_id("GLM-5.1") is None
    assert repo_id("models--") is None


def test_repo_root_resolves_refs_main(tmp_path, tiny_checkpoint):
    repo = hub_tree(tmp_path / "hub", tiny_checkpoint)
    snap = resolve_hub_dir(repo)
    assert snap.path == repo / "snapshots" / REV and snap.repo == "acme/tiny-dense" and snap.via_ref
    src = open_model(str(repo))
    assert src.spec.name == "acme/tiny-dense" and src.kind == "checkpoint"
    assert len(src.table) > 0                        # the symlinked shard was read
    assert any(REV in f.message for f in src.findings)


def test_snapshot_dir_is_named_by_its_repo(tmp_path, tiny_checkpoint):
    repo = hub_tree(tmp_path / "hub", tiny_checkpoint)
    src = open_model(str(repo / "snapshots" / REV))
    assert src.spec.name == "acme/tiny-dense"
    assert REV not in src.spec.name


def test_snapshot_named_relative_to_the_working_dir(tmp_path, tiny_checkpoint, monkeypatch):
    repo = hub_tree(tmp_path / "hub", tiny_checkpoint)
    monkeypatch.chdir(repo / "snapshots" / REV)
    assert open_model(".", tables=False).spec.name == "acme/tiny-dense"


def test_plain_directory_is_not_a_hub_dir(tmp_path):
    (tmp_path / "some-model").mkdir()
    assert resolve_hub_dir(tmp_path / "some-model") is None


def test_root_without_refs_main_is_refused(tmp_path, tiny_checkpoint):
    repo = hub_tree(tmp_path / "hub", tiny_checkpoint, ref=None)
    with pytest.raises(AuditInputError, match="without refs/main"):
        open_model(str(repo))


def test_dangling_ref_is_refused(tmp_path, tiny_checkpoint):
    repo = hub_tree(tmp_path / "hub", tiny_checkpoint, ref="f" * 40)
    with pytest.raises(AuditInputError, match="dangling ref"):
        open_model(str(repo))


def test_cli_reports_the_repo_and_refuses_in_one_line(tmp_path, tiny_checkpoint, capsys, snapshot):
    repo = hub_tree(tmp_path / "hub", tiny_checkpoint)
    before = snapshot(repo)
    out = tmp_path / "mem.json"
    assert main(["memory", str(repo), "--format", "json", "-o", str(out)]) == 0
    rep = json.loads(out.read_text())
    assert rep["model"]["name"] == "acme/tiny-dense"
    assert main(["inventory", str(repo)]) == 0
    text = capsys.readouterr().out
    assert "audit inventory: acme/tiny-dense" in text and f"audit inventory: {REV}" not in text
    assert snapshot(repo) == before                  # nothing written into the cache
    (repo / "refs" / "main").write_text("e" * 40)
    assert main(["perf", str(repo)]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("audit: error:") and "dangling ref" in err[0]
