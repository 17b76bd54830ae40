"""Non-torch device memory a rank gains before its profile run ends: HCCL communicator buffers
plus the ACL runtime (engine-vllm-ascend-runtime.md §4.5).

Each communicator a rank belongs to holds 2 x its buffer (send + receive), allocated when the
group is created, which is before the end of ``profile_run`` for every group the forward pass
uses, so all of it lands in ``N_nontorch`` (the init snapshot is taken before distributed init).
Group buffer sizes on HEAD: named groups 200 MB (``_DEFAULT_BUFFER_SIZE``), ``mc2`` the
``HCCL_BUFFSIZE`` env (default 200), ``dp`` 50 MB. MB = 2^20 B (UNCONFIRMED).
"""
from __future__ import annotations

from dataclasses import dataclass

from ...parallel import ParallelPlan

MiB = 1 << 20
GiB = 1 << 30
DEFAULT_GROUP_MB = 200
DEFAULT_HCCL_BUFFSIZE_MB = 200
DP_GROUP_MB = 50
#: ACL runtime / context memory outside torch (spec: 0.3-0.6 GiB, UNCONFIRMED); 0.5 GiB makes the
#: spec's A2 point (tp + ep + mc2 + world = 1.56 GiB of buffers) land on its measured 2.07 GiB
C_RUNTIME_BYTES = GiB // 2

ASSUMPTIONS = (
    "HCCL: each communicator holds 2 x its buffer (CANN docs, UNCONFIRMED); MB = 2^20 B; the world "
    "group is created, the DP group is not (token sync runs on gloo) (UNCONFIRMED)",
    f"non-torch runtime (ACL context) {C_RUNTIME_BYTES / GiB:.1f} GiB besides HCCL (spec range 0.3-0.6, UNCONFIRMED)",
)


@dataclass(frozen=True)
class Communicator:
    name: str
    ranks: int
    buffer_mb: int

    @property
    def bytes(self) -> int:
        return 2 * self.buffer_mb * MiB


def communicators(plan: ParallelPlan, *, hccl_buffsize_mb: int = DEFAULT_HCCL_BUFFSIZE_MB, dcp: int = 1,
                  mc2: bool | None = None) -> list[Communicator]:
    """HCCL groups of more than one rank that a rank of ``plan`` creates before profiling ends."""
    out = []
    if plan.tp > 1:
        out.append(Communicator("tp", plan.tp, DEFAULT_GROUP_MB))
    if plan.ep > 1:
        out.append(Communicator("ep", plan.ep, DEFAULT_GROUP_MB))
        if mc2 is None or mc2:
            # the mc2 group spans DP*PCP*TP ranks (= EP); its buffer is HCCL_BUFFSIZE
            out.append(Communicator("mc2", plan.ep, hccl_buffsize_mb))
    if dcp > 1:
        out.append(Communicator("dcp", dcp, DEFAULT_GROUP_MB))
    if plan.pp > 1:
        out.append(Communicator("pp", plan.pp, DEFAULT_GROUP_MB))
    if plan.world > 1:
        out.append(Communicator("world", plan.world, DEFAULT_GROUP_MB))
    return out


def non_torch_terms(plan: ParallelPlan, *, hccl_buffsize_mb: int = DEFAULT_HCCL_BUFFSIZE_MB,
                    dcp: int = 1) -> dict[str, int]:
    """N_nontorch by item: one entry per communicator (``hccl <group>``) plus the runtime."""
    terms = {f"hccl {c.name} ({c.ranks} ranks, 2 x {c.buffer_mb} MB)": c.bytes
             for c in communicators(plan, hccl_buffsize_mb=hccl_buffsize_mb, dcp=dcp)}
    terms["ACL runtime"] = C_RUNTIME_BYTES
    return terms
