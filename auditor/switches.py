"""The deployment switches, declared once.

A switch is a setting every record of a deployment carries (``ParallelPlan``, ``InstancePlan``, the launch
reader's ``DeploymentOptions``): its field, audit's option, what kind of value it takes, its default and its
help. ``parallel.CARRIED_FIELDS`` is this table's fields; the click options (``cli.options.switch_option``),
the launch renderer (``cli.deployment``) and the help-walking test read it. A new switch is one row here;
a record or a command that misses it fails ``tests/test_deployment_fields.py``.

No click here (the record layer must not import the CLI): ``kind`` says how a value is parsed and
written back, and the CLI turns it into a click type.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

#: kind -> how a launch renders the value back into audit's option (``cli.deployment``)
RENDER_OF_KIND = {"size": "int", "range": "int", "length": "int", "ep": "int", "flag": "flag",
                  "tristate": "flag", "names": "list", "pairs": "pairs"}


@dataclass(frozen=True)
class Switch:
    """One deployment switch.

    kind: ``size`` (an integer capped by ``limits.OPTION_CAPS[option]``), ``range`` (an integer in
    ``lo_hi``), ``length`` (a token count with vLLM's suffixes), ``ep`` (on / off / a size), ``flag``
    (``--x/--no-x``), ``tristate`` (a flag whose default is "not set"), ``names`` (a comma list),
    ``pairs`` (``MODULE=SIZE,...``).
    group: the option group that declares it on a command: ``plan`` (``plan_options``), ``runtime``
    (``runtime_options``: the KV budget) or ``finegrained`` (``finegrained_option``).
    """

    field: str
    option: str
    kind: str
    default: Any
    help: str
    group: str = "plan"
    lo_hi: tuple[int, int] = (0, 0)
    metavar: str | None = None
    #: print ``[default: X]`` in --help (off where the default means "not set" or "the engine's")
    show_default: bool = True

    @property
    def render(self) -> str:
        return RENDER_OF_KIND[self.kind]


SWITCHES: tuple[Switch, ...] = (
    Switch("tp", "--tp", "size", 1, "tensor parallel size"),
    Switch("dp", "--dp", "size", 1, "data parallel size"),
    Switch("ep", "--ep", "ep", 1, "expert parallel: on (= DP x TP, vLLM's --enable-expert-parallel), off, or the size"),
    Switch("pp", "--pp", "size", 1, "pipeline parallel size"),
    Switch("sp", "--sp", "flag", False,
           "sequence parallel: exactly VLLM_ASCEND_ENABLE_FLASHCOMM1=1 (the engine version decides whether it also "
           "turns DSA-CP on: v0.18 does)"),
    Switch("dsa_cp", "--dsa-cp", "tristate", None,
           "DSA context parallel switch: exactly additional_config.enable_dsa_cp (v0.21-v0.26 need --sp with it and "
           "refuse to start without; v0.18 has no such switch; default: not set)", show_default=False),
    Switch("layer_sharding", "--layer-sharding", "names", "", "comma list: q_b_proj,o_proj (v0.18-v0.23 P node)",
           show_default=False),
    Switch("nz_mode", "--nz-mode", "range", 1, "VLLM_ASCEND_ENABLE_NZ: 0 none, 1 quantized weights, 2 also bf16",
           lo_hi=(0, 2)),
    Switch("shared_expert_dp", "--shared-expert-dp", "flag", False, "additional_config.enable_shared_expert_dp"),
    Switch("redundant_experts", "--redundant-experts", "size", 0,
           "EPLB redundant experts (added to the routed experts before EP split)"),
    Switch("max_num_batched_tokens", "--max-num-batched-tokens", "length", 8192,
           "vLLM's scheduler limit: max tokens per step per DP rank (decode tokens plus prefill chunks; a longer "
           "prompt is chunked); memory: also sizes topk_indices_buffer, the rope buffers and the profile run"),
    Switch("block_size", "--block-size", "size", 0,
           "vLLM's --block-size: tokens per KV block (0: the engine's; vLLM-Ascend's SFA backend forces 128; "
           "compressed-attention pools take 32, 64 or 128)", show_default=False),
    Switch("fused_mc2", "--fused-mc2", "range", 0,
           "VLLM_ASCEND_ENABLE_FUSED_MC2: 1 = dispatch_ffn_combine MoE on A3 with EP <= 32 (int64 expert scales; its "
           "workspace is in the activation peak)", lo_hi=(0, 2)),
    Switch("combine_max_tokens", "--mega-moe-max-tokens", "size", 0,
           "additional_config.mega_moe_max_tokens: dispatch_ffn_combine's max_output_size (its workspace grows "
           "with it; default: the engine version's, 131072 on main)", show_default=False),
    Switch("dcp", "--dcp", "size", 1, "decode context parallel size (SFA: indexer cache replicated, DCP == TP on main)",
           group="runtime"),
    Switch("finegrained_tp", "--finegrained-tp", "pairs", "",
           "additional_config finegrained_tp_config: lmhead=N shards lm_head, embedding=N embed_tokens over N DP "
           "ranks instead of TP (N divides DP)", group="finegrained", metavar="MODULE=SIZE,...", show_default=False),
)

BY_FIELD: dict[str, Switch] = {s.field: s for s in SWITCHES}
