"""ModelScope: list the repository with its own hub client (``modelscope_hub``), read files over HTTP.

The client gives the listing (``/api/v1/models/{org}/{name}/repo/files``, with its handling of the
server's 3,000-entry truncation and its retries), the token (``MODELSCOPE_API_TOKEN``, else the
saved login) and its error classes. It has no ranged read, so files are read by ``ranges.py`` at
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
import logging
import os
import warnings
from contextlib import contextmanager
from typing import Iterator
from urllib.parse import quote, quote_plus

from ..errors import AuditInputError
from .refs import RemoteRef
from .snapshot import Snapshot, listed_files

DEFAULT_ENDPOINT = "https://modelscope.cn"
TOKEN_HINT = "MODELSCOPE_API_TOKEN"


def endpoint() -> str:
    value = os.environ.get("MODELSCOPE_ENDPOINT", "").strip()
    if not value:
        value = os.environ.get("MODELSCOPE_DOMAIN", "").strip() or DEFAULT_ENDPOINT
    if not value.lower().startswith(("http://", "https://")):
        value = "https://" + value
    return value.rstrip("/")


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

    @contextmanager
    def _errors(self, ref: RemoteRef) -> Iterator[None]:
        import modelscope_hub.errors as mse
        import requests

        where = ref.uri
        try:
            yield
        except mse.AuthenticationError:
            how = f"the token in {TOKEN_HINT} is not accepted" if self.token() else \
                f"private: set {TOKEN_HINT} to a token with access"
            raise AuditInputError(where, f"not authorized (HTTP 401): {how}") from None
        except mse.PermissionDeniedError:
            raise AuditInputError(where, f"access denied (HTTP 403): the token in {TOKEN_HINT} has no access "
                                         f"to this repository" if self.token() else
                                         f"access denied (HTTP 403): private repository; set {TOKEN_HINT}") from None
        except mse.NotExistError:
            raise AuditInputError(where, f"repository or revision '{ref.rev}' not found on {self.endpoint}") from None
        except mse.RateLimitError:
            raise AuditInputError(where, "rate limited (HTTP 429) after the client's retries; try again later") from None
        except mse.ServerError as exc:
            status = getattr(exc, "status_code", None) or "5xx"
            raise AuditInputError(where, f"server error (HTTP {status}) after the client's retries") from None
        except (mse.NetworkError, mse.RequestTimeoutError, requests.RequestException) as exc:
            raise AuditInputError(where, f"cannot reach {self.endpoint} ({type(exc).__name__})") from None
        except mse.HubError as exc:
            first = " ".join(str(exc).splitlines()[0].split())[:160] if str(exc) else type(exc).__name__
            raise AuditInputError(where, f"ModelScope: {first}") from None

    def snapshot(self, ref: RemoteRef) -> Snapshot:
        from modelscope_hub import HubApi

        for name in ("modelscope_hub", "modelscope"):     # its warnings would break our one-line output
            logging.getLogger(name).setLevel(logging.CRITICAL)
        with self._errors(ref), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            api = HubApi(endpoint=self.endpoint, token=self.token() or "")
            listed = api.list_repo_files(ref.repo, "model", revision=ref.rev, recursive=True)
        blobs = [f for f in listed if f.type == "blob" and f.path]
        files = listed_files(((f.path, f.size) for f in blobs), ref.uri)
        entries = [(f.path, f.size, f.sha256 or f.blob_id or "") for f in blobs]
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
