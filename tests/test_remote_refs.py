"""MODEL forms that name a remote repository, and how open_model routes them: hf:// and ms:// always,
a bare org/name only when no such local path exists; presets and local directories never go
near the network."""
from __future__ import annotations

import re
import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from auditor.errors import AuditInputError
from auditor.remote.refs import HF, MS, RemoteRef, parse_remote
from auditor.source import open_model

# Independent statement of the grammar (refs.py's docstring), written as plain predicates.
NAME_CHARS = string.ascii_letters + string.digits + "._-"
EDGE_CHARS = string.ascii_letters + string.digits + "_"
REV_CHARS = string.ascii_letters + string.digits + "._/+-"


def valid_part(p: str) -> bool:
    return (1 <= len(p) <= 96 and all(c in NAME_CHARS for c in p) and p[0] in EDGE_CHARS
            and p[-1] in EDGE_CHARS and "--" not in p and ".." not in p)


def valid_rev(r: str) -> bool:
    return (1 <= len(r) <= 255 and all(c in REV_CHARS for c in r) and r[0] in EDGE_CHARS
            and ".." not in r and "//" not in r and not r.endswith("/"))


parts = st.text(alphabet=NAME_CHARS, min_size=1, max_size=100).filter(valid_part)
revisions = st.text(alphabet=REV_CHARS, min_size=1, max_size=60).filter(valid_rev)


@given(hub=st.sampled_from(["hf", "ms"]), org=parts, name=parts, rev=st.none() | revisions)
def test_valid_forms_round_trip(hub, org, name, rev):
    text = f"{hub}://{org}/{name}" + (f"@{rev}" if rev is not None else "")
    ref = parse_remote(text)
    assert ref == RemoteRef(hub, org, name, rev)
    assert ref.uri == text and ref.repo == f"{org}/{name}"
    assert ref.rev == (rev if rev is not None else {"hf": "main", "ms": "master"}[hub])


@settings(max_examples=400)
@given(body=st.text(alphabet=NAME_CHARS + "/@\\ :?#%\x00é", max_size=40), hub=st.sampled_from(["hf", "ms"]))
def test_any_scheme_form_is_parsed_or_refused_in_one_line(body, hub):
    """Whatever follows the scheme: a ref that fits the grammar, or one AuditInputError naming it."""
    text = f"{hub}://{body}"
    try:
        ref = parse_remote(text)
    except AuditInputError as exc:
        assert "\n" not in exc.one_line() and exc.where == text[:300]
        repo, at, rev = body.partition("@")
        org, _, name = repo.partition("/")
        assert not (valid_part(org) and valid_part(name) and (not at or valid_rev(rev)))
        return
    repo, at, rev = body.partition("@")
    org, _, name = repo.partition("/")
    assert valid_part(org) and valid_part(name) and "/" not in name
    assert ref == RemoteRef(hub, org, name, rev if at else None)
    assert not at or valid_rev(rev)


@given(text=st.text(alphabet=NAME_CHARS + "/@\\ .", max_size=40))
def test_bare_form_only_when_nothing_is_at_that_path(text):
    assert parse_remote(text, local_exists=True) is None
    ref = parse_remote(text, local_exists=False)
    if ref is not None:
        assert ref.hub == HF and ref.bare
        repo, _, _ = text.partition("@")
        assert repo.count("/") == 1 and valid_part(ref.org) and valid_part(ref.name)


def test_named_examples():
    assert parse_remote("hf://zai-org/GLM-5.1") == RemoteRef(HF, "zai-org", "GLM-5.1", None)
    assert parse_remote("ms://Eco-Tech/GLM-5.1-w8a8@v1.0") == RemoteRef(MS, "Eco-Tech", "GLM-5.1-w8a8", "v1.0")
    assert parse_remote("HF://a/b").hub == HF                            # the scheme is case-insensitive
    pr = parse_remote("hf://a/b@refs/pr/1")
    assert pr.revision == "refs/pr/1" and not pr.pinned
    assert parse_remote("hf://a/b@" + "0123456789abcdef" * 2 + "01234567").pinned
    assert not parse_remote("ms://a/b@" + "0" * 40).pinned                # ModelScope has no commit ids
    assert parse_remote("zai-org/GLM-5.1").bare
    assert parse_remote("./zai-org/GLM-5.1") is None and parse_remote("/abs/dir") is None
    assert parse_remote("a/b/c") is None and parse_remote("glm-5.1") is None
    for bad, needle in [("hf://", "no '/'"), ("hf://a", "no '/'"), ("hf://a/b/c", "subfolders"),
                        ("hf://a--x/b", "org"), ("hf://a/.b", "repository name"), ("hf://a/b@", "empty revision"),
                        ("hf://a/b@x..y", "revision"), ("ms://a/b@-x", "revision"), ("hf://" + "a" * 97 + "/b", "96")]:
        with pytest.raises(AuditInputError, match=re.escape(needle)):
            parse_remote(bad)


def test_open_model_routes_without_touching_the_network(tmp_path, monkeypatch):
    """Presets, local directories and a missing path that is no repository id never reach the
    remote layer; a scheme form does even when a local directory has the same spelling."""
    import auditor.remote.mirror as mirror

    calls = []

    def fake_open_remote(ref, progress=None):
        calls.append(ref)
        raise AuditInputError(ref.uri, "stopped here")

    monkeypatch.setattr(mirror, "open_remote", fake_open_remote)
    assert open_model("glm-5.1", tables=False).kind == "preset"
    monkeypatch.chdir(tmp_path)
    (tmp_path / "acme" / "tiny").mkdir(parents=True)
    (tmp_path / "acme" / "tiny" / "config.json").write_text("{}")
    with pytest.raises(AuditInputError) as local:
        open_model("acme/tiny", tables=False)            # the local directory wins (and its config is bad)
    assert "stopped here" not in str(local.value)
    with pytest.raises(AuditInputError, match="no such directory"):
        open_model(str(tmp_path / "nope" / "deeper"))
    assert calls == []
    with pytest.raises(AuditInputError, match="stopped here"):
        open_model("acme/other")                         # nothing there: a Hub repository
    with pytest.raises(AuditInputError, match="stopped here"):
        open_model("ms://acme/tiny")
    assert [c.uri for c in calls] == ["hf://acme/other", "ms://acme/tiny"] and calls[0].bare
