"""The one place audit writes a file the user named (--output, --png, --trace, --csv, calibrate -o,
kernels import -o, synth OUT_DIR): checked before the work starts, written so that a failure is one
``audit: error:`` line and never a half-written file.

Rules (the README's list):

* the parent directory must exist and be a directory: audit never creates it;
* the target may be a new file, an existing regular file (replaced), or an existing character
  device or pipe (``/dev/stdout``, ``/dev/null``; written in place). A directory, a block device,
  a socket, and anything under ``/proc`` or ``/sys`` are refused;
* a regular file is written to a temporary file in the target directory, flushed, fsynced and
  renamed over the target, so ENOSPC, EIO or a quota leaves the old file (or nothing) behind;
* every OSError on the way (ENOSPC on ``/dev/full``, EACCES, EROFS, ELOOP, ENOTDIR, ...) becomes an
  AuditInputError naming the path and the option;
* a command with several outputs (a report and its PNG, a ticket's markdown, JSON and figures) writes
  them inside :func:`all_or_none`: each is staged (a fsynced temporary file beside a regular target,
  the bytes for a device or pipe) and the targets change only once every one is staged; a failure
  leaves every target as it was (a replaced one is put back).
"""
from __future__ import annotations

import contextlib
import contextvars
import errno
import io
import os
import stat
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Iterator

from .errors import AuditInputError

PSEUDO_FILESYSTEMS = ("/proc", "/sys")


def _fail(path: str | Path, what: str, reason: str) -> AuditInputError:
    return AuditInputError(path, f"cannot write {what}: {reason}")


def _reason(exc: OSError) -> str:
    return (exc.strerror or str(exc)).rstrip(".")


def _under_pseudo_fs(real: str) -> bool:
    return any(real == root or real.startswith(root + "/") for root in PSEUDO_FILESYSTEMS)


def check_output_path(path: str | Path, what: str = "--output") -> tuple[str, bool]:
    """Refuse a target that cannot be written, before any work is done. Returns the real path to
    write and whether it is written in place (a character device or a pipe)."""
    text = os.fspath(path)
    if not text:
        raise AuditInputError(what, "empty file name")
    try:
        st = os.stat(text)
    except FileNotFoundError:
        st = None
    except OSError as exc:                      # ELOOP, ENOTDIR (a parent is a file), EACCES, ENAMETOOLONG
        raise _fail(text, what, _reason(exc)) from None
    if st is not None:
        if stat.S_ISDIR(st.st_mode):
            raise _fail(text, what, "is a directory")
        if stat.S_ISCHR(st.st_mode) or stat.S_ISFIFO(st.st_mode):
            return text, True                   # /dev/stdout resolves to /proc/self/fd/1: keep the name
        if not stat.S_ISREG(st.st_mode):
            raise _fail(text, what, "not a regular file, character device or pipe")
    real = os.path.realpath(text)
    if _under_pseudo_fs(real):
        raise _fail(text, what, f"{real} is in a kernel pseudo-filesystem ({', '.join(PSEUDO_FILESYSTEMS)})")
    _check_parent(text, what, real)
    return real, False


def _check_parent(text: str, what: str, real: str) -> None:
    """The directory a new file or directory goes into must exist, be a directory and be writable
    (audit never creates it)."""
    parent = os.path.dirname(real) or "."
    try:
        pst = os.stat(parent)
    except FileNotFoundError:
        raise _fail(text, what, f"directory {parent} does not exist (audit does not create it)") from None
    except OSError as exc:
        raise _fail(text, what, f"{parent}: {_reason(exc)}") from None
    if not stat.S_ISDIR(pst.st_mode):
        raise _fail(text, what, f"{parent} is not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise _fail(text, what, f"directory {parent} is not writable")


def _keep_mode(tmp: str, real: str) -> None:
    """The temporary file gets the target's mode (a new target: the umask's)."""
    try:
        keep = stat.S_IMODE(os.stat(real).st_mode)
    except FileNotFoundError:
        keep = _new_file_mode()
    os.chmod(tmp, keep)


def _open_in_place(real: str) -> int:
    """A device or pipe opened for writing; O_NONBLOCK: a pipe nobody reads is refused (ENXIO) instead
    of blocking forever."""
    fd = os.open(real, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    os.set_blocking(fd, True)
    return fd


def _new_file_mode() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


@dataclass
class _Staged:
    path: str                   # as the user gave it (for messages)
    what: str
    real: str
    tmp: str | None = None      # a regular target: the staged temporary file beside it
    data: bytes | None = None   # a device or pipe: the bytes to write in place


@dataclass
class _Transaction:
    staged: list[_Staged] = field(default_factory=list)
    then: list = field(default_factory=list)       # what to do once every output is written ("wrote X")


_CURRENT: contextvars.ContextVar[_Transaction | None] = contextvars.ContextVar("audit_outputs", default=None)


@contextlib.contextmanager
def all_or_none() -> Iterator[None]:
    """Every output opened inside the block (``open_output``, ``write_output``, a PNG) is staged and
    written when the block ends without an error; on any error none of the targets changes."""
    if _CURRENT.get() is not None:              # nested: the outer block decides
        yield
        return
    tx = _Transaction()
    token = _CURRENT.set(tx)
    try:
        yield
    except BaseException:
        _discard(tx)
        raise
    finally:
        _CURRENT.reset(token)
    _commit(tx)
    for fn in tx.then:
        fn()


def when_written(fn) -> None:
    """``fn()`` once the outputs are written: now, or when the enclosing :func:`all_or_none` block has
    written them all (a "wrote X" line must not precede an error about Y)."""
    tx = _CURRENT.get()
    if tx is None:
        fn()
    else:
        tx.then.append(fn)


def _discard(tx: _Transaction) -> None:
    for st in tx.staged:
        if st.tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(st.tmp)


def _commit(tx: _Transaction) -> None:
    """Devices and pipes first (they cannot be put back; /dev/full fails here, before any file is
    replaced), then every staged file renamed over its target, the replaced ones put back on failure."""
    try:
        for st in tx.staged:
            if st.data is not None:
                try:
                    with os.fdopen(_open_in_place(st.real), "wb") as f:
                        f.write(st.data)
                        f.flush()
                except OSError as exc:
                    if exc.errno == errno.ENXIO:
                        raise _fail(st.path, st.what, "a pipe with no reader") from None
                    raise _fail(st.path, st.what, _reason(exc)) from None
    except BaseException:
        _discard(tx)
        raise
    done: list[tuple[_Staged, str | None]] = []      # (renamed, backup of the old target)
    current = None
    try:
        for st in tx.staged:
            if st.tmp is None:
                continue
            current, backup = st, None
            if os.path.exists(st.real):
                backup = f"{st.tmp}.old"
                os.link(st.real, backup)
            try:
                os.replace(st.tmp, st.real)
            except OSError:
                if backup is not None:
                    os.unlink(backup)
                raise
            done.append((st, backup))
    except OSError as exc:
        for st, backup in reversed(done):
            with contextlib.suppress(OSError):
                if backup is not None:
                    os.replace(backup, st.real)
                else:
                    os.unlink(st.real)
        _discard(tx)
        raise _fail(current.path, current.what, _reason(exc)) from None
    for _, backup in done:
        if backup is not None:
            with contextlib.suppress(OSError):
                os.unlink(backup)


@contextlib.contextmanager
def _staged_output(tx: _Transaction, path: str | Path, what: str, text: bool) -> Iterator[IO]:
    real, in_place = check_output_path(path, what)
    if in_place:
        buf = io.StringIO(newline="") if text else io.BytesIO()
        yield buf
        data = buf.getvalue()
        tx.staged.append(_Staged(os.fspath(path), what, real,
                                 data=data.encode("utf-8") if isinstance(data, str) else data))
        return
    directory, name = os.path.split(real)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=directory)
    except OSError as exc:
        raise _fail(path, what, _reason(exc)) from None
    entry = _Staged(os.fspath(path), what, real, tmp=tmp)
    tx.staged.append(entry)                      # removed with the others on any failure
    mode, enc = ("w", {"encoding": "utf-8", "newline": ""}) if text else ("wb", {})
    try:
        with os.fdopen(fd, mode, **enc) as f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        _keep_mode(tmp, real)
    except OSError as exc:
        raise _fail(path, what, _reason(exc)) from None


@contextlib.contextmanager
def open_output(path: str | Path, what: str = "--output", text: bool = False, durable: bool = True) -> Iterator[IO]:
    """A file object for the target; the target is complete when the ``with`` block ends, or
    untouched (and one AuditInputError raised) when anything fails. ``durable=False`` skips the
    fsync (synth's thousands of sparse shards; errors are still caught at write and close).
    Inside :func:`all_or_none` the target is only staged, and written when the block ends."""
    tx = _CURRENT.get()
    if tx is not None:
        with _staged_output(tx, path, what, text) as f:
            yield f
        return
    real, in_place = check_output_path(path, what)
    mode = "w" if text else "wb"
    enc = {"encoding": "utf-8", "newline": ""} if text else {}
    try:
        if in_place:
            with os.fdopen(_open_in_place(real), mode, **enc) as f:
                yield f
                f.flush()
            return
        directory, name = os.path.split(real)
        fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=directory)
        try:
            with os.fdopen(fd, mode, **enc) as f:
                yield f
                f.flush()
                if durable:
                    os.fsync(f.fileno())
            _keep_mode(tmp, real)
            os.replace(tmp, real)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
    except OSError as exc:
        if exc.errno == errno.ENXIO:
            raise _fail(path, what, "a pipe with no reader") from None
        raise _fail(path, what, _reason(exc)) from None


def write_output(path: str | Path, data: str | bytes, what: str = "--output") -> None:
    """Write ``data`` to the target through :func:`open_output`."""
    with open_output(path, what, text=isinstance(data, str)) as f:
        f.write(data)


def check_output_dir(path: str | Path, what: str = "OUT_DIR") -> bool:
    """Refuse an output directory that cannot be used (under /proc or /sys, not a directory, not
    writable, or a missing parent: audit creates the directory itself, never its parents).
    Returns whether it exists."""
    text = os.fspath(path)
    if not text:
        raise AuditInputError(what, "empty directory name")
    real = os.path.realpath(text)
    if _under_pseudo_fs(real):
        raise _fail(text, what, f"{real} is in a kernel pseudo-filesystem ({', '.join(PSEUDO_FILESYSTEMS)})")
    try:
        st = os.stat(text)
    except FileNotFoundError:
        _check_parent(text, what, real)
        return False
    except OSError as exc:
        raise _fail(text, what, _reason(exc)) from None
    if not stat.S_ISDIR(st.st_mode):
        raise _fail(text, what, "exists and is not a directory")
    if not os.access(real, os.W_OK | os.X_OK):
        raise _fail(text, what, "directory is not writable")
    return True


def prepare_output_dir(path: str | Path, what: str = "OUT_DIR") -> Path:
    """:func:`check_output_dir`, then create the directory (one level) when it is missing."""
    if not check_output_dir(path, what):
        try:
            os.mkdir(path)
        except OSError as exc:
            raise _fail(path, what, _reason(exc)) from None
    return Path(path)
