"""Hugging Face Hub: resolve a revision to its commit and list the repository with ``huggingface_hub``.

What the library does for us: ``model_info`` (``/api/models/{repo}/revision/{rev}``: the commit
sha), ``list_repo_tree`` (recursive, following the ``Link`` pagination, with its own backoff),
the token (``HF_TOKEN``, else the token file) and the error mapping from ``X-Error-Code``. What it
does not do well enough for us, and ``ranges.py`` does instead: its header reader
(``parse_safetensors_file_metadata``) caps headers at 25 MB where the loader allows 100 MB, does
not check for 206/Content-Range (a server ignoring Range is read whole into memory), and looks
only for root-level ``model.safetensors[.index.json]``, not msModelSlim's names.

Telemetry is turned off for our calls (the library would otherwise fetch
``{endpoint}/api/agent-harnesses`` to describe the caller in its User-Agent and cache it under
``HF_HOME``). Files are then read at ``{endpoint}/{repo}/resolve/{sha}/{path}``: always by the commit, never by a
branch, so a push during the run cannot mix two commits; a resolve answer whose
``X-Repo-Commit`` names another commit is refused. ``HF_ENDPOINT`` is read when used (the library
reads it at import), with the library's rule.
"""
from __future__ import annotations

import os
import re
import time
from contextlib import contextmanager
from typing import Callable, Iterator, TypeVar
from urllib.parse import quote

from .. import __version__
from ..errors import AuditInputError
from . import http
from .refs import RemoteRef
from .snapshot import Snapshot, listed_files

DEFAULT_ENDPOINT = "https://huggingface.co"
TOKEN_HINT = "HF_TOKEN"
_SHA1 = re.compile(r"[0-9a-f]{40}\Z")
T = TypeVar("T")


def endpoint() -> str:
    return os.environ.get("HF_ENDPOINT", DEFAULT_ENDPOINT).rstrip("/")


def _is_transport(exc: BaseException) -> bool:
    return type(exc).__module__.split(".")[0] in ("httpx", "httpx2", "httpcore", "httpcore2")


class HfBackend:
    hub = "hf"
    token_hint = TOKEN_HINT

    def __init__(self) -> None:
        self.endpoint = endpoint()
        self._token: str | None | bool = False     # not looked up yet

    def token(self) -> str | None:
        if self._token is False:
            from huggingface_hub import get_token
            self._token = get_token()
        return self._token

    def auth_headers(self) -> dict[str, str]:
        tok = self.token()
        return {"Authorization": f"Bearer {tok}"} if tok else {}

    @contextmanager
    def _errors(self, ref: RemoteRef) -> Iterator[None]:
        """huggingface_hub's exceptions as one line naming the repository."""
        from huggingface_hub.errors import (DisabledRepoError, GatedRepoError, HfHubHTTPError, HFValidationError,
                                            RepositoryNotFoundError, RevisionNotFoundError)
        where = ref.uri
        try:
            yield
        except GatedRepoError:
            raise AuditInputError(where, f"gated repository: request access on its Hub page, then set "
                                         f"{TOKEN_HINT} to a token of an account that has it") from None
        except RepositoryNotFoundError as exc:
            status = exc.response.status_code if exc.response is not None else 404
            how = (f"the token in {TOKEN_HINT} has no access to it" if self.token()
                   else f"private or gated: set {TOKEN_HINT} to a token with access")
            raise AuditInputError(where, f"repository not found on {self.endpoint}, or {how} "
                                         f"(HTTP {status})") from None
        except RevisionNotFoundError:
            raise AuditInputError(where, f"revision '{ref.rev}' not found") from None
        except DisabledRepoError:
            raise AuditInputError(where, "repository disabled on the Hub") from None
        except HFValidationError as exc:
            raise AuditInputError(where, f"refused by huggingface_hub: {' '.join(str(exc).split())[:160]}") from None
        except HfHubHTTPError as exc:
            resp = exc.response
            status = resp.status_code if resp is not None else 0
            headers = resp.headers if resp is not None else {}
            raise AuditInputError(where, http.status_problem(status, headers, TOKEN_HINT,
                                                             bool(self.token()))) from None
        except Exception as exc:
            if not _is_transport(exc):
                raise
            raise AuditInputError(where, f"cannot reach {self.endpoint} ({type(exc).__name__}: "
                                         f"{' '.join(str(exc).split())[:120]})") from None

    def _retrying(self, call: Callable[[], T]) -> T:
        """``call()``, retried on 429/5xx and dropped connections (``model_info`` has no backoff
        of its own)."""
        from huggingface_hub.errors import HfHubHTTPError
        for attempt in range(http.RETRIES + 1):
            try:
                return call()
            except HfHubHTTPError as exc:
                resp = exc.response
                if resp is None or resp.status_code not in http.RETRY_STATUSES or attempt == http.RETRIES:
                    raise
                wait = http.backoff(attempt + 1, http._retry_after(resp.headers.get("retry-after")))
            except Exception as exc:
                refused = type(exc).__name__ == "ConnectError"
                if not _is_transport(exc) or attempt == (http.CONNECT_RETRIES if refused else http.RETRIES):
                    raise
                wait = http.backoff(attempt + 1)
            time.sleep(wait)
        raise AssertionError("unreachable")

    def snapshot(self, ref: RemoteRef) -> Snapshot:
        """The commit ``ref`` resolves to and the repository's files at it (one API call for the
        commit, the tree listing for the files)."""
        import huggingface_hub.constants as hf_constants
        from huggingface_hub import HfApi
        from huggingface_hub.hf_api import RepoFile
        from huggingface_hub.utils import logging as hf_logging

        hf_logging.set_verbosity_error()       # its retry warnings would break our one-line output
        # no telemetry: with it on, building the User-Agent fetches {endpoint}/api/agent-harnesses and
        # writes it under HF_HOME, a request and a write nobody asked a headers-only audit for
        hf_constants.HF_HUB_DISABLE_TELEMETRY = True
        api = HfApi(endpoint=self.endpoint, token=self.token() or False, library_name="audit",
                    library_version=__version__)
        with self._errors(ref):
            info = self._retrying(lambda: api.model_info(ref.repo, revision=ref.rev, timeout=http.TIMEOUT))
            sha = getattr(info, "sha", None)
            if not isinstance(sha, str) or not _SHA1.match(sha):
                raise AuditInputError(ref.uri, f"the Hub gave no commit id for revision '{ref.rev}'")
            if ref.pinned and sha != ref.revision:
                raise AuditInputError(ref.uri, f"the Hub resolved commit {ref.revision} to {sha}")
            tree = self._retrying(lambda: list(api.list_repo_tree(ref.repo, revision=sha, recursive=True)))
        files = listed_files(((t.path, t.size) for t in tree if isinstance(t, RepoFile)), ref.uri)
        return Snapshot(commit=sha, files=files, url_rev=sha)

    def file_url(self, ref: RemoteRef, snap: Snapshot, path: str) -> str:
        return f"{self.endpoint}/{ref.repo}/resolve/{quote(snap.url_rev, safe='')}/{quote(path)}"

    def check_hop(self, snap: Snapshot) -> Callable[[http.Hop, str], None]:
        def check(hop: http.Hop, where: str) -> None:
            got = hop.headers.get("x-repo-commit")
            if got is not None and got.strip() != snap.commit:
                raise AuditInputError(where, f"the Hub served commit {got.strip()[:40]} for {snap.commit}")
        return check

    def describe(self, ref: RemoteRef, commit: str) -> str:
        host = "" if self.endpoint == DEFAULT_ENDPOINT else f" via {self.endpoint}"
        return f"Hugging Face Hub{host}: {ref.repo}, {ref.rev} -> commit {commit} (headers read over HTTP)"
