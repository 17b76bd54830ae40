"""Hugging Face hub cache directories, so a cached model can be named as it sits on disk.

The hub cache keeps one directory per repository, ``models--{org}--{name}``, holding ``refs/main``
(a text file with the commit hash ``main`` points at), ``snapshots/{hash}/`` (the repository's files
at that commit, usually symlinks into ``blobs/``) and ``blobs/``. A repository root resolves through
``refs/main`` to its snapshot; a snapshot directory is used as is. Either way the model is named by
its repository (``org/name``), never by the hash directory it happens to be read from.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from .errors import AuditInputError

REPO_PREFIX = "models--"
_REVISION_RE = re.compile(r"^[0-9a-fA-F]{7,64}$")


@dataclass(frozen=True)
class HubSnapshot:
    """A snapshot directory of a hub cache repository."""

    path: Path          # the snapshot directory (what the scanner reads)
    repo: str           # "org/name"
    revision: str       # the commit hash (the snapshot directory's name)
    via_ref: bool       # resolved from the repository root through refs/main


def repo_id(dirname: str) -> str | None:
    """'models--zai-org--GLM-5.1' -> 'zai-org/GLM-5.1' ('models--gpt2' -> 'gpt2'); None for any other name."""
    if not dirname.startswith(REPO_PREFIX):
        return None
    parts = dirname[len(REPO_PREFIX):].split("--")
    if not all(parts):
        return None
    return "/".join(parts)


def _repo_root(path: Path) -> bool:
    return repo_id(path.name) is not None and ((path / "snapshots").is_dir() or (path / "refs").is_dir())


def resolve_hub_dir(path: Path) -> HubSnapshot | None:
    """The snapshot ``path`` stands for when it is a hub cache repository root or one of its
    snapshots; None for any other directory. A repository root without ``refs/main``, or whose
    ``refs/main`` names a snapshot that is not there, is refused (AuditInputError)."""
    for cand in dict.fromkeys((Path(os.path.abspath(path)), path.resolve())):   # as named, then symlinks followed
        if _repo_root(cand):
            return _from_root(cand)
        parent = cand.parent
        if parent.name == "snapshots" and _repo_root(parent.parent):
            return HubSnapshot(cand, repo_id(parent.parent.name), cand.name, False)
    return None


def _from_root(root: Path) -> HubSnapshot:
    ref = root / "refs" / "main"
    if not ref.is_file():
        raise AuditInputError(root, "Hugging Face cache repository without refs/main: name a snapshot "
                                    "directory (snapshots/<hash>) instead")
    from .inputs import read_text_capped
    rev = read_text_capped(ref, "ref", 4096).strip()          # a commit hash: 40 characters
    if not _REVISION_RE.match(rev):
        raise AuditInputError(ref, f"not a commit hash: {rev[:80]!r}")
    snap = root / "snapshots" / rev
    if not snap.is_dir():
        raise AuditInputError(ref, f"dangling ref: main points at {rev}, which is not in snapshots/")
    return HubSnapshot(snap, repo_id(root.name), rev, True)
