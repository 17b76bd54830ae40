"""A deployment and a benchmark workload -> the simulated run (``kernels/serving_core.simulate``)."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import threading

import numpy as np

from ..context import DeploymentContext
from ..deployment import InstancePlan
from ..errors import AuditInputError
from .costs import DEFAULT_KV_LINK_BYTES_PER_S, ROLE, StepCosts, host_params, step_costs

#: prefix-cache hits are whole KV blocks of the engine's block size (``Engine.prefix_block_tokens``; a pool of
#: groups sharing block ids: the lcm of their block sizes, ``hit_alignment``), and the last prompt token is
#: recomputed; this default is vLLM-Ascend's forced 128
PREFIX_BLOCK = 128


@dataclass(frozen=True)
class BenchWorkload:
    """What the client sends (``vllm bench serve`` / aisbench flags)."""

    concurrency: int
    isl: int
    osl: int
    num_prompts: int
    request_rate: float = float("inf")     # inf: all requests at time 0 (bounded by concurrency)
    prefix_ratio: float = 0.0              # share of every prompt that is one shared prefix
    acceptance: Any = 0.7                  # per-draft MTP acceptance, or an ``perf.acceptance.Acceptance``
    prefix_caching: bool = True
    #: P/D: the decode instance's own prefix cache (vLLM --no-enable-prefix-caching on the D node turns it
    #: off: its KV cache manager finds no local hit, so the connector pulls the whole prompt every time,
    #: ``mooncake_hybrid_connector.py:1350-1356``@182b75ea count = prompt - locally computed tokens)
    decode_prefix_caching: bool = True
    seed: int = 0
    #: DP ranks (of the first instance) whose cache holds the shared prefix before the timed run:
    #: None = every rank (a warm-up per rank), 0 = none (the run computes it: N7's yaml has no
    #: warm-up case), 1 = the rank a one-prompt warm-up case was routed to (N9's ``perf_128k_warmup``,
    #: num_prompts 1). Each DP rank has its own prefix cache (serving-facts §1.5)
    warm_ranks: int | None = None

    @property
    def hit_tokens(self) -> int:
        return self.hit_tokens_at(PREFIX_BLOCK)

    def hit_tokens_at(self, block: int) -> int:
        """Prefix-cache hit per prompt once the prefix is cached: whole ``block``-token blocks of the
        shared prefix, never the last prompt token (``kv_cache_manager.py:212-222``). Which ranks hold
        it before the run is ``warm_ranks``; the others compute it with their first request."""
        if not self.prefix_caching or self.prefix_ratio <= 0:
            return 0
        shared = min(int(self.isl * self.prefix_ratio), self.isl - 1)
        return shared // block * block


@dataclass
class Deployment:
    """Instances of one deployment: one aggregated instance, or a prefill and a decode instance
    (``count`` of each); a P/D deployment's counts multiply its DP ranks (external DP)."""

    base: DeploymentContext            # model, engine, recipe, device; each instance has its own plan
    instances: list[InstancePlan]
    kv_link_bytes_per_s: float = DEFAULT_KV_LINK_BYTES_PER_S
    _costs: list[StepCosts] = field(default_factory=list, repr=False)

    @property
    def spec(self) -> Any:
        return self.base.spec

    @property
    def engine(self) -> Any:
        return self.base.engine

    @property
    def recipe(self) -> str:
        return self.base.recipe

    @property
    def device(self) -> Any:
        return self.base.device

    def costs(self) -> list[StepCosts]:
        if not self._costs:
            self._costs = [step_costs(self.base, _merged(i)) for i in self.instances]
        return self._costs

    @property
    def dies(self) -> int:
        return sum(i.count * i.tp * i.dp for i in self.instances)


def _merged(inst: InstancePlan) -> InstancePlan:
    """``count`` instances of DP d behave as one of DP count x d for the scheduler (least-loaded
    routing over all ranks; proxy balancing for external DP), with per-instance tables."""
    return inst


@dataclass
class BenchRun:
    workload: BenchWorkload
    send: np.ndarray
    first: np.ndarray
    done: np.ndarray
    steps: np.ndarray          # [n, 5]: start, dt, decoding requests, instance, eager
    dies: int
    notes: list[str]
    preemptions: np.ndarray | None = None      # per instance: requests preempted for KV blocks (recomputed)
    gave_up: bool = False                      # stopped once sure to miss ``simulate``'s ``give_up_sla``


def _chain(acceptance: Any, k: int) -> np.ndarray:
    """The conditional acceptance of draft 1..K the kernel samples (``perf.acceptance``)."""
    from ..perf.acceptance import given
    acc = acceptance if hasattr(acceptance, "conditional") else given(acceptance)
    return acc.conditional(k)


def graph_tokens(engine: Any, inst: Any) -> int:
    """The largest decode step an instance replays from a graph: the launch's own (its capture sizes,
    0 when eager) or, when it names none (-1), the engine's default for its max_num_seqs and K."""
    from ..engines.registry import as_engine
    return as_engine(engine).graph_tokens(int(getattr(inst, "graph_tokens", -1)), inst.max_num_seqs, inst.mtp,
                                          inst.max_num_batched_tokens)


def hit_alignment(engine: Any, cost: StepCosts) -> int:
    """Tokens a prefix hit on this instance is a multiple of: its pool's (``StepCosts.hit_alignment``, the
    lcm of the groups' block sizes of a pool sharing block ids) or, for one block table, the engine's
    ``prefix_block_tokens`` times DCP: under decode context parallel the scheduler's (hashed) block is
    ``bs x DCP`` tokens, its hash block too (``patch/platform/patch_kv_cache_utils.py:41-43``@182b75ea, one
    group: ``bs = cache_config.block_size * dcp``; engine-vllm-ascend-runtime.md §1.3), each rank storing ``bs``
    of them."""
    from ..engines.registry import as_engine
    return int(cost.hit_alignment) or int(as_engine(engine).prefix_block_tokens) * max(int(cost.inst.dcp), 1)


def prefix_hits(dep: Deployment, wl: BenchWorkload) -> np.ndarray:
    """Prefix-cache hit tokens per prompt on each instance once it holds the prefix: the shared prefix in
    whole blocks of that instance's hit alignment (each instance's KV cache coordinator finds its own hits);
    none on a decode instance without prefix caching (``BenchWorkload.decode_prefix_caching``)."""
    return np.array([0 if c.inst.name == "decode" and not wl.decode_prefix_caching
                     else wl.hit_tokens_at(hit_alignment(dep.engine, c)) for c in dep.costs()], np.int64)


#: the resampled tables of the last few cost-table sets (``_resampled``): (the arrays they were read from, tables)
_RESAMPLED: dict[tuple, tuple] = {}
_RESAMPLED_MAX = 64
_RESAMPLED_LOCK = threading.Lock()


def _resampled(costs: list[StepCosts], smax: int) -> tuple[np.ndarray, ...]:
    """(ctx, tok, dec, pre_rest, pre_ctx, dec_ctx): the instances' step-cost tables resampled onto one
    context grid and one token grid (their unions); shared, so callers must not modify them (the scheduler
    kernel only reads them; they stay writeable so the kernel's cached signature is the one it has).

    Kept for the tables' array objects (held by the entry, so their ids stay theirs): every run of one
    deployment (plan's operating-point bisection, the KV-edge run on a scaled pool, bench's ladder) reads
    the same tables, and resampling them each time was a quarter of a run (~250 np.interp calls, all
    holding the GIL). The tables are never modified in place once built (``step_costs``)."""
    src = tuple((c.ctx, c.tok, c.dec, c.pre_rest, c.pre_ctx, c.dec_ctx) for c in costs)
    key = (smax,) + tuple(id(a) for arrays in src for a in arrays)
    hit = _RESAMPLED.get(key)
    if hit is not None and all(a is b for x, y in zip(hit[0], src) for a, b in zip(x, y)):
        return hit[1]
    n = len(costs)
    # the tables share one context grid and one token grid: resample onto the union
    ctx = np.unique(np.concatenate([c.ctx for c in costs]))
    tok = np.unique(np.concatenate([c.tok for c in costs]))
    dec = np.zeros((n, smax + 1, len(ctx)))
    pre_rest = np.zeros((n, len(tok)))
    pre_ctx = np.zeros((n, len(tok), len(ctx)))
    dec_ctx = np.zeros((n, len(ctx)))
    for i, c in enumerate(costs):
        for b in range(smax + 1):
            row = c.dec[min(b, c.dec.shape[0] - 1)]
            dec[i, b] = np.interp(ctx, c.ctx, row)
        pre_rest[i] = np.interp(tok, c.tok, c.pre_rest)
        tmp = np.array([np.interp(ctx, c.ctx, r) for r in c.pre_ctx])
        pre_ctx[i] = np.array([np.interp(tok, c.tok, tmp[:, q]) for q in range(len(ctx))]).T
        dec_ctx[i] = np.interp(ctx, c.ctx, c.dec_ctx)
    out = (ctx, tok, dec, pre_rest, pre_ctx, dec_ctx)
    with _RESAMPLED_LOCK:           # plan and bench simulate on threads: two evictions must not pop one key
        if len(_RESAMPLED) >= _RESAMPLED_MAX:
            _RESAMPLED.pop(next(iter(_RESAMPLED)), None)
        _RESAMPLED[key] = (src, out)
    return out


def simulate(dep: Deployment, wl: BenchWorkload, host: np.ndarray | None = None,
             give_up_sla: tuple[float, float] | None = None) -> BenchRun:
    """The benchmark run of ``wl`` on ``dep``. ``give_up_sla`` = (mean TTFT ms, mean TPOT ms): stop as
    soon as the run is sure to miss either (``BenchRun.gave_up``; its figures are then partial), for a
    caller that only needs to know it misses (``audit plan``'s concurrency search)."""
    from auditor_kernels.serving_core import simulate as core

    costs = dep.costs()
    if len(costs) not in (1, 2):
        raise AuditInputError("--prefill/--decode", "a deployment is one aggregated instance or one P + one D")
    n = len(costs)
    ranks = np.array([c.inst.dp * c.inst.count for c in costs], np.int64)
    seqs = np.array([c.inst.max_num_seqs for c in costs], np.int64)
    budget = np.array([c.inst.max_num_batched_tokens for c in costs], np.int64)
    blocks = np.array([c.num_blocks for c in costs], np.int64)
    btok = np.array([int(c.block_tokens) for c in costs], np.int64)     # per instance: DCP x block_size
    bfix = np.array([int(c.fixed_blocks) for c in costs], np.int64)     # per request, whatever its length
    kk = np.array([c.inst.mtp for c in costs], np.int64)
    role = np.array([ROLE[c.inst.name] for c in costs], np.int64)
    le = np.array([c.launches_eager for c in costs])
    ld = np.array([c.launches_draft for c in costs])
    split = np.array([c.token_split for c in costs])
    ctx, tok, dec, pre_rest, pre_ctx, dec_ctx = _resampled(costs, int(seqs.max()))
    from ..perf.host import full_host
    hp = host_params(dep.device) if host is None else full_host(host)
    N = wl.num_prompts
    if wl.request_rate == float("inf"):
        arrival = np.zeros(N)
    else:
        rng = np.random.default_rng(wl.seed)
        arrival = np.cumsum(rng.exponential(1.0 / wl.request_rate, N))
    # P/D: the decode instance pulls the prompt's KV from P after the prefill (not layerwise)
    xfer = 0.0
    if n == 2:
        xfer = wl.isl * costs[1].kv_bytes_per_token / dep.kv_link_bytes_per_s
    send, first, done = np.full(N, -1.0), np.full(N, -1.0), np.full(N, -1.0)
    log = np.zeros((400_000, 5))
    hits = prefix_hits(dep, wl)
    # where a rank's cache holds a prefix the first request is still computing: whole hit alignments
    align = np.array([c.hit_alignment or int(c.block_tokens) for c in costs], np.int64)
    preempts = np.zeros(n, np.int64)
    sla = np.zeros(2) if give_up_sla is None else np.array(give_up_sla, dtype=np.float64) * 1e-3
    gave_up = np.zeros(1, np.int64)
    nlog = core(n, ranks, seqs, budget, blocks, btok, bfix, kk, role, le, ld, split, ctx, tok, dec, pre_rest, pre_ctx,
                dec_ctx, hp,
                N, wl.concurrency, wl.isl, wl.osl, hits, arrival, _chain(wl.acceptance, int(kk.max())), xfer, send,
                first, done, log,
                -1 if wl.warm_ranks is None else int(wl.warm_ranks),
                np.array([1 if getattr(c.inst, "balance_scheduling", False) else 0 for c in costs], np.int64),
                int(wl.seed), np.array([graph_tokens(dep.engine, c.inst) for c in costs], np.int64), preempts,
                np.array([1 if getattr(c.inst, "async_scheduling", False) else 0 for c in costs], np.int64), align,
                sla, gave_up)
    notes = []
    if gave_up[0]:
        notes.append("stopped early: the run could no longer meet the mean TTFT / TPOT asked for")
    elif (done < 0).any():
        notes.append(f"{int((done < 0).sum())} requests never finished: a prompt larger than the KV pool")
    for c, k in zip(costs, preempts):
        if k:
            notes.append(f"{int(k)} preemptions on the {c.inst.name} instance (each request recomputed): its KV pool "
                         f"({c.num_blocks:,} blocks of {c.block_tokens} tokens per rank) is smaller than its running "
                         "requests grow to, so throughput follows the pool (vLLM logs each preemption)")
    return BenchRun(wl, send, first, done, log[:nlog], dep.dies, notes, preempts, bool(gave_up[0]))


#: a run is "at the KV edge" when +-EDGE_STEP of the KV blocks moves its output throughput by more than
#: EDGE_SPREAD (max / min): the memory model's own uncertainty (a few %) then decides the answer
EDGE_STEP = 0.05
EDGE_SPREAD = 1.25


def kv_sensitivity(dep: Deployment, wl: BenchWorkload, host: np.ndarray | None = None,
                   step: float = EDGE_STEP) -> tuple[float, float]:
    """Output throughput with every instance's KV pool at (1 - step) and (1 + step) of its blocks.

    Why: admission needs the whole prompt in KV and each DP rank holds its own prefix cache, so near
    the point where one more request fits the simulated throughput jumps; a few % of memory error
    (the budget's UNCONFIRMED terms) then swings the answer, and the user should see that."""
    _, low, high = run_with_sensitivity(dep, wl, host, step, main=False)
    return low, high


def run_with_sensitivity(dep: Deployment, wl: BenchWorkload, host: np.ndarray | None = None,
                         step: float = EDGE_STEP, main: bool = True) -> tuple["BenchRun | None", float, float]:
    """(the run of ``wl`` on ``dep`` (``main``), its output throughput at (1 - step) and (1 + step) of every
    pool): the runs are independent, and the kernel releases the GIL (``serving_core.simulate``, nogil), so
    they run on threads side by side (``audit bench``: 0.35 s -> ~0.2 s at concurrency 1024). The cost
    tables are built first, once, on this thread."""
    from concurrent.futures import ThreadPoolExecutor

    from .bench import metrics
    dep.costs()
    pools = [scaled_pool(dep, f) for f in (1.0 - step, 1.0 + step)]
    with ThreadPoolExecutor(max_workers=3 if main else 2) as ex:
        edge = [ex.submit(simulate, d, wl, host) for d in pools]
        run = ex.submit(simulate, dep, wl, host) if main else None
        low, high = (metrics(f.result())["output_throughput"] for f in edge)
        return (run.result() if run is not None else None), low, high


def scaled_pool(dep: Deployment, factor: float) -> Deployment:
    """The same deployment with every instance's KV pool at ``factor`` x its blocks (at least one)."""
    from dataclasses import replace
    return replace(dep, _costs=[replace(c, num_blocks=max(1, int(c.num_blocks * factor))) for c in dep.costs()])


def at_kv_edge(low: float, high: float) -> bool:
    return high > 0 and (low <= 0 or high / low > EDGE_SPREAD)


def kv_edge_text(low: float, high: float) -> str:
    """The KV-edge figures as bench, calibrate and the tests name them."""
    return (f"KV edge: with {100 * EDGE_STEP:.0f}% fewer / more KV blocks per rank the output throughput "
            f"is {low:.1f} / {high:.1f} tok/s")
