"""``audit bench``: what ``vllm bench serve`` would print for a deployment and a workload.

Parses options (the same plan/runtime options as ``perf``/``memory``; a P/D deployment as two
option strings parsed by the same options), calls ``auditor.serving``, renders. No logic here."""
from __future__ import annotations

import contextlib
import io
import json
import shlex
from contextvars import ContextVar
from typing import Any

import click

from ..devices.profiles import DEFAULT_DEVICE
from ..errors import AuditInputError
from .deployment import DeploymentCommand, launch_option
from .feedback import announce_compiles, stage
from .options import (FiniteFloatRange, acceptance_option, async_option, capped, client_options, draft_eager_option, emit,
                      finegrained_option, formats_options, graph_option, guard_output, plan_options, recipe_option)
from .refusal import refuse_kv, warn_device
from .runtime_options import hf_overrides_option, runtime_options


def _instance(name: str, count: int, plan, runtime: dict, mtp: int, isl: int, osl: int, balance: bool = False,
              graph_tokens: int = -1, async_scheduling: bool = False, draft_eager: bool = False):
    from ..deployment import InstancePlan
    mml = runtime["max_model_len"] or (isl + osl)
    role = {"aggregated": "mixed"}.get(name, name)
    return InstancePlan.from_plan(name, count, plan.with_(role=role, dcp=runtime["dcp"]),
                                  max_num_seqs=runtime["max_num_seqs"], max_model_len=mml,
                                  gpu_memory_utilization=runtime["util"], mtp=mtp,
                                  kv_cache_dtype=runtime["kv_cache_dtype"], hccl_buffsize_mb=runtime["hccl_buffsize_mb"],
                                  balance_scheduling=balance and name == "aggregated", graph_tokens=graph_tokens,
                                  async_scheduling=async_scheduling, draft_eager=draft_eager)


@click.command("_instance", cls=DeploymentCommand, add_help_option=False)
@launch_option
@plan_options
@finegrained_option
@runtime_options(device=False)
@graph_option
@async_option
@draft_eager_option
@click.option("--prefix-caching/--no-prefix-caching", default=None, hidden=True)
def _instance_options(plan, engine, mtp_drafter, runtime, mtp, graph_tokens, async_scheduling, draft_eager,
                      prefix_caching):
    return plan, runtime, mtp, graph_tokens, async_scheduling, draft_eager, prefix_caching


def _parse_instance(text: str, what: str):
    """One instance's options (``--prefill '...'``): audit's or vLLM's flags, or a launch file, parsed by
    the same click options as the command."""
    import os

    from ..limits import MAX_COMMAND_WORDS
    try:
        args = ["--launch", text] if os.path.isfile(text) else shlex.split(text)
        if len(args) > MAX_COMMAND_WORDS:
            raise AuditInputError(what, f"{len(args):,} words, over audit's cap of {MAX_COMMAND_WORDS:,} for one "
                                        "instance's options")
        return _instance_options.main(args=args, standalone_mode=False)
    except click.ClickException as exc:
        raise AuditInputError(what, exc.format_message()) from None
    except ValueError as exc:
        raise AuditInputError(what, str(exc)) from None


@click.command("bench", cls=DeploymentCommand, short_help="What vllm bench serve would report, from a scheduler simulation.")
@launch_option
@click.argument("model", required=False)
@plan_options
@finegrained_option
@runtime_options(device=False)
@recipe_option("quantization recipe (default: the checkpoint's / preset's own)")
@click.option("--device", "device_name", default=DEFAULT_DEVICE, show_default=True, help="device profile")
@click.option("--prefill", "prefill_opts", default=None,
              help="P/D: the prefill instance as one string of options (audit's or vLLM's) or a launch file")
@click.option("--decode", "decode_opts", default=None,
              help="P/D: the decode instance as one string of options (audit's or vLLM's) or a launch file")
@click.option("--prefill-count", type=click.IntRange(1, 4096), default=1, show_default=True,
              help="P/D: how many prefill instances")
@click.option("--decode-count", type=click.IntRange(1, 4096), default=1, show_default=True,
              help="P/D: how many decode instances")
@client_options
@click.option("--prefix-ratio", type=FiniteFloatRange(0.0, 1.0), default=0.0, show_default=True,
              help="share of every prompt that is one shared prefix (prefix-cache hits)")
@click.option("--prefix-caching/--no-prefix-caching", default=True, show_default=True,
              help="vLLM's --enable-prefix-caching (hits in whole 128-token blocks; on a pool of cache groups "
                   "sharing block ids, DeepSeek-V4's, whole multiples of the lcm of their block sizes)")
@click.option("--decode-prefix-caching/--no-decode-prefix-caching", default=True, show_default=True,
              help="P/D: the decode instance's own --enable-prefix-caching (off: it holds no prefix, so every "
                   "prompt's whole KV is pulled from the prefill instance; read from a --launch config's decode node)")
@click.option("--prefix-warm-ranks", type=click.IntRange(0, 1_000_000), default=None,
              help="DP ranks whose prefix cache holds the shared prefix before the run (a warm-up prompt primes "
                   "one; default: every rank); the others compute it with their first request")
@click.option("--balance-scheduling/--no-balance-scheduling", default=False,
              help="vLLM-Ascend additional_config enable_balance_scheduling: no rank admits while any DP rank "
                   "is at max_num_seqs (PD-mixed only)")
@graph_option
@async_option
@draft_eager_option
@acceptance_option
@hf_overrides_option
@formats_options(("table", "json"))
def bench_command(model, plan, engine, mtp_drafter, runtime, mtp, recipe, device_name, prefill_opts,
                  decode_opts, prefill_count, decode_count, concurrency, isl, osl, num_prompts, request_rate,
                  prefix_ratio, prefix_caching, decode_prefix_caching, prefix_warm_ranks, balance_scheduling, graph_tokens, async_scheduling,
                  draft_eager, acceptance, fmt,
                  output) -> None:
    """Simulate vLLM's scheduler (token budget, max_num_seqs, KV admission and preemption, DP
    lockstep, MTP, prefix cache, P/D with KV transfer) over the perf model's step costs and print the
    "Serving Benchmark Result" block of vllm bench serve (--format json: its --save-result keys)."""
    from ..devices.profiles import load_device
    from ..serving.bench import metrics, render_block
    from ..context import DeploymentContext
    from ..serving.sim import BenchWorkload, Deployment, at_kv_edge, kv_edge_text, prefix_hits, run_with_sensitivity
    from ..source import open_model

    guard_output(output, model, "--output")
    if (prefill_opts is None) != (decode_opts is None):
        raise AuditInputError("--prefill/--decode", "a P/D deployment needs both --prefill and --decode")
    src = open_model(model, recipe, tables=False)
    from ..perf.program import check_timeable
    from ..parallel import check_drafter
    check_drafter(src.spec, plan)
    check_timeable(src.spec, engine)
    dev = load_device(device_name)
    warn_device(engine, dev)
    if prefill_opts is not None:
        pp, prt, pm, pg, pa, pe, pc = _parse_instance(prefill_opts, "--prefill")
        dp_, drt, dm, dg, da, de, dc = _parse_instance(decode_opts, "--decode")
        # an instance's own --no-enable-prefix-caching: the prefill's turns the hits off, the decode's
        # makes it hold no prefix (as a --launch config's decode node, _case_options)
        prefix_caching = prefix_caching and pc is not False
        decode_prefix_caching = decode_prefix_caching and dc is not False
        insts = [_instance("prefill", prefill_count, pp, prt, pm, isl, osl, graph_tokens=pg, async_scheduling=pa,
                           draft_eager=pe),
                 _instance("decode", decode_count, dp_, drt, dm, isl, osl, graph_tokens=dg, async_scheduling=da,
                           draft_eager=de)]
    else:
        insts = [_instance("aggregated", 1, plan, runtime, mtp, isl, osl, balance_scheduling, graph_tokens,
                           async_scheduling, draft_eager)]
    for i in insts:
        refuse_kv(src.spec, engine, i.kv_cache_dtype)
        if i.mtp and not src.spec.mtp_layers:
            raise AuditInputError("--mtp", f"{src.spec.name} has no MTP layer")
        if i.max_model_len < isl + (osl if i.name != "prefill" else 1):
            raise AuditInputError("--max-model-len", f"{i.max_model_len} is shorter than isl + osl = {isl + osl}")
    dep = Deployment(DeploymentContext(src.spec, None, engine, src.scheme_recipe, dev), insts)
    from ..perf.acceptance import resolve
    acc = resolve(src.spec, acceptance, engine=engine)
    wl = BenchWorkload(concurrency, isl, osl, num_prompts or 4 * concurrency,
                       float("inf") if request_rate is None else request_rate, prefix_ratio, acc,
                       prefix_caching, decode_prefix_caching=decode_prefix_caching, warm_ranks=prefix_warm_ranks)
    box = _INPUTS.get()
    if box is not None:             # bench_inputs: the deployment and client this run would simulate
        box.append((dep, wl))
        return
    announce_compiles()
    with stage(f"bench: simulating {wl.num_prompts} requests through the scheduler"):
        run, lo, hi = run_with_sensitivity(dep, wl)
    if at_kv_edge(lo, hi):
        run.notes.append(kv_edge_text(lo, hi) + "; the memory model's uncertainty decides this answer "
                         "(check the KV line of `audit memory` against the engine's log)")
    m = metrics(run)
    if fmt == "json":
        k = max(i.mtp for i in insts)
        # each instance's memory as `audit memory` gives it for the same flags (its budget's own figures)
        pools = [{"name": c.inst.name, "count": c.inst.count, "weights_bytes": c.weights_bytes,
                  "kv_blocks_per_rank": int(c.num_blocks), "kv_tokens": c.kv_tokens}
                 for c in dep.costs()]
        text = json.dumps({"model_id": model or src.spec.name, "backend": "vllm", "endpoint_type": "vllm",
                           "label": "audit bench", **m,
                           "mtp_acceptance": {"per_position": [acc.rate(i) for i in range(1, k + 1)],
                                              "tokens_per_step": acc.tokens_per_step(k), "source": acc.source},
                           "notes": run.notes, "instances": pools}, indent=2) + "\n"
    else:
        shape = " + ".join(f"{i.count} x {i.name} TP{i.tp} DP{i.dp}" + (f" EP{i.ep}" if i.ep > 1 else "")
                           + (" PP%d" % i.pp if i.pp > 1 else "") + (" SP" if i.sp else "")
                           + (" DSA-CP" if engine.placement(src.spec, i.parallel_plan()).dsa_cp else "")
                           + (" async" if i.async_scheduling else "")
                           + f" MTP{i.mtp} seqs {i.max_num_seqs} "
                           f"batched {i.max_num_batched_tokens}" for i in insts)
        costs = dep.costs()
        kv = ", ".join(f"{c.inst.name} {c.num_blocks:,} blocks/rank" for c in costs)
        text = (f"audit bench: {src.spec.name} ({src.scheme_recipe}) on {dev.name}, {engine}: {shape}\n"
                f"workload: concurrency {concurrency}, {wl.num_prompts} prompts, isl {isl}, osl {osl}, "
                f"prefix {prefix_ratio:g} (hit {int(prefix_hits(dep, wl)[0])} tokens), MTP acceptance "
                f"{acc.text(max(i.mtp for i in insts))}; "
                f"KV {kv}; {engine.devices(run.dies)}\n\n" + render_block(m)
                + f"output tokens/s per {engine.device_noun}: {m['output_throughput_per_die']:.2f}\n"
                + "".join(f"note: {n}\n" for n in run.notes))
    emit(text, output)


#: set by ``bench_inputs``: the command hands its deployment and client here instead of simulating
_INPUTS: ContextVar[list | None] = ContextVar("audit_bench_inputs", default=None)


def bench_inputs(argv: list[str]) -> tuple[Any, Any]:
    """(``serving.sim.Deployment``, ``BenchWorkload``) that ``audit bench ARGV`` would simulate: a CI config
    read through ``--launch`` exactly as the command reads it (the serving calibration's CI rows). Its notes
    are dropped; bad input raises ``AuditInputError`` as the command would."""
    box: list = []
    token = _INPUTS.set(box)
    try:
        with contextlib.redirect_stderr(io.StringIO()):
            bench_command.main(args=list(argv), prog_name="audit bench", standalone_mode=False)
    except click.ClickException as exc:
        raise AuditInputError(" ".join(argv[:2]), exc.format_message()) from None
    finally:
        _INPUTS.reset(token)
    if not box:
        raise AuditInputError(" ".join(argv[:2]), "audit bench did not reach its simulation")
    return box[0]


#: a P/D launch (a nightly config) renders each instance for these options (``cli.deployment``)
bench_command.instance_command = _instance_options
