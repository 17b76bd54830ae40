"""``audit perf`` and ``audit sweep``: parse options, call the perf library, render.

numba is imported only when a perf command actually runs, so ``audit memory`` never pays for it.
"""
from __future__ import annotations

import sys
from pathlib import Path

import click

from ..errors import AuditInputError
from ..limits import MAX_SWEEP_CONFIGS, MAX_SWEEP_PLANS
from ..parallel import ParallelPlan
from .deployment import DeploymentCommand, launch_option
from .feedback import announce_compiles, on_terminal, stage
from .refusal import refuse_kv, warn_device, warn_refusal
from ..switches import BY_FIELD
from .options import (acceptance_option, async_option, batched_tokens_option, capped, draft_eager_option, emit,
                      engine_option, finegrained_option, graph_option, guard_output, output_options, plan_options,
                      recipe_option, switch_option)
from .runtime_options import hf_overrides_option, runtime_options
from .vocabulary import ExpertParallel, Length, parse_length_list

DEVICE_HELP = "device profile: a name in auditor/devices (a3-752t, a2-376t, ...) or a JSON file"


def _phases(phase: str) -> list[str]:
    return ["prefill", "decode"] if phase == "both" else [phase]


@click.command("perf", cls=DeploymentCommand, short_help="Layer program, collectives and op times for prefill and decode.")
@launch_option
@click.argument("model", required=False)
@plan_options
@finegrained_option
@click.option("--phase", type=click.Choice(["prefill", "decode", "both"]), default="both", show_default=True,
              help="which phase to model: prefill (TTFT), decode (one step), or both")
@click.option("--tokens", type=Length("--tokens"), default=4096, show_default=True,
              help="prefill query length per request")
@click.option("--context", type=Length("--context"), default=None,
              help="tokens already in the cache (default: prefill 0; decode the prefill length --tokens)")
@click.option("--batch", type=capped("--batch"), default=1, show_default=True,
              help="requests per DP rank (decode: each brings 1 + MTP tokens)")
@click.option("--mtp", type=capped("--mtp"), default=0, show_default=True,
              help="speculative tokens K: decode verifies K+1 per request; the MTP layer runs K times")
@acceptance_option
@click.option("--contexts", default=None,
              help="comma list of context lengths (4096 or 4K = 4,096; e.g. 4K,32K,64K,128K): adds a table of ms per op "
                   "class at each, a --tokens chunk for prefill and one step for decode")
@recipe_option("quantization recipe (default: the checkpoint's / preset's own); --quant is an alias")
@runtime_options(mtp=False, seqs=False)
@click.option("--graph", type=click.Choice(["expanded", "repetition"]), default="expanded", show_default=True,
              help="expanded: every layer built; repetition: one representative per layer kind x its count")
@click.option("--trace", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="write a Chrome trace JSON (open in Perfetto)")
@click.option("--png", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="write a PNG of time per op class per layer")
@click.option("--measured", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="measured kernel table CSV (ops it covers are tagged measured/interpolated)")
@graph_option
@async_option
@draft_eager_option
@hf_overrides_option
@output_options
def perf_command(model, plan: ParallelPlan, engine: str, mtp_drafter, phase, tokens, context, batch, mtp, acceptance,
                 contexts, device_name, runtime, recipe, graph, trace, png, measured, graph_tokens, async_scheduling,
                 draft_eager, fmt, output) -> None:
    """Per-op time model: token layout, FLOPs, bytes, collectives and time of every op of every layer."""
    from ..context import DeploymentContext
    from ..devices.profiles import load_device
    from ..perf.api import PerfResult, Workload, evaluate_phase, result_notes
    from ..report.perf_text import render
    from ..source import open_model

    for path, what in ((output, "--output"), (trace, "--trace"), (png, "--png")):
        guard_output(path, model, what)
    src = open_model(model, recipe, tables=False)
    refused = warn_refusal(src, engine)
    spec = src.spec
    if mtp_drafter is False and mtp > 0:
        raise AuditInputError("--mtp", "speculative tokens need the MTP drafter (drop --no-mtp-drafter)")
    dev = load_device(device_name)
    warn_device(engine, dev)
    kv_cache_dtype = runtime["kv_cache_dtype"]
    refuse_kv(spec, engine, kv_cache_dtype)
    plan = plan.with_(dcp=runtime["dcp"]).validate()
    dep = DeploymentContext(spec, plan, engine, src.scheme_recipe, dev)          # resolved once
    lengths = _context_list(contexts) if contexts is not None else None     # '' is refused, not the default
    table = None
    if measured is not None:
        from ..perf.measured import load_kernel_table
        table = load_kernel_table(measured)
    # no capture sizes named: the engine's default for the max_num_seqs this workload implies (its batch)
    graph_tokens = dep.engine.graph_tokens(graph_tokens, batch, mtp, plan.max_num_batched_tokens)
    from ..perf.acceptance import resolve
    acc = resolve(spec, acceptance, engine=engine)
    phases = {}
    announce_compiles()
    with stage(f"perf: modelling {' and '.join(_phases(phase))}"):
        for ph in _phases(phase):
            # decode continues the prefill it follows: its context defaults to the prefill length
            ctx = context if context is not None else (tokens if ph == "decode" else 0)
            wl = Workload(ph, tokens, ctx, batch, mtp, acc.equivalent(mtp))
            phases[ph] = evaluate_phase(dep, wl, graph=graph, table=table, cache=kv_cache_dtype,
                                        graph_tokens=graph_tokens, draft_eager=draft_eager,
                                        async_scheduling=async_scheduling)
    first = next(iter(phases.values()))
    res = PerfResult(spec.name, plan, dep.engine.key, dep.recipe, dep.device_name, graph, phases,
                     result_notes(first.program, plan, mtp, dep.engine))
    if mtp > 0:
        res.notes.append(f"MTP acceptance {acc.text(mtp)}")
    fit = _workload_fit(dep, phases, mtp, runtime)
    res.hbm = fit.to_json()
    if trace:
        from ..report.trace import write_trace
        write_trace(res, trace)
        click.echo(f"wrote {trace}", err=True)
    if png:
        from ..report.perf_png import write_png
        write_png(res, png)
        click.echo(f"wrote {png}", err=True)
    growth = None
    if lengths:
        from ..perf.growth import context_growth
        growth = context_growth(dep, lengths, tokens, batch, mtp, cache=kv_cache_dtype, phases=tuple(phases))
        res.growth = growth.to_json()
    text = render(res, fmt)
    if fmt in ("table", "markdown"):
        if growth is not None:
            from ..report.perf_text import growth_tables
            text = text.rstrip("\n") + "\n\n" + growth_tables(growth, "github" if fmt == "markdown" else "simple")
        warn = "" if fit.fits else "WARNING: this configuration does not fit the device: "
        text = text.rstrip("\n") + f"\n\n{warn}{fit.summary()}\n"
        if refused:
            text = f"WARNING: the engine cannot start this: {refused}\n\n" + text
    emit(text, output)
    if not fit.fits:
        click.echo(f"audit: warning: does not fit: {fit.verdict()}", err=True)


def _context_list(text: str) -> list[int]:
    """'4K,32K,65536' -> [4096, 32768, 65536] (vLLM's lengths: K = 1,024, k = 1,000), increasing."""
    out = parse_length_list(text, "--contexts", increasing=True)
    if len(out) > 16:
        raise AuditInputError("--contexts", "at most 16 context lengths")
    return out


def _workload_fit(dep, phases, mtp, runtime):
    """HBM budget of the longest request and the batch the modelled phases imply."""
    longest = max(ph.workload.context + (ph.workload.tokens if ph.phase == "prefill" else 1 + mtp)
                  for ph in phases.values())
    # the engine's batched tokens: its configured chunk (longer prefills are chunked) or the decode step
    step = max(ph.workload.batch * (1 + mtp) for ph in phases.values())
    batch = max(ph.workload.batch for ph in phases.values())
    from ..runtime.feasibility import workload_fit
    return workload_fit(dep, batch=batch, request_tokens=longest, step_tokens=step, mtp=mtp, util=runtime["util"],
                        kv_cache_dtype=runtime["kv_cache_dtype"], dcp=runtime["dcp"],
                        hccl_buffsize_mb=runtime["hccl_buffsize_mb"])


@click.command("sweep", cls=DeploymentCommand, short_help="Grid of TP x DP x workloads: CSV and the best configurations.")
@launch_option
@click.argument("model", required=False)
@click.option("--tp", "tps", default="4,8,16", show_default=True, help="comma list of TP sizes")
@click.option("--dp", "dps", default="1,2", show_default=True, help="comma list of DP sizes")
@click.option("--ep", "ep_mode", type=ExpertParallel(), default="on", show_default=True,
              help="expert parallel: on = DP x TP in every row, off (or 1) = experts TP-sharded")
@switch_option(BY_FIELD["sp"])
@switch_option(BY_FIELD["dsa_cp"], help="additional_config.enable_dsa_cp for the rows with TP > 1 (the same "
                                        "option as memory's)")
@engine_option()
@click.option("--role", type=click.Choice(["mixed", "prefill", "decode"]), default="mixed", show_default=True,
              help="prefill = kv_producer, decode = kv_consumer, mixed = no kv transfer")
@click.option("--tokens", default="4096", show_default=True, help="comma list of prefill lengths (4096, 8K, ...)")
@click.option("--context", default=None,
              help="comma list of cached tokens (default: prefill 0, decode continues at the prefill length)")
@click.option("--batch", default="1", show_default=True, help="comma list of requests per DP rank")
@click.option("--mtp", default="0", show_default=True, help="comma list of speculative tokens")
@acceptance_option
@recipe_option("quantization recipe (default: the checkpoint's / preset's own); --quant is an alias")
@runtime_options(mtp=False, seqs=False)
@batched_tokens_option()
@click.option("--csv", "csv_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="write every configuration to this CSV")
@click.option("--top", type=capped("--top"), default=5, show_default=True, help="best configurations to print")
@hf_overrides_option
@click.option("--png", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="also write TTFT against decode tokens/s per die of every configuration (PNG, Pareto front)")
@output_options
def sweep_command(model, tps, dps, ep_mode, sp, dsa_cp, engine, role, tokens, context, batch, mtp, acceptance, recipe,
                  device_name, runtime, max_num_batched_tokens, csv_path, top, png, fmt, output) -> None:
    """Grid of TP x DP x workloads (batched kernel): the best configurations by TTFT and decode tok/s."""
    from ..devices.profiles import load_device
    from ..perf.sweep import parse_grid, run_sweep
    from ..engines.registry import as_engine
    from ..report.sweep import render_sweep, write_sweep_csv
    from ..source import open_model

    for path, what in ((output, "--output"), (csv_path, "--csv"), (png, "--png")):
        guard_output(path, model, what)
    src = open_model(model, recipe, tables=False)
    from ..perf.program import check_timeable
    check_timeable(src.spec, engine)     # grids price KV through the engine's KV spec, pools too
    refuse_kv(src.spec, engine, runtime["kv_cache_dtype"])
    from ..perf.acceptance import plan_value, resolve, value_json
    if isinstance(acceptance, tuple):
        raise AuditInputError("--mtp-acceptance", "sweep takes one per-draft value (per-position rates: bench, perf)")
    acceptance = plan_value(resolve(src.spec, acceptance, engine=engine))
    follow = context is None
    if ep_mode not in ("on", 1):
        raise AuditInputError("--ep", f"sweep takes --ep on or off (EP = DP x TP in every row), got {ep_mode}")
    grids = {k: parse_grid(v, k) for k, v in (("tp", tps), ("dp", dps), ("batch", batch), ("mtp", mtp))}
    grids["tokens"] = parse_length_list(tokens, "--tokens")
    grids["context"] = parse_length_list("0" if context is None else context, "--context")
    n_configs = 1
    for values in grids.values():
        n_configs *= len(values)
    if n_configs > MAX_SWEEP_CONFIGS:
        raise AuditInputError("--tp", f"the grid has {n_configs:,} configurations, more than the "
                                      f"{MAX_SWEEP_CONFIGS:,} one sweep evaluates")
    n_plans = len(grids["tp"]) * len(grids["dp"])
    if n_plans > MAX_SWEEP_PLANS:           # a plan costs a program build, a grid point a kernel row
        raise AuditInputError("--tp/--dp", f"{n_plans:,} parallel plans (TP x DP), more than the "
                                           f"{MAX_SWEEP_PLANS:,} one sweep builds")
    # every row's engine has this token budget: its prefill is chunked at it, and its memory budget is sized
    # for it (or for the row's decode step, when that is larger), as `audit perf` and `audit memory` take it
    base = ParallelPlan(sp=sp, dsa_cp=dsa_cp, role=role, max_num_batched_tokens=max_num_batched_tokens)
    dev = load_device(device_name)
    warn_device(engine, dev)
    from ..context import DeploymentContext
    args = (DeploymentContext(src.spec, base, engine, src.scheme_recipe, dev), grids["tp"], grids["dp"], grids["tokens"],
            grids["context"], grids["batch"], grids["mtp"], ep_mode == "on")
    opts = dict(decode_follows_prefill=follow, util=runtime["util"], kv_cache_dtype=runtime["kv_cache_dtype"],
                acceptance=acceptance, hccl_buffsize_mb=runtime["hccl_buffsize_mb"], dcp=runtime["dcp"],
                max_model_len=runtime["max_model_len"])
    announce_compiles()
    if on_terminal():   # sweep's own bar: a grid has a known length
        with click.progressbar(length=n_plans, label="sweep", file=sys.stderr) as bar:
            res = run_sweep(*args, progress=bar.update, **opts)
    else:
        res = run_sweep(*args, **opts)
    if csv_path:
        write_sweep_csv(res, csv_path)
        click.echo(f"wrote {csv_path} ({res.n_configs} configurations)", err=True)
    context = {"model": src.spec.name, "recipe": src.scheme_recipe, "engine": as_engine(engine).key,
               "device": dev.name, "ep": "on" if ep_mode == "on" else "off", "kv_cache_dtype": runtime["kv_cache_dtype"],
               "gpu_memory_utilization": runtime["util"], "mtp_acceptance": value_json(acceptance)}
    emit(render_sweep(res, fmt, top, context), output)
    if png is not None:
        from ..report.sweep import write_sweep_png
        write_sweep_png(res, png, "audit sweep: " + ", ".join(f"{k} {v}" for k, v in context.items()))
        click.echo(f"wrote {png}", err=True)
