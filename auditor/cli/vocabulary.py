"""The option vocabulary every deployment command shares: value types with one meaning everywhere.

Why one module: ``--ep`` was a number in four commands and on/off in ``sweep``, ``--tokens 8k`` was
refused where ``--contexts 4k`` worked. Lengths follow vLLM's own rule for human-readable integers
(``vllm/engine/arg_utils.py::human_readable_int``), so a launch line means the same to ``audit``
as to the engine: ``k``/``m``/``g`` are decimal (1k = 1,000; 25.6k = 25,600), ``K``/``M``/``G``
binary (1K = 1,024; 128K = 131,072).
"""
from __future__ import annotations

import math
import re

import click

from ..errors import AuditInputError
from ..limits import OPTION_CAPS

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


class Length(click.ParamType):
    """A token count in vLLM's human-readable form, range-checked against the option's cap."""

    name = "length"

    def __init__(self, option: str) -> None:
        self.option = option

    def convert(self, value, param, ctx):
        if isinstance(value, int):
            return value
        try:
            return parse_length(value, self.option)
        except AuditInputError as exc:
            self.fail(exc.problem, param, ctx)


class LengthList(click.ParamType):
    """A comma list of lengths (grids: ``sweep --tokens 4K,32K``)."""

    name = "lengths"

    def __init__(self, option: str, increasing: bool = False) -> None:
        self.option, self.increasing = option, increasing

    def convert(self, value, param, ctx):
        if isinstance(value, list):
            return value
        try:
            return parse_length_list(value, self.option, increasing=self.increasing)
        except AuditInputError as exc:
            self.fail(exc.problem, param, ctx)


class ExpertParallel(click.ParamType):
    """``--ep``: ``on`` (EP = DP x TP, vLLM's --enable-expert-parallel), ``off`` (1), or a size."""

    name = "on|off|N"

    def convert(self, value, param, ctx):
        if isinstance(value, int) or value in ("on", None):
            return value
        text = str(value).strip().lower()
        if text in ("on", "true", "yes"):
            return "on"
        if text in ("off", "false", "no"):
            return 1
        cap = OPTION_CAPS["--ep"]
        if text.isdigit() and len(text) <= 9 and cap.lo <= int(text) <= cap.hi:
            return int(text)
        self.fail(f"{value!r} is not on, off or an expert-parallel size in {cap.lo}..{cap.hi:,}", param, ctx)


def ep_size(ep: int | str, tp: int, dp: int) -> int:
    """The EP size a ``--ep`` value means for one deployment: 'on' = DP x TP."""
    return tp * dp if ep == "on" else int(ep)


def finite(x: float) -> bool:
    return math.isfinite(x)
