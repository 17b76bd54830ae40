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
  AuditInputError naming the path and the option.
"""
from __future__ import annotations

import contextlib
import errno
import os
import stat
import tempfile
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


def _new_file_mode() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return 0o666 & ~mask


@contextlib.contextmanager
def open_output(path: str | Path, what: str = "--output", text: bool = False, durable: bool = True) -> Iterator[IO]:
    """A file object for the target; the target is complete when the ``with`` block ends, or
    untouched (and one AuditInputError raised) when anything fails. ``durable=False`` skips the
    fsync (synth's thousands of sparse shards; errors are still caught at write and close)."""
    real, in_place = check_output_path(path, what)
    mode = "w" if text else "wb"
    enc = {"encoding": "utf-8", "newline": ""} if text else {}
    try:
        if in_place:
            # O_NONBLOCK: a pipe nobody reads is refused (ENXIO) instead of blocking forever
            fd = os.open(real, os.O_WRONLY | os.O_NONBLOCK | os.O_CLOEXEC)
            os.set_blocking(fd, True)
            with os.fdopen(fd, mode, **enc) as f:
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
            try:
                keep = stat.S_IMODE(os.stat(real).st_mode)
            except FileNotFoundError:
                keep = _new_file_mode()
            os.chmod(tmp, keep)
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
