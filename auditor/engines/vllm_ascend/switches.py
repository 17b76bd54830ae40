"""vLLM-Ascend's DSA context-parallel switch, as each version decides it.

audit's ``--sp`` is exactly ``VLLM_ASCEND_ENABLE_FLASHCOMM1=1`` and ``--dsa-cp`` exactly
``additional_config.enable_dsa_cp``; what the pair turns on is this version's rule, read from
``vllm_ascend/utils.py::enable_dsa_cp``:

* ``"sp"`` (v0.18.0, ``utils.py:1240-1247@releases/v0.18.0``): DSA-CP = the model has
  ``index_topk`` and FlashComm1 is on; ``enable_dsa_cp`` is no switch there.
* ``"flag+sp"`` (v0.20.2rc1 - v0.26.0rc, ``utils.py:1345-1365@v0.21.0rc1``,
  ``:1515-1535@releases/v0.23.0``, ``:1394-1414@releases/v0.26.0rc``): the flag and FlashComm1;
  the flag without FlashComm1 makes the engine raise ``ValueError`` at start.
* ``"flag"`` (main, ``utils.py:1308-1328@182b75ea``): the flag alone.

Both spellings (audit's options, a launch's env and JSON) reach this one function, so they
cannot disagree.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from ...errors import AuditInputError

#: the engine's own words when enable_dsa_cp is set without FlashComm1 (v0.20.2rc1 - v0.26.0rc)
RAISES_WITHOUT_SP = ("DSA CP requires SP to be enabled. Please enable SP(set VLLM_ASCEND_ENABLE_FLASHCOMM1=1) "
                     "to use DSA CP.")


@dataclass(frozen=True)
class DsaCpDecision:
    """Whether DSA-CP runs, and what audit says about how the switches were read."""

    on: bool
    notes: tuple[str, ...] = ()
    warnings: tuple[str, ...] = field(default=())


def decide_dsa_cp(trigger: str, label: str, *, has_indexer: bool, sp: bool, flag: bool | None,
                  tp: int) -> DsaCpDecision:
    """DSA-CP for one rank: ``trigger`` is the version row's rule, ``flag`` the launch's
    enable_dsa_cp (None: not set), ``sp`` FlashComm1. AuditInputError where the engine raises."""
    if flag and not has_indexer:
        raise AuditInputError("--dsa-cp", "the model has no DSA indexer (no index_topk in config.json)")
    if not has_indexer:
        return DsaCpDecision(False)
    if trigger == "sp":
        on = sp and tp > 1
        warnings = ()
        if flag is not None and bool(flag) != sp:
            warnings = (f"additional_config.enable_dsa_cp is not a switch of {label}: DSA-CP follows "
                        f"FlashComm1 (VLLM_ASCEND_ENABLE_FLASHCOMM1) there, so it is {'on' if sp else 'off'}",)
        notes = ("DSA-CP on: index_topk + FlashComm1 (SP)",) if on else ()
        return DsaCpDecision(on, notes, warnings)
    if trigger == "flag+sp":
        if flag and not sp:
            raise AuditInputError("--dsa-cp", f"{label} raises ValueError at start: \"{RAISES_WITHOUT_SP}\" "
                                              "(enable_dsa_cp needs --sp on this version)")
        on = bool(flag) and sp
        return DsaCpDecision(on, ("DSA-CP on: additional_config.enable_dsa_cp + FlashComm1",) if on else ())
    if trigger == "flag":
        on = bool(flag)
        return DsaCpDecision(on, ("DSA-CP on: additional_config.enable_dsa_cp",) if on else ())
    raise ValueError(f"unknown DSA-CP trigger {trigger!r}")
