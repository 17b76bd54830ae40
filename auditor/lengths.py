"""Token lengths as vLLM writes them (``vllm/engine/arg_utils.py::human_readable_int``): ``k``/``m``/``g``
decimal, ``K``/``M``/``G`` binary, each range-checked against its option's cap. Bottom floor: read by
the command options and the launch reader alike."""
from __future__ import annotations

import re

from .errors import AuditInputError
from .limits import OPTION_CAPS

_LENGTH_RE = re.compile(r"^([0-9]{1,12})(?:\.([0-9]{1,6}))?([kmgKMG]?)$")
_MULT = {"": 1, "k": 10 ** 3, "m": 10 ** 6, "g": 10 ** 9, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}


def parse_length(text: str, option: str) -> int:
    """'131072', '128K' (131,072), '128k' (128,000), '25.6k' (25,600) -> int, within the option's cap.

    A fraction must give a whole number of tokens (vLLM rejects '1.5' without a suffix too)."""
    raw = str(text).strip()
    m = _LENGTH_RE.match(raw)
    if not m:
        raise AuditInputError(option, f"not a length: {raw!r} (an integer, optionally with k/m/g = 10^3/10^6/10^9 "
                                      "or K/M/G = 2^10/2^20/2^30, e.g. 4096, 128K, 25.6k)")
    whole, frac, suffix = m.groups()
    mult = _MULT[suffix]
    num = int(whole) * mult
    if frac:
        scaled = int(frac) * mult
        den = 10 ** len(frac)
        if scaled % den:
            raise AuditInputError(option, f"{raw!r} is not a whole number of tokens")
        num += scaled // den
    cap = OPTION_CAPS.get(option)
    if cap is not None and not cap.lo <= num <= cap.hi:
        raise AuditInputError(option, f"{num:,} is outside the accepted range {cap.lo:,}..{cap.hi:,}")
    return num


def parse_length_list(text: str, option: str, *, increasing: bool = False) -> list[int]:
    """'4K,32K,65536' -> [4096, 32768, 65536]; every item a length (``parse_length``)."""
    parts = [p for p in str(text).split(",")]
    if not parts or any(not p.strip() for p in parts):
        raise AuditInputError(option, f"expected a comma list of lengths, got {text!r}")
    out = [parse_length(p, option) for p in parts]
    if increasing and any(b <= a for a, b in zip(out, out[1:])):
        raise AuditInputError(option, "give increasing lengths, e.g. 4K,32K,64K,128K")
    return out
