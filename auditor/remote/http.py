"""One HTTP client for every file read from a hub: retries, redirects, auth scoping, failures as one line.

Why our own layer on httpx rather than the hub libraries' downloaders: we read byte ranges and
small JSON files with hard caps, and must check what comes back (206 or 200 + Content-Range, the
byte counts) while streaming, so nothing is ever buffered past what was asked for.

Rules:
* ``Accept-Encoding: identity`` (a compressed body has no byte offsets) and a User-Agent naming us;
* 429, 500, 502, 503, 504, a dropped connection, a timeout and a truncated body are retried with
  exponential backoff (``Retry-After`` honoured, within ``MAX_WAIT``), ``RETRIES`` times;
* redirects are followed by hand, at most ``MAX_REDIRECTS`` hops, http(s) only, never from https
  down to http (except to a loopback host), and the hub's credentials (``Authorization``,
  ``Cookie``) go only to the endpoint's own origin: a presigned CDN URL never sees the token;
* every failure is an AuditInputError naming what was being read (``hf://org/name@sha/file``) and
  the problem, never a URL with a signature in it;
* every attempt has a total deadline (``REQUEST_DEADLINE``; the read timeout alone is per read, so a
  server sending a byte every 29 s would hold a run for days), and the waits between attempts are
  at most ``MAX_WAIT`` in all, whatever ``Retry-After`` says.
"""
from __future__ import annotations

import email.utils
import random
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable, Iterator, TypeVar
from urllib.parse import urljoin, urlsplit

from .. import __version__
from ..errors import AuditInputError

RETRY_STATUSES = frozenset({429, 500, 502, 503, 504})
RETRIES = 5                 # after the first attempt
CONNECT_RETRIES = 2         # a refused connection or an unknown host rarely heals in seconds
BACKOFF_BASE = 0.5          # seconds; doubled per retry, jittered
BACKOFF_CAP = 8.0
MAX_WAIT = 60.0             # a Retry-After longer than this is reported, not waited for
MAX_REDIRECTS = 5
TIMEOUT = 30.0              # per read; connect 10 s
REQUEST_DEADLINE = 300.0    # one attempt, headers and body (a 100 MB header at 1 MB/s: 100 s)
_LOOPBACK = ("127.0.0.1", "::1", "localhost")

T = TypeVar("T")


class Unreachable(AuditInputError):
    """The server could not be reached (refused, reset, unknown host) after the retries."""


class _Cancelled(Exception):
    """The attempt outlived its deadline; its thread stops at its next read."""


class Retry(Exception):
    """Raised by a body consumer for a transient problem (a truncated body): try again."""

    def __init__(self, problem: str):
        super().__init__(problem)
        self.problem = problem


@dataclass
class Hop:
    """The first response of a chain (the hub's own answer, before any redirect)."""

    status: int
    headers: dict[str, str]


def origin(url: str) -> tuple[str, str, int | None]:
    """(scheme, host, port) of ``url``; scheme '' when the URL cannot be an HTTP one."""
    parts = urlsplit(url)
    try:
        port = parts.port or {"http": 80, "https": 443}.get(parts.scheme)
    except ValueError:                     # a port that is not a number
        return "", "", None
    return parts.scheme, (parts.hostname or "").lower(), port


def _retry_after(value: str | None) -> float | None:
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    return max(0.0, when.timestamp() - time.time())


def host_unknown(exc: BaseException) -> bool:
    """Whether a connection failed because the resolver says the host name does not exist (EAI_NONAME:
    no DNS entry, or no resolver at all on an offline machine): a retry cannot heal that, and waiting for
    it cost a nightly config's hub-name fallback ~1.7 s offline. A temporary resolver failure (EAI_AGAIN)
    is still retried."""
    import socket
    seen = 0
    while exc is not None and seen < 8:
        if isinstance(exc, socket.gaierror) and exc.errno == socket.EAI_NONAME:
            return True
        if isinstance(exc, socket.gaierror):
            return False
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return False


def backoff(attempt: int, retry_after: float | None = None) -> float:
    """Seconds to wait before retry ``attempt`` (1-based)."""
    if retry_after is not None:
        return min(retry_after, MAX_WAIT)
    base = min(BACKOFF_CAP, BACKOFF_BASE * 2 ** (attempt - 1))
    return base * random.uniform(0.75, 1.25)


def status_problem(status: int, headers, token_hint: str, have_token: bool) -> str:
    """One line for an HTTP error status, from the status and the hub's ``X-Error-Code``."""
    code = headers.get("x-error-code", "")
    detail = " ".join(headers.get("x-error-message", "").split())[:160]
    tail = f" ({detail})" if detail else ""
    if code == "GatedRepo":
        return (f"gated repository: request access on its page, then set {token_hint} to a token of an "
                f"account that has it{tail}")
    if code == "RevisionNotFound":
        return f"revision not found (HTTP {status}){tail}"
    if code == "EntryNotFound":
        return f"file not found in the repository at this revision (HTTP {status}){tail}"
    if code == "RepoNotFound" or status == 401:
        how = (f"the token in {token_hint} has no access to it" if have_token
               else f"private or gated: set {token_hint} to a token with access")
        return f"repository not found, or {how} (HTTP {status}){tail}"
    if code == "DisabledRepo":
        return f"repository disabled (HTTP {status}){tail}"
    if status == 403:
        return f"access denied (HTTP 403){tail}"
    if status == 404:
        return f"not found (HTTP 404){tail}"
    if status == 416:
        return "range not satisfiable (HTTP 416): the file is shorter than the repository listing says"
    if status == 429:
        return f"rate limited (HTTP 429) after {RETRIES + 1} attempts; try again later{tail}"
    if status >= 500:
        return f"server error (HTTP {status}) after {RETRIES + 1} attempts{tail}"
    return f"unexpected HTTP {status}{tail}"


class Http:
    """A shared httpx client (thread-safe) with ``concurrency`` connections per host."""

    def __init__(self, auth_origin: str, auth: dict[str, str], token_hint: str, concurrency: int = 8):
        import httpx                       # only the remote path pays for it

        self._httpx = httpx
        self.auth_origin = origin(auth_origin)
        self.auth = dict(auth)
        self.token_hint = token_hint
        self.client = httpx.Client(
            follow_redirects=False, timeout=httpx.Timeout(TIMEOUT, connect=10.0),
            limits=httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency),
            headers={"User-Agent": f"audit/{__version__}", "Accept-Encoding": "identity"})
        self.requests = 0
        self._lock = threading.Lock()

    def close(self) -> None:
        self.client.close()

    def _headers_for(self, url: str, extra: dict[str, str]) -> dict[str, str]:
        headers = dict(extra)
        if origin(url) == self.auth_origin:
            headers.update(self.auth)
        return headers

    @contextmanager
    def _chain(self, url: str, extra: dict[str, str], where: str) -> Iterator[tuple[object, Hop]]:
        """The final response of ``url`` after redirects (streamed, closed on exit) and the first hop."""
        first: Hop | None = None
        current = url
        for _ in range(MAX_REDIRECTS + 1):
            request = self.client.build_request("GET", current, headers=self._headers_for(current, extra))
            with self._lock:
                self.requests += 1
            resp = self.client.send(request, stream=True)
            if first is None:
                first = Hop(resp.status_code, {k.lower(): v for k, v in resp.headers.items()})
            if resp.status_code in (301, 302, 303, 307, 308):
                location = resp.headers.get("location")
                resp.close()
                if not location:
                    raise AuditInputError(where, f"redirect (HTTP {resp.status_code}) without a Location")
                target = urljoin(current, location)
                scheme, host, _ = origin(target)
                if scheme not in ("http", "https") or not host:
                    raise AuditInputError(where, f"redirect to a URL that is not plain http(s) refused "
                                                 f"({location[:80]!r})")
                if origin(current)[0] == "https" and scheme == "http" and host not in _LOOPBACK:
                    raise AuditInputError(where, f"redirect from https down to http ({host}) refused")
                current = target
                continue
            try:
                yield resp, first
            finally:
                resp.close()
            return
        raise AuditInputError(where, f"more than {MAX_REDIRECTS} redirects")

    def _attempt(self, url: str, extra: dict[str, str], where: str, consume, deadline: float):
        """One attempt (the redirect chain and ``consume``) in a thread of its own, given at most
        ``deadline`` seconds: then its socket is shut down (a blocked read returns at once), its
        reads raise, and the caller gets one line. Returns ("ok", value) or ("status", response
        facts) or re-raises what the attempt raised."""
        cancelled = threading.Event()
        box: dict[str, object] = {}

        def guarded(resp):
            real = resp.iter_raw

            def iter_raw(*a, **k):
                for chunk in real(*a, **k):
                    if cancelled.is_set():
                        raise _Cancelled()
                    yield chunk
            resp.iter_raw = iter_raw
            stream = resp.extensions.get("network_stream")
            box["socket"] = stream.get_extra_info("socket") if stream is not None else None
            return resp

        def run() -> None:
            try:
                with self._chain(url, extra, where) as (resp, first):
                    if cancelled.is_set():
                        raise _Cancelled()
                    status = resp.status_code
                    if 200 <= status < 300:
                        box["result"] = ("ok", consume(guarded(resp), first))
                    else:
                        box["result"] = ("status", (status, resp.headers))
            except BaseException as exc:            # handed to the caller's thread
                box["error"] = exc

        worker = threading.Thread(target=run, daemon=True, name="audit-http")
        worker.start()
        worker.join(deadline)
        if worker.is_alive():
            cancelled.set()
            sock = box.get("socket")
            if sock is not None:                    # reading the body: stop it before its caller cleans up
                import socket
                try:
                    sock.shutdown(socket.SHUT_RDWR)
                except OSError:
                    pass
                worker.join(5.0)
            raise AuditInputError(where, f"no complete answer within {deadline:.0f} s (the server sends too "
                                         f"slowly or not at all)")
        if "error" in box:
            raise box["error"]
        return box["result"]

    def fetch(self, url: str, where: str, consume: Callable[[object, Hop], T],
              headers: dict[str, str] | None = None, deadline: float | None = None,
              describe: Callable[[int, object], str] | None = None) -> T:
        """``consume(response, first_hop)`` on the final 2xx response of ``url``, retrying
        transient failures; an error status becomes one AuditInputError line (worded by
        ``describe(status, headers)`` when given). Each attempt is bounded by ``deadline``
        seconds (``REQUEST_DEADLINE``), the waits between attempts by ``MAX_WAIT`` in all."""
        httpx = self._httpx
        def worded(status: int, resp_headers) -> str:
            if describe is not None:
                return describe(status, resp_headers)
            return status_problem(status, resp_headers, self.token_hint, bool(self.auth))
        last = ""
        refused = 0
        waited = 0.0
        unreachable = False
        for attempt in range(RETRIES + 1):
            wait_hint = None
            try:
                kind, value = self._attempt(url, headers or {}, where, consume,
                                            REQUEST_DEADLINE if deadline is None else deadline)
                if kind == "ok":
                    return value
                status, resp_headers = value
                if status not in RETRY_STATUSES:
                    raise AuditInputError(where, worded(status, resp_headers))
                wait_hint = _retry_after(resp_headers.get("retry-after"))
                if wait_hint is not None and wait_hint > MAX_WAIT - waited:
                    raise AuditInputError(where, f"HTTP {status}: the server asks to wait {wait_hint:.0f} s "
                                                 f"before retrying; try again later")
                last = worded(status, resp_headers)
                unreachable = False
            except Retry as exc:
                last, unreachable = exc.problem, False
            except _Cancelled:                     # pragma: no cover - only a late thread sees it
                raise AuditInputError(where, "cancelled") from None
            except httpx.InvalidURL as exc:
                raise AuditInputError(where, f"invalid URL ({' '.join(str(exc).split())[:120]})") from None
            except httpx.RemoteProtocolError as exc:   # the peer closed before the promised length
                text = " ".join(str(exc).split())[:120]
                if text.lower().startswith("invalid url in location"):     # httpx parses Location itself
                    raise AuditInputError(where, f"redirect to an invalid URL refused ({text})") from None
                last, unreachable = f"truncated response after {attempt + 1} attempts ({text})", False
            except httpx.TimeoutException:
                last, unreachable = f"timed out after {TIMEOUT:.0f} s, {RETRIES + 1} attempts", False
            except httpx.TransportError as exc:   # refused, reset, closed mid-body
                refused += isinstance(exc, httpx.ConnectError)
                last = f"connection failed after {attempt + 1} attempts ({type(exc).__name__}: " \
                       f"{' '.join(str(exc).split())[:120]})"
                unreachable = True
                if refused > CONNECT_RETRIES or host_unknown(exc):
                    break
            if attempt < RETRIES:
                pause = backoff(attempt + 1, wait_hint)
                if waited + pause > MAX_WAIT:
                    break
                waited += pause
                time.sleep(pause)
        raise (Unreachable if unreachable else AuditInputError)(where, last)
