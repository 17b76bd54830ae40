"""An unknown host name (the resolver's EAI_NONAME: no DNS entry, or no resolver on an offline machine) is
not retried: a retry cannot heal it, and the backoff cost a nightly config's hub-name fallback ~1.7 s per
run offline. A temporary resolver failure (EAI_AGAIN) and a refused connection keep their retries."""
from __future__ import annotations

import socket

import httpx
import pytest

from auditor.errors import AuditInputError
from auditor.remote import http as H


def _connect_error(errno: int | None) -> httpx.ConnectError:
    exc = httpx.ConnectError("connect failed")
    if errno is not None:
        try:
            raise socket.gaierror(errno, "resolver")
        except socket.gaierror as cause:
            exc.__cause__ = cause
    return exc


@pytest.mark.parametrize("errno,unknown", [(socket.EAI_NONAME, True), (socket.EAI_AGAIN, False), (None, False)])
def test_host_unknown_reads_the_resolver_error(errno, unknown):
    assert H.host_unknown(_connect_error(errno)) is unknown


@pytest.mark.parametrize("errno,attempts", [(socket.EAI_NONAME, 1), (socket.EAI_AGAIN, H.CONNECT_RETRIES + 1)])
def test_fetch_retries_only_what_can_heal(monkeypatch, errno, attempts):
    tried, slept = [], []

    def attempt(self, url, headers, where, consume, deadline):
        tried.append(url)
        raise _connect_error(errno)
    monkeypatch.setattr(H.Http, "_attempt", attempt)
    monkeypatch.setattr(H.time, "sleep", slept.append)
    client = H.Http("https://hub.invalid", {}, "")
    with pytest.raises(AuditInputError) as info:
        client.fetch("https://hub.invalid/api/x", "hf://acme/x", lambda resp, hop: resp)
    assert len(tried) == attempts and len(slept) == attempts - 1
    assert "connection failed after" in str(info.value)
