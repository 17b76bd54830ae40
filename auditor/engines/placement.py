"""Where a rank's weights sit: the layout decisions an engine resolves for a model and a plan.

Memory and perf both read this one object, so the two can never disagree about what is
replicated. An engine fills it (``Engine.placement``); every decision that rests on an
UNCONFIRMED spec line is recorded in ``assumptions``.
"""
from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Placement:
    dsa_cp: bool
    heads_local: int              # heads of q_b_proj / kv_b_proj / W_UK_T / W_UV on one rank
    qb_kvb_replicated: bool
    o_proj_replicated: bool       # full [NH*Dv, H] weight per layer (P node in v0.18-v0.23)
    o_proj_gather_pool: bool      # one shared full-size gather buffer per process
    shared_experts_replicated: bool
    moe_tp: int                   # TP size of the routed experts (1 under EP)
    experts_local: int            # E_l = (E + R) / ep
    I_p: int                      # moe intermediate per partition
    dense_tp: int                 # TP size of dense MLP / shared experts when sharded
    layer_sharding: tuple[str, ...]
    kv_role: str                  # kv_producer / kv_consumer / none
    assumptions: list[str] = field(default_factory=list)
    findings: list[tuple[str, str]] = field(default_factory=list)   # (severity, message)


KV_ROLE = {"prefill": "kv_producer", "decode": "kv_consumer", "mixed": "none"}
