"""Opening the files a user points us at, safely: never block, never read unbounded data.

Why: a model directory from a hub or shared storage can hold anything where a shard, the index,
config.json or the quant description is expected: a FIFO (a plain open() blocks forever), a
symlink to /dev/zero (a plain read() never ends), a socket, a directory. Every reader here opens
with ``O_NONBLOCK``, ``fstat``s the descriptor it got (after symlinks were followed) and refuses
anything but a regular file with one line naming it; JSON side files are read up to a cap.
"""
from __future__ import annotations

import errno
import os
import re
import stat
from pathlib import Path

import numpy as np

from .errors import AuditInputError

# Caps on the JSON side files (bytes). Real files are far smaller: GLM-5.1's index is 19 MB and
# its description 10 MB for 177,102 tensors, a config.json a few KB.
CONFIG_CAP = 4 << 20
INDEX_CAP = 128 << 20
DESCRIPTION_CAP = 64 << 20
OTHER_CAP = 256 << 20        # any other file read whole (logs, benchmark results)
CONFIG_MAX_DEPTH = 64          # config.json nesting (objects and arrays); real configs use < 6


def _kind(mode: int) -> str:
    if stat.S_ISDIR(mode):
        return "a directory"
    if stat.S_ISFIFO(mode):
        return "a FIFO (named pipe)"
    if stat.S_ISCHR(mode):
        return "a character device"
    if stat.S_ISBLK(mode):
        return "a block device"
    if stat.S_ISSOCK(mode):
        return "a socket"
    return "not a regular file"


def open_regular(path: str | Path, what: str) -> tuple[int, int]:
    """(descriptor, size) of ``path`` opened read-only without blocking; AuditInputError naming
    the file when it is missing, unreadable, or not a regular file once symlinks are followed.
    The caller closes the descriptor."""
    path = Path(path)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0))
    except FileNotFoundError:
        why = "is a broken symlink" if path.is_symlink() else "does not exist"
        raise AuditInputError(path, f"cannot read {what}: {why}") from None
    except OSError as exc:
        if exc.errno in (errno.ENXIO, errno.EOPNOTSUPP):     # a socket cannot be opened
            try:
                kind = _kind(os.stat(path).st_mode)
            except OSError:
                kind = "not a regular file"
            raise AuditInputError(path, f"cannot read {what}: it is {kind}, not a regular file") from None
        if exc.errno == errno.ELOOP:
            raise AuditInputError(path, f"cannot read {what}: symlink loop") from None
        raise AuditInputError(path, f"cannot read {what}: {exc.strerror or exc}") from None
    try:
        st = os.fstat(fd)
    except OSError as exc:  # pragma: no cover - fstat of an open descriptor
        os.close(fd)
        raise AuditInputError(path, f"cannot read {what}: {exc.strerror or exc}") from None
    if not stat.S_ISREG(st.st_mode):
        os.close(fd)
        raise AuditInputError(path, f"cannot read {what}: it is {_kind(st.st_mode)}, not a regular file")
    return fd, st.st_size


def open_binary(path: str | Path, what: str):
    """``open_regular`` as an unbuffered binary file object (closes the descriptor with it)."""
    fd, size = open_regular(path, what)
    return os.fdopen(fd, "rb", buffering=0), size


def read_capped(path: str | Path, what: str, cap: int) -> bytes:
    """All bytes of the regular file ``path``, refusing one larger than ``cap`` bytes (checked
    before reading, and again while reading in case it grows)."""
    path = Path(path)
    fd, size = open_regular(path, what)
    try:
        if size > cap:
            raise AuditInputError(path, f"{what} is {size:,} bytes, over the {cap >> 20} MiB cap for {what} files")
        chunks, got = [], 0
        while True:
            chunk = os.read(fd, min(max(size - got, 0) + 1, cap + 1 - got) or 1)
            if not chunk:
                break
            chunks.append(chunk)
            got += len(chunk)
            if got > cap:
                raise AuditInputError(path, f"{what} grew past the {cap >> 20} MiB cap for {what} files while read")
    except OSError as exc:
        raise AuditInputError(path, f"cannot read {what}: {exc.strerror or exc}") from None
    finally:
        os.close(fd)
    return b"".join(chunks)



def read_text_capped(path: str | Path, what: str, cap: int) -> str:
    """The regular file ``path`` as UTF-8 text of at most ``cap`` bytes (``read_capped``), or one
    line naming it: a text input that is not UTF-8 (or holds NUL bytes, i.e. is binary) is refused
    with the line and byte where it stops being text, never decoded with replacement characters."""
    raw = read_capped(path, what, cap)
    nul = raw.find(b"\0")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        if nul < 0 or nul > exc.start:
            line = raw.count(b"\n", 0, exc.start) + 1
            raise AuditInputError(path, f"{what} is not UTF-8 text: byte 0x{raw[exc.start]:02x} at offset "
                                        f"{exc.start:,} (line {line})") from None
    if nul >= 0:
        line = raw.count(b"\n", 0, nul) + 1
        raise AuditInputError(path, f"{what} is a binary file, not text: NUL byte at offset {nul:,} (line {line})")
    return text[1:] if text.startswith("\ufeff") else text

_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)
_OPEN, _CLOSE = np.zeros(256, np.int8), np.zeros(256, np.int8)
_OPEN[[ord("{"), ord("[")]] = 1
_CLOSE[[ord("}"), ord("]")]] = 1


def json_depth(raw: bytes) -> int:
    """Deepest nesting of objects/arrays in the JSON text ``raw`` (the top-level object is 1),
    with strings cut out first; exact for valid JSON, a bound for anything else. No recursion."""
    if b"\\" in raw or raw.count(b'"') % 2:
        text = _STRING.sub(b'""', raw)
    else:                                   # no escapes: strings run from one quote to the next
        b = np.frombuffer(raw, np.uint8)
        inside = (np.cumsum(b == 0x22, dtype=np.int32) & 1).astype(bool)
        text = np.where(inside, np.uint8(0x20), b)
        b = text
        steps = _OPEN[b].astype(np.int32) - _CLOSE[b]
        return int(np.cumsum(steps, dtype=np.int32).max(initial=0))
    b = np.frombuffer(text, np.uint8)
    steps = _OPEN[b].astype(np.int32) - _CLOSE[b]
    return int(np.cumsum(steps, dtype=np.int32).max(initial=0))
