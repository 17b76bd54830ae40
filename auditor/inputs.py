"""Opening the files a user points us at, safely: never block, never read unbounded data.

Why: a model directory from a hub or shared storage can hold anything where a shard, the index,
config.json or the quant description is expected: a FIFO (a plain open() blocks forever), a
symlink to /dev/zero (a plain read() never ends), a socket, a directory. Every reader here opens
with ``O_NONBLOCK``, ``fstat``s the descriptor it got (after symlinks were followed) and refuses
anything but a regular file with one line naming it; JSON side files are read up to a cap.
"""
from __future__ import annotations

import errno
import math
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


# ------------------------------------------------------------------------------------------------
# Evidence files (issue 18): logs, profiles, benchmark results, calibration / workload / kernel-table
# CSVs, device JSON. Every one goes through ``iter_lines`` or ``load_json`` below: the file is opened
# by ``open_regular`` (non-blocking, a regular file after symlinks), its size cap is enforced before
# and WHILE reading (a file that grows, /dev/zero behind a symlink, a 300 MB "log"), lines are split
# on b"\n" only (a form feed, U+2028 or a lone CR never shifts a line number), each line is decoded
# as strict UTF-8 and a bad byte is one error naming the file and line.

LOG_CAP = 128 << 20            # an engine log (real ones: a few MB per worker per day)
PROFILE_CAP = 256 << 20        # a kernel_details.csv / op_summary CSV (a few steps: tens of MB)
CSV_CAP = 64 << 20             # calibrate / workload / kernel-table CSVs
JSON_CAP = 16 << 20            # bench serve results, device profiles
LINE_CAP = 1 << 20             # one line of any evidence file (a vLLM config line is a few kB)
JSON_MAX_DEPTH = 32            # bench / device JSON nesting (real files: 2)
MAX_NUMBER_CHARS = 40          # "400-digit numbers" are refused before any conversion


def _decode_line(raw: bytes, path: Path, what: str, lineno: int) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise AuditInputError(path, f"line {lineno}: {what} is not UTF-8 text "
                                    f"(byte 0x{raw[exc.start]:02x} at column {exc.start + 1})") from None


def iter_lines(path: str | Path, what: str, cap: int, line_cap: int = LINE_CAP):
    """(line number, text) of every line of a regular file of at most ``cap`` bytes, read in 1 MiB
    chunks (never the whole file at once); lines end at b"\\n" only, a trailing CR is dropped, a UTF-8
    BOM at the start is dropped. AuditInputError naming file (and line) on any problem."""
    path = Path(path)
    fd, size = open_regular(path, what)
    try:
        if size > cap:
            raise AuditInputError(path, f"{what} is {size:,} bytes, over the {cap >> 20} MiB cap for {what} files")
        buf, got, n = b"", 0, 0
        while True:
            try:
                chunk = os.read(fd, 1 << 20)
            except OSError as exc:
                raise AuditInputError(path, f"cannot read {what}: {exc.strerror or exc}") from None
            if not chunk:
                break
            got += len(chunk)
            if got > cap:
                raise AuditInputError(path, f"{what} grew past the {cap >> 20} MiB cap for {what} files while read")
            buf = buf + chunk if buf else chunk
            start = 0
            while True:
                i = buf.find(b"\n", start)
                if i < 0:
                    break
                n += 1
                raw = buf[start:i]
                if n == 1 and raw.startswith(b"\xef\xbb\xbf"):
                    raw = raw[3:]
                if raw.endswith(b"\r"):
                    raw = raw[:-1]
                if len(raw) > line_cap:
                    raise AuditInputError(path, f"line {n}: longer than {line_cap >> 10} KiB (not a {what})")
                yield n, _decode_line(raw, path, what, n)
                start = i + 1
            buf = buf[start:]
            if len(buf) > line_cap:
                raise AuditInputError(path, f"line {n + 1}: longer than {line_cap >> 10} KiB (not a {what})")
        if buf:
            n += 1
            if n == 1 and buf.startswith(b"\xef\xbb\xbf"):
                buf = buf[3:]
            yield n, _decode_line(buf[:-1] if buf.endswith(b"\r") else buf, path, what, n)
    finally:
        os.close(fd)


def _json_number(limit: int = MAX_NUMBER_CHARS):
    def parse_int(text: str) -> int:
        if len(text) > limit:
            raise ValueError(f"a {len(text)}-digit number")
        return int(text)

    def parse_float(text: str) -> float:
        if len(text) > limit:
            raise ValueError(f"a {len(text)}-character number")
        v = float(text)
        if not math.isfinite(v):
            raise ValueError(f"number {text} is out of range")
        return v

    def parse_constant(text: str):
        raise ValueError(f"{text} is not a JSON number")
    return parse_int, parse_float, parse_constant


def load_json(path: str | Path, what: str, cap: int = JSON_CAP, max_depth: int = JSON_MAX_DEPTH):
    """The JSON document in a regular file of at most ``cap`` bytes: strict UTF-8 (a bad byte named
    by line), nesting at most ``max_depth`` (checked without recursion before parsing), numbers of at
    most 40 characters, no NaN / Infinity. One AuditInputError naming the file on any problem."""
    path = Path(path)
    raw = read_capped(path, what, cap)
    if raw.startswith(b"\xef\xbb\xbf"):
        raw = raw[3:]
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[:exc.start].count(b"\n") + 1
        raise AuditInputError(path, f"line {line}: {what} is not UTF-8 text (byte 0x{raw[exc.start]:02x})") from None
    return parse_json_text(text, path, what, max_depth=max_depth, raw=raw)


def parse_json_text(text: str, where: str | Path, what: str, *, max_depth: int = JSON_MAX_DEPTH,
                    cap: int = JSON_CAP, raw: bytes | None = None):
    """A JSON text from outside (a file's content, or an option's value such as ``--hf-overrides`` or a
    launch's ``--speculative-config``) with the evidence rules: at most ``cap`` bytes, nesting at most
    ``max_depth`` (checked without recursion before parsing), numbers of at most 40 characters, finite
    (no NaN / Infinity literal, no 1e400). One AuditInputError naming ``where`` on any problem."""
    import json
    if raw is None:
        raw = text.encode("utf-8", "surrogatepass")
    if len(raw) > cap:
        raise AuditInputError(where, f"{what} is {len(raw):,} bytes of JSON, over audit's cap of {cap >> 10:,} KiB")
    depth = json_depth(raw)
    if depth > max_depth:
        raise AuditInputError(where, f"{what} nests {depth} levels deep, over the cap of {max_depth}")
    pi, pf, pc = _json_number()
    try:
        return json.loads(text, parse_int=pi, parse_float=pf, parse_constant=pc)
    except json.JSONDecodeError as exc:
        raise AuditInputError(where, f"not valid JSON (line {exc.lineno} column {exc.colno}: {exc.msg})") from None
    except (ValueError, RecursionError) as exc:
        raise AuditInputError(where, f"not valid JSON: {exc}") from None


_NUMBER = re.compile(r"[-+]?(?:\d{1,3}(?:,\d{3}){1,12}|\d{1,40})(?:\.\d{1,40})?(?:[eE][-+]?\d{1,3})?", re.ASCII)


def parse_number(text: str, where: str | Path, what: str, *, lo: float, hi: float, integer: bool = False,
                 commas: bool = False) -> float:
    """A number from an evidence file, checked: ASCII digits only (no full-width digits), at most 40
    characters, thousands separators only where ``commas`` and only in groups of three ("3,,,8.2" and
    "38,2" are refused), finite and within [lo, hi]; ``integer`` refuses a fraction. The error names
    ``where`` (file:line) and ``what``."""
    t = text.strip()
    if not t or len(t) > MAX_NUMBER_CHARS or not t.isascii() or not _NUMBER.fullmatch(t) \
            or ("," in t and not commas):
        raise AuditInputError(where, f"{what}: not a number: {t[:60]!r}")
    v = float(t.replace(",", ""))
    # range first: "1E400" reads as inf, which int() cannot take (an OverflowError, not an answer)
    if not (math.isfinite(v) and lo <= v <= hi):
        raise AuditInputError(where, f"{what}: {t} is outside the plausible range [{lo:g}, {hi:g}]")
    if integer and v != int(v):
        raise AuditInputError(where, f"{what}: expected a whole number, got {t!r}")
    return v


def csv_header(path: str | Path, what: str, cap: int):
    """(stripped header, reader over the remaining rows) of a CSV read through ``iter_lines``; an
    empty file or a malformed first row is one line naming the file. ``reader.line_num`` counts rows.
    Strict: an unterminated quote or text after a closing quote is a csv.Error, not a field read to
    the end of the file."""
    import csv
    reader = csv.reader((text for _, text in iter_lines(path, what, cap)), strict=True)
    try:
        header = [h.strip() for h in next(reader)]
    except StopIteration:
        raise AuditInputError(path, f"{what} is empty") from None
    except csv.Error as exc:
        raise AuditInputError(path, f"line 1: malformed CSV: {exc}") from None
    return header, reader


def read_input_bytes(path: str | Path, what: str, cap: int | None = None) -> bytes:
    """Bytes of a user-supplied regular file of at most ``cap`` bytes (default
    ``inputs.OTHER_CAP``), or an AuditInputError naming it (a FIFO, device, socket or directory
    is refused without blocking: auditor.inputs)."""
    return read_capped(path, what, OTHER_CAP if cap is None else cap)
