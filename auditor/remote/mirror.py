"""Mirror what the local scan reads of a remote repository into the cache, then hand the directory
to the local path: the report is the local report by construction, and every rule (caps, header
rules, index vs headers) is the local one, worded the same way.

Order of work: the commit (cache, else the hub), then config/indexes/description whole, then
every shard's header, ``concurrency`` at a time (``AUDIT_REMOTE_CONCURRENCY``, default 8), with a
progress line on a terminal. Anything that fails removes the half-built snapshot; errors name
``hf://org/name@commit/file``, never a cache path.
"""
from __future__ import annotations

import os
import shutil
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path

from ..errors import AuditInputError
from ..inventory.header import header_length
from ..inventory.progress import ProgressLine, want_progress
from . import plan as planner
from .cache import RepoCache, ref_ttl
from .http import Http
from .ranges import INVALID, read_header, read_whole
from .refs import HF, RemoteRef
from .snapshot import Snapshot

DEFAULT_CONCURRENCY = 8


def hf_offline() -> bool:
    """``HF_HUB_OFFLINE`` as huggingface_hub reads it."""
    return os.environ.get("HF_HUB_OFFLINE", "").strip().upper() in ("1", "ON", "YES", "TRUE")


@dataclass
class Mirrored:
    """A remote repository as a local directory, and how to name it."""

    path: Path          # the directory the local scan reads
    ref: RemoteRef
    commit: str
    label: str          # hf://org/name@<commit> (ms://org/name@<revision>)
    note: str           # an info finding naming the repository and the commit

    def relabel(self, exc: AuditInputError) -> AuditInputError:
        """``exc`` with every cache path replaced by the repository's name."""
        prefixes = sorted({str(self.path), str(self.path.resolve())}, key=len, reverse=True)

        def fix(text: str | None) -> str | None:
            if text is None:
                return None
            for p in prefixes:
                text = text.replace(p, self.label)
            return text

        return AuditInputError(fix(exc.where), fix(exc.problem))

    def relabel_source(self, src):
        """``src`` (a ModelSource read from ``path``) with the quant description named by the
        repository (the inventory report shows its path)."""
        desc = getattr(src, "desc", None)
        if desc is not None and str(desc.path).startswith(str(self.path)):
            desc.path = self.label + str(desc.path)[len(str(self.path)):]   # a name, not a local path
        return src


def concurrency() -> int:
    raw = os.environ.get("AUDIT_REMOTE_CONCURRENCY", "").strip()
    if not raw:
        return DEFAULT_CONCURRENCY
    if not raw.isdigit() or not 1 <= int(raw) <= 64:
        raise AuditInputError("AUDIT_REMOTE_CONCURRENCY", f"must be an integer from 1 to 64, got {raw[:40]!r}")
    return int(raw)


def backend_for(ref: RemoteRef):
    if ref.hub == HF:
        from .hf import HfBackend
        return HfBackend()
    from .modelscope import MsBackend
    return MsBackend()


def label_of(ref: RemoteRef, commit: str) -> str:
    return f"{ref.hub}://{ref.repo}@{commit if ref.hub == HF else ref.rev}"


def open_remote(ref: RemoteRef, progress: bool | None = None) -> Mirrored:
    """The mirrored directory of ``ref``: from the cache when it holds the commit, else fetched.
    A bare ``org/name`` that fails says it was tried as a Hub repository because no such local
    directory exists."""
    try:
        return _open_remote(ref, progress)
    except AuditInputError as exc:
        if not ref.bare or exc.where != ref.uri:      # a file's or a setting's error names itself
            raise
        typed = ref.repo + (f"@{ref.revision}" if ref.revision else "")
        raise AuditInputError(typed, f"no such local directory; as the Hugging Face repository {ref.uri}: "
                                     f"{exc.problem}") from None


def _open_remote(ref: RemoteRef, progress: bool | None) -> Mirrored:
    be = backend_for(ref)
    cache = RepoCache(be.hub, be.endpoint, ref)
    offline = ref.hub == HF and hf_offline()
    if ref.pinned:
        known = ref.revision
    else:
        known = cache.cached_commit(None if offline else ref_ttl())
    if known is not None:
        path = cache.valid(known)
        if path is not None:
            return Mirrored(path, ref, known, label_of(ref, known), be.describe(ref, known))
    if offline:
        raise AuditInputError(ref.uri, "HF_HUB_OFFLINE is set and this revision is not in the cache "
                                       f"({cache.root})")
    snap = be.snapshot(ref)
    path = cache.valid(snap.commit) or _materialize(be, ref, snap, cache, progress)
    if not ref.pinned:
        cache.remember(snap.commit)
    return Mirrored(path, ref, snap.commit, label_of(ref, snap.commit), be.describe(ref, snap.commit))


def _create(path: Path, size: int) -> int:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o644)
    os.ftruncate(fd, size)          # a hole: what is not read stays unallocated
    return fd


def _materialize(be, ref: RemoteRef, snap: Snapshot, cache: RepoCache,
                 progress: bool | None) -> Path:
    label = label_of(ref, snap.commit)
    plan = planner.small_files(snap.files, label)
    planner.check_paths(plan, label)
    workers = concurrency()
    http = Http(be.endpoint, be.auth_headers(), be.token_hint, workers)
    check = be.check_hop(snap)

    def where(rel: str) -> str:
        return f"{label}/{rel}"

    def whole(rel: str) -> int:
        fd = _create(files / rel, plan.whole[rel])
        try:
            read_whole(http, be.file_url(ref, snap, rel), plan.whole[rel], fd, where(rel), check)
            os.fsync(fd)
        finally:
            os.close(fd)
        return plan.whole[rel]

    def shard(rel: str) -> int:
        size = plan.shards[rel]
        fd = _create(files / rel, size)
        try:
            if size < 8:            # the local reader refuses it by its size alone
                return 0

            def header_len() -> int:
                with os.fdopen(os.dup(fd), "rb", buffering=0) as fh:
                    fh.seek(0)
                    try:
                        return header_length(Path(where(rel)), fh)[0]
                    except AuditInputError:
                        return INVALID

            read_header(http, be.file_url(ref, snap, rel), size, plan.guess[rel], fd, where(rel), header_len, check)
            os.fsync(fd)
            n = header_len()
            return 8 + n if n != INVALID else 8
        finally:
            os.close(fd)

    try:
        tmp = cache.new_tmp(snap.commit)
        files = tmp / "files"
        done = False
        try:
            with ThreadPoolExecutor(max_workers=workers) as pool:
                for rel, size in plan.holes.items():
                    os.close(_create(files / rel, size))
                _run(pool, whole, sorted(plan.whole), None)
                indexed = []
                for name in plan.indexes:
                    parsed = planner.index_shards((files / name).read_bytes())
                    if parsed is not None:
                        indexed.append(parsed)
                planner.add_shards(plan, snap.files, indexed)
                planner.check_paths(plan, label)
                shards = sorted(plan.shards)
                with ProgressLine(len(shards), label=f"reading headers of {ref.uri}", unit="shards",
                                  enabled=want_progress(progress, len(shards))) as bar:
                    _run(pool, shard, shards, bar)
            sizes = {**plan.whole, **plan.holes, **plan.shards}
            path = cache.commit(tmp, snap.commit, sizes, {"endpoint": be.endpoint, "revision": ref.rev,
                                                          "requests": http.requests})
            done = True
            return path
        except OSError as exc:
            raise AuditInputError(cache.root, f"cannot write the remote-checkpoint cache: {exc.strerror or exc} "
                                              f"(set AUDIT_CACHE to a writable directory)") from None
        finally:
            if not done:
                shutil.rmtree(tmp, ignore_errors=True)
    finally:
        http.close()


def _run(pool: ThreadPoolExecutor, fn, items: list[str], bar: ProgressLine | None) -> None:
    """``fn`` over ``items`` on the pool; on a failure the rest is cancelled and the error of the
    first failed item in ``items`` order is raised (the same one whatever finished first)."""
    futures = {pool.submit(fn, item): i for i, item in enumerate(items)}
    pending = set(futures)
    while pending:
        finished, pending = wait(pending, return_when=FIRST_EXCEPTION)
        failed = [f for f in finished if f.exception() is not None]
        if failed:
            for f in pending:
                f.cancel()
            wait(pending)
            failed += [f for f in pending if not f.cancelled() and f.exception() is not None]
            raise min(failed, key=futures.get).exception()
        if bar is not None:
            for f in finished:
                bar.update(f.result())
