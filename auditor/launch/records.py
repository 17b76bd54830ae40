"""What reading a vLLM launch produces: the launch itself (``Launch``), the deployment options it
means to audit (``DeploymentOptions``), and the findings on the way (``Note``, ``Setting``).

Why separate records: the script reader and the flag table are tested on their own, and the CLI
that consumes them needs only these types, never the parsing code.
"""
from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any

from ..parallel import ParallelPlan


@dataclass(frozen=True)
class Note:
    """A finding about the launch, with the line it comes from (0: the launch as a whole)."""

    severity: str           # "warning" | "info"
    line: int
    message: str

    def text(self, where: str = "") -> str:
        at = f"{where}:{self.line}" if where and self.line else (where or (f"line {self.line}" if self.line else ""))
        return f"{at}: {self.message}" if at else self.message


@dataclass(frozen=True)
class Setting:
    """One flag, environment variable or JSON key of the launch as given (value as text), with what
    it does for audit: ``why`` says why it is ignored or what audit does not model."""

    name: str               # "--seed", "HCCL_OP_EXPANSION_MODE", "additional_config.enable_balance_scheduling"
    value: str
    line: int
    why: str


@dataclass(frozen=True)
class Launch:
    """One vLLM launch read from a script or a command line.

    ``env`` is what the engine process sees from the script: exported variables (and ``VAR=value``
    prefixes of the command) at the point of the serve command. ``argv`` are the serve arguments
    after the model, one line number per argument in ``arg_lines``."""

    where: str
    model: str
    env: dict[str, str]
    argv: tuple[str, ...]
    arg_lines: tuple[int, ...]
    env_lines: dict[str, int]
    line: int                       # line of the serve command
    program: str                    # "vllm serve" | "python -m vllm.entrypoints.openai.api_server"
    notes: tuple[Note, ...] = ()


# fields of DeploymentOptions that are options (not findings or bookkeeping)
_BOOKKEEPING = ("explicit", "ignored", "unmodelled", "unknown", "notes", "where", "engine", "env",
                "speculative_method")


@dataclass(frozen=True)
class DeploymentOptions:
    """audit's deployment options as a vLLM launch sets them.

    Values not set by the launch are audit's CLI defaults (``explicit`` names the ones the launch
    set), so ``plan()`` and ``runtime()`` can be used as they are or merged under command-line
    options by the caller. ``ignored`` / ``unmodelled`` / ``unknown`` name every flag, environment
    variable and JSON key of the launch that sets no option here."""

    model: str = ""
    # parallel plan (auditor.parallel.ParallelPlan)
    tp: int = 1
    dp: int = 1
    ep: int = 1                     # 1 = off; --enable-expert-parallel: DP x TP
    pp: int = 1
    sp: bool = False                # VLLM_ASCEND_ENABLE_FLASHCOMM1
    dsa_cp: bool | None = None      # None: inferred from sp (v0.18: DSA-CP follows FlashComm1)
    role: str = "mixed"             # kv_role: kv_producer -> prefill, kv_consumer -> decode
    mtp_drafter: bool = False       # speculative method *mtp / dspark: the checkpoint's drafter is loaded
    #: the launch's speculative method ("mtp" for *mtp, "dspark"; "": none): checked against the checkpoint's
    #: drafter where the model is known (``parallel.check_drafter``)
    speculative_method: str = field(default="", compare=False)
    layer_sharding: tuple[str, ...] = ()
    nz_mode: int = 1
    shared_expert_dp: bool = False
    redundant_experts: int = 0
    fused_mc2: int = 0              # VLLM_ASCEND_ENABLE_FUSED_MC2 (1: dispatch_ffn_combine)
    combine_max_tokens: int = 0     # additional_config.mega_moe_max_tokens (0: the version's default)
    finegrained_tp: tuple[tuple[str, int], ...] = ()     # additional_config.finegrained_tp_config (modelled keys)
    max_num_batched_tokens: int = 8192
    block_size: int = 0             # --block-size (0: the engine's default)
    # runtime budget (auditor.cli.runtime_options)
    util: float = 0.9
    max_model_len: int | None = None    # None: the model's max_position_embeddings
    max_num_seqs: int = 256
    kv_cache_dtype: str = "bf16"        # bf16 | c8-indexer | c8 (auditor.runtime.kvspec.KV_DTYPES)
    dcp: int = 1
    hccl_buffsize: int = 200            # MB
    mtp: int = 0                        # num_speculative_tokens
    balance_scheduling: bool = False    # additional_config.enable_balance_scheduling (bench's client side)
    async_scheduling: bool = False      # --async-scheduling (bench's host model: step_ms overlaps the device)
    draft_eager: bool = False           # speculative_config.enforce_eager (bench's host model: eager drafter launches)
    #: largest decode step (tokens per DP rank) replayed from a captured graph: the max of
    #: compilation_config.cudagraph_capture_sizes; 0 with --enforce-eager / cudagraph_mode NONE;
    #: -1 = not set (every decode step is captured)
    graph_tokens: int = -1
    # recorded: set by the launch, not (or not yet) used by audit's models
    dp_local: int | None = None         # DP ranks on this node (--data-parallel-size-local)
    quantization: str | None = None     # "ascend": the recipe comes from the checkpoint's description
    mlapo: bool = True
    prefix_caching: bool | None = None
    eager: bool = False
    hf_overrides: dict = field(default_factory=dict, hash=False)
    compilation: dict = field(default_factory=dict, hash=False)
    # bookkeeping
    where: str = field(default="", compare=False)
    engine: str = field(default="", compare=False)
    env: dict = field(default_factory=dict, compare=False, hash=False)
    explicit: frozenset = field(default_factory=frozenset, compare=False)
    ignored: tuple[Setting, ...] = field(default=(), compare=False)
    unmodelled: tuple[Setting, ...] = field(default=(), compare=False)
    unknown: tuple[Setting, ...] = field(default=(), compare=False)
    notes: tuple[Note, ...] = field(default=(), compare=False)

    def values(self) -> dict[str, Any]:
        """The option fields as a dict (no findings): what tests and reports compare."""
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name not in _BOOKKEEPING}

    def plan(self) -> ParallelPlan:
        """The ParallelPlan these options describe, validated (AuditInputError naming the option)."""
        from ..parallel import carried
        # DCP is a runtime option here: the commands check it against TP where they use it
        extra = {"speculative_method": self.speculative_method} if self.speculative_method else {}
        return ParallelPlan(**{**carried(self), "dcp": 1}, role=self.role, mtp=self.mtp_drafter,
                            num_speculative_tokens=self.mtp if self.mtp_drafter else 0, extra=extra).validate()

    def runtime(self) -> dict[str, Any]:
        """The ``runtime`` dict ``cli.runtime_options`` builds (``rank_budget`` keyword arguments)."""
        return {"util": self.util, "max_model_len": self.max_model_len, "kv_cache_dtype": self.kv_cache_dtype,
                "dcp": self.dcp, "hccl_buffsize_mb": self.hccl_buffsize, "max_num_seqs": self.max_num_seqs}
