"""Byte ranges of a remote file, written into a local file at their offsets.

A shard's header is bytes ``[0, 8+N)``. The first request asks for ``[0, min(size, 8+guess))``,
where ``guess`` is a generous estimate of N (``plan.header_guess``), so one request covers the
header in the common case; the 8-byte prefix gives N, the body is read up to ``8+N`` and no
further, and the response is closed there. A second request ``[got, 8+N)`` is made only when the
header is larger than the guess. A prefix the local header rules refuse (N = 0, over the 100 MB
cap, past the end of the file) stops the reading: the prefix is kept, and the local reader
refuses the mirrored file with its own words.

What a response must be (anything else is one line naming the file):
* 206, or 200 with a Content-Range (ModelScope's answer), for ``bytes a-b/total`` with ``a`` the
  offset asked for, ``b`` within the request and ``total`` the size the listing gave;
  Content-Length, when sent, equal to ``b - a + 1``;
* or a bare 200 (the server ignored Range): the whole file follows, so it is read from its
  start up to the header's end and the connection dropped; never buffered, never read further;
* no Content-Encoding (we ask for identity: compressed bytes have no offsets).
A body that ends before what its headers promised is retried (``http.Retry``).
"""
from __future__ import annotations

import os
import re
from typing import Callable

from ..errors import AuditInputError
from .http import Hop, Http, Retry

CHUNK = 1 << 16
MAX_REQUESTS = 4            # per file: a server answering ever-shorter ranges is refused
_CONTENT_RANGE = re.compile(r"bytes (\d{1,19})-(\d{1,19})/(\d{1,19}|\*)\Z")
INVALID = -1                # "the prefix is one the local header rules refuse"


def parse_content_range(value: str) -> tuple[int, int, int | None] | None:
    """(first, last, total) of ``bytes first-last/total`` (total None for ``*``), or None."""
    m = _CONTENT_RANGE.match(value.strip())
    if not m:
        return None
    first, last = int(m.group(1)), int(m.group(2))
    total = None if m.group(3) == "*" else int(m.group(3))
    if last < first:
        return None
    return first, last, total


class Body:
    """The streamed body of a response, positioned at the offset asked for.

    ``end`` is the file offset just past the last byte the response will deliver."""

    def __init__(self, resp, start: int, stop: int, size: int, where: str):
        enc = resp.headers.get("content-encoding", "identity").strip().lower()
        if enc not in ("", "identity"):
            raise AuditInputError(where, f"the server sent a {enc}-encoded body although identity was asked "
                                         f"for (byte offsets need the raw file)")
        self._it = resp.iter_raw(CHUNK)
        self._left = b""
        length = resp.headers.get("content-length")
        cr = resp.headers.get("content-range")
        asked = f"bytes {start}-{stop - 1}"
        if cr is not None:
            parsed = parse_content_range(cr)
            if parsed is None:
                raise AuditInputError(where, f"malformed Content-Range {cr[:80]!r} for {asked}")
            first, last, total = parsed
            if total != size:
                raise AuditInputError(where, f"the server gives the file as {total if total is not None else '*'} "
                                             f"bytes, the repository listing as {size}")
            if first != start or last >= size:
                raise AuditInputError(where, f"the server answered bytes {first}-{last} for {asked}")
            if length is not None and length.strip() != str(last - first + 1):
                raise AuditInputError(where, f"Content-Length {length.strip()[:20]} does not match Content-Range "
                                             f"{first}-{last}")
            self.end = last + 1
        elif resp.status_code == 206:
            raise AuditInputError(where, f"206 Partial Content without a Content-Range for {asked}")
        else:                       # Range ignored: the whole file, from offset 0
            if length is not None and length.strip() != str(size):
                raise AuditInputError(where, f"the server sends {length.strip()[:20]} bytes for a file the "
                                             f"repository listing gives as {size}")
            self.end = size
            self._skip(start, where)

    def _skip(self, n: int, where: str) -> None:
        while n > 0:
            chunk = self.read(min(n, CHUNK))
            if not chunk:
                raise Retry(f"response ended before offset {n}")
            n -= len(chunk)

    def read(self, n: int) -> bytes:
        """Between 1 and ``n`` bytes (what one chunk holds), b'' at the end of the body."""
        if not self._left:
            for chunk in self._it:
                if chunk:
                    self._left = chunk
                    break
            else:
                return b""
        out, self._left = self._left[:n], self._left[n:]
        return out


def _fill(body: Body, fd: int, pos: int, target: int, where: str) -> int:
    """Copy the body into ``fd`` from file offset ``pos`` up to ``target``; the new offset."""
    while pos < target:
        chunk = body.read(min(target - pos, CHUNK))
        if not chunk:
            raise Retry(f"response ended at byte {pos} of the {target} expected (truncated body)")
        os.pwrite(fd, chunk, pos)
        pos += len(chunk)
    return pos


def read_header(http: Http, url: str, size: int, guess: int, fd: int, where: str,
                header_len: Callable[[], int], check: Callable[[Hop, str], None] | None = None) -> int:
    """Copy bytes ``[0, 8+N)`` of the remote file into ``fd`` (already ``size`` bytes long, a hole).

    ``header_len()`` reads N back from ``fd`` under the local rules, INVALID when they refuse it.
    Returns the number of requests made."""
    pos, n, requests = 0, None, 0
    while True:
        if n == INVALID or (n is not None and pos >= 8 + n):
            return requests
        stop = 8 + n if n is not None else min(size, 8 + guess)
        if requests == MAX_REQUESTS:
            raise AuditInputError(where, f"header not complete after {MAX_REQUESTS} range requests "
                                         f"(the server answers shorter ranges than asked)")

        def consume(resp, hop: Hop, start: int = pos, stop: int = stop, known: int | None = n) -> tuple[int, int | None]:
            if check is not None:
                check(hop, where)
            body = Body(resp, start, stop, size, where)
            p, m = start, known
            while True:
                if m is None and p >= 8:
                    m = header_len()
                    if m == INVALID:
                        return p, m
                target = min(8 + m, body.end) if m is not None else min(8, body.end)
                if p >= target:
                    return p, m
                p = _fill(body, fd, p, target, where)

        pos, n = http.fetch(url, where, consume, headers={"Range": f"bytes={pos}-{stop - 1}"})
        requests += 1


def read_whole(http: Http, url: str, size: int, fd: int, where: str,
               check: Callable[[Hop, str], None] | None = None) -> None:
    """Copy the whole remote file (``size`` bytes by the listing) into ``fd``; more or fewer
    bytes than listed is an error (a truncated body is retried)."""

    def consume(resp, hop: Hop) -> None:
        if check is not None:
            check(hop, where)
        body = Body(resp, 0, max(size, 1), size, where)
        if body.end != size:
            raise AuditInputError(where, f"the server sent bytes 0-{body.end - 1} of the whole file")
        _fill(body, fd, 0, size, where)
        if body.read(1):
            raise AuditInputError(where, f"the server sends more than the {size} bytes the repository listing "
                                         f"gives")

    http.fetch(url, where, consume)
