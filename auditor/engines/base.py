"""An engine: every decision a serving engine makes, as hooks over the generic flow.

The generic machinery (materializer traversal, ledger, budget arithmetic, layer program, serving
model, renderers) asks an Engine, never tests an engine or version string. One subclass per engine
family lives in its own folder (``engines/vllm_ascend/``); one instance per modelled version row,
resolved once from ``--engine`` by ``engines/registry.py`` and passed down. A new family copies the
folder and changes values (block size, cache entry bytes, communicator buffers, log lines, launch
flags, kernel names), as aiconfigurator's backends do.

Engines compare and hash by their profile key, so caches keyed on an Engine never mix versions.
"""
from __future__ import annotations

from typing import Any, ClassVar, Sequence


class Engine:
    """One engine family at one version. Subclasses set the class attributes and the hooks."""

    #: family name as typed in ``--engine FAMILY@VERSION``
    family: ClassVar[str] = ""
    #: version rows: key -> profile (a frozen dataclass with name, label, version, ...)
    profiles: ClassVar[dict[str, Any]] = {}
    #: other names of rows ("main", "head")
    aliases: ClassVar[dict[str, str]] = {}
    #: the engine's name for --kv-cache-dtype values (cache variants this family knows)
    kv_dtypes: ClassVar[tuple[str, ...]] = ("bf16",)
    #: vLLM ``--kv-cache-dtype`` values a launch line may carry that this engine takes as one of its variants
    #: (besides auto / bfloat16 = bf16); vLLM-Ascend selects its C8 caches through additional_config instead
    launch_kv_cache_dtypes: ClassVar[tuple[str, ...]] = ()

    def __init__(self, profile: Any, note: str | None = None) -> None:
        self.profile = profile
        self.note = note

    # ------------------------------------------------------------ identity
    @property
    def key(self) -> str:
        return self.profile.name

    @property
    def name(self) -> str:
        return self.profile.name

    @property
    def label(self) -> str:
        return self.profile.label

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Engine) and type(other) is type(self) and other.key == self.key

    def __hash__(self) -> int:
        return hash((type(self).__name__, self.key))

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.key!r})"

    def __str__(self) -> str:
        return self.key

    # ------------------------------------------------------------ weights
    def placement(self, spec: Any, plan: Any) -> Any:
        """What is replicated or sharded on a rank of ``plan`` (a Placement)."""
        raise NotImplementedError

    def materializer(self, spec: Any, plan: Any, layout: Any, stored: Any, desc: Any,
                     row_cache: dict | None = None) -> Any:
        """The object that emits every resident tensor of a rank (engines/materialize.py)."""
        raise NotImplementedError

    def untimed(self, spec: Any) -> str | None:
        """Why this engine's perf / bench model does not time ``spec`` (one line), or None when it does."""
        return None

    def loads_recipe(self, spec: Any, recipe: str) -> bool:
        """Whether this engine can load ``spec``'s checkpoint made with ``recipe`` (align searches only those)."""
        return True

    #: profile fields the materializer reads: two profiles equal on these share materialized rows
    materializer_fields: ClassVar[tuple[str, ...]] = ()

    def materializer_key(self) -> tuple:
        """Cache key of what this engine's materializer depends on (derived from the declared fields)."""
        return (self.family,) + tuple(getattr(self.profile, f) for f in self.materializer_fields)

    # ------------------------------------------------------------ runtime memory
    def kv_spec(self, spec: Any, plan: Any, *, variant: str = "bf16", dcp: int = 1, mtp: bool = False,
                stage: int | None = None, arch: str = "") -> Any:
        """The KV cache of one worker (a KVSpec); ``arch`` is ``soc(device)`` (a cache layout may
        depend on the device generation)."""
        raise NotImplementedError

    def kv_switches(self, variant: str) -> dict:
        """Engine configuration that selects a cache variant (empty when it needs none)."""
        return {}

    def activation_terms(self, spec: Any, **kw: Any) -> dict[str, Any]:
        """Named bytes of the profile run's activation peak; ``kw`` carries the workload, the plan's
        sizes and ``expert_scheme`` (the routed experts' quant scheme, e.g. ``W8A8_DYNAMIC``, or None)."""
        raise NotImplementedError

    def activation_peak(self, terms: dict[str, Any]) -> Any:
        raise NotImplementedError

    def non_torch_terms(self, plan: Any, *, hccl_buffsize_mb: int, dcp: int = 1, **state: Any) -> dict[str, int]:
        """Non-torch bytes measured with the profile run; ``state`` (spec, tokens, seqs, mtp, soc, ...)
        tells the engine which communicators that run touched."""
        raise NotImplementedError

    #: the non-torch bytes of the device runtime itself (no communicator)
    runtime_non_torch_bytes: ClassVar[int] = 0

    def minimal_profile_non_torch_bytes(self, plan: Any, *, hccl_buffsize_mb: int) -> int:
        """Non-torch bytes of the simplest profile run of ``plan`` (no expert-parallel comm path, no
        warm-up): what a breakdown line of a dense TP deployment should show."""
        return self.runtime_non_torch_bytes

    def soc(self, device: Any) -> str:
        """The engine's device generation for a device profile (selects e.g. a comm path)."""
        return ""

    def device_mismatch(self, device: Any) -> str | None:
        """Why this engine does not run on ``device`` (another vendor's accelerator), or None; the commands
        warn, since the figures would mix one engine's facts with another's hardware."""
        return None

    @property
    def default_gpu_memory_utilization(self) -> float:
        """What ``--gpu-memory-utilization`` is when a launch names none."""
        return 0.9

    def graph_max_tokens(self, max_num_seqs: int, mtp: int, max_num_batched_tokens: int) -> int:
        """The largest decode step (tokens per DP rank) a launch without explicit capture sizes replays
        from a captured graph; -1 = every decode step (an engine without graph limits)."""
        return -1

    def graph_tokens(self, launch: int, max_num_seqs: int, mtp: int, max_num_batched_tokens: int) -> int:
        """The largest decode step replayed from a graph: the launch's own (its capture sizes, 0 when
        eager) or, when it names none (-1), this engine's default. The one place bench, plan and perf
        resolve it."""
        if launch != -1:
            return int(launch)
        return int(self.graph_max_tokens(max_num_seqs, mtp, max_num_batched_tokens))

    def term_ranges(self, p_act: float, non_torch: dict[str, int], graph: int) -> dict[str, tuple[float, float]]:
        """(low, high) bytes of every UNCONFIRMED budget term; the report says whether the verdict holds
        at both ends. Default: none."""
        return {}

    def unbudgeted_items(self, spec: Any, plan: Any, kv: Any, **kw: Any) -> list[tuple[str, int]]:
        return []

    def kv_refusal(self, spec: Any, variant: str) -> str | None:
        """The error the engine raises while building the model when its KV cache is ``--kv-cache-dtype
        variant`` (an attention class that asserts a cache dtype), or None. memory shows it as the start-up
        error; perf, bench and plan refuse with it."""
        return None

    def profile_run_error(self, spec: Any, plan: Any, **state: Any) -> str | None:
        """The error the engine's profile run stops on for this plan (a kernel's own limit), or None."""
        return None

    #: bytes deducted from the KV budget besides W, P_act and non-torch (a graph pool on some versions)
    def graph_deducted_bytes(self) -> int:
        return 0

    def kv_available(self, requested: Any, weights: Any, activation: Any, non_torch: Any, graph: Any) -> Any:
        """The engine's formula for the KV cache memory of a worker from its named terms (numpy arrays
        broadcast; linear in ``weights``, which grids subtract last): vLLM's ``requested - weights -
        peak activation - non-torch - graph estimate`` unless the engine says otherwise."""
        return requested - weights - activation - non_torch - graph

    #: tokens of the KV block prefix-cache hits are counted in (vLLM's default --block-size)
    prefix_block_tokens: ClassVar[int] = 16

    #: memory other processes hold on the die at start (outside the budget)
    others_at_start_bytes: ClassVar[int] = 0
    default_hccl_buffsize_mb: ClassVar[int] = 200
    term_docs: ClassVar[dict[str, str]] = {}
    #: how the budget report names the engine's non-torch and graph terms
    budget_labels: ClassVar[dict[str, str]] = {"non_torch": "communicators + runtime", "graph": "graph pool estimate",
                                               "weights": "weights line"}

    def budget_assumptions(self, spec: Any = None, kv: Any = None) -> Sequence[str]:
        return ()

    def measured_acceptance(self, spec: Any, drafter: str = "mtp") -> tuple[float, int, str] | None:
        """A public measurement of ``spec``'s drafter on this engine, as (tokens per step, at K drafts,
        source), used when ``--mtp-acceptance`` is not given (``perf.acceptance.resolve``); tokens None:
        none on this engine (the generic assumption). None: the family's table there
        (``acceptance.default_acceptance``)."""
        return None

    # ------------------------------------------------------------ the engine's words in generic output
    #: what output text calls one accelerator of this engine (vLLM-Ascend: "die"; CUDA: "GPU"); every
    #: generic renderer (plan, bench, perf, memory) asks, so no run prints another engine's hardware words
    device_noun: ClassVar[str] = "device"
    #: examples of what the engine allocates outside its KV budget (plan's gpu-memory-utilization note)
    outside_budget_words: ClassVar[str] = "workspaces the profile run skips"
    #: the engine's own evidence that a prefill node with long chunks needs a lower utilization ("" = none)
    prefill_util_evidence: ClassVar[str] = ""
    #: why a P node runs the MTP drafter with K = 1
    prefill_mtp_source: ClassVar[str] = "an assumption"

    def devices(self, n: int) -> str:
        """``n`` accelerators in this engine's word ("8 dies", "8 GPUs")."""
        return f"{n} {self.device_noun}" + ("" if n == 1 else "s")

    def kv_link_words(self, bytes_per_s: float) -> str:
        """How the P -> D KV pull bandwidth the serving model assumes is stated."""
        return f"{bytes_per_s / 1e9:g} GB/s per {self.device_noun}, an assumption"

    def memory_savers(self, recipe: str | None, kv_cache_dtype: str | None) -> list[str]:
        """What would lower per-rank memory on this engine besides more accelerators (plan's binds line)."""
        return []

    def plan_switches(self, plan: dict) -> str:
        """The switches on the memory report's plan line after the role (``plan`` is the report's plan
        dict): the drafter, plus an engine's own."""
        return f"MTP-drafter={'on' if plan.get('mtp_drafter') else 'off'}"

    # ------------------------------------------------------------ what the engine prints and takes
    @property
    def loglines(self) -> Any:
        """The module of the engine's log-line formatters (weights, KV, concurrency, errors)."""
        raise NotImplementedError

    @classmethod
    def weights_patterns(cls) -> tuple:
        """(pattern, form, marker) of every per-worker weights line this family prints: ``audit align``
        reads a log with the patterns of every registered family."""
        return ()

    @classmethod
    def parse_breakdown(cls, line: str) -> dict | None:
        """The engine's memory breakdown line as GiB figures (keys ``weights_gib``, ``activation_gib``,
        ``non_torch_gib``, ``graph_gib``, ``kv_cache_gib``, ``free_gib``, ``total_gib``, ``util``), or None."""
        return None

    def launch(self, model: str, instance: Any) -> dict[str, Any]:
        """The launch command of one instance: {'args': [...], 'env': {...}, 'command': str}."""
        raise NotImplementedError

    # ------------------------------------------------------------ what align searches
    #: the engine-behaviour options ``audit align`` searches when the user did not pin them, in order of
    #: preference (earlier values are the defaults): the plan's role and the drafter for every engine
    align_search_space: ClassVar[dict[str, tuple]] = {"role": ("mixed", "prefill", "decode"), "mtp": (False, True)}

    def align_skip(self, option: dict, pinned: dict) -> bool:
        """Whether ``option`` (one point of the search space) is no configuration this engine runs as
        given, so align does not score it (default: every point is one)."""
        return False

    # ------------------------------------------------------------ kernels
    def kernel_path(self, variant: str) -> Any:
        """The kernel constants of a cache variant (indexer / top-k / sparse-attention tiling)."""
        raise NotImplementedError

    def kernel_path_on(self, variant: str, arch: str) -> Any:
        """The kernel constants of a cache variant on the device generation ``arch`` (``soc(device)``): an
        engine whose kernels depend on the GPU generation overrides this; default ``kernel_path(variant)``."""
        return self.kernel_path(variant)

    def weights_by_drafter_k(self, spec: Any) -> bool:
        """Whether the resident bytes of ``spec`` depend on the drafter's K (num_speculative_tokens), so a
        grid must build weights per K. Default: no (the drafter's weights are one layer whatever K)."""
        return False

    def drafter_eager(self, spec: Any, async_scheduling: bool = False) -> bool:
        """Whether the MTP drafter of ``spec`` runs eager behind a replayed decode graph (its launches are
        then host time of every decode step, ``perf.host``), on an instance with or without
        --async-scheduling. Default: it is captured with the step."""
        return False

    def launch_overrides(self, options: dict[str, Any]) -> tuple[tuple[str, str, str], ...]:
        """Launch settings this engine turns off itself at start, given the deployment's ``options``
        (DeploymentOptions field -> value): (setting name as the launch reader names it, why, the line the
        engine logs). The launch reader then reports the setting as without effect, not as unmodelled.
        Default: none."""
        return ()

    def recipe_refusal(self, spec: Any, kv_b_schemes: Sequence[str]) -> str | None:
        """Why this engine cannot start a DSA model whose kv_b_proj has the quant schemes ``kv_b_schemes``
        (non-float ones; perf and plan check it before timing), or None. Default: no refusal."""
        return None

    @property
    def profiler(self) -> Any:
        """The module that reads this engine's profiler output: ``kernel_class(type, name)``,
        ``gather_class(shapes, hidden)``, ``is_anchor(name, cls)``, ``NORM_WEIGHT``,
        ``COLLECTIVE_CLASSES``, ``COMPOSITES``, ``DEFAULT_MAPPING`` (profiler kernel type -> ours)."""
        raise NotImplementedError
