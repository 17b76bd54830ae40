"""MODEL forms that name a remote repository: ``hf://org/name[@revision]``, ``ms://org/name[@revision]``
and a bare ``org/name[@revision]`` (Hugging Face) when nothing exists at that local path.

Pure parsing, no network and no third-party import: ``source.open_model`` calls this for every
MODEL, so a preset or a local directory never pays for the hub clients.

The grammar is deliberately narrower than what the hubs accept in corner cases, and names the
problem when a scheme form does not fit it:
* ``org`` and ``name``: 1-96 characters of ``[A-Za-z0-9._-]``, starting and ending with a letter,
  digit or ``_``, without ``--`` or ``..`` (the Hub's own repo-id rule, ASCII only);
* ``revision``: a branch, tag or commit: 1-255 characters of ``[A-Za-z0-9._/+-]``, starting with
  a letter, digit or ``_``, without ``..``, ``//`` or a trailing ``/`` (``refs/pr/1`` is fine).
  It travels as one quoted URL path segment or query value, never as a path.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import AuditInputError

HF, MS = "hf", "ms"
SCHEMES = {"hf://": HF, "ms://": MS}
DEFAULT_REVISION = {HF: "main", MS: "master"}
HUB_NAMES = {HF: "Hugging Face Hub", MS: "ModelScope"}

_PART = re.compile(r"[A-Za-z0-9_](?:[A-Za-z0-9._-]{0,94}[A-Za-z0-9_])?\Z")
_REVISION = re.compile(r"[A-Za-z0-9_][A-Za-z0-9._/+-]{0,254}\Z")
_SHA1 = re.compile(r"[0-9a-f]{40}\Z")
FORMS = "expected hf://org/name[@revision] or ms://org/name[@revision]"


@dataclass(frozen=True)
class RemoteRef:
    """A repository on a hub, at a revision (None: the hub's default branch)."""

    hub: str                 # "hf" | "ms"
    org: str
    name: str
    revision: str | None
    bare: bool = False       # given as org/name, without a scheme

    @property
    def repo(self) -> str:
        return f"{self.org}/{self.name}"

    @property
    def rev(self) -> str:
        """The revision asked for, the hub's default branch when none was given."""
        return self.revision or DEFAULT_REVISION[self.hub]

    @property
    def uri(self) -> str:
        at = f"@{self.revision}" if self.revision else ""
        return f"{self.hub}://{self.repo}{at}"

    @property
    def pinned(self) -> bool:
        """The revision is a full Hugging Face commit id: nothing to resolve, ever."""
        return self.hub == HF and self.revision is not None and _SHA1.match(self.revision) is not None


def part_problem(part: str, what: str) -> str | None:
    """Why ``part`` is not a valid org or repository name, or None."""
    if not part:
        return f"empty {what}"
    if len(part) > 96:
        return f"{what} longer than 96 characters"
    if not _PART.match(part) or "--" in part or ".." in part:
        return (f"{what} {part[:100]!r} must be letters, digits, '.', '_' or '-', start and end with a "
                f"letter, digit or '_', and hold no '--' or '..'")
    return None


def revision_problem(rev: str) -> str | None:
    """Why ``rev`` is not an acceptable revision, or None."""
    if not rev:
        return "empty revision after '@'"
    if len(rev) > 255:
        return "revision longer than 255 characters"
    if not _REVISION.match(rev) or ".." in rev or "//" in rev or rev.endswith("/"):
        return (f"revision {rev[:100]!r} must be letters, digits, '.', '_', '/', '+' or '-' (a branch, tag "
                f"or commit), start with a letter, digit or '_', and hold no '..' or '//'")
    return None


def _split(body: str) -> tuple[str, str, str | None] | str:
    """(org, name, revision) of ``org/name[@rev]``, or the problem as a string."""
    repo, at, rev = body.partition("@")
    if "/" not in repo:
        return f"{FORMS} (no '/' between org and name in {repo[:100]!r})"
    org, _, name = repo.partition("/")
    if "/" in name:
        return f"{FORMS} (a repository is org/name; subfolders are not supported: {repo[:100]!r})"
    for part, what in ((org, "org"), (name, "repository name")):
        problem = part_problem(part, what)
        if problem:
            return problem
    if at:
        problem = revision_problem(rev)
        if problem:
            return problem
    return org, name, (rev if at else None)


def scheme_of(model: str) -> str | None:
    """The hub a ``hf://`` or ``ms://`` MODEL names (scheme case-insensitive), else None."""
    head = model[:5].lower()
    return SCHEMES.get(head)


def parse_remote(model: str, local_exists: bool = False) -> RemoteRef | None:
    """The repository ``model`` names, or None when it is not a remote form.

    A ``hf://``/``ms://`` form always is one, and a malformed one raises AuditInputError naming
    it. A bare ``org/name[@rev]`` is a Hugging Face repository only when nothing exists at that
    local path (``local_exists`` False) and it fits the grammar; otherwise None (the caller then
    reports the missing directory as before).
    """
    hub = scheme_of(model)
    if hub is not None:
        parsed = _split(model[5:])
        if isinstance(parsed, str):
            raise AuditInputError(model[:300], parsed)
        org, name, rev = parsed
        return RemoteRef(hub, org, name, rev)
    if local_exists or model.count("/") < 1 or "\\" in model:
        return None
    parsed = _split(model)
    if isinstance(parsed, str):
        return None
    org, name, rev = parsed
    return RemoteRef(HF, org, name, rev, bare=True)
