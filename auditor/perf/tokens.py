"""The token-layout contract (seed RFC §3.3.1): which token range a tensor covers on one rank.

A tensor's token dimension is described symbolically, not as a number, so that one program can
be evaluated for any workload and so that a layout mistake stays visible: ``Tok(stream, exp)``
means ``ceil(base / tp^-exp)`` tokens for ``exp < 0`` (local-token, sequence-sharded by the TP
group), ``base`` for ``exp == 0`` (full-token) and ``base * tp^exp`` for ``exp > 0`` -- a tensor
gathered twice, exactly the "4096 becomes 65536" bug the seed warns about. ``mul`` multiplies
the count (padding to a multiple of TP, or tokens gathered across DP).

``State`` is what flows across a decoder-layer boundary: the hidden output of the layer and the
residual stream. Region markers of the repetition graph must be layout-transparent, i.e. a
repeated layer must leave the State exactly as it found it.
"""
from __future__ import annotations

from dataclasses import dataclass, replace

from auditor_kernels.kinds import STREAM_MAIN as MAIN              # the main forward's tokens
from auditor_kernels.kinds import STREAM_MTP_LATER as MTP_LATER    # one token per request (later MTP passes)
from auditor_kernels.kinds import STREAM_ROWS as ROWS              # rows reaching lm_head
from auditor_kernels.kinds import STREAM_DRAFT_BLOCK as DRAFT_BLOCK  # a block drafter's K queries per request

__all__ = ["MAIN", "MTP_LATER", "ROWS", "DRAFT_BLOCK", "ContractError", "Tok", "State", "require_same"]


class ContractError(AssertionError):
    """The layer program broke the token-layout contract (a bug in the builder, not user input)."""


@dataclass(frozen=True)
class Tok:
    stream: int = MAIN
    exp: int = 0
    mul: int = 1

    def gathered(self) -> "Tok":
        return replace(self, exp=self.exp + 1)

    def sliced(self) -> "Tok":
        return replace(self, exp=self.exp - 1)

    def times(self, k: int) -> "Tok":
        return replace(self, mul=self.mul * k)

    @property
    def layout(self) -> str:
        if self.exp < 0:
            return "local"
        if self.exp == 0:
            return "full"
        return f"over-gathered(tp^{self.exp})"

    def count(self, base: int, tp: int) -> int:
        """Token count for a stream of ``base`` tokens (Python twin of kernels.op_tokens)."""
        if self.exp < 0:
            t = -(-base // tp ** (-self.exp))
        else:
            t = base * tp ** self.exp
        return t * self.mul


@dataclass(frozen=True)
class State:
    """Placement of the two tensors crossing a decoder-layer boundary."""

    hidden: Tok
    residual: Tok | None   # None before the first layer (no residual add yet)


def require_same(a: Tok, b: Tok, where: str) -> None:
    """Elementwise meeting points (residual add, routed + shared merge) need identical layouts."""
    if a != b:
        raise ContractError(f"{where}: token layouts differ ({a.layout} x{a.mul} vs {b.layout} x{b.mul})")
