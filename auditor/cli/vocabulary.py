"""The option vocabulary every deployment command shares: value types with one meaning everywhere.

Why one module: ``--ep`` was a number in four commands and on/off in ``sweep``, ``--tokens 8k`` was
refused where ``--contexts 4k`` worked. Lengths follow vLLM's own rule for human-readable integers
(``vllm/engine/arg_utils.py::human_readable_int``), so a launch line means the same to ``audit``
as to the engine: ``k``/``m``/``g`` are decimal (1k = 1,000; 25.6k = 25,600), ``K``/``M``/``G``
binary (1K = 1,024; 128K = 131,072).
"""
from __future__ import annotations

import math

import click

from ..errors import AuditInputError
from ..limits import OPTION_CAPS

from ..lengths import parse_length, parse_length_list  # noqa: F401 (one length vocabulary)


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
