"""ParallelPlan: parallel sizes plus the runtime switches the engine reads.

It describes sizes and user-set switches only; behaviour (DSA-CP on or off, which projections
are replicated) is resolved against the model structure and the engine profile elsewhere
(``engines.resolve``), as the seed RFC asks.
"""
from __future__ import annotations

from typing import Any

from dataclasses import dataclass, field, replace

from .errors import AuditInputError
from .limits import MAX_WORLD
from .switches import SWITCHES

ROLES = ("mixed", "prefill", "decode")   # kv_both/none, kv_producer, kv_consumer
NZ_MODES = (0, 1, 2)


#: ParallelPlan fields every record of a deployment carries under the same name and meaning (InstancePlan,
#: the launch reader's DeploymentOptions, the CLI's options): the switches of ``auditor.switches``, where each
#: is declared once (option, kind, default, help). The conversions between records copy exactly these, and
#: tests/test_deployment_fields.py fails until every record and every command carries a new one. The other fields are derived: ``role`` (an instance's
#: name / kv_role), ``mtp`` and ``num_speculative_tokens`` (the drafter and its K), ``extra``.
CARRIED_FIELDS = tuple(sw.field for sw in SWITCHES)
DERIVED_FIELDS = ("role", "mtp", "num_speculative_tokens", "extra")


def check_drafter(spec: Any, plan: Any) -> None:
    """A launch's speculative method (``plan.extra["speculative_method"]``, set by ``--speculative-config``)
    must be the checkpoint's drafter: method dspark builds DSpark from a Flash-0731 / Flash-DSpark config's
    dspark keys (model-deepseek-v4.md §1.6), *mtp the MTP layers; the other pairing is not modelled and is
    refused rather than priced as the checkpoint's own drafter."""
    method = plan.extra.get("speculative_method") if plan is not None else None
    if not method or not plan.mtp:
        return
    drafter = getattr(spec, "drafter", "mtp")
    if method == drafter:
        return
    if method == "dspark":
        raise AuditInputError("--speculative-config", f"method dspark on {spec.name}, whose config has no "
                                                      "dspark_target_layer_ids: DSpark drafts from a DSpark checkpoint "
                                                      "(Flash-0731 / Flash-DSpark); its drafter is MTP (method mtp)")
    raise AuditInputError("--speculative-config", f"method {method} on {spec.name}, a DSpark checkpoint "
                                                  "(dspark_target_layer_ids): audit models its DSpark drafter "
                                                  "(method dspark), not an MTP drafter in it")


def carried(record: Any) -> dict[str, Any]:
    """The carried switches of any deployment record, by name (tuples kept as tuples)."""
    out = {}
    for name in CARRIED_FIELDS:
        v = getattr(record, name)
        out[name] = tuple(v) if isinstance(v, list) else v
    return out


@dataclass(frozen=True)
class ParallelPlan:
    tp: int = 1
    dp: int = 1
    ep: int = 1                 # 1 = expert parallel off; otherwise must equal dp*tp
    pp: int = 1
    sp: bool = False            # sequence parallel (FlashComm1)
    dsa_cp: bool | None = None  # None: inferred from sp + DSA structure
    role: str = "mixed"         # prefill = kv_producer, decode = kv_consumer, mixed = no kv transfer
    mtp: bool = False           # MTP drafter loaded (--speculative-config deepseek_mtp)
    layer_sharding: tuple[str, ...] = ()
    nz_mode: int = 1
    shared_expert_dp: bool = False
    redundant_experts: int = 0
    max_num_batched_tokens: int = 8192
    fused_mc2: int = 0          # VLLM_ASCEND_ENABLE_FUSED_MC2: 1 = dispatch_ffn_combine (expert scales, profile workspace)
    combine_max_tokens: int = 0  # additional_config.mega_moe_max_tokens: its max_output_size (0: the version's)
    dcp: int = 1                # decode context parallel (KV split over DCP = TP ranks; research serving-facts §5)
    #: vLLM-Ascend additional_config finegrained_tp_config: (module, group size) pairs, e.g. (("lmhead", 16),):
    #: that module is sharded over a group of DP ranks instead of TP (``auditor.finegrained``)
    finegrained_tp: tuple[tuple[str, int], ...] = ()
    #: --speculative-config num_speculative_tokens (k) when the drafter is loaded (0: not given)
    num_speculative_tokens: int = 0
    #: --block-size (0: the engine's default); compressed-attention pools are laid out by it
    block_size: int = 0
    extra: dict = field(default_factory=dict, compare=False, hash=False)

    @property
    def world(self) -> int:
        return self.tp * self.dp * self.pp

    @property
    def ranks_per_stage(self) -> int:
        return self.tp * self.dp

    @property
    def ep_on(self) -> bool:
        return self.ep > 1

    def validate(self) -> "ParallelPlan":
        for name in ("tp", "dp", "ep", "pp"):
            v = getattr(self, name)
            if not isinstance(v, int) or v < 1:
                raise AuditInputError(f"--{name}", f"must be a positive integer, got {v!r}")
        if self.tp * self.dp * self.pp > MAX_WORLD:
            raise AuditInputError("--tp", f"TP x DP x PP = {self.tp * self.dp * self.pp:,} ranks is past the "
                                          f"plausible {MAX_WORLD:,}")
        if self.ep > 1 and self.ep != self.tp * self.dp:
            raise AuditInputError("--ep", f"expert parallel size is DP x TP in vLLM ({self.dp} x {self.tp} = "
                                          f"{self.dp * self.tp}); got {self.ep}")
        if self.role not in ROLES:
            raise AuditInputError("--role", f"must be one of {', '.join(ROLES)}, got {self.role!r}")
        if self.nz_mode not in NZ_MODES:
            raise AuditInputError("--nz-mode", f"must be 0, 1 or 2, got {self.nz_mode!r}")
        if not isinstance(self.dcp, int) or self.dcp < 1 or self.tp % self.dcp:
            raise AuditInputError("--dcp", f"must be a positive divisor of TP {self.tp}, got {self.dcp!r}")
        if self.redundant_experts < 0:
            raise AuditInputError("--redundant-experts", "must not be negative")
        for s in self.layer_sharding:
            if s not in ("q_b_proj", "o_proj"):
                raise AuditInputError("--layer-sharding", f"unknown series {s!r} (q_b_proj, o_proj)")
        return self

    def rank_coords(self, rank: int) -> tuple[int, int, int]:
        """(pp_stage, dp_rank, tp_rank) of a global rank; rank = stage*DP*TP + dp*TP + tp."""
        stage, rest = divmod(rank, self.ranks_per_stage)
        dp_rank, tp_rank = divmod(rest, self.tp)
        return stage, dp_rank, tp_rank

    def with_(self, **kw) -> "ParallelPlan":
        return replace(self, **kw)

    def describe(self) -> str:
        parts = [f"TP{self.tp}", f"DP{self.dp}"]
        parts.append(f"EP{self.ep}" if self.ep > 1 else "EP off")
        if self.pp > 1:
            parts.append(f"PP{self.pp}")
        if self.sp:
            parts.append("SP")
        parts.append(f"role {self.role}")
        if self.mtp:
            parts.append("MTP drafter")
        return " ".join(parts)


def stage_layers(n_layers: int, pp: int) -> list[range]:
    """Decoder layers per PP stage, split as vLLM's get_pp_indices does: an even split, with the
    remainder going one layer each to the stages just before the last (which holds lm_head)."""
    sizes = [n_layers // pp] * pp
    for i in range(2, n_layers % pp + 2):
        sizes[-i] += 1
    out, start = [], 0
    for n in sizes:
        out.append(range(start, start + n))
        start += n
    return out
