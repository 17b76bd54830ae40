"""The local mirror of remote repositories, keyed by commit: a second run does no network at all.

Layout, under ``$AUDIT_CACHE`` (default ``$XDG_CACHE_HOME/audit``, else ``~/.cache/audit``)::

    remote/<hub>/<host>/<org>/<name>/
        refs/<revision>.json        {"commit": ..., "resolved_at": epoch seconds}
        snapshots/<commit>/
            manifest.json           what was mirrored: every file and its size
            files/                  the repository as the local scan reads it: config, indexes and
                                    description whole, every shard a sparse file of its full size
                                    holding only bytes [0, 8+N)
        tmp/                        snapshots being written

A snapshot is built in ``tmp/`` and renamed into ``snapshots/`` once complete (files fsynced,
manifest written last), so an interrupted or failed run leaves nothing that looks complete. Before
use a snapshot is checked against its manifest (every file present, regular, of its size; nothing
else there); one that does not match (a file removed, added or written over) is discarded and
fetched again. A branch or tag resolved less than ``AUDIT_REMOTE_TTL`` seconds ago (default 3600)
is not asked again; a full commit id never needs asking; ``HF_HUB_OFFLINE=1`` uses the last
resolution whatever its age.
"""
from __future__ import annotations

import json
import os
import shutil
import stat
import time
import uuid
from pathlib import Path
from urllib.parse import quote, urlsplit

from ..cachefile import cache_root     # the one root every cache of audit shares
from ..errors import AuditInputError
from ..inputs import load_json
from .refs import RemoteRef

MANIFEST = "manifest.json"
FILES = "files"
FORMAT = 1
MANIFEST_CAP = 64 << 20         # a manifest lists every file with its size (100,000 files: ~10 MB)
DEFAULT_TTL = 3600.0
STALE_TMP = 3600.0          # a tmp/ entry this old belongs to a run that died


def ref_ttl() -> float:
    raw = os.environ.get("AUDIT_REMOTE_TTL", "").strip()
    if not raw:
        return DEFAULT_TTL
    try:
        ttl = float(raw)
    except ValueError:
        raise AuditInputError("AUDIT_REMOTE_TTL", f"not a number of seconds: {raw[:40]!r}") from None
    if not 0 <= ttl <= 10 ** 9:
        raise AuditInputError("AUDIT_REMOTE_TTL", f"must be 0 to 1e9 seconds, got {raw[:40]}")
    return ttl


def host_key(endpoint: str) -> str:
    """A directory name for the endpoint: host, port and path, nothing else kept."""
    parts = urlsplit(endpoint)
    text = (parts.netloc + parts.path).rstrip("/") or "default"
    return "".join(c if c.isalnum() or c in "._-" else "_" for c in text.lower())


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def write_json_atomic(path: Path, doc: dict) -> None:
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(doc, f, indent=1, sort_keys=True)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


class RepoCache:
    """The cache directory of one repository on one endpoint."""

    def __init__(self, hub: str, endpoint: str, ref: RemoteRef, root: Path | None = None):
        self.root = (root or cache_root()) / "remote" / hub / host_key(endpoint) / ref.org / ref.name
        self.ref = ref

    def _fail(self, path: Path, exc: OSError) -> AuditInputError:
        return AuditInputError(path, f"cannot use the remote-checkpoint cache: {exc.strerror or exc} "
                                     f"(set AUDIT_CACHE to a writable directory)")

    # --- refs -----------------------------------------------------------------------------
    def _ref_path(self) -> Path:
        return self.root / "refs" / (quote(self.ref.rev, safe="") + ".json")

    def cached_commit(self, max_age: float | None) -> str | None:
        """The commit the revision last resolved to, if resolved less than ``max_age`` seconds ago
        (None: any age)."""
        try:
            doc = load_json(self._ref_path(), "cached ref", cap=64 << 10)
            commit, when = doc["commit"], float(doc["resolved_at"])
        except (AuditInputError, ValueError, KeyError, TypeError):       # missing or damaged: resolve again
            return None
        if not isinstance(commit, str) or not commit.isalnum() or len(commit) > 128:
            return None
        if max_age is not None and not (0 <= time.time() - when < max_age):
            return None
        return commit

    def remember(self, commit: str) -> None:
        path = self._ref_path()
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_json_atomic(path, {"revision": self.ref.rev, "commit": commit, "resolved_at": time.time()})
        except OSError as exc:
            raise self._fail(path, exc) from None

    # --- snapshots ------------------------------------------------------------------------
    def snapshot_dir(self, commit: str) -> Path:
        return self.root / "snapshots" / commit

    def valid(self, commit: str) -> Path | None:
        """The files/ directory of a complete, untouched snapshot of ``commit``, else None (a
        damaged one is removed)."""
        snap = self.snapshot_dir(commit)
        if not snap.is_dir():
            if os.path.lexists(snap):               # a file or a link where the snapshot was: fetch it again
                self._discard(snap)
            return None
        if self._matches_manifest(snap, commit):
            return snap / FILES
        self._discard(snap)
        return None

    def _matches_manifest(self, snap: Path, commit: str) -> bool:
        try:
            doc = load_json(snap / MANIFEST, "snapshot manifest", cap=MANIFEST_CAP)
            if not isinstance(doc, dict):
                return False
            if doc.get("format") != FORMAT or doc.get("commit") != commit or doc.get("repo") != self.ref.repo:
                return False
            files = {str(k): int(v) for k, v in doc["files"].items()}
        except (AuditInputError, OSError, ValueError, KeyError, TypeError, AttributeError):
            return False
        base = snap / FILES
        seen: set[str] = set()
        dirs: set[str] = set()
        for dirpath, dirnames, filenames in os.walk(base):
            rel_dir = os.path.relpath(dirpath, base)
            for d in dirnames:
                dirs.add(d if rel_dir == "." else f"{rel_dir}/{d}")
            for name in filenames:
                seen.add(name if rel_dir == "." else f"{rel_dir}/{name}")
        if seen != set(files):
            return False
        needed = {p.rsplit("/", 1)[0] for p in files if "/" in p}
        needed |= {"/".join(p.split("/")[:i]) for p in needed for i in range(1, p.count("/") + 1)}
        if dirs - needed:
            return False
        for rel, size in files.items():
            try:
                st = os.lstat(base / rel)
            except OSError:
                return False
            if not stat.S_ISREG(st.st_mode) or st.st_size != size:
                return False
        return True

    def _discard(self, path: Path) -> None:
        """Move a snapshot out of the way first (rename is atomic), then delete it."""
        tmp = self.root / "tmp"
        try:
            tmp.mkdir(parents=True, exist_ok=True)
            gone = tmp / f"discard-{uuid.uuid4().hex}"
            os.rename(path, gone)
            if not gone.is_dir() or gone.is_symlink():
                os.unlink(gone)
        except OSError as exc:
            raise self._fail(path, exc) from None
        shutil.rmtree(gone, ignore_errors=True)

    def new_tmp(self, commit: str) -> Path:
        """A fresh directory to build a snapshot of ``commit`` in (stale ones are removed)."""
        tmp = self.root / "tmp"
        try:
            tmp.mkdir(parents=True, exist_ok=True)
            now = time.time()
            for old in tmp.iterdir():
                try:
                    if now - old.lstat().st_mtime > STALE_TMP:
                        shutil.rmtree(old, ignore_errors=True)
                except OSError:
                    pass
            path = tmp / f"{commit[:40]}.{os.getpid()}.{uuid.uuid4().hex[:8]}"
            (path / FILES).mkdir(parents=True)
        except OSError as exc:
            raise self._fail(tmp, exc) from None
        return path

    def commit(self, tmp: Path, commit: str, files: dict[str, int], extra: dict) -> Path:
        """Write the manifest and move ``tmp`` into place; the files/ directory to read. When
        another run got there first, its (valid) snapshot is used and ours dropped."""
        target = self.snapshot_dir(commit)
        try:
            write_json_atomic(tmp / MANIFEST, {"format": FORMAT, "repo": self.ref.repo, "commit": commit,
                                               "files": files, **extra})
            _fsync_dir(tmp / FILES)
            target.parent.mkdir(parents=True, exist_ok=True)
            for attempt in range(2):
                try:
                    os.rename(tmp, target)
                    break
                except OSError:
                    if self.valid(commit) is not None:    # another run finished it first
                        shutil.rmtree(tmp, ignore_errors=True)
                        break
                    if attempt:                           # (a damaged one was discarded: once more)
                        raise
            _fsync_dir(target.parent)
        except OSError as exc:
            shutil.rmtree(tmp, ignore_errors=True)
            raise self._fail(target, exc) from None
        return target / FILES
