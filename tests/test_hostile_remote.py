"""Hostile hub servers (issue 31, remote hubs): a server on 127.0.0.1 that answers the Hub's and ModelScope's
API calls with malformed, empty, HTML, null or deeply nested JSON, an endless body, a gzip bomb, a
``Retry-After`` of days, a slow-loris trickle, a ``Link`` pagination loop or a ``Link`` / redirect to another
origin (a second server on another port). Each case runs ``audit memory hf://...`` (or ``ms://``) with the
bad-input contract of tests/hostile_harness.py, and the second origin's log proves no token reached it."""
from __future__ import annotations

import functools
import json
import time
import zlib
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Callable

import pytest

from hostile_harness import check_contract, run_in_process
from test_remote_standin import SHA, LocalServer, point_at

TOKEN = "hf_secret_hostile_token"
MS_TOKEN = "ms-secret-hostile"


@dataclass
class Seen:
    path: str
    authorization: str | None
    cookie: str | None


class Hostile(LocalServer):
    """One server on 127.0.0.1:<ephemeral>; ``answer(handler, path)`` writes the whole response."""

    def __init__(self, answer: Callable | None = None) -> None:
        self.answer = answer
        self.log: list[Seen] = []
        hub = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_GET(self):
                hub.log.append(Seen(self.path, self.headers.get("Authorization"), self.headers.get("Cookie")))
                try:
                    (hub.answer or _not_found)(self, self.path)
                except (BrokenPipeError, ConnectionResetError, OSError):
                    self.close_connection = True

        super().__init__(Handler)


def send(h, status: int, body: bytes = b"", headers: dict | None = None) -> None:
    h.send_response(status)
    for k, v in (headers or {}).items():
        h.send_header(k, v)
    h.send_header("Content-Length", str(len(body)))
    h.end_headers()
    h.wfile.write(body)


def send_json(h, doc, headers: dict | None = None) -> None:
    send(h, 200, doc if isinstance(doc, bytes) else json.dumps(doc).encode(),
         {"Content-Type": "application/json", **(headers or {})})


def _not_found(h, path):
    send(h, 404, b"{}", {"X-Error-Code": "EntryNotFound"})


INFO = {"id": "acme/tiny", "sha": SHA, "siblings": []}
TREE_OK = [{"type": "file", "path": "config.json", "size": 10, "oid": "x"}]


def hf(info=None, tree=None, tree_headers=None) -> Callable:
    """The Hub's two API calls: model info, then the tree page(s)."""
    def answer(h, path):
        if "/revision/" in path:
            return info(h, path) if callable(info) else send_json(h, INFO if info is None else info)
        if "/tree/" in path:
            return tree(h, path) if callable(tree) else send_json(h, TREE_OK if tree is None else tree,
                                                                 tree_headers)
        _not_found(h, path)
    return answer


def ms(listing) -> Callable:
    def answer(h, path):
        if "/repo/files" in path:
            return listing(h, path) if callable(listing) else send_json(h, listing)
        _not_found(h, path)
    return answer


def deep(n: int) -> bytes:
    return b"[" * n + b"]" * n


def endless(h, path):
    h.send_response(200)
    h.send_header("Content-Type", "application/json")
    h.send_header("Transfer-Encoding", "chunked")
    h.end_headers()
    block = b"[" + b"0," * 32767
    chunk = f"{len(block):x}\r\n".encode() + block + b"\r\n"
    for _ in range(100_000):                 # 6.4 GB if nobody stops reading
        h.wfile.write(chunk)


@functools.lru_cache(maxsize=1)
def bomb() -> bytes:
    """256 MiB of spaces gzipped (~250 kB on the wire), compressed 1 MiB at a time (never held whole)."""
    z = zlib.compressobj(9, zlib.DEFLATED, 31)
    block = b" " * (1 << 20)
    return b"".join([*(z.compress(block) for _ in range(256)), z.flush()])


def gzip_bomb(h, path):
    send(h, 200, bomb(), {"Content-Type": "application/json", "Content-Encoding": "gzip"})


def slow_headers(h, path):
    h.wfile.write(b"HTTP/1.1 200 OK\r\n")
    for _ in range(600):
        h.wfile.write(b"X-Slow: y\r\n")
        h.wfile.flush()
        time.sleep(0.2)


def slow_body(h, path):
    h.send_response(200)
    h.send_header("Content-Length", "100000")
    h.end_headers()
    for _ in range(600):
        h.wfile.write(b" ")
        h.wfile.flush()
        time.sleep(0.2)


def retry_after(seconds: str):
    def answer(h, path):
        send(h, 429, b"slow down", {"Retry-After": seconds})
    return answer


def link_loop(h, path):
    """Every tree page says the next page is itself."""
    host = h.headers.get("Host")
    send_json(h, TREE_OK, {"Link": f'<http://{host}{path}>; rel="next"'})


def million_files(h, path):
    """10^6 files in pages of 1,500, each page linking the next."""
    page = int(path.rsplit("cursor=", 1)[-1]) if "cursor=" in path else 0
    host = h.headers.get("Host")
    entries = [{"type": "file", "path": f"f{page * 1500 + i}.bin", "size": 1} for i in range(1500)]
    nxt = path.split("&cursor=")[0] + f"&cursor={page + 1}"
    send_json(h, entries, {"Link": f'<http://{host}{nxt}>; rel="next"'} if page < 666 else None)


# name -> (answer builder, hub, needles); the builder gets the second origin's URL
CASES: dict[str, tuple[Callable[[str], Callable], str, tuple[str, ...]]] = {
    "info-empty": (lambda o: hf(info=b""), "hf", ("empty",)),
    "info-null": (lambda o: hf(info=b"null"), "hf", ("no commit id",)),
    "info-html": (lambda o: hf(info=b"<html><body>login</body></html>"), "hf", ("HTML",)),
    "info-list": (lambda o: hf(info=[1, 2]), "hf", ("no commit id",)),
    "info-sha-number": (lambda o: hf(info={"sha": 5}), "hf", ("no commit id",)),
    "info-deep": (lambda o: hf(info=deep(100_000)), "hf", ("nests",)),
    "info-truncated-json": (lambda o: hf(info=b'{"sha": "' + SHA.encode()), "hf", ("not valid JSON",)),
    "info-nan": (lambda o: hf(info=b'{"sha": "' + SHA.encode() + b'", "x": NaN}'), "hf", ("NaN",)),
    "info-5000-digits": (lambda o: hf(info=b'{"sha": "' + SHA.encode() + b'", "x": ' + b"9" * 5000 + b"}"), "hf",
                         ("digit",)),
    "info-not-utf8": (lambda o: hf(info=b'{"sha": "\xff"}'), "hf", ("UTF-8",)),
    "info-endless": (lambda o: hf(info=endless), "hf", ("larger than",)),
    "info-gzip-bomb": (lambda o: (bomb(), hf(info=gzip_bomb))[1], "hf", ("larger than",)),   # built before the run
    "info-gzip-garbage": (lambda o: hf(info=lambda h, p: send(h, 200, b"not gzip at all",
                                                              {"Content-Encoding": "gzip"})), "hf", ("decode",)),
    "info-brotli": (lambda o: hf(info=lambda h, p: send(h, 200, b"xx", {"Content-Encoding": "br"})), "hf",
                    ("br-encoded",)),
    "info-retry-after-999999": (lambda o: hf(info=retry_after("999999")), "hf", ("999999 s",)),
    "info-slow-headers": (lambda o: hf(info=slow_headers), "hf", ("no complete answer within",)),
    "info-slow-body": (lambda o: hf(info=slow_body), "hf", ("no complete answer within",)),
    "tree-missing-size": (lambda o: hf(tree=[{"type": "file", "path": "config.json"}]), "hf", ("size",)),
    "tree-null": (lambda o: hf(tree=b"null"), "hf", ("not a list",)),
    "tree-object": (lambda o: hf(tree={"files": []}), "hf", ("not a list",)),
    "tree-entry-string": (lambda o: hf(tree=["config.json"]), "hf", ("not an object",)),
    "tree-entry-type": (lambda o: hf(tree=[{"type": "submodule", "path": "x", "size": 1}]), "hf", ("submodule",)),
    "tree-path-number": (lambda o: hf(tree=[{"type": "file", "path": 5, "size": 1}]), "hf", ("without a path",)),
    "tree-size-huge": (lambda o: hf(tree=[{"type": "file", "path": "a", "size": 10 ** 30}]), "hf", ("size",)),
    "tree-deep": (lambda o: hf(tree=deep(50_000)), "hf", ("nests",)),
    "tree-link-loop": (lambda o: hf(tree=link_loop), "hf", ("100 pages",)),
    "tree-million-files": (lambda o: hf(tree=million_files), "hf", ("100,000 files",)),
    "tree-link-other-origin": (lambda o: hf(tree_headers={"Link": f'<{o}/api/models/acme/tiny/tree/x>; rel="next"'}),
                               "hf", ("another origin",)),
    "tree-redirect-other-origin": (lambda o: hf(tree=lambda h, p: send(h, 302, b"", {"Location": o + p})), "hf",
                                   ()),
    "ms-data-null": (lambda o: ms({"Code": 200, "Data": None, "Success": True}), "ms", ("not a list",)),
    "ms-files-object": (lambda o: ms({"Code": 200, "Data": {"Files": {"a": 1}}, "Success": True}), "ms",
                        ("not a list",)),
    "ms-html": (lambda o: ms(b"<!DOCTYPE html><html></html>"), "ms", ("HTML",)),
    "ms-failure-message": (lambda o: ms({"Code": 10010205001, "Message": "model\nnot\nexist " + "x" * 500,
                                         "Success": False}), "ms", ("ModelScope: model not exist",)),
    "ms-entry-size-text": (lambda o: ms({"Code": 200, "Data": {"Files": [{"Type": "blob", "Path": "a",
                                                                           "Size": "big"}]}}), "ms", ("size",)),
    "ms-3000-files": (lambda o: ms({"Code": 200, "Data": {"Files": [{"Type": "blob", "Path": f"f{i}", "Size": 1}
                                                                    for i in range(3000)]}}), "ms", ("3,000 files",)),
    "ms-deep": (lambda o: ms(deep(100_000)), "ms", ("nests",)),
    "ms-redirect-other-origin": (lambda o: ms(lambda h, p: send(h, 302, b"", {"Location": o + p})), "ms", ()),
}


@pytest.fixture
def origins(tmp_path, monkeypatch):
    import auditor.remote.api as api
    import auditor.remote.http as remote_http

    main, other = Hostile(), Hostile()
    point_at(main, tmp_path, monkeypatch)
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    monkeypatch.setenv("MODELSCOPE_API_TOKEN", MS_TOKEN)
    monkeypatch.setattr(api, "API_DEADLINE", 2.0)
    monkeypatch.setattr(remote_http, "TIMEOUT", 5.0)
    yield main, other
    main.close()
    other.close()


@pytest.mark.parametrize("name", sorted(CASES))
def test_hostile_hub(name: str, origins, tmp_path: Path, capfd) -> None:
    main, other = origins
    build, hub, needles = CASES[name]
    other.answer = build(other.url)             # the second origin answers as the hub does, but must see no token
    main.answer = build(other.url)
    run = run_in_process(["memory", f"{hub}://acme/tiny"], capfd, timeout=60)
    check_contract(run, "error", needles)
    assert TOKEN not in run.err and MS_TOKEN not in run.err
    assert all(s.authorization is None and s.cookie is None for s in other.log), other.log
    assert len(main.log) <= 110                 # no request storm: 100 pages at most, a few retries
    cache = tmp_path / "cache"
    assert not list(cache.rglob("snapshots/*"))


def test_token_goes_to_the_endpoint_only(origins, capfd) -> None:
    """The endpoint itself does get the token and the cookie (so the tests above can see them withheld)."""
    main, other = origins
    main.answer = hf(tree=b"null")
    run_in_process(["memory", "hf://acme/tiny"], capfd)
    assert main.log and all(s.authorization == f"Bearer {TOKEN}" for s in main.log)
    main.log.clear()
    main.answer = ms(b"null")
    run_in_process(["memory", "ms://acme/tiny"], capfd)
    assert main.log and all(s.authorization == f"Bearer {MS_TOKEN}" and f"m_session_id={MS_TOKEN}" in s.cookie
                            for s in main.log)


def test_a_redirected_listing_is_read_without_the_token(origins, capfd) -> None:
    """A listing redirected to another origin is still read (public repositories move), but without
    ``Authorization`` or the session cookie."""
    main, other = origins
    other.answer = hf(tree=[{"type": "file", "path": "x.bin", "size": 1}])
    main.answer = hf(tree=lambda h, p: send(h, 302, b"", {"Location": other.url + p}))
    run = run_in_process(["memory", "hf://acme/tiny"], capfd)
    check_contract(run, "error", ("no config.json",))
    assert [s.path.split("?")[0] for s in other.log] == [f"/api/models/acme/tiny/tree/{SHA}"]
    assert other.log[0].authorization is None and other.log[0].cookie is None


# -- the cache a hostile run (or another user) left behind --------------------------------------------------

@pytest.fixture
def standin_repo(tmp_path, monkeypatch):
    from test_remote_standin import Repo, StandIn, tiny_repo
    hub = StandIn()
    point_at(hub, tmp_path, monkeypatch)
    hub.repos["acme/tiny"] = Repo(tiny_repo(tmp_path / "tiny"))
    yield hub
    hub.close()


def _snapshot(tmp_path: Path) -> Path:
    (snap,) = sorted((tmp_path / "cache" / "remote").glob("*/*/*/*/snapshots/*"))
    return snap


@pytest.mark.parametrize("damage", ["manifest-deep", "manifest-null", "manifest-fifo", "snapshot-is-a-file",
                                    "ref-deep", "ref-fifo"])
def test_a_damaged_cache_is_fetched_again(damage: str, standin_repo, tmp_path: Path, capfd) -> None:
    import os
    first = run_in_process(["inventory", "hf://acme/tiny"], capfd)
    check_contract(first, "ok")
    snap = _snapshot(tmp_path)
    (ref,) = sorted((tmp_path / "cache" / "remote").glob("*/*/*/*/refs/*.json"))
    if damage == "manifest-deep":
        (snap / "manifest.json").write_bytes(deep(100_000))
    elif damage == "manifest-null":
        (snap / "manifest.json").write_bytes(b"null")
    elif damage == "manifest-fifo":
        (snap / "manifest.json").unlink()
        os.mkfifo(snap / "manifest.json")
    elif damage == "snapshot-is-a-file":
        import shutil
        shutil.rmtree(snap)
        snap.write_text("not a snapshot")
    elif damage == "ref-deep":
        ref.write_bytes(deep(100_000))
    else:
        ref.unlink()
        os.mkfifo(ref)
    standin_repo.clear()
    again = run_in_process(["inventory", "hf://acme/tiny"], capfd)
    check_contract(again, "ok")
    assert again.out == first.out
    if damage.startswith(("manifest", "snapshot")):
        assert standin_repo.file_reads()              # read again from the hub
    assert _snapshot(tmp_path).is_dir()


def test_a_sparse_4gb_ref_in_a_hub_cache_is_refused(tmp_path: Path, capfd) -> None:
    root = tmp_path / "models--acme--tiny"
    (root / "refs").mkdir(parents=True)
    (root / "snapshots" / ("a" * 40)).mkdir(parents=True)
    with open(root / "refs" / "main", "wb") as fh:
        fh.truncate(4 << 30)
    run = run_in_process(["inventory", str(root)], capfd)
    check_contract(run, "error", ("refs/main", "cap"))
