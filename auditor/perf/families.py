"""Op programs of the model families with per-layer kinds (``model.families``): family name -> the
function that emits one decoder layer's ops, and the drafter's input projections.

Why a registry here: a family module in ``model/`` declares structure and must not import the perf
model; the op program of its layers lives with the other op programs and is found by the family's name.
A family without an entry is refused by every timing command (``program.check_timeable``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable


@dataclass(frozen=True)
class FamilyProgram:
    layer: Callable[..., Any]              # (builder, layer, LayerKind, State, shard, mtp_layer) -> State
    mtp_inputs: Callable[..., None] | None = None   # (builder, prefix, tok, layer): the drafter's input ops
    #: drafters other than MTP the family's checkpoints carry: ``ModelSpec.drafter`` -> (builder, shard),
    #: which emits that drafter's whole step (DeepSeek-V4's DSpark block drafter: ``perf.dspark``)
    drafters: dict[str, Callable[..., None]] = field(default_factory=dict)


_PROGRAMS: dict[str, FamilyProgram] = {}
_BUILTIN_LOADED = False


def register_program(family: str, program: FamilyProgram) -> None:
    _PROGRAMS[family] = program


def unregister_program(family: str) -> None:
    _PROGRAMS.pop(family, None)


def program_of(family: str) -> FamilyProgram | None:
    global _BUILTIN_LOADED
    if not _BUILTIN_LOADED:             # the built-in programs, imported on first use
        from .compressed import compressed_layer, mtp_inputs
        from .dspark import dspark_step
        _PROGRAMS.setdefault("deepseek_v4", FamilyProgram(compressed_layer, mtp_inputs, {"dspark": dspark_step}))
        _BUILTIN_LOADED = True
    return _PROGRAMS.get(family)
