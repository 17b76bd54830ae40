"""A hub's JSON answers (Hugging Face model info and tree pages, ModelScope's file listing) read
through our own HTTP client, with caps.

Why not the hub libraries: they buffer whole bodies (an endless body or a gzip bomb runs out of
memory), follow a ``Link`` header to any origin with the request's own headers (the ``HF_TOKEN``
goes with it), and ModelScope's session hands its cookie to wherever a listing redirects. Here
the token goes only to the endpoint's own origin (``http.Http``), a body is read up to ``API_CAP``
bytes (decompressed bytes counted, a compressed body decoded in bounded steps), within
``API_DEADLINE`` seconds, and parsed with the evidence rules (``inputs.parse_json_text``: nesting,
number length, finite numbers). Pagination is followed at most ``MAX_PAGES`` times and only on
the endpoint's origin; a listing holds at most ``MAX_LISTED`` entries. Every answer is checked for
the shape we read (an object with a 40-hex ``sha``; a list of entries with a string path and an
integer size), anything else is one line naming the repository.
"""
from __future__ import annotations

import re
import zlib
from typing import Any, Callable

from ..errors import AuditInputError
from ..inputs import parse_json_text
from .http import Http, origin

API_CAP = 16 << 20              # one answer (a 1,000-entry tree page is ~300 kB)
API_DEADLINE = 60.0             # seconds for one answer, headers and body
MAX_PAGES = 100                 # tree pages of 1,000 entries: 100,000 files
MAX_LISTED = 100_000            # entries of one listing (GLM-5.1: ~300 files)
_NEXT = re.compile(r'<([^<>\s]{1,4096})>\s*;[^,]*?\brel="?next"?', re.IGNORECASE)


def read_body(resp, cap: int, where: str) -> bytes:
    """The body of ``resp``, at most ``cap`` bytes once decoded; gzip and deflate are decoded in
    steps of at most what is left under the cap (a bomb stops at the cap), other encodings refused."""
    enc = resp.headers.get("content-encoding", "identity").strip().lower()
    if enc in ("", "identity"):
        decoder = None
    elif enc in ("gzip", "x-gzip", "deflate"):
        decoder = zlib.decompressobj(47 if enc != "deflate" else 15)
    else:
        raise AuditInputError(where, f"the server sent a {enc[:20]}-encoded answer (identity was asked for)")
    out, got = [], 0

    def take(data: bytes) -> None:
        nonlocal got
        got += len(data)
        if got > cap:
            raise AuditInputError(where, f"the server's answer is larger than {cap >> 20} MiB (audit's cap)")
        out.append(data)

    for chunk in resp.iter_raw(1 << 16):
        if decoder is None:
            take(chunk)
            continue
        data = chunk
        while data:
            try:
                piece = decoder.decompress(data, cap + 1 - got)
            except zlib.error as exc:
                raise AuditInputError(where, f"the server's {enc} answer does not decode ({exc})") from None
            take(piece)
            data = decoder.unconsumed_tail
    return b"".join(out)


def get_json(http: Http, url: str, where: str, describe: Callable[[int, Any], str] | None = None
             ) -> tuple[Any, str | None]:
    """(parsed JSON answer of ``url``, its ``Link`` header) with the caps above; one line naming
    ``where`` on any problem."""
    def consume(resp, hop) -> tuple[Any, str | None]:
        raw = read_body(resp, API_CAP, where)
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            raise AuditInputError(where, "the server's answer is not UTF-8 JSON") from None
        if not text.strip():
            raise AuditInputError(where, "the server's answer is empty (JSON expected)")
        if text.lstrip()[:1] == "<":
            raise AuditInputError(where, "the server answered with HTML, not JSON (a proxy or login page?)")
        try:
            doc = parse_json_text(text, where, "the server's answer", cap=API_CAP)
        except AuditInputError as exc:
            raise AuditInputError(where, f"the server's answer: {exc.problem}") from None
        return doc, resp.headers.get("link")
    return http.fetch(url, where, consume, deadline=API_DEADLINE, describe=describe)


def next_page(link: str | None, endpoint: str, where: str) -> str | None:
    """The ``rel="next"`` URL of a ``Link`` header, refused unless it is on the endpoint's origin."""
    if not link:
        return None
    m = _NEXT.search(link[:16384])
    if m is None:
        return None
    url = m.group(1)
    if origin(url) != origin(endpoint):
        scheme, host, port = origin(url)
        raise AuditInputError(where, f"the listing's next page is on another origin ({scheme}://{host}:{port}); "
                                     "audit follows pagination only on the endpoint (the token must not go there)")
    return url


def entries(doc: Any, where: str, key: Callable[[dict], tuple[Any, Any, Any, Any]]) -> list[tuple[str, int, Any]]:
    """(path, size, extra) of every file entry of a listing page; ``key`` picks (kind, path, size,
    extra) out of one entry, kind "file", "dir" or anything else (refused)."""
    if not isinstance(doc, list):
        raise AuditInputError(where, f"the repository listing is not a list of entries (got {type(doc).__name__})")
    out = []
    for e in doc:
        if not isinstance(e, dict):
            raise AuditInputError(where, "the repository listing holds an entry that is not an object")
        kind, path, size, extra = key(e)
        if kind == "dir":
            continue
        if kind != "file":
            raise AuditInputError(where, f"the repository listing holds an entry of type {str(kind)[:20]!r}")
        if not isinstance(path, str) or not path:
            raise AuditInputError(where, "the repository listing holds a file without a path")
        out.append((path, size, extra))
    return out
