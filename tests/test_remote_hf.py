"""hf://org/name against the Hub stand-in: the report equals the local copy's, only headers are read,
a second run does no network, and every failure is one line with a non-zero exit."""
from __future__ import annotations

import json
import os
import shutil
import struct
from pathlib import Path

import pytest

from auditor.cli import main
from test_remote_standin import SHA, Repo, StandIn, header_end, point_at, tiny_repo

SHARDS = [f"quant_model_weights-0000{i}-of-00005.safetensors" for i in range(1, 6)]
HEADER_FILES = SHARDS + ["rot.safetensors", "optional/quarot.safetensors"]
WHOLE_FILES = ["config.json", "quant_model_weights.safetensors.index.json", "quant_model_description.json"]


@pytest.fixture
def remote_env(tmp_path, monkeypatch):
    hub = StandIn()
    yield point_at(hub, tmp_path, monkeypatch)
    hub.close()


def run(capsys, *args: str) -> tuple[int, str, str]:
    rc = main(list(args))
    cap = capsys.readouterr()
    return rc, cap.out, cap.err


def hub_note(finding: dict) -> bool:
    return finding["tensor"] is None and finding["message"].startswith(("Hugging Face Hub", "ModelScope"))


def comparable(report: dict) -> dict:
    """A report without what names the source (the local path or the repository)."""
    out = json.loads(json.dumps(report))
    out["model"].pop("name")
    out["model"].pop("path")
    out["findings"] = [f for f in out["findings"] if not hub_note(f)]
    out["finding_groups"] = [g for g in out["finding_groups"] if not g["message"].startswith(("Hugging Face Hub",
                                                                                              "ModelScope"))]
    return out


def one_error_line(rc: int, err: str) -> str:
    lines = err.strip().splitlines()
    assert rc == 2 and len(lines) == 1 and lines[0].startswith("audit: error: "), err
    assert "Traceback" not in err
    return lines[0]


@pytest.fixture
def tiny(tmp_path, remote_env) -> Path:
    root = tiny_repo(tmp_path / "tiny")
    remote_env.repos["acme/tiny"] = Repo(root)
    return root


def snapshots(tmp_path: Path) -> list[Path]:
    base = tmp_path / "cache" / "remote"
    return sorted(base.glob("*/*/*/*/snapshots/*"))


def test_memory_inventory_and_perf_equal_the_local_copy(tmp_path, tiny, remote_env, capsys):
    rc, out, err = run(capsys, "memory", "hf://acme/tiny", "--format", "json")
    assert rc == 0, err
    remote = json.loads(out)
    rc, out, _ = run(capsys, "memory", str(tiny), "--format", "json")
    local = json.loads(out)
    assert comparable(remote) == comparable(local)
    assert remote["model"]["name"] == "acme/tiny" and remote["model"]["path"] == f"hf://acme/tiny@{SHA}"
    notes = [f["message"] for f in remote["findings"] if hub_note(f)]
    assert notes == [f"Hugging Face Hub via {remote_env.url}: acme/tiny, main -> commit {SHA} (headers read over HTTP)"]
    for cmd in (["inventory"], ["perf", "--tp", "1"]):
        rc, rem, _ = run(capsys, *cmd, "hf://acme/tiny", "--format", "json")
        rc2, loc, _ = run(capsys, *cmd, str(tiny), "--format", "json")
        assert rc == rc2 == 0
        assert str(tmp_path / "cache") not in rem
        r, l_ = json.loads(rem.replace(f"hf://acme/tiny@{SHA}", str(tiny))), json.loads(loc)
        r.pop("model", None), l_.pop("model", None)
        strip = lambda d: {k: v for k, v in d.items() if k not in ("findings", "finding_groups")}  # noqa: E731
        assert strip(r) == strip(l_)
    rc, text, _ = run(capsys, "memory", "hf://acme/tiny")
    cache = str(tmp_path / "cache")
    assert rc == 0 and "acme/tiny" in text and cache not in text and cache not in json.dumps(remote)


def test_only_headers_and_side_files_are_read(tmp_path, tiny, remote_env, capsys):
    """One GET per file; whole reads for config/index/description, one range from byte 0 per
    shard; the mirror holds bytes [0, 8+N) of each shard and nothing after."""
    rc, _, err = run(capsys, "memory", "hf://acme/tiny")
    assert rc == 0, err
    reads = remote_env.file_reads()
    assert sorted(e.file for e in reads) == sorted(WHOLE_FILES + HEADER_FILES)
    for e in reads:
        if e.file in WHOLE_FILES:
            assert e.range is None and e.status == 200
        else:
            assert e.status == 206 and e.range.startswith("bytes=0-")
    api = [e.path for e in remote_env.log if e.file is None]
    assert [p.split("?")[0] for p in api] == ["/api/models/acme/tiny/revision/main",
                                              f"/api/models/acme/tiny/tree/{SHA}"]
    (snap,) = snapshots(tmp_path)
    for rel in HEADER_FILES:
        mirrored = (snap / "files" / rel).read_bytes()
        original = (tiny / rel).read_bytes()
        end = header_end(tiny / rel)
        assert len(mirrored) == len(original)
        assert mirrored[:end] == original[:end] and mirrored[end:] == bytes(len(original) - end)
    for rel in WHOLE_FILES:
        assert (snap / "files" / rel).read_bytes() == (tiny / rel).read_bytes()


def test_second_run_does_no_network(tmp_path, tiny, remote_env, capsys):
    rc, first, _ = run(capsys, "memory", "hf://acme/tiny", "--format", "json")
    remote_env.clear()
    remote_env.close()                                   # nothing to talk to any more
    rc2, second, err = run(capsys, "memory", "hf://acme/tiny", "--format", "json")
    assert rc == rc2 == 0, err
    assert first == second and remote_env.log == []


def test_full_size_glm51_equals_the_local_directory(tmp_path, remote_env, capsys):
    """The issue's acceptance case at full size: a synthesized GLM-5.1 W8A8 (msModelSlim names,
    177k tensors): same ledger and HBM budget, one request per shard, no shard read past its header."""
    from auditor.synth import synthesize

    root = tmp_path / "glm"
    synthesize(root, "glm-5.1", "w8a8")
    remote_env.repos["zai-org/GLM-5.1-w8a8"] = Repo(root)
    args = ["--tp", "16", "--dp", "2", "--ep", "32", "--sp", "--format", "json"]
    rc, out, err = run(capsys, "memory", "hf://zai-org/GLM-5.1-w8a8", *args)
    assert rc == 0, err
    rc, loc, _ = run(capsys, "memory", str(root), *args)
    remote, local = json.loads(out), json.loads(loc)
    assert comparable(remote) == comparable(local)
    assert remote["ranks"] == local["ranks"] and remote["runtime"] == local["runtime"]   # ledger and HBM budget
    assert remote["vllm_log_lines"] == local["vllm_log_lines"]
    shards = {e.file for e in remote_env.file_reads() if e.file.endswith(".safetensors")}
    on_disk = {p.relative_to(root).as_posix() for p in root.rglob("*.safetensors")}
    assert shards == on_disk and len(on_disk) > 140
    per_shard = {}
    for e in remote_env.file_reads():
        per_shard.setdefault(e.file, []).append(e)
    assert all(len(v) == 1 for v in per_shard.values())
    snap = snapshots(tmp_path)[0] / "files"
    for rel in sorted(on_disk)[:10]:
        end = header_end(root / rel)
        with open(snap / rel, "rb") as fh:
            fh.seek(end)
            assert fh.read(1 << 16) == bytes(min(1 << 16, (root / rel).stat().st_size - end))


def test_server_ignoring_range_is_read_to_the_header_end_only(tmp_path, remote_env, capsys):
    """A 200 with the whole body: read up to 8+N, then the connection is dropped. The shard here is
    a 1 GiB sparse file; the server manages to send a small part of it before the client hangs up."""
    root = tiny_repo(tmp_path / "tiny")
    big = root / SHARDS[0]
    with open(big, "r+b") as fh:
        fh.truncate(1 << 30)                             # tensor data now ends far past the header
        n = struct.unpack("<Q", fh.read(8))[0]
    remote_env.repos["acme/tiny"] = Repo(root)
    remote_env.faults.ignore_range.add(SHARDS[0])
    rc, _, err = run(capsys, "inventory", "hf://acme/tiny")
    # the local copy is refused the same way (the header's offsets no longer reach the file's end)
    rc_local, _, err_local = run(capsys, "inventory", str(root))
    assert rc == rc_local == 2
    assert err.replace(f"hf://acme/tiny@{SHA}", str(root)) == err_local
    (entry,) = [e for e in remote_env.file_reads() if e.file == SHARDS[0]]
    assert entry.status == 200 and entry.range is not None
    assert 8 + n <= entry.sent < 64 << 20                # far less than the 1 GiB body


def test_truncated_body_is_retried_then_refused(tmp_path, tiny, remote_env, capsys):
    remote_env.faults.truncate[SHARDS[1]] = 1
    rc, _, err = run(capsys, "memory", "hf://acme/tiny")
    assert rc == 0, err
    assert len([e for e in remote_env.file_reads() if e.file == SHARDS[1]]) == 2
    shutil.rmtree(tmp_path / "cache")
    remote_env.faults.truncate[SHARDS[1]] = -1
    line = one_error_line(*run(capsys, "memory", "hf://acme/tiny")[::2])
    assert line.startswith(f"audit: error: hf://acme/tiny@{SHA}/{SHARDS[1]}: truncated response after 6 attempts")
    assert snapshots(tmp_path) == []


def test_429_and_503_then_success(tmp_path, tiny, remote_env, capsys):
    remote_env.faults.statuses = {"api": [429, 503], SHARDS[2]: [429, 429], "config.json": [503]}
    rc, out, err = run(capsys, "memory", "hf://acme/tiny", "--format", "json")
    assert rc == 0, err
    assert [e.status for e in remote_env.file_reads() if e.file == SHARDS[2]] == [429, 429, 206]
    assert [e.status for e in remote_env.log if "/revision/" in e.path] == [429, 503, 200]


def test_persistent_server_error_is_one_line(tmp_path, tiny, remote_env, capsys):
    remote_env.faults.statuses = {SHARDS[0]: [503] * 10}
    line = one_error_line(*run(capsys, "memory", "hf://acme/tiny")[::2])
    assert line == f"audit: error: hf://acme/tiny@{SHA}/{SHARDS[0]}: server error (HTTP 503) after 6 attempts"
    assert len([e for e in remote_env.file_reads() if e.file == SHARDS[0]]) == 6
    assert snapshots(tmp_path) == []
    assert not any((tmp_path / "cache").rglob("tmp/*"))    # the half-built snapshot is gone


def test_missing_shard(tmp_path, tiny, remote_env, capsys):
    """Listed but 404 on read: one line naming the file. Named by the index but not in the
    repository: the local scan's own error, naming the repository's file, not the cache."""
    remote_env.faults.missing.add(SHARDS[3])
    line = one_error_line(*run(capsys, "memory", "hf://acme/tiny")[::2])
    assert line.startswith(f"audit: error: hf://acme/tiny@{SHA}/{SHARDS[3]}: file not found in the repository")
    assert snapshots(tmp_path) == []
    remote_env.faults.missing.clear()
    os.remove(tiny / SHARDS[3])
    rc, _, err = run(capsys, "memory", "hf://acme/tiny")
    rc_local, _, err_local = run(capsys, "memory", str(tiny))
    line = one_error_line(rc, err)
    assert rc_local == 2 and err.replace(f"hf://acme/tiny@{SHA}", str(tiny)) == err_local
    assert "weight_map shard" in line and str(tmp_path / "cache") not in line


def test_redirect_to_another_host_drops_the_token(tmp_path, tiny, remote_env, capsys, monkeypatch):
    cdn = StandIn(dict(remote_env.repos))
    try:
        remote_env.other = cdn
        remote_env.faults.redirect = True
        monkeypatch.setenv("HF_TOKEN", "hf_secret_token")
        rc, out, err = run(capsys, "memory", "hf://acme/tiny", "--format", "json")
        assert rc == 0, err
        hops = remote_env.file_reads()
        assert {e.status for e in hops} == {302} and all(e.authorization == "Bearer hf_secret_token" for e in hops)
        served = cdn.file_reads()
        assert sorted(e.file for e in served) == sorted(WHOLE_FILES + HEADER_FILES)
        assert all(e.authorization is None and e.cookie is None for e in served)
        assert all("hf_secret_token" not in (e.path + str(e.range)) for e in served)
    finally:
        cdn.close()


@pytest.mark.parametrize("case, needle", [
    ("absent", "hf://acme/absent: repository not found on {url}, or private or gated: set HF_TOKEN to a token "
               "with access (HTTP 401)"),
    ("private", "hf://acme/private: repository not found on {url}, or private or gated: set HF_TOKEN to a token "
                "with access (HTTP 401)"),
    ("private-wrong-token", "hf://acme/private: repository not found on {url}, or the token in HF_TOKEN has no "
                            "access to it (HTTP 401)"),
    ("gated", "hf://acme/gated: gated repository: request access on its Hub page, then set HF_TOKEN to a token "
              "of an account that has it"),
    ("revision", "hf://acme/tiny@v9: revision 'v9' not found"),
    ("forbidden", "hf://acme/tiny@{sha}/config.json: access denied (HTTP 403)"),
    ("wrong-commit", "hf://acme/tiny@{sha}/config.json: the Hub served commit " + "f" * 40 + " for {sha}"),
    ("bare", "acme/absent: no such local directory; as the Hugging Face repository hf://acme/absent: repository "
             "not found on {url}"),
    ("refused", "hf://acme/tiny: cannot reach http://127.0.0.1:9 (ConnectError"),
])
def test_each_failure_is_one_line(tmp_path, tiny, remote_env, capsys, monkeypatch, case, needle):
    model = {"absent": "hf://acme/absent", "private": "hf://acme/private", "private-wrong-token": "hf://acme/private",
             "gated": "hf://acme/gated", "revision": "hf://acme/tiny@v9", "bare": "acme/absent"}.get(case, "hf://acme/tiny")
    remote_env.repos["acme/private"] = Repo(tiny, private_token="right")
    remote_env.repos["acme/gated"] = Repo(tiny, gated=True)
    if case == "private-wrong-token":
        monkeypatch.setenv("HF_TOKEN", "wrong")
    if case == "forbidden":
        remote_env.faults.statuses["config.json"] = [403]
    if case == "wrong-commit":
        remote_env.faults.wrong_commit = True
    if case == "refused":
        monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")
    monkeypatch.chdir(tmp_path)
    line = one_error_line(*run(capsys, "memory", model)[::2])
    assert line.startswith("audit: error: " + needle.format(url=remote_env.url, sha=SHA)), line
    assert "hf_" not in line.replace("hf://", "")        # no token, no signed URL
    assert snapshots(tmp_path) == []


def test_private_repo_with_the_right_token(tmp_path, tiny, remote_env, capsys, monkeypatch):
    remote_env.repos["acme/private"] = Repo(tiny, private_token="right")
    monkeypatch.setenv("HF_TOKEN", "right")
    rc, _, err = run(capsys, "inventory", "hf://acme/private")
    assert rc == 0, err
    assert all(e.authorization == "Bearer right" for e in remote_env.log)


def test_malformed_header_is_worded_as_locally_and_named_remotely(tmp_path, remote_env, capsys):
    root = tiny_repo(tmp_path / "tiny")
    with open(root / SHARDS[2], "r+b") as fh:            # break the JSON inside the header
        fh.seek(8)
        fh.write(b"[")
    remote_env.repos["acme/tiny"] = Repo(root)
    rc, _, err = run(capsys, "memory", "hf://acme/tiny")
    rc_local, _, err_local = run(capsys, "memory", str(root))
    one_error_line(rc, err)
    assert rc_local == 2 and err.replace(f"hf://acme/tiny@{SHA}", str(root)) == err_local
    assert f"hf://acme/tiny@{SHA}/{SHARDS[2]}: header" in err


def test_header_over_the_cap_is_refused_without_reading_it(tmp_path, remote_env, capsys):
    root = tiny_repo(tmp_path / "tiny")
    with open(root / SHARDS[0], "r+b") as fh:
        fh.truncate(300_000_000)
        fh.write(struct.pack("<Q", 150_000_000))
    remote_env.repos["acme/tiny"] = Repo(root)
    rc, _, err = run(capsys, "memory", "hf://acme/tiny")
    rc_local, _, err_local = run(capsys, "memory", str(root))
    one_error_line(rc, err)
    assert err.replace(f"hf://acme/tiny@{SHA}", str(root)) == err_local
    assert "exceeds the safetensors limit of 100000000 bytes" in err
    (entry,) = [e for e in remote_env.file_reads() if e.file == SHARDS[0]]
    assert entry.range.startswith("bytes=0-")


def test_a_damaged_cache_is_fetched_again(tmp_path, tiny, remote_env, capsys):
    rc, first, _ = run(capsys, "memory", "hf://acme/tiny", "--format", "json")
    (snap,) = snapshots(tmp_path)
    os.remove(snap / "files" / SHARDS[4])
    remote_env.clear()
    rc, second, _ = run(capsys, "memory", "hf://acme/tiny", "--format", "json")
    assert rc == 0 and first == second and len(remote_env.file_reads()) == len(WHOLE_FILES + HEADER_FILES)
    (snap,) = snapshots(tmp_path)
    (snap / "files" / "extra.safetensors").write_bytes(b"\0" * 16)   # something written into it
    remote_env.clear()
    rc, third, _ = run(capsys, "memory", "hf://acme/tiny", "--format", "json")
    assert rc == 0 and third == first and remote_env.file_reads()


def test_ref_ttl_pinned_commit_and_offline(tmp_path, tiny, remote_env, capsys, monkeypatch):
    assert run(capsys, "memory", "hf://acme/tiny")[0] == 0
    monkeypatch.setenv("AUDIT_REMOTE_TTL", "0")             # re-resolve main, but the commit is cached
    remote_env.clear()
    assert run(capsys, "memory", "hf://acme/tiny")[0] == 0
    assert [e.path.split("?")[0] for e in remote_env.log] == ["/api/models/acme/tiny/revision/main",
                                                              f"/api/models/acme/tiny/tree/{SHA}"]
    remote_env.clear()
    assert run(capsys, "memory", f"hf://acme/tiny@{SHA}")[0] == 0   # a commit id never needs resolving
    assert remote_env.log == []
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert run(capsys, "memory", "hf://acme/tiny")[0] == 0 and remote_env.log == []
    line = one_error_line(*run(capsys, "memory", "hf://acme/tiny@dev")[::2])
    assert "HF_HUB_OFFLINE is set and this revision is not in the cache" in line


def test_progress_line_for_many_shards(tmp_path, tiny, remote_env, capsys):
    rc, _, err = run(capsys, "inventory", "hf://acme/tiny", "--progress")
    assert rc == 0
    assert "reading headers of hf://acme/tiny 7/7 shards" in err


def test_unusable_cache_directory_is_one_line(tmp_path, tiny, remote_env, capsys, monkeypatch):
    blocker = tmp_path / "a-file"
    blocker.write_text("not a directory")
    monkeypatch.setenv("AUDIT_CACHE", str(blocker / "cache"))
    line = one_error_line(*run(capsys, "memory", "hf://acme/tiny")[::2])
    assert "cannot use the remote-checkpoint cache" in line and "AUDIT_CACHE" in line


@pytest.mark.parametrize("var, value, needle", [
    ("AUDIT_REMOTE_CONCURRENCY", "0", "AUDIT_REMOTE_CONCURRENCY: must be an integer from 1 to 64, got '0'"),
    ("AUDIT_REMOTE_CONCURRENCY", "many", "AUDIT_REMOTE_CONCURRENCY: must be an integer from 1 to 64, got 'many'"),
    ("AUDIT_REMOTE_TTL", "soon", "AUDIT_REMOTE_TTL: not a number of seconds: 'soon'"),
    ("AUDIT_REMOTE_TTL", "-5", "AUDIT_REMOTE_TTL: must be 0 to 1e9 seconds, got -5"),
])
def test_bad_settings_are_one_line(tmp_path, tiny, remote_env, capsys, monkeypatch, var, value, needle):
    monkeypatch.setenv(var, value)
    line = one_error_line(*run(capsys, "memory", "hf://acme/tiny")[::2])
    assert line == f"audit: error: {needle}"
    assert snapshots(tmp_path) == []


def test_one_worker_gives_the_same_mirror(tmp_path, tiny, remote_env, capsys, monkeypatch):
    monkeypatch.setenv("AUDIT_REMOTE_CONCURRENCY", "1")
    rc, one, _ = run(capsys, "memory", "hf://acme/tiny", "--format", "json")
    monkeypatch.setenv("AUDIT_CACHE", str(tmp_path / "cache8"))
    monkeypatch.setenv("AUDIT_REMOTE_CONCURRENCY", "8")
    rc8, eight, _ = run(capsys, "memory", "hf://acme/tiny", "--format", "json")
    assert rc == rc8 == 0 and one == eight


@pytest.mark.parametrize("location, needle", [
    ("file:///etc/passwd", "redirect to a URL that is not plain http(s) refused ('file:///etc/passwd')"),
    ("ftp://example.org/x", "redirect to a URL that is not plain http(s) refused"),
    ("http://127.0.0.1:port/x", "redirect to an invalid URL refused (Invalid URL in location header"),
    ("/acme/tiny/resolve/main/config.json", "more than 5 redirects"),
])
def test_bad_redirects_are_refused(tmp_path, tiny, remote_env, capsys, location, needle):
    remote_env.faults.location = location
    line = one_error_line(*run(capsys, "memory", "hf://acme/tiny")[::2])
    assert line.startswith(f"audit: error: hf://acme/tiny@{SHA}/config.json: {needle}"), line
    assert snapshots(tmp_path) == []


def test_fp8_checkpoint_on_cuda_names_engine_and_gpu(tmp_path, remote_env, capsys):
    """An FP8 block-scale checkpoint (GLM-5.1's HF layout, synthesized) read from the hub on upstream vLLM:
    the report says which engine release and which GPU it is for, and is the local directory's report."""
    from auditor.synth import synthesize

    root = tmp_path / "glm-fp8"
    synthesize(root, "glm-5.1", "fp8-block")
    remote_env.repos["zai-org/GLM-5.1-FP8"] = Repo(root)
    args = ["--engine", "vllm@0.28", "--device", "h200", "--tp", "8"]
    rc, text, err = run(capsys, "memory", "hf://zai-org/GLM-5.1-FP8", *args)
    assert rc == 0, err
    assert "engine: vLLM v0.28.0 (CUDA)" in text and "(h200, GiB)" in text
    rc, out, _ = run(capsys, "memory", "hf://zai-org/GLM-5.1-FP8", *args, "--format", "json")
    rc2, loc, _ = run(capsys, "memory", str(root), *args, "--format", "json")
    remote, local = json.loads(out), json.loads(loc)
    assert rc == rc2 == 0 and comparable(remote) == comparable(local)
    assert remote["runtime"] == local["runtime"] and remote["vllm_log_lines"][0].startswith("Model loading took")
