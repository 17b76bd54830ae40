"""Byte units, once: the constants every module uses, parsing what users type ("38GiB", "31 GB",
"500MiB") and formatting what we print. The bottom floor: imports nothing of the project but the
error type and the caps."""
from __future__ import annotations

import re

from .errors import AuditInputError
from .limits import MAX_SIZE_BYTES

KiB = 1 << 10
MiB = 1 << 20
GiB = 1 << 30

_UNITS = {"b": 1, "k": 1000, "kb": 1000, "kib": 1024, "m": 1000 ** 2, "mb": 1000 ** 2, "mib": MiB,
          "g": GiB, "gb": 1000 ** 3, "gib": GiB, "t": 1024 ** 4, "tb": 1000 ** 4, "tib": 1024 ** 4}
_SIZE_RE = re.compile(r"^\s*([0-9]{1,30}(?:\.[0-9]{1,30})?|\.[0-9]{1,30})\s*([a-zA-Z]*)\s*$")


def parse_size(text: str, option: str = "size") -> int:
    """'38GiB' -> bytes, for every size option of every command. A unit is required (a bare '38'
    would silently mean 38 bytes); a bare 'G' means GiB, as engines and TensorCast print it, and
    'GB' is 10^9; 'B' states plain bytes."""
    if not str(text).strip():
        raise AuditInputError(option, "empty size (examples: 38GiB, 31.5GB, 512MiB)")
    m = _SIZE_RE.match(str(text))
    shown = repr(text) if len(str(text)) <= 40 else repr(str(text)[:37] + '...')
    if not m:
        raise AuditInputError(option, f"cannot read size {shown} (examples: 38GiB, 31.5GB, 512MiB)")
    unit = m.group(2).lower()
    if not unit:
        raise AuditInputError(option, f"size {shown} has no unit (write e.g. {text.strip()}GiB, "
                                      f"{text.strip()}GB or {text.strip()}B)")
    if unit not in _UNITS:
        raise AuditInputError(option, f"unknown unit {m.group(2)!r} in {shown} (B, KiB, MiB, GiB, TiB, KB, MB, "
                                      "GB, TB; a bare G means GiB)")
    value = int(float(m.group(1)) * _UNITS[unit])
    if value > MAX_SIZE_BYTES:
        raise AuditInputError(option, f"size {text.strip()!r} is past the plausible 1 EiB")
    return value


def gib(n: float, digits: int = 3) -> str:
    return f"{n / GiB:.{digits}f}"


def human(n: float) -> str:
    a = abs(n)
    if a >= GiB:
        return f"{n / GiB:.3f} GiB"
    if a >= MiB:
        return f"{n / MiB:.1f} MiB"
    if a >= 1024:
        return f"{n / 1024:.1f} KiB"
    return f"{int(n)} B"


def binary(n: float, digits: int = 2) -> str:
    """Bytes in the largest binary unit that keeps the number >= 1, always ``digits`` decimals
    ('512 B', '96.02 MiB', '7.31 GiB'): the perf reports' spelling, so their bytes read like memory's."""
    a = abs(n)
    for name, div in (("TiB", 1024 ** 4), ("GiB", GiB), ("MiB", MiB), ("KiB", 1024)):
        if a >= div:
            return f"{n / div:.{digits}f} {name}"
    return f"{n:.0f} B"


def count(n: int, noun: str) -> str:
    """'1 rank', '32 ranks' (regular English plurals only)."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def signed_gib(n: float) -> str:
    return f"{n / GiB:+.3f}"


def pick_unit(largest: float) -> tuple[str, float]:
    """One unit for a whole report: GiB for real models, MiB or KiB for tiny test checkpoints."""
    if largest >= GiB:
        return "GiB", float(GiB)
    if largest >= MiB:
        return "MiB", float(MiB)
    return "KiB", 1024.0


class Unit:
    """Formats numbers in one chosen unit, so every column of a report agrees."""

    def __init__(self, largest: float):
        self.name, self.div = pick_unit(largest)

    def __call__(self, n: float) -> str:
        return f"{n / self.div:.3f}"

    def signed(self, n: float) -> str:
        return f"{n / self.div:+.3f}"

    def cell(self, n: float) -> str:
        """Like ``__call__``, but a non-zero amount too small for 3 decimals shows as '<0.001'
        (a small tensor is not nothing)."""
        if 0 < abs(n) < 0.0005 * self.div:
            return "<0.001"
        return self(n)
