"""ModelScope: list the repository and read files over our own HTTP client.

The listing is ``/api/v1/models/{org}/{name}/repo/files?Revision=..&Recursive=True``, read as the hub's
own client (``modelscope_hub``) reads it (``{"Code": 200, "Data": {"Files": [...]}}``, its error
classes by status) but through ``api``: bounded size, time and nesting, the token and session cookie
only to the endpoint's own origin (the client's session hands its cookie to wherever a listing
redirects). The server returns at most 3,000 entries unpaginated; a listing at that limit is refused
(the client walks the tree per directory; no checkpoint has that many files). The client still gives
the token (``MODELSCOPE_API_TOKEN``, else the saved login). Files are read by ``ranges.py`` at
``{endpoint}/api/v1/models/{org}/{name}/repo?Revision=..&FilePath=..``, whose answer to a Range is
200 with a Content-Range (accepted there as partial content).

ModelScope exposes no commit id, so a snapshot is named by a digest of the listing (every path,
size and sha256): the cache key changes whenever any file does. Files are read by the revision
name; each answer's size is checked against the listing, which catches a push during the run
short of one that keeps every size.

The endpoint follows the client's precedence, read here without importing it (a cached run must
not pay for it): ``MODELSCOPE_ENDPOINT``, else the deprecated ``MODELSCOPE_DOMAIN`` (``https://``
added when it has no scheme), else ``https://modelscope.cn``.
"""
from __future__ import annotations

import hashlib
import os
import warnings
from urllib.parse import quote, quote_plus

from ..errors import AuditInputError
from . import api, http
from .refs import RemoteRef
from .snapshot import Snapshot, listed_files

DEFAULT_ENDPOINT = "https://modelscope.cn"
#: entries ModelScope's ``repo/files`` returns at most, unpaginated (modelscope_hub REPO_FILES_TRUNCATION_LIMIT)
TRUNCATION = 3000
TOKEN_HINT = "MODELSCOPE_API_TOKEN"


def endpoint() -> str:
    value = os.environ.get("MODELSCOPE_ENDPOINT", "").strip()
    if not value:
        value = os.environ.get("MODELSCOPE_DOMAIN", "").strip() or DEFAULT_ENDPOINT
    if not value.lower().startswith(("http://", "https://")):
        value = "https://" + value
    return value.rstrip("/")


def _file_entry(e: dict) -> tuple[object, object, object, object]:
    kind = {"blob": "file", "tree": "dir"}.get(e.get("Type"), e.get("Type"))
    sha = e.get("Sha256") or e.get("BlobId") or ""
    return kind, e.get("Path"), e.get("Size"), sha if isinstance(sha, str) else ""


def listing_digest(entries: list[tuple[str, int, str]]) -> str:
    """sha256 over the sorted (path, size, sha256) of every file: the snapshot's name."""
    h = hashlib.sha256()
    for path, size, sha in sorted(entries):
        h.update(f"{path}\0{size}\0{sha}\n".encode("utf-8", "surrogatepass"))
    return h.hexdigest()


class MsBackend:
    hub = "ms"
    token_hint = TOKEN_HINT

    def __init__(self) -> None:
        self.endpoint = endpoint()
        self._token: str | None | bool = False

    def token(self) -> str | None:
        if self._token is False:
            from modelscope_hub import HubConfig
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                self._token = HubConfig(endpoint=self.endpoint).token or None
        return self._token

    def auth_headers(self) -> dict[str, str]:
        tok = self.token()
        # the client sends both: older endpoints read the cookie, newer ones the header
        return {"Authorization": f"Bearer {tok}", "Cookie": f"m_session_id={tok}"} if tok else {}

    def _api_problem(self, ref: RemoteRef):
        """An error status of ModelScope's listing as one line (the client's error classes, by status)."""
        def describe(status: int, headers) -> str:
            if status == 401:
                how = f"the token in {TOKEN_HINT} is not accepted" if self.token() else \
                    f"private: set {TOKEN_HINT} to a token with access"
                return f"not authorized (HTTP 401): {how}"
            if status == 403:
                return (f"access denied (HTTP 403): the token in {TOKEN_HINT} has no access to this repository"
                        if self.token() else f"access denied (HTTP 403): private repository; set {TOKEN_HINT}")
            if status == 404:
                return f"repository or revision '{ref.rev}' not found on {self.endpoint}"
            return http.status_problem(status, headers, TOKEN_HINT, bool(self.token()))
        return describe

    def snapshot(self, ref: RemoteRef) -> Snapshot:
        """The repository's files (``/api/v1/models/{org}/{name}/repo/files?Recursive=True``) through our
        HTTP client and its caps (``api``). The server returns at most ``TRUNCATION`` entries and no
        pagination (the client walks the tree per directory past that); a listing at the limit is
        refused rather than read as the whole repository."""
        client = http.Http(self.endpoint, self.auth_headers(), TOKEN_HINT, 1)
        url = (f"{self.endpoint}/api/v1/models/{quote(ref.org, safe='')}/{quote(ref.name, safe='')}/repo/files"
               f"?Revision={quote_plus(ref.rev)}&Recursive=True")
        try:
            doc, _ = api.get_json(client, url, ref.uri, self._api_problem(ref))
        except http.Unreachable as exc:
            raise AuditInputError(ref.uri, f"cannot reach {self.endpoint} "
                                           f"({exc.problem.split('(', 1)[-1].rstrip(')')})") from None
        finally:
            client.close()
        if not isinstance(doc, dict):
            raise AuditInputError(ref.uri, f"ModelScope's listing is not an object (got {type(doc).__name__})")
        code, data = doc.get("Code"), doc.get("Data")
        if doc.get("Success") is False or (code is not None and code != 200):
            message = " ".join(str(doc.get("Message") or "").split())[:160] or f"code {str(code)[:20]}"
            raise AuditInputError(ref.uri, f"ModelScope: {message}")
        listing = data.get("Files") if isinstance(data, dict) else data
        blobs = api.entries(listing, ref.uri, _file_entry)
        if len(blobs) >= TRUNCATION:
            raise AuditInputError(ref.uri, f"ModelScope lists {len(blobs):,} files, its limit for one listing: the "
                                           "listing may be incomplete (audit reads repositories of fewer files)")
        files = listed_files(((p, size) for p, size, _ in blobs), ref.uri)
        entries = [(p, size, sha) for p, size, sha in blobs]
        return Snapshot(commit=listing_digest(entries), files=files, url_rev=ref.rev)

    def file_url(self, ref: RemoteRef, snap: Snapshot, path: str) -> str:
        return (f"{self.endpoint}/api/v1/models/{quote(ref.org, safe='')}/{quote(ref.name, safe='')}/repo"
                f"?Revision={quote_plus(snap.url_rev)}&FilePath={quote_plus(path)}")

    def check_hop(self, snap: Snapshot):
        return None

    def describe(self, ref: RemoteRef, commit: str) -> str:
        host = "" if self.endpoint == DEFAULT_ENDPOINT else f" via {self.endpoint}"
        return (f"ModelScope{host}: {ref.repo}, revision {ref.rev}, listing digest {commit[:16]} "
                f"(ModelScope exposes no commit id; headers read over HTTP)")
