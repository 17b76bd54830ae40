"""Header reads by byte range, against the stand-in's three ways of answering a Range (206 as the
Hub does, 200 + Content-Range as ModelScope does, a bare 200 from a server that ignores it), for
generated header lengths, first-read guesses and file sizes; and the response checks one by one."""
from __future__ import annotations

import itertools
import os
import struct
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from auditor.errors import AuditInputError
from auditor.inventory.header import MAX_HEADER_SIZE, header_length
from auditor.remote import http as remote_http
from auditor.remote.http import Http, Retry
from auditor.remote.ranges import INVALID, Body, parse_content_range, read_header
from test_remote_standin import Repo, StandIn

_names = itertools.count()


@pytest.fixture(scope="module")
def server():
    root = Path(tempfile.mkdtemp(prefix="ranges-"))
    hub = StandIn({"acme/r": Repo(root)})
    yield hub, root
    hub.close()


def _file(root: Path, n: int, payload: int, declared: int | None = None) -> tuple[str, bytes]:
    """A file whose prefix declares ``declared`` (default n) and which holds n header bytes and
    ``payload`` data bytes; distinct bytes everywhere so a misplaced copy shows."""
    rel = f"f{next(_names)}.safetensors"
    head = bytes((i * 7 + 3) % 251 for i in range(n))
    body = struct.pack("<Q", n if declared is None else declared) + head + bytes((i * 13 + 1) % 253 for i in range(payload))
    (root / rel).write_bytes(body)
    return rel, body


def _read(hub: StandIn, rel: str, size: int, guess: int, ms: bool) -> tuple[bytes, int]:
    url = (f"{hub.url}/api/v1/models/acme/r/repo?Revision=master&FilePath={rel}" if ms
           else f"{hub.url}/acme/r/resolve/main/{rel}")
    client = Http(hub.url, {}, "HF_TOKEN", concurrency=2)
    fd, path = tempfile.mkstemp()
    try:
        os.ftruncate(fd, size)

        def header_len() -> int:
            with os.fdopen(os.dup(fd), "rb", buffering=0) as fh:
                fh.seek(0)
                try:
                    return header_length(Path(rel), fh)[0]
                except AuditInputError:
                    return INVALID

        requests = read_header(client, url, size, guess, fd, rel, header_len)
        with open(path, "rb") as fh:
            return fh.read(), requests
    finally:
        os.close(fd)
        os.remove(path)
        client.close()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(n=st.integers(1, 300_000), payload=st.integers(0, 4096), guess=st.integers(0, 400_000),
       mode=st.sampled_from(["hub", "modelscope", "ignore-range"]))
def test_header_is_copied_in_one_request_unless_larger_than_the_guess(server, n, payload, guess, mode):
    hub, root = server
    rel, data = _file(root, n, payload)
    if mode == "ignore-range":
        hub.faults.ignore_range.add(rel)
    hub.clear()
    got, requests = _read(hub, rel, len(data), guess, ms=mode == "modelscope")
    end = 8 + n
    assert got[:end] == data[:end] and got[end:] == bytes(len(data) - end)     # nothing past the header
    first_stop = min(len(data), 8 + guess)
    ranges = [e.range for e in hub.file_reads()]
    assert ranges[0] == f"bytes=0-{first_stop - 1}"
    if mode == "ignore-range" or end <= first_stop:
        assert requests == 1 and len(ranges) == 1
    else:                                   # the rest of the header, from where the first read ended
        assert requests == 2 and ranges[1] == f"bytes={first_stop}-{end - 1}"
    statuses = {e.status for e in hub.file_reads()}
    assert statuses == {"hub": {206}, "modelscope": {200}, "ignore-range": {200}}[mode]


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(declared=st.sampled_from([0, MAX_HEADER_SIZE + 1, 2 ** 63, 2 ** 64 - 1]) | st.integers(100, 10_000),
       payload=st.integers(0, 64))
def test_a_prefix_the_local_rules_refuse_stops_the_reading(server, declared, payload):
    """N = 0, over the cap, or past the end of the file: one request, only the prefix kept."""
    hub, root = server
    rel, data = _file(root, 16, payload, declared=declared)
    if 8 + declared <= len(data) and declared:
        return                             # a valid prefix: not this test's case
    hub.clear()
    got, requests = _read(hub, rel, len(data), 100_000, ms=False)
    assert requests == 1 and got[:8] == data[:8] and got[8:] == bytes(len(data) - 8)


@given(first=st.integers(0, 2 ** 62), length=st.integers(1, 2 ** 40), extra=st.integers(0, 2 ** 40),
       star=st.booleans())
def test_content_range_round_trip(first, length, extra, star):
    last = first + length - 1
    total = None if star else last + 1 + extra
    text = f"bytes {first}-{last}/{'*' if star else total}"
    assert parse_content_range(text) == (first, last, total)
    assert parse_content_range(f"bytes {last + 1}-{first}/{total or 1}") is None or last + 1 <= first
    assert parse_content_range(text.replace("bytes ", "items ")) is None


class _Resp:
    """What Body reads from an httpx response: status, headers, iter_raw."""

    def __init__(self, status: int, headers: dict, body: bytes):
        self.status_code, self.headers, self._body = status, {k.lower(): v for k, v in headers.items()}, body

    def iter_raw(self, chunk: int):
        for i in range(0, len(self._body), 3):          # small chunks: exercises the carry-over
            yield self._body[i:i + 3]


def _take(body: Body, n: int) -> bytes:
    out = b""
    while len(out) < n:
        chunk = body.read(n - len(out))
        assert len(chunk) <= n - len(out)
        if not chunk:
            break
        out += chunk
    return out


def test_response_checks():
    data = bytes(range(100))
    ok = Body(_Resp(206, {"Content-Range": "bytes 10-19/100", "Content-Length": "10"}, data[10:20]), 10, 20, 100, "f")
    assert ok.end == 20 and _take(ok, 4) + _take(ok, 100) == data[10:20] and ok.read(1) == b""
    quirk = Body(_Resp(200, {"Content-Range": "bytes 0-9/100"}, data[:10]), 0, 10, 100, "f")
    assert quirk.end == 10 and _take(quirk, 10) == data[:10]
    ignored = Body(_Resp(200, {"Content-Length": "100"}, data), 31, 40, 100, "f")   # a bare 200: skip to 31
    assert ignored.end == 100 and _take(ignored, 5) == data[31:36]
    bad = [
        (_Resp(206, {"Content-Range": "bytes 0-9/99"}, b""), "gives the file as 99 bytes, the repository listing as 100"),
        (_Resp(206, {"Content-Range": "bytes 5-9/100"}, b""), "answered bytes 5-9 for bytes 0-9"),
        (_Resp(206, {"Content-Range": "bytes 0-9/100", "Content-Length": "11"}, b""), "Content-Length 11"),
        (_Resp(206, {}, b""), "206 Partial Content without a Content-Range"),
        (_Resp(206, {"Content-Range": "bytes=0-9/100"}, b""), "malformed Content-Range"),
        (_Resp(200, {"Content-Length": "5"}, b""), "sends 5 bytes for a file the repository listing gives as 100"),
        (_Resp(206, {"Content-Range": "bytes 0-9/100", "Content-Encoding": "gzip"}, b""), "gzip-encoded"),
    ]
    for resp, needle in bad:
        with pytest.raises(AuditInputError, match=needle):
            Body(resp, 0, 10, 100, "f")
    with pytest.raises(Retry):                          # a bare 200 that ends before the offset asked for
        Body(_Resp(200, {}, data[:20]), 30, 40, 100, "f")


def test_backoff_honours_retry_after_within_the_cap(monkeypatch):
    monkeypatch.setattr(remote_http, "BACKOFF_BASE", 0.5)
    assert remote_http.backoff(1, 3.0) == 3.0 and remote_http.backoff(1, 1e6) == remote_http.MAX_WAIT
    for k in range(1, 8):                               # 0.5, 1, 2, 4, 8, 8, 8 s, each jittered by +-25 %
        base = min(8.0, 0.5 * 2 ** (k - 1))
        assert 0.75 * base <= remote_http.backoff(k) <= 1.25 * base
    assert remote_http._retry_after("7") == 7.0 and remote_http._retry_after("soon") is None
