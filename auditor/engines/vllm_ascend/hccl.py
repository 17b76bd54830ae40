"""Non-torch device memory a rank holds when the engine measures it: the HCCL buffers of the
groups the profile run exercised, plus the ACL runtime (research note runtime-facts.md §2).

``non_torch_increase`` is measured against an init snapshot taken before distributed init
(``worker/worker.py:424`` vs ``:453``@182b75ea), so it holds what exists at the end of
``profile_run``. Process groups get their ``hccl_buffer_size`` at creation
(``utils.py:960-991``@182b75ea: 200 MB named groups (``_DEFAULT_BUFFER_SIZE``, ``:70``), ``dp``
50 MB, ``mc2`` the ``HCCL_BUFFSIZE`` env), but a communicator's CCL buffer (2 x its size, CANN
``HcclGetHcclBuffer`` / HCCL_BUFFSIZE docs) is allocated on first use (UNCONFIRMED that first use
= first collective). So only groups the profile run touches are in ``N_nontorch``:

* tp: always (embedding all-reduce, All2All finalize TP all-gather, ``prepare_finalize.py:216-221``)
* ep: when the main pass runs ALLTOALL (``token_dispatcher.py:520-560``), or ALLGATHER over EP with SP
* mc2: when the MC2 warm-up runs or the main pass is MC2 or FUSED_MC2 (dispatch_ffn_combine runs on the
  mc2 group's communicator, ``moe_comm_method.py:441``; ``model_runner_v1.py:3469-3473``)
* dp: ALLGATHER with DP > 1 (the token-count sync is gloo, ``model_runner_v1.py:669-693``)
* pp: PP > 1

Everything else is first used after profiling and must fit in the ``(1 - util)`` margin: the world
group (UNCONFIRMED), o_proj TP / DCP / DSA-CP groups (attention is skipped in profile,
``attention/sfa_v1.py:1490``), the lm-head TP group (``need_dummy_logits = not is_profile``,
``model_runner_v1.py:3382``), mc2/ep when untouched. This is why issue #13439 (DeepSeek-V4-Flash,
A2, TP1, ALLGATHER) logs only 0.22 GiB of non-torch memory. MB = 2^20 B (UNCONFIRMED).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ...parallel import ParallelPlan
from . import activation
from ...units import GiB, MiB

DEFAULT_GROUP_MB = 200
DEFAULT_HCCL_BUFFSIZE_MB = 200
DP_GROUP_MB = 50
#: ACL runtime / context memory outside torch: issue #13439 logs 0.22 GiB of non-torch memory with
#: only the DP all-gather (2 x 50 MB) touched, i.e. ~0.12 GiB; a single-card log shows 0.03 GiB.
#: Nominal 0.15 GiB, range 0.05-0.6 GiB (UNCONFIRMED; ``audit calibrate --breakdown`` fits it).
C_RUNTIME_BYTES = int(0.15 * GiB)
C_RUNTIME_RANGE = (int(0.05 * GiB), int(0.6 * GiB))

ASSUMPTIONS = (
    "HCCL: each communicator holds 2 x its buffer, allocated at its first collective (CANN docs; first-use "
    "timing UNCONFIRMED); only groups the profile run exercises count in non-torch memory, the rest "
    "(world, o_proj TP, DCP, lm-head TP, untouched mc2/ep) are allocated later, outside the budget; MB = 2^20 B",
    f"non-torch runtime (ACL context) {C_RUNTIME_BYTES / GiB:.2f} GiB besides HCCL (range "
    f"{C_RUNTIME_RANGE[0] / GiB:.2f}-{C_RUNTIME_RANGE[1] / GiB:.2f}, UNCONFIRMED)",
)


@dataclass(frozen=True)
class Communicator:
    name: str
    ranks: int
    buffer_mb: int
    at_profile: bool = True        # its buffer exists when non-torch memory is measured

    @property
    def bytes(self) -> int:
        return 2 * self.buffer_mb * MiB


def communicators(plan: ParallelPlan, *, hccl_buffsize_mb: int = DEFAULT_HCCL_BUFFSIZE_MB, dcp: int = 1,
                  path: int | None = None, warmup: bool | None = None, sp: bool | None = None) -> list[Communicator]:
    """HCCL groups of more than one rank of a rank of ``plan``, each marked with whether the profile
    run touched it. ``path``: the main pass's MoE comm path (activation.ALLGATHER/ALLTOALL/MC2),
    ``warmup``: the MC2 warm-up ran; None = unknown (ep and mc2 counted as touched)."""
    sp = plan.sp if sp is None else sp
    out = []
    if plan.tp > 1:
        out.append(Communicator("tp", plan.tp, DEFAULT_GROUP_MB))
    if plan.ep > 1:
        ep_used = path is None or path == activation.ALLTOALL or (path == activation.ALLGATHER and sp)
        mc2_used = path is None or path in (activation.MC2, activation.FUSED_MC2) or bool(warmup)
        out.append(Communicator("ep", plan.ep, DEFAULT_GROUP_MB, ep_used))
        # the mc2 group spans DP*PCP*TP ranks (= EP); its buffer is HCCL_BUFFSIZE
        out.append(Communicator("mc2", plan.ep, hccl_buffsize_mb, mc2_used))
    if plan.dp > 1 and path == activation.ALLGATHER:
        out.append(Communicator("dp", plan.dp, DP_GROUP_MB))
    if dcp > 1:
        out.append(Communicator("dcp", dcp, DEFAULT_GROUP_MB, False))
    if plan.pp > 1:
        out.append(Communicator("pp", plan.pp, DEFAULT_GROUP_MB))
    if plan.world > 1:
        out.append(Communicator("world", plan.world, DEFAULT_GROUP_MB, False))
    return out


def profile_state(spec: Any, plan: ParallelPlan, *, tokens: int | None = None, seqs: int = 256, mtp: int = 0,
                  soc: str = "a3", prefill_mc2: bool = False, fused_mc2: int = 0) -> tuple[int | None, bool | None]:
    """(main-pass comm path, warm-up ran) of the profile run, or (None, None) when unknown."""
    if spec is None or tokens is None or not getattr(spec, "moe", False):
        return None, None
    cap = float(activation.mc2_capacity(tokens=tokens, seqs=seqs, mtp=mtp, tp=plan.tp, prefill_mc2=prefill_mc2))
    path = int(activation.comm_path(soc, tokens, cap, ep=plan.ep, experts=spec.E, fused_mc2=fused_mc2))
    at_cap = int(activation.comm_path(soc, cap, cap, ep=plan.ep, experts=spec.E, fused_mc2=fused_mc2))
    warm = bool(tokens > cap and plan.ep > 1 and at_cap in (activation.MC2, activation.FUSED_MC2))
    return path, warm


def _label(c: Communicator) -> str:
    return f"hccl {c.name} ({c.ranks} ranks, 2 x {c.buffer_mb} MB)"


def non_torch_terms(plan: ParallelPlan, *, hccl_buffsize_mb: int = DEFAULT_HCCL_BUFFSIZE_MB, dcp: int = 1,
                    spec: Any = None, **state: Any) -> dict[str, int]:
    """N_nontorch by item: one entry per communicator touched by the profile run plus the runtime."""
    path, warm = profile_state(spec, plan, **state)
    terms = {_label(c): c.bytes for c in communicators(plan, hccl_buffsize_mb=hccl_buffsize_mb, dcp=dcp,
                                                         path=path, warmup=warm) if c.at_profile}
    terms["ACL runtime"] = C_RUNTIME_BYTES
    return terms


def after_profile_items(plan: ParallelPlan, *, hccl_buffsize_mb: int = DEFAULT_HCCL_BUFFSIZE_MB, dcp: int = 1,
                        spec: Any = None, **state: Any) -> list[tuple[str, int]]:
    """Communicator buffers first used after profiling (outside the budget)."""
    path, warm = profile_state(spec, plan, **state)
    return [(_label(c) + ", first used after profiling", c.bytes)
            for c in communicators(plan, hccl_buffsize_mb=hccl_buffsize_mb, dcp=dcp, path=path, warmup=warm)
            if not c.at_profile]
