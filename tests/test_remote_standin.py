"""A local stand-in for the Hugging Face Hub and ModelScope (threads, 127.0.0.1, an ephemeral port),
and the tests that it speaks their interface as the hubs' own client libraries expect it.

Hugging Face routes: ``/api/models/{org}/{name}/revision/{rev}`` (model info with siblings; 404 +
``X-Error-Code: RevisionNotFound``), ``/api/models/{org}/{name}/tree/{rev}`` (recursive listing,
``Link: <...>; rel="next"`` pagination, ``page_size`` entries a page), ``GET|HEAD
/{org}/{name}/resolve/{rev}/{path}`` (``X-Repo-Commit``, ``ETag``, ``Accept-Ranges``, Range -> 206 +
Content-Range, 416 past the end, 404 + ``X-Error-Code: EntryNotFound``). Private repositories
answer 401 + ``RepoNotFound`` without the right token, gated ones 403 + ``GatedRepo``.

ModelScope routes: ``/api/v1/models/{org}/{name}/repo/files`` (``{"Code": 200, "Data": {"Files":
[...]}}``) and ``/api/v1/models/{org}/{name}/repo?Revision=&FilePath=`` answering a Range with 200 +
Content-Range, as the real server does.

Fault injection (``Faults``): Range ignored (200 and the whole file), a truncated body, statuses
served before the real answer (429 + ``Retry-After: 0``, 503), a file listed but missing, a
redirect of file reads to another server (another origin: the token must not reach it), another
commit in ``X-Repo-Commit``. Every request is logged with its Range, Authorization and Cookie.

Used by the other ``test_remote_*`` files and by ``benchmarks/bench_remote.py``.
"""
from __future__ import annotations

import hashlib
import json
import os
import socket
import struct
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, quote, unquote, urlsplit

import pytest

SHA = "0f1e2d3c4b5a69788796a5b4c3d2e1f00f1e2d3c"
CHUNK = 1 << 16


@dataclass
class Repo:
    """A repository: files on disk (sparse ones welcome), one commit, branches pointing at it."""

    root: Path
    sha: str = SHA
    branches: tuple[str, ...] = ("main", "master")
    private_token: str | None = None     # private: only this token may read it
    gated: bool = False

    def files(self) -> dict[str, Path]:
        out = {}
        for p in sorted(self.root.rglob("*")):
            if p.is_file():
                out[p.relative_to(self.root).as_posix()] = p
        return out

    def resolves(self, rev: str) -> bool:
        return rev == self.sha or rev in self.branches


@dataclass
class Faults:
    ignore_range: set[str] = field(default_factory=set)          # paths answered 200 + whole file
    truncate: dict[str, int] = field(default_factory=dict)       # path -> times a body is cut in half (-1: always)
    statuses: dict[str, list[int]] = field(default_factory=dict)  # path or "api" -> statuses served first
    missing: set[str] = field(default_factory=set)               # listed, but 404 when read
    redirect: bool = False                                        # file reads -> 302 to the other server
    wrong_commit: bool = False                                    # X-Repo-Commit names another commit
    location: str | None = None                                   # file reads -> 302 to this Location
    lock: threading.Lock = field(default_factory=threading.Lock)

    def take_status(self, key: str) -> int | None:
        with self.lock:
            queue = self.statuses.get(key)
            return queue.pop(0) if queue else None

    def take_truncate(self, key: str) -> bool:
        with self.lock:
            left = self.truncate.get(key, 0)
            if left == 0:
                return False
            if left > 0:
                self.truncate[key] = left - 1
            return True


@dataclass
class Logged:
    method: str
    path: str                    # URL path (unquoted) + query
    file: str | None             # repository file read, if any
    range: str | None
    authorization: str | None
    cookie: str | None
    status: int
    sent: int = 0                # body bytes written before the client went away


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def handle_error(self, request, client_address) -> None:
        """A client hanging up mid-response is expected here (the reader stops at the header's end)."""
        import sys
        if not isinstance(sys.exc_info()[1], (ConnectionError, BrokenPipeError)):
            super().handle_error(request, client_address)


class LocalServer:
    """A threaded HTTP server on 127.0.0.1:<ephemeral> for ``handler`` (also the hostile hubs of
    tests/test_hostile_remote.py)."""

    def __init__(self, handler) -> None:
        self.server = _Server(("127.0.0.1", 0), handler)
        # serve_forever notices shutdown() only between polls: its default 0.5 s was ~1 s of every
        # two-origin test's teardown
        self.thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.02},
                                       daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


class StandIn(LocalServer):
    """One server on 127.0.0.1:<ephemeral>, serving ``repos`` under both hubs' routes."""

    def __init__(self, repos: dict[str, Repo] | None = None, page_size: int = 1000):
        self.repos: dict[str, Repo] = dict(repos or {})
        self.faults = Faults()
        self.page_size = page_size
        self.log: list[Logged] = []
        self.other: StandIn | None = None          # where redirected file reads go
        self._lock = threading.Lock()
        super().__init__(_handler(self))

    def record(self, entry: Logged) -> None:
        with self._lock:
            self.log.append(entry)

    def file_reads(self) -> list[Logged]:
        return [e for e in self.log if e.file is not None and e.method == "GET"]

    def clear(self) -> None:
        with self._lock:
            self.log.clear()


def _handler(hub: StandIn):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args) -> None:      # quiet
            pass

        # --- plumbing -------------------------------------------------------------------
        def _entry(self, status: int, file: str | None = None) -> Logged:
            e = Logged(self.command, unquote(self.path), file, self.headers.get("Range"),
                       self.headers.get("Authorization"), self.headers.get("Cookie"), status)
            hub.record(e)
            return e

        def _send(self, status: int, body: bytes = b"", headers: dict | None = None, file: str | None = None) -> None:
            self._entry(status, file).sent = len(body) if self.command != "HEAD" else 0
            self.send_response(status)
            for k, v in (headers or {}).items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        def _json(self, status: int, doc, headers: dict | None = None) -> None:
            self._send(status, json.dumps(doc).encode(), {"Content-Type": "application/json", **(headers or {})})

        def _hf_error(self, status: int, code: str, message: str) -> None:
            self._json(status, {"error": message}, {"X-Error-Code": code, "X-Error-Message": message})

        def do_HEAD(self) -> None:
            self.do_GET()

        def do_GET(self) -> None:
            parts = urlsplit(self.path)
            path = unquote(parts.path)
            query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
            try:
                self._route(path, query)
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True

        # --- routing --------------------------------------------------------------------
        def _repo(self, org: str, name: str) -> Repo | None:
            return hub.repos.get(f"{org}/{name}")

        def _denied(self, repo: Repo, ms: bool = False) -> bool:
            auth = self.headers.get("Authorization")
            if repo.private_token is not None and auth != f"Bearer {repo.private_token}":
                if ms:
                    self._json(401, {"Code": 10010205001, "Message": "unauthorized", "Success": False})
                else:
                    self._hf_error(401, "RepoNotFound", "Repository not found")
                return True
            if repo.gated and not ms and auth is None:
                self._hf_error(403, "GatedRepo", "Access to this model is restricted")
                return True
            return False

        def _route(self, path: str, query: dict) -> None:
            seg = path.strip("/").split("/")
            status = hub.faults.take_status("api") if seg[0] == "api" else None
            if status is not None:
                self._send(status, b"busy", {"Retry-After": "0"})
                return
            if seg[:2] == ["api", "models"] and len(seg) >= 6 and seg[4] in ("revision", "tree"):
                return self._hf_api(seg[2], seg[3], seg[4], "/".join(seg[5:]), query)
            if seg[:3] == ["api", "v1", "models"] and len(seg) >= 6 and seg[5] == "repo":
                return self._ms(seg[3], seg[4], seg[6:] if len(seg) > 6 else [], query)
            if len(seg) >= 5 and seg[2] == "resolve":
                return self._hf_resolve(seg[0], seg[1], seg[3], "/".join(seg[4:]))
            if seg[0] == "cdn" and len(seg) >= 4:
                repo = self._repo(seg[1], seg[2])
                return self._serve(repo, "/".join(seg[3:]), quirk_200=False, headers={})
            self._json(404, {"error": "no route"})

        def _hf_repo(self, org: str, name: str, rev: str):
            """The repository at ``rev``, or None after answering as the Hub does (401, 403, 404)."""
            repo = self._repo(org, name)
            if repo is None:
                self._hf_error(401, "RepoNotFound", "Repository not found")
                return None
            if self._denied(repo):
                return None
            if not repo.resolves(rev):
                self._hf_error(404, "RevisionNotFound", f"Invalid rev id: {rev}")
                return None
            return repo

        def _hf_api(self, org: str, name: str, kind: str, rev: str, query: dict) -> None:
            repo = self._hf_repo(org, name, rev)
            if repo is None:
                return
            files = repo.files()
            if kind == "revision":
                blobs = query.get("blobs", "").lower() == "true"
                sib = [{"rfilename": p, **({"size": f.stat().st_size} if blobs else {})} for p, f in files.items()]
                return self._json(200, {"id": f"{org}/{name}", "modelId": f"{org}/{name}", "sha": repo.sha,
                                        "private": repo.private_token is not None, "gated": repo.gated,
                                        "siblings": sib})
            entries = []
            dirs = sorted({"/".join(p.split("/")[:i]) for p in files for i in range(1, p.count("/") + 1)})
            for d in dirs:
                entries.append({"type": "directory", "oid": hashlib.sha1(d.encode()).hexdigest(), "path": d})
            for p, f in files.items():
                size = f.stat().st_size
                entries.append({"type": "file", "oid": hashlib.sha1(p.encode()).hexdigest(), "size": size,
                                "path": p, "lfs": {"oid": hashlib.sha256(p.encode()).hexdigest(), "size": size,
                                                   "pointerSize": 134}})
            entries.sort(key=lambda e: e["path"])
            start = int(query.get("cursor", "0"))
            page = entries[start:start + hub.page_size]
            headers = {}
            if start + hub.page_size < len(entries):
                nxt = (f"{hub.url}/api/models/{org}/{name}/tree/{quote(rev, safe='')}?recursive=true&expand=false"
                       f"&cursor={start + hub.page_size}")
                headers["Link"] = f'<{nxt}>; rel="next"'
            self._json(200, page, headers)

        def _hf_resolve(self, org: str, name: str, rev: str, rel: str) -> None:
            repo = self._hf_repo(org, name, rev)
            if repo is None:
                return
            commit = "f" * 40 if hub.faults.wrong_commit else repo.sha
            headers = {"X-Repo-Commit": commit, "Accept-Ranges": "bytes"}
            if hub.faults.location is not None:
                self._send(302, b"", {**headers, "Location": hub.faults.location}, file=rel)
                return
            if hub.faults.redirect and hub.other is not None and rel in repo.files():
                self._send(302, b"", {**headers, "Location": f"{hub.other.url}/cdn/{org}/{name}/{quote(rel)}"},
                           file=rel)
                return
            self._serve(repo, rel, quirk_200=False, headers=headers)

        def _ms(self, org: str, name: str, rest: list[str], query: dict) -> None:
            repo = self._repo(org, name)
            if repo is None:
                return self._json(404, {"Code": 10010205001, "Message": f"model {org}/{name} not exist",
                                        "Success": False})
            if self._denied(repo, ms=True):
                return
            rev = query.get("Revision", "master")
            if not repo.resolves(rev):
                return self._json(404, {"Code": 10010205001, "Message": f"revision {rev} not exist",
                                        "Success": False})
            if rest == ["files"]:
                files = []
                for p, f in repo.files().items():
                    files.append({"Name": p.rsplit("/", 1)[-1], "Path": p, "Type": "blob",
                                  "Size": f.stat().st_size, "Sha256": hashlib.sha256(p.encode()).hexdigest(),
                                  "Revision": repo.sha})
                return self._json(200, {"Code": 200, "Data": {"Files": files}, "Message": "success",
                                        "Success": True})
            if not rest and "FilePath" in query:
                rel = query["FilePath"]
                if hub.faults.redirect and hub.other is not None and rel in repo.files():
                    self._send(302, b"", {"Location": f"{hub.other.url}/cdn/{org}/{name}/{quote(rel)}"}, file=rel)
                    return
                return self._serve(repo, rel, quirk_200=True, headers={})
            self._json(404, {"Code": 404, "Message": "no route", "Success": False})

        # --- file bodies ----------------------------------------------------------------
        def _serve(self, repo: Repo | None, rel: str, quirk_200: bool, headers: dict) -> None:
            files = repo.files() if repo is not None else {}
            if rel not in files or rel in hub.faults.missing:
                return self._hf_error(404, "EntryNotFound", f"{rel} does not exist on this revision")
            status = hub.faults.take_status(rel)
            if status is not None:
                return self._send(status, b"slow down", {"Retry-After": "0"}, file=rel)
            fpath = files[rel]
            size = fpath.stat().st_size
            headers = {**headers, "ETag": f'"{hashlib.sha1(rel.encode()).hexdigest()}"'}
            rng = self.headers.get("Range")
            start, stop, status = 0, size, 200
            if rng and rel not in hub.faults.ignore_range:
                spec = rng.strip()
                if not spec.startswith("bytes=") or "," in spec:
                    return self._send(400, b"bad range", file=rel)
                a, _, b = spec[6:].partition("-")
                start = int(a)
                stop = min(int(b) + 1, size) if b else size
                if start >= size:
                    return self._send(416, b"", {"Content-Range": f"bytes */{size}"}, file=rel)
                status = 200 if quirk_200 else 206
                headers["Content-Range"] = f"bytes {start}-{stop - 1}/{size}"
            length = stop - start
            entry = self._entry(status, rel)
            self.send_response(status)
            for k, v in headers.items():
                self.send_header(k, v)
            self.send_header("Content-Length", str(length))
            self.end_headers()
            if self.command == "HEAD":
                return
            cut = length // 2 if hub.faults.take_truncate(rel) else length
            with open(fpath, "rb") as fh:
                pos = start
                while pos < start + cut:
                    chunk = os.pread(fh.fileno(), min(CHUNK, start + cut - pos), pos)
                    if not chunk:
                        break
                    self.wfile.write(chunk)
                    pos += len(chunk)
                    entry.sent += len(chunk)
            if cut < length:                     # drop the connection mid-body
                self.wfile.flush()
                self.connection.shutdown(socket.SHUT_RDWR)
                self.close_connection = True

    return Handler


def header_end(path: Path) -> int:
    """8 + N of a safetensors file."""
    with open(path, "rb") as fh:
        return 8 + struct.unpack("<Q", fh.read(8))[0]


# --- fixtures shared by the test_remote_* files -------------------------------------------------

TINY = {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "torch_dtype": "bfloat16",
        "hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
        "head_dim": 16, "intermediate_size": 128, "vocab_size": 256, "max_position_embeddings": 512,
        "tie_word_embeddings": False}


def tiny_repo(out: Path) -> Path:
    """A tiny msModelSlim W8A8 checkpoint: 5 ``quant_model_weights-*`` shards, its index, the
    description, rot.safetensors and optional/quarot.safetensors."""
    from auditor.synth import synthesize
    synthesize(out, "tiny", "w8a8", config=TINY, shard_bytes=40_000)
    return out


@pytest.fixture
def standin():
    hub = StandIn()
    yield hub
    hub.close()


# --- the stand-in against the hubs' own clients -------------------------------------------------

def test_huggingface_hub_reads_the_standin(tmp_path, standin):
    """model_info, a paginated recursive tree and the library's own header reader all work against
    it: the stand-in speaks the Hub's interface as huggingface_hub expects it."""
    from huggingface_hub import HfApi
    from huggingface_hub.hf_api import RepoFile

    root = tiny_repo(tmp_path / "tiny")
    standin.repos["acme/tiny"] = Repo(root)
    standin.page_size = 3                     # 10 files + optional/: 4 pages, Link followed 3 times
    api = HfApi(endpoint=standin.url, token=False)
    info = api.model_info("acme/tiny", revision="main")
    assert info.sha == SHA
    assert sorted(s.rfilename for s in info.siblings) == sorted(Repo(root).files())
    tree = list(api.list_repo_tree("acme/tiny", revision=SHA, recursive=True))
    files = {t.path: t.size for t in tree if isinstance(t, RepoFile)}
    assert files == {p: f.stat().st_size for p, f in Repo(root).files().items()}
    entries = len(files) + 1                  # the files and the optional/ directory
    assert len(files) == 10 and sum(1 for e in standin.log if "/tree/" in e.path) == -(-entries // 3) == 4
    meta = api.parse_safetensors_file_metadata("acme/tiny", "quant_model_weights-00001-of-00005.safetensors",
                                               revision=SHA)
    n = header_end(root / "quant_model_weights-00001-of-00005.safetensors") - 8
    raw = json.loads((root / "quant_model_weights-00001-of-00005.safetensors").read_bytes()[8:8 + n])
    assert set(meta.tensors) == {k for k in raw if k != "__metadata__"}
    last = standin.file_reads()[-1]
    assert last.status == 206 and last.range.startswith("bytes=0-")


def test_huggingface_hub_errors_from_the_standin(tmp_path, standin):
    from huggingface_hub import HfApi
    from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError, RevisionNotFoundError

    root = tiny_repo(tmp_path / "tiny")
    standin.repos["acme/tiny"] = Repo(root)
    standin.repos["acme/gated"] = Repo(root, gated=True)
    api = HfApi(endpoint=standin.url, token=False)
    with pytest.raises(RevisionNotFoundError):
        api.model_info("acme/tiny", revision="nope")
    with pytest.raises(RepositoryNotFoundError):
        api.model_info("acme/absent", revision="main")
    with pytest.raises(GatedRepoError):
        api.model_info("acme/gated", revision="main")


def test_modelscope_hub_lists_the_standin(tmp_path, standin):
    from modelscope_hub import HubApi

    root = tiny_repo(tmp_path / "tiny")
    standin.repos["acme/tiny"] = Repo(root)
    files = HubApi(endpoint=standin.url, token="").list_repo_files("acme/tiny", "model", revision="master")
    assert {f.path: f.size for f in files} == {p: f.stat().st_size for p, f in Repo(root).files().items()}


def test_standin_range_answers(tmp_path, standin):
    """The two hubs' answers to the same Range, byte for byte: 206 on the Hub, 200 + Content-Range
    on ModelScope; 416 past the end; the whole file when Range is ignored."""
    import httpx

    root = tiny_repo(tmp_path / "tiny")
    standin.repos["acme/tiny"] = Repo(root)
    rel = "quant_model_weights-00002-of-00005.safetensors"
    data = (root / rel).read_bytes()
    hf = httpx.get(f"{standin.url}/acme/tiny/resolve/main/{rel}", headers={"Range": "bytes=10-99"})
    assert hf.status_code == 206 and hf.content == data[10:100]
    assert hf.headers["content-range"] == f"bytes 10-99/{len(data)}" and hf.headers["x-repo-commit"] == SHA
    ms = httpx.get(f"{standin.url}/api/v1/models/acme/tiny/repo", params={"Revision": "master", "FilePath": rel},
                   headers={"Range": "bytes=10-99"})
    assert ms.status_code == 200 and ms.content == data[10:100]
    assert ms.headers["content-range"] == f"bytes 10-99/{len(data)}"
    past = httpx.get(f"{standin.url}/acme/tiny/resolve/main/{rel}", headers={"Range": f"bytes={len(data)}-"})
    assert past.status_code == 416
    standin.faults.ignore_range.add(rel)
    whole = httpx.get(f"{standin.url}/acme/tiny/resolve/main/{rel}", headers={"Range": "bytes=10-99"})
    assert whole.status_code == 200 and whole.content == data and "content-range" not in whole.headers
    missing = httpx.get(f"{standin.url}/acme/tiny/resolve/main/nope.json")
    assert missing.status_code == 404 and missing.headers["x-error-code"] == "EntryNotFound"


def point_at(hub: StandIn, tmp_path: Path, monkeypatch) -> StandIn:
    """``hub`` as both hubs' endpoint, an empty cache, no token anywhere, no backoff waits (the
    ``remote_env`` fixture of the other test_remote_* files)."""
    import huggingface_hub.constants as hf_constants

    import auditor.remote.http as remote_http

    for var in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_HUB_OFFLINE", "MODELSCOPE_API_TOKEN", "MODELSCOPE_DOMAIN",
                "AUDIT_REMOTE_TTL", "AUDIT_REMOTE_CONCURRENCY", "HF_OIDC_RESOURCE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AUDIT_CACHE", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    monkeypatch.setenv("MODELSCOPE_ENDPOINT", hub.url)
    monkeypatch.setenv("MODELSCOPE_HOME", str(tmp_path / "ms-home"))
    monkeypatch.setattr(hf_constants, "HF_TOKEN_PATH", str(tmp_path / "no-hf-token"))
    monkeypatch.setattr(remote_http, "BACKOFF_BASE", 0.0)
    return hub
