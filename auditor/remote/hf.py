"""Hugging Face Hub: resolve a revision to its commit and list the repository, through our own HTTP client.

The Hub's API is read as ``huggingface_hub`` reads it (``/api/models/{repo}/revision/{rev}`` for the
commit sha, ``/api/models/{repo}/tree/{sha}?recursive=true`` with its ``Link`` pagination for the files,
the error mapping from ``X-Error-Code``), but not with it: the library buffers whole answers and its
pagination sends the request's headers, token included, to whatever origin a ``Link`` names. Here
every answer goes through ``api`` (bounded size, time and nesting; pagination on the endpoint only)
and the token only to the endpoint's own origin. The library still gives the token (``HF_TOKEN``,
else the token file). Its header reader is not used either (``ranges.py``): it caps headers at 25 MB
where the loader allows 100 MB, does not check for 206/Content-Range, and looks only for root-level
``model.safetensors[.index.json]``, not msModelSlim's names.

Files are read at ``{endpoint}/{repo}/resolve/{sha}/{path}``: always by the commit, never by a
branch, so a push during the run cannot mix two commits; a resolve answer whose
``X-Repo-Commit`` names another commit is refused. ``HF_ENDPOINT`` is read when used (the library
reads it at import), with the library's rule.
"""
from __future__ import annotations

import os
import re
from typing import Callable
from urllib.parse import quote

from ..errors import AuditInputError
from . import api, http
from .refs import RemoteRef
from .snapshot import Snapshot, listed_files

DEFAULT_ENDPOINT = "https://huggingface.co"
TOKEN_HINT = "HF_TOKEN"
_SHA1 = re.compile(r"[0-9a-f]{40}\Z")


def endpoint() -> str:
    return os.environ.get("HF_ENDPOINT", DEFAULT_ENDPOINT).rstrip("/")


def _tree_entry(e: dict) -> tuple[object, object, object, object]:
    kind = {"file": "file", "directory": "dir"}.get(e.get("type"), e.get("type"))
    return kind, e.get("path"), e.get("size"), None


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

    def _api_problem(self, ref: RemoteRef) -> Callable[[int, object], str]:
        """An error status of the Hub's API as one line, from the status and its ``X-Error-Code``."""
        def describe(status: int, headers) -> str:
            code = headers.get("x-error-code", "")
            if code == "GatedRepo":
                return (f"gated repository: request access on its Hub page, then set {TOKEN_HINT} to a token of "
                        "an account that has it")
            if code == "RevisionNotFound":
                return f"revision '{ref.rev}' not found"
            if code == "DisabledRepo":
                return "repository disabled on the Hub"
            if code == "RepoNotFound" or status == 401:
                how = (f"the token in {TOKEN_HINT} has no access to it" if self.token()
                       else f"private or gated: set {TOKEN_HINT} to a token with access")
                return f"repository not found on {self.endpoint}, or {how} (HTTP {status})"
            return http.status_problem(status, headers, TOKEN_HINT, bool(self.token()))
        return describe

    def snapshot(self, ref: RemoteRef) -> Snapshot:
        """The commit ``ref`` resolves to (``/api/models/{repo}/revision/{rev}``) and the repository's
        files at it (``/api/models/{repo}/tree/{sha}?recursive=true``, its ``Link`` pages followed on the
        endpoint only), through our HTTP client and its caps (``api``)."""
        client = http.Http(self.endpoint, self.auth_headers(), TOKEN_HINT, 1)
        describe = self._api_problem(ref)
        try:
            info, _ = self._get(client, f"{self.endpoint}/api/models/{ref.repo}/revision/{quote(ref.rev, safe='')}",
                                ref, describe)
            sha = info.get("sha") if isinstance(info, dict) else None
            if not isinstance(sha, str) or not _SHA1.match(sha):
                raise AuditInputError(ref.uri, f"the Hub gave no commit id for revision '{ref.rev}'")
            if ref.pinned and sha != ref.revision:
                raise AuditInputError(ref.uri, f"the Hub resolved commit {ref.revision} to {sha}")
            url: str | None = f"{self.endpoint}/api/models/{ref.repo}/tree/{sha}?recursive=true&expand=false"
            listed: list[tuple[str, object, object]] = []
            for _page in range(api.MAX_PAGES):
                doc, link = self._get(client, url, ref, describe)
                listed += api.entries(doc, ref.uri, _tree_entry)
                if len(listed) > api.MAX_LISTED:
                    raise AuditInputError(ref.uri, f"the repository lists more than {api.MAX_LISTED:,} files "
                                                   "(audit's cap)")
                url = api.next_page(link, self.endpoint, ref.uri)
                if url is None:
                    break
            else:
                raise AuditInputError(ref.uri, f"the repository listing runs past {api.MAX_PAGES} pages (audit's cap)")
        finally:
            client.close()
        files = listed_files(((p, size) for p, size, _ in listed), ref.uri)
        return Snapshot(commit=sha, files=files, url_rev=sha)

    def _get(self, client: http.Http, url: str, ref: RemoteRef, describe) -> tuple[object, str | None]:
        try:
            return api.get_json(client, url, ref.uri, describe)
        except http.Unreachable as exc:
            raise AuditInputError(ref.uri, f"cannot reach {self.endpoint} "
                                           f"({exc.problem.split('(', 1)[-1].rstrip(')')})") from None

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
