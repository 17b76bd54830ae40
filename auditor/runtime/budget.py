"""The HBM budget of a rank as the engine computes it, and what the KV pool then holds.

engine-vllm-ascend-runtime.md §3.2 and §1.4::

    requested  = util * M_total
    A_kv       = requested - W - P_act - N_nontorch          (per worker of one DP engine)
    num_blocks = min over the TP x PP workers of floor(A_kv / page_block)
    concurrency(L) = num_blocks / cdiv(cdiv(L, DCP), bs);  GPU KV cache size = int(concurrency * L)

``M_total`` is the usable total the worker sees (device profile ``hbm_usable_bytes``), ``W`` the
ledger's resident bytes of the worst rank of the stage (it already holds the top-k buffers, MLAPO
copies and gather pools the engine measures as weights), ``P_act`` the profile-run activation
peak and ``N_nontorch`` the communicator buffers plus runtime; both are the engine's terms
(``Engine.activation_terms``, ``Engine.non_torch_terms``), as are the KV spec and the items it
allocates outside this budget, which must fit in ``M_total * (1 - util)`` minus what other
processes held at start; ``headroom_bytes`` is what is left of it. The arithmetic is here, once.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Sequence

from ..engines.kv_interface import KVSpec
from ..engines.registry import EngineLike, as_engine
from ..errors import AuditInputError
from ..model.recipes import linear_scheme
from ..model.spec import ModelSpec
from ..parallel import ParallelPlan

DEFAULT_UTIL = 0.9
DEFAULT_MAX_NUM_SEQS = 256


@dataclass
class RuntimeBudget:
    """One DP engine's KV budget, reported for its binding worker (the one with fewest blocks)."""

    total_bytes: int
    util: float
    requested_bytes: int
    weights_bytes: int
    activation_terms: dict[str, float]
    activation_peak_bytes: int
    non_torch_terms: dict[str, int]
    non_torch_bytes: int
    graph_deducted_bytes: int
    kv_available_bytes: int
    kv: KVSpec
    num_blocks: int
    max_model_len: int
    max_num_seqs: int
    max_num_batched_tokens: int
    mtp: int
    unbudgeted: list[tuple[str, int]]
    others_bytes: int
    stage: int = 0
    stage_blocks: list[int] = field(default_factory=list)
    assumptions: list[str] = field(default_factory=list)
    injected: tuple[str, ...] = ()
    engine: Any = None              # the Engine whose log lines and errors these are
    #: the error the engine's profile run stops on (a kernel limit, e.g. dispatch_ffn_combine's HCCL window)
    startup_error: str | None = None
    #: (low, high) bytes of each UNCONFIRMED deducted term (Engine.term_ranges), nominal = the estimate
    ranges: dict[str, tuple[float, float]] = field(default_factory=dict)
    nominal: dict[str, float] = field(default_factory=dict)

    # ------------------------------------------------------------ derived figures
    @property
    def blocks_per_request(self) -> int:
        return self.kv.blocks_per_request(self.max_model_len)

    @property
    def max_concurrency(self) -> float:
        return self.num_blocks / self.blocks_per_request if self.max_model_len > 0 else 0.0

    @property
    def kv_tokens(self) -> int:
        """What "GPU KV cache size" reports: int(concurrency * max_model_len)."""
        return int(self.max_concurrency * self.max_model_len)

    @property
    def kv_pool_bytes(self) -> int:
        return self.num_blocks * self.kv.page_block_bytes

    @property
    def kv_bytes_per_request(self) -> int:
        return self.kv.bytes_per_request(self.max_model_len)

    @property
    def estimated_max_model_len(self) -> int:
        """Largest model length whose one request fits (upstream estimate_max_model_len)."""
        if self.kv_available_bytes <= 0:
            return 0
        return self.kv.max_length(self.kv_available_bytes // self.kv.page_block_bytes, self.max_model_len)

    @property
    def fits(self) -> bool:
        """The profile run completes and one max_model_len request fits (the engine's own checks)."""
        return (self.startup_error is None and self.kv_available_bytes > 0
                and self.kv_bytes_per_request <= self.kv_available_bytes)

    @property
    def unbudgeted_bytes(self) -> int:
        return sum(b for _, b in self.unbudgeted)

    @property
    def headroom_bytes(self) -> int:
        """(1 - util) * total - others at start - every unbudgeted item (negative: OOM risk)."""
        return int(self.total_bytes - self.requested_bytes - self.others_bytes - self.unbudgeted_bytes)

    @property
    def _lines(self) -> Any:
        return as_engine(self.engine if self.engine is not None else "main").loglines

    def _fits_with(self, avail: float) -> bool:
        return self.startup_error is None and avail > 0 and self.kv_bytes_per_request <= avail

    def uncertainty(self) -> dict[str, Any]:
        """Whether the verdict (one max_model_len request fits) holds at both ends of every UNCONFIRMED
        term's range: ``{"verdict": "fits either way" | "fails either way" | "depends on <terms>",
        "kv_available_low_bytes", "kv_available_high_bytes", "terms": {name: {nominal, low, high}}}``."""
        delta_hi = sum(hi - self.nominal.get(n, hi) for n, (lo, hi) in self.ranges.items())
        delta_lo = sum(lo - self.nominal.get(n, lo) for n, (lo, hi) in self.ranges.items())
        low = int(self.kv_available_bytes - delta_hi)      # pessimistic: every term at its high end
        high = int(self.kv_available_bytes - delta_lo)
        f_low, f_high = self._fits_with(low), self._fits_with(high)
        if f_low and f_high:
            verdict = "fits either way"
        elif not f_low and not f_high:
            verdict = "fails either way"
        else:
            flips = []
            for n, (lo, hi) in self.ranges.items():
                nom = self.nominal.get(n, lo)
                if self._fits_with(self.kv_available_bytes - (hi - nom)) != self._fits_with(
                        self.kv_available_bytes - (lo - nom)):
                    flips.append(n)
            verdict = "depends on " + (", ".join(flips) if flips else " + ".join(self.ranges))
        return {"verdict": verdict, "kv_available_low_bytes": low, "kv_available_high_bytes": high,
                "terms": {n: {"nominal": int(self.nominal.get(n, lo)), "low": int(lo), "high": int(hi)}
                          for n, (lo, hi) in self.ranges.items()}}

    def error(self) -> str | None:
        """The ValueError the engine raises at start-up, or None."""
        loglines = self._lines
        if self.startup_error:
            return self.startup_error
        if self.kv_available_bytes <= 0:
            return loglines.no_memory_error()
        if not self.fits:
            return loglines.shortfall_error(self.max_model_len, self.kv_bytes_per_request,
                                            self.kv_available_bytes, self.estimated_max_model_len)
        return None

    def fits_requests(self, requests: Any, tokens: Any) -> Any:
        """Whether ``requests`` sequences of ``tokens`` each fit the pool (numpy-broadcastable)."""
        import numpy as np
        return np.asarray(requests) * self.kv.request_blocks(tokens) <= self.num_blocks

    def log_lines(self) -> list[str]:
        loglines = self._lines
        lines = [*getattr(self.kv, "engine_lines", ()), loglines.weights_line(self.weights_bytes),
                 loglines.available_kv_line(self.kv_available_bytes)]
        err = self.error()
        if err:
            return lines + [err]
        return lines + [loglines.kv_cache_size_line(self.kv_tokens),
                        loglines.max_concurrency_line(self.max_model_len, self.max_concurrency)]

    def to_json(self) -> dict[str, Any]:
        """The ``runtime`` object of every JSON report (issue 9 schema, plus detail keys)."""
        return {
            "total_bytes": self.total_bytes, "requested_bytes": self.requested_bytes,
            "weights_bytes": self.weights_bytes, "activation_peak_bytes": self.activation_peak_bytes,
            "non_torch_bytes": self.non_torch_bytes, "kv_available_bytes": self.kv_available_bytes,
            "kv_bytes_per_token": _num(self.kv.bytes_per_token()),
            "kv_bytes_per_token_layer": _num(self.kv.bytes_per_token_layer()),
            "block_size": self.kv.block_size, "num_blocks": self.num_blocks, "kv_tokens": self.kv_tokens,
            "max_model_len": self.max_model_len, "kv_bytes_per_request": self.kv_bytes_per_request,
            "max_concurrency": self.max_concurrency,
            "unbudgeted": [{"name": n, "bytes": b} for n, b in self.unbudgeted],
            "headroom_bytes": self.headroom_bytes,
            # detail
            "gpu_memory_utilization": self.util, "kv_cache_dtype": self.kv.variant, "dcp": self.kv.dcp,
            "max_num_seqs": self.max_num_seqs, "max_num_batched_tokens": self.max_num_batched_tokens,
            "mtp": self.mtp, "binding_pp_stage": self.stage, "stage_num_blocks": list(self.stage_blocks),
            "activation_terms": {k: int(round(v)) for k, v in self.activation_terms.items()},
            "non_torch_terms": dict(self.non_torch_terms), "graph_deducted_bytes": self.graph_deducted_bytes,
            "others_at_start_bytes": self.others_bytes, "kv_pool_bytes": self.kv_pool_bytes,
            "kv_spec": self.kv.to_json(), "fits": self.fits, "error": self.error(),
            "startup_error": self.startup_error,
            "estimated_max_model_len": self.estimated_max_model_len,
            "injected": list(self.injected), "uncertainty": self.uncertainty(),
        }


def _num(x: float) -> float | int:
    return int(x) if float(x).is_integer() else float(x)


def usable_total(device: Any) -> int:
    """The total the worker sees: the profile's ``hbm_usable_bytes``, else its HBM capacity."""
    return int(getattr(device, "hbm_usable_bytes", 0) or device.hbm_capacity_bytes)


def kv_base(eng: Any, spec: ModelSpec, plan: ParallelPlan, *, total_bytes: float, util: float, tokens: Any, seqs: Any,
            mtp: Any, dsa_cp: bool, hccl_buffsize_mb: int, dcp: int = 1, soc: str | None = None,
            prefill_mc2: bool = False, recipe: str | None = None, max_model_len: int | None = None) -> dict[str, Any]:
    """The budget arithmetic, once, for one deployment (scalars) and for grids (numpy arrays of
    workloads): ``base = int(util x M_total) - P_act - N_nontorch - graph``, so that a rank with
    weights W has ``A_kv = base - W``. The activation terms broadcast over ``tokens``/``seqs``/
    ``mtp``; which communicators the profile run touches is decided at one batch (a grid's plan's own
    max_num_batched_tokens and its largest batch and K)."""
    import numpy as np
    state = {"soc": soc, "prefill_mc2": prefill_mc2} if soc else {}
    if plan.fused_mc2:                  # VLLM_ASCEND_ENABLE_FUSED_MC2: the profile run's MoE path and its workspace
        state["fused_mc2"] = int(plan.fused_mc2)
    # the recipe's routed-expert scheme: the engine knows which ones run gate/up fused (no output at the peak)
    terms = eng.activation_terms(spec, tokens=tokens, seqs=seqs, mtp=mtp, tp=plan.tp, dp=plan.dp, ep=plan.ep,
                                 sp=plan.sp, dsa_cp=dsa_cp, expert_scheme=linear_scheme(recipe, "expert") if recipe
                                 else None, combine_max_tokens=plan.combine_max_tokens or None,
                                 max_model_len=max_model_len, **state)
    p_act = eng.activation_peak(terms)
    scalar = np.ndim(tokens) == 0 and np.ndim(seqs) == 0 and np.ndim(mtp) == 0
    nt_at = (dict(tokens=int(tokens), seqs=int(seqs), mtp=int(mtp)) if scalar else
             dict(tokens=int(plan.max_num_batched_tokens), seqs=int(np.max(seqs)), mtp=int(np.max(mtp))))
    nt_terms = eng.non_torch_terms(plan, hccl_buffsize_mb=hccl_buffsize_mb, dcp=dcp, spec=spec, **nt_at, **state)
    requested = int(total_bytes * util)
    graph = eng.graph_deducted_bytes()
    n_nt = sum(nt_terms.values())
    if not scalar:
        # which communicators a profile run touches depends on its batch and K (the MoE comm path): a grid
        # row is charged its own, as rank_budget charges one deployment (the grid's largest batch could
        # select a lighter path and promise KV a smaller batch does not have)
        # (at the plan's own max_num_batched_tokens, as before: a grid varies batch and K far less often)
        shape = np.broadcast(tokens, seqs, mtp).shape
        b_all = np.broadcast_to(np.asarray(seqs, dtype=np.int64), shape).ravel()
        k_all = np.broadcast_to(np.asarray(mtp, dtype=np.int64), shape).ravel()
        keys, inverse = np.unique(b_all * 1024 + k_all, return_inverse=True)     # one int per (batch, K <= 1023)
        t0 = int(plan.max_num_batched_tokens)
        per_key = np.array([sum(eng.non_torch_terms(plan, hccl_buffsize_mb=hccl_buffsize_mb, dcp=dcp, spec=spec,
                                                    tokens=t0, seqs=int(key // 1024), mtp=int(key % 1024),
                                                    **state).values())
                            for key in keys], dtype=float)
        n_nt = per_key[np.asarray(inverse).ravel()].reshape(shape)
    return {"terms": terms, "p_act": p_act, "nt_terms": nt_terms, "n_nt": n_nt, "graph": graph,
            "requested": requested, "base": eng.kv_available(requested, 0, p_act, n_nt, graph), "state": state}


def rank_budget(spec: ModelSpec, plan: ParallelPlan, engine: EngineLike, *, weights_bytes: float | Sequence[float],
                device: Any = None, total_bytes: int | None = None, util: float = DEFAULT_UTIL,
                max_model_len: int | None = None, max_num_seqs: int = DEFAULT_MAX_NUM_SEQS,
                max_num_batched_tokens: int | None = None, kv_cache_dtype: str = "bf16", dcp: int = 1,
                hccl_buffsize_mb: int | None = None, mtp: int = 0, dsa_cp: bool | None = None,
                activation_bytes: float | None = None, non_torch_bytes: float | None = None,
                others_bytes: int | None = None, prefill_mc2: bool = False,
                recipe: str | None = None) -> RuntimeBudget:
    """The KV budget of one DP engine of ``plan``.

    ``weights_bytes``: the worst rank's resident bytes (the memory ledger), one number or one per PP
    stage. ``device`` (a Device or profile name) gives the usable total unless ``total_bytes`` is
    given. ``activation_bytes`` / ``non_torch_bytes`` replace the estimates (e.g. figures measured
    from an engine log); ``max_model_len`` defaults to the model's max_position_embeddings. ``recipe``
    tells the activation peak how the routed experts run (a fused gmm1 holds no gate/up output).
    """
    eng = as_engine(engine)
    if hccl_buffsize_mb is None:
        hccl_buffsize_mb = eng.default_hccl_buffsize_mb
    if others_bytes is None:
        others_bytes = eng.others_at_start_bytes
    if total_bytes is None:
        from ..devices.profiles import load_device
        device = load_device(device)
        total_bytes = usable_total(device)
    soc = eng.soc(device)
    if not 0 < util <= 1:
        raise AuditInputError("--gpu-memory-utilization", f"must be in (0, 1], got {util!r}")
    L = int(max_model_len if max_model_len is not None else spec.max_position)
    if max_model_len is None and L < 1:
        raise AuditInputError("--max-model-len", "config.json has no 'max_position_embeddings' to default to; "
                                                 "give --max-model-len")
    if L < 1:
        raise AuditInputError("--max-model-len", f"must be at least 1, got {L}")
    if max_num_seqs < 1:
        raise AuditInputError("--max-num-seqs", f"must be at least 1, got {max_num_seqs}")
    T = int(max_num_batched_tokens or plan.max_num_batched_tokens)
    if T < 1:
        raise AuditInputError("--max-num-batched-tokens", f"must be at least 1, got {T}")
    if mtp < 0:
        raise AuditInputError("--mtp", f"must not be negative, got {mtp}")
    if hccl_buffsize_mb < 1:
        raise AuditInputError("--hccl-buffsize", f"must be a positive number of MB, got {hccl_buffsize_mb}")
    if dsa_cp is None:                  # the engine's rule over the plan's switches (its placement)
        dsa_cp = eng.placement(spec, plan).dsa_cp
    ws = [float(weights_bytes)] * plan.pp if isinstance(weights_bytes, (int, float)) else [float(w) for w in weights_bytes]
    if len(ws) != plan.pp:
        raise ValueError(f"weights_bytes: one value or one per PP stage ({plan.pp}), got {len(ws)}")
    injected = []
    core = kv_base(eng, spec, plan, total_bytes=total_bytes, util=util, tokens=T, seqs=max_num_seqs, mtp=mtp,
                   dsa_cp=dsa_cp, hccl_buffsize_mb=hccl_buffsize_mb, dcp=dcp, soc=soc, prefill_mc2=prefill_mc2,
                   recipe=recipe, max_model_len=L)
    state = core["state"]
    terms = {k: float(v) for k, v in core["terms"].items()}
    if activation_bytes is None:
        p_act = int(round(float(core["p_act"])))
    else:
        p_act, terms = int(activation_bytes), {"given": float(activation_bytes)}
        injected.append("activation_peak_bytes")
    nt_terms = core["nt_terms"]
    if non_torch_bytes is None:
        n_nt = sum(nt_terms.values())
    else:
        n_nt, nt_terms = int(non_torch_bytes), {"given": int(non_torch_bytes)}
        injected.append("non_torch_bytes")
    requested = core["requested"]
    graph = core["graph"]
    best = None
    stage_blocks = []
    for s in range(plan.pp):
        kv = eng.kv_spec(spec, plan, variant=kv_cache_dtype, dcp=dcp, mtp=mtp > 0, stage=s, arch=soc)
        avail = int(eng.kv_available(requested, ws[s], p_act, n_nt, graph))
        blocks = max(0, avail // kv.page_block_bytes) if avail > 0 else 0
        stage_blocks.append(int(blocks))
        key = (blocks, avail)
        if best is None or key < best[0]:
            best = (key, s, kv, avail)
    _, stage, kv, avail = best
    unb = eng.unbudgeted_items(spec, plan, kv, max_model_len=L, max_num_seqs=max_num_seqs, max_num_batched_tokens=T,
                               mtp=mtp, dsa_cp=dsa_cp, hccl_buffsize_mb=hccl_buffsize_mb, **state)
    ranges = eng.term_ranges(p_act, nt_terms, graph)
    if "activation_peak_bytes" in injected:
        ranges.pop("activation peak", None)
    if "non_torch_bytes" in injected:
        ranges.pop("non-torch runtime (ACL)", None)
    nominal = {"activation peak": float(p_act), "non-torch runtime (ACL)": float(nt_terms.get("ACL runtime", 0)),
               "ACL graph estimate": float(graph)}
    assumptions = list(eng.budget_assumptions(spec, kv))
    return RuntimeBudget(
        total_bytes=int(total_bytes), util=util, requested_bytes=requested, weights_bytes=int(round(ws[stage])),
        activation_terms=terms, activation_peak_bytes=p_act, non_torch_terms=nt_terms, non_torch_bytes=int(n_nt),
        graph_deducted_bytes=graph, kv_available_bytes=avail, kv=kv, num_blocks=min(stage_blocks),
        max_model_len=L, max_num_seqs=max_num_seqs, max_num_batched_tokens=T, mtp=mtp, unbudgeted=unb,
        others_bytes=others_bytes, stage=stage, stage_blocks=stage_blocks, assumptions=assumptions,
        injected=tuple(injected), engine=eng, ranges=ranges, nominal=nominal,
        startup_error=eng.kv_refusal(spec, kv_cache_dtype) or eng.profile_run_error(
            spec, plan, tokens=T, seqs=max_num_seqs, mtp=mtp, hccl_buffsize_mb=hccl_buffsize_mb, dsa_cp=dsa_cp,
            **state),
    )


__all__ = ["RuntimeBudget", "rank_budget", "usable_total"]
