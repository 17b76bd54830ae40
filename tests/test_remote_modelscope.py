"""ms://org/name against the ModelScope stand-in: its 200 + Content-Range answer to a Range, the
listing digest as the snapshot's name, its endpoint variables and its failures."""
from __future__ import annotations

import json
import os

import pytest

from auditor.remote import modelscope
from test_remote_hf import HEADER_FILES, SHARDS, WHOLE_FILES, comparable, one_error_line, run, snapshots
from test_remote_standin import Repo, StandIn, header_end, point_at, tiny_repo


@pytest.fixture
def remote_env(tmp_path, monkeypatch):
    hub = StandIn()
    yield point_at(hub, tmp_path, monkeypatch)
    hub.close()


@pytest.fixture
def tiny(tmp_path, remote_env):
    root = tiny_repo(tmp_path / "tiny")
    remote_env.repos["acme/tiny"] = Repo(root)
    return root


def test_memory_equals_the_local_copy(tmp_path, tiny, remote_env, capsys):
    rc, out, err = run(capsys, "memory", "ms://acme/tiny", "--format", "json")
    assert rc == 0, err
    rc2, loc, _ = run(capsys, "memory", str(tiny), "--format", "json")
    remote, local = json.loads(out), json.loads(loc)
    assert comparable(remote) == comparable(local)
    assert remote["model"]["name"] == "acme/tiny" and remote["model"]["path"] == "ms://acme/tiny@master"
    (note,) = [f["message"] for f in remote["findings"] if f["message"].startswith("ModelScope")]
    assert "listing digest" in note and "no commit id" in note
    reads = remote_env.file_reads()
    assert sorted(e.file for e in reads) == sorted(WHOLE_FILES + HEADER_FILES)
    for e in reads:                       # the real server's answer to a Range: 200 with a Content-Range
        assert e.status == 200 and (e.range is None) == (e.file in WHOLE_FILES)
    (snap,) = snapshots(tmp_path)
    for rel in SHARDS:
        end = header_end(tiny / rel)
        mirrored = (snap / "files" / rel).read_bytes()
        assert mirrored[:end] == (tiny / rel).read_bytes()[:end] and not any(mirrored[end:])
    remote_env.clear()
    rc, again, _ = run(capsys, "memory", "ms://acme/tiny", "--format", "json")
    assert again == out and remote_env.log == []


def test_listing_digest_names_the_snapshot(tmp_path, tiny, remote_env, capsys, monkeypatch):
    """No commit id: any change to the listing is a new snapshot; an unchanged one is reused."""
    monkeypatch.setenv("AUDIT_REMOTE_TTL", "0")
    assert run(capsys, "inventory", "ms://acme/tiny")[0] == 0
    remote_env.clear()
    assert run(capsys, "inventory", "ms://acme/tiny")[0] == 0
    assert remote_env.file_reads() == [] and len(remote_env.log) == 1          # the listing only
    with open(tiny / "config.json", "a") as fh:
        fh.write("\n")
    assert run(capsys, "inventory", "ms://acme/tiny")[0] == 0
    assert len(snapshots(tmp_path)) == 2


def test_redirect_drops_token_and_cookie(tmp_path, tiny, remote_env, capsys, monkeypatch):
    cdn = StandIn(dict(remote_env.repos))
    try:
        remote_env.other, remote_env.faults.redirect = cdn, True
        monkeypatch.setenv("MODELSCOPE_API_TOKEN", "ms-secret")
        rc, _, err = run(capsys, "inventory", "ms://acme/tiny")
        assert rc == 0, err
        assert all(e.authorization == "Bearer ms-secret" and "m_session_id=ms-secret" in e.cookie
                   for e in remote_env.file_reads())
        assert len(cdn.file_reads()) == len(WHOLE_FILES + HEADER_FILES)
        assert all(e.authorization is None and e.cookie is None for e in cdn.log)
    finally:
        cdn.close()


@pytest.mark.parametrize("model, token, needle", [
    ("ms://acme/absent", None, "ms://acme/absent: repository or revision 'master' not found on {url}"),
    ("ms://acme/tiny@v9", None, "ms://acme/tiny@v9: repository or revision 'v9' not found on {url}"),
    ("ms://acme/private", None, "ms://acme/private: not authorized (HTTP 401): private: set MODELSCOPE_API_TOKEN"),
    ("ms://acme/private", "wrong", "ms://acme/private: not authorized (HTTP 401): the token in MODELSCOPE_API_TOKEN "
                                   "is not accepted"),
])
def test_each_failure_is_one_line(tmp_path, tiny, remote_env, capsys, monkeypatch, model, token, needle):
    remote_env.repos["acme/private"] = Repo(tiny, private_token="right")
    if token:
        monkeypatch.setenv("MODELSCOPE_API_TOKEN", token)
    line = one_error_line(*run(capsys, "memory", model)[::2])
    assert line.startswith("audit: error: " + needle.format(url=remote_env.url)), line
    assert snapshots(tmp_path) == []


def test_missing_and_failing_files(tmp_path, tiny, remote_env, capsys):
    remote_env.faults.missing.add(SHARDS[0])
    line = one_error_line(*run(capsys, "memory", "ms://acme/tiny")[::2])
    assert line.startswith(f"audit: error: ms://acme/tiny@master/{SHARDS[0]}: file not found")
    assert snapshots(tmp_path) == []
    remote_env.faults.missing.clear()
    remote_env.clear()
    remote_env.faults.statuses = {SHARDS[1]: [429, 502], "api": [429]}
    assert run(capsys, "memory", "ms://acme/tiny")[0] == 0
    assert [e.status for e in remote_env.log if e.file is None] == [429, 200]      # the listing, retried by the client
    assert [e.status for e in remote_env.file_reads() if e.file == SHARDS[1]] == [429, 502, 200]


def test_endpoint_variables(monkeypatch):
    """MODELSCOPE_ENDPOINT, else the deprecated MODELSCOPE_DOMAIN (https:// added), else modelscope.cn:
    the client's own precedence, which also picks the cache directory."""
    from modelscope_hub import HubConfig

    for env, want in [({}, "https://modelscope.cn"),
                      ({"MODELSCOPE_DOMAIN": "www.modelscope.ai"}, "https://www.modelscope.ai"),
                      ({"MODELSCOPE_DOMAIN": "http://mirror.local/"}, "http://mirror.local"),
                      ({"MODELSCOPE_ENDPOINT": "https://a.example", "MODELSCOPE_DOMAIN": "b.example"}, "https://a.example")]:
        for var in ("MODELSCOPE_ENDPOINT", "MODELSCOPE_DOMAIN"):
            monkeypatch.delenv(var, raising=False)
        for k, v in env.items():
            monkeypatch.setenv(k, v)
        assert modelscope.endpoint() == want
        with pytest.warns(FutureWarning) if env.keys() == {"MODELSCOPE_DOMAIN"} else _nothing():
            assert HubConfig().endpoint == want          # the client agrees


class _nothing:
    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


def test_listing_digest_is_order_free_and_changes_with_any_field():
    entries = [("a.json", 3, "x"), ("b.safetensors", 10, "y")]
    d = modelscope.listing_digest(entries)
    assert d == modelscope.listing_digest(list(reversed(entries))) and len(d) == 64
    for changed in ([("a.json", 4, "x"), entries[1]], [("a.json", 3, "z"), entries[1]],
                    [("c.json", 3, "x"), entries[1]], entries[:1]):
        assert modelscope.listing_digest(changed) != d
    assert os.path.basename(modelscope.DEFAULT_ENDPOINT) == "modelscope.cn"
