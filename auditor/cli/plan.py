"""``audit plan``: parse options, call ``auditor.planner``, render. No logic here."""
from __future__ import annotations

from pathlib import Path
from typing import Any

import click

from ..devices.profiles import DEFAULT_DEVICE
from ..errors import AuditInputError
from ..limits import OPTION_CAPS
from ..outputs import all_or_none, when_written, write_output
from ..switches import BY_FIELD
from .options import (acceptance_option, capped, capped_float, emit, engine_option, guard_output, output_options,
                      recipe_option, switch_option)
from .feedback import announce_compiles, stage
from .refusal import refuse_kv, warn_device, warn_refusal
from .runtime_options import KvDtypeChoice, hf_overrides_option
from .vocabulary import Length


MAX_LIST_VALUES = 64       # values of one --dies / --tp / --batch / --mtp list


def _ints(text: str, name: str) -> list[int]:
    parts = [v.strip() for v in str(text).split(",") if v.strip()]
    if len(parts) > MAX_LIST_VALUES:
        # bound the search before doing it: every value multiplies the plans evaluated
        raise AuditInputError(name, f"{len(parts):,} values, more than the {MAX_LIST_VALUES} one plan searches")
    if any(not (v.isascii() and v.lstrip("+").isdigit() and len(v) <= 9) for v in parts):
        raise AuditInputError(name, f"expected a comma list of integers, got {text[:80]!r}")
    vals = sorted({int(v) for v in parts}, key=parts and [int(v) for v in parts].index)
    cap = OPTION_CAPS[name]
    if not vals or any(not cap.lo <= v <= cap.hi for v in vals):
        raise AuditInputError(name, f"expected integers in {cap.lo:,}..{cap.hi:,}, got {text!r}")
    return vals


def _utils(text: str) -> tuple[float, ...]:
    """``--gpu-memory-utilization 0.92`` or a comma list searched (``0.90,0.92,0.95``)."""
    parts = [v.strip() for v in str(text).split(",") if v.strip()]
    if not parts or len(parts) > MAX_LIST_VALUES:
        raise AuditInputError("--gpu-memory-utilization", f"expected one value or a comma list, got {text[:80]!r}")
    out = []
    for v in parts:
        try:
            u = float(v) if len(v) <= 12 else float("nan")
        except ValueError:
            u = float("nan")
        if not 0 < u <= 1:
            raise AuditInputError("--gpu-memory-utilization", f"expected values in (0, 1], got {v[:20]!r}")
        out.append(u)
    return tuple(sorted(set(out)))


@click.command("plan", short_help="Search deployments that fit HBM and the SLA, by tokens/s per die.")
@click.argument("model", required=False)
@click.option("--dies", default="32", show_default=True, help="die budget, or a comma list of budgets")
@click.option("--device", "device_name", default=DEFAULT_DEVICE, show_default=True, help="device profile")
@click.option("--isl", type=Length("--isl"), default=None, help="mean input length (prefill tokens; 4096, 64k, 128K)")
@click.option("--osl", type=Length("--osl"), default=None, help="mean output length")
@click.option("--workload", "workload_csv", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              default=None, help="CSV of requests (columns isl,osl) instead of --isl/--osl")
@click.option("--ttft-ms", type=capped_float("--ttft-ms"), required=True, help="SLA: time to first token, ms")
@click.option("--tpot-ms", type=capped_float("--tpot-ms"), required=True, help="SLA: time per output token, ms")
@acceptance_option
@click.option("--tp", "tps", default="1,2,4,8,16", show_default=True, help="TP sizes to search")
@click.option("--batch", "batches", default="1,2,4,8,16,24,32,48,64,96,128", show_default=True,
              help="batch per DP rank to search")
@click.option("--mtp", "mtps", default="0,1,2,3", show_default=True,
              help="speculative tokens K to search (a DSpark checkpoint: 0,5,6,7 unless given; K >= 5)")
@click.option("--sp/--no-sp", "sp_mode", default=None,
              help="pin SP/FlashComm1 (DSA-CP on DSA models) on or off; default: search both")
@click.option("--disagg/--no-disagg", default=True, show_default=True, help="also search P/D-disaggregated")
@engine_option()
@click.option("--gpu-memory-utilization", "util", default="0.92", show_default=True,
              help="share of the device the engine may use (the engine's docs: 0.92), or a comma list to search "
                   "(0.90,0.92,0.95)")
@click.option("--prefill-batched-tokens", "p_tokens", default="4096,8192,16384,32560", show_default=True,
              help="P/D: max_num_batched_tokens searched on prefill instances (the chunk; values above the input "
                   "length are skipped)")
@click.option("--simulate", "n_sim", type=capped("--simulate"), default=4, show_default=True,
              help="deployments per die budget and mode simulated with the serving model (0: estimate only)")
@click.option("--kv-cache-dtype", type=KvDtypeChoice(), default="bf16", show_default=True,
              help="KV cache variant (each engine refuses the ones it lacks): bf16; vllm-ascend: c8-indexer = "
                   "LI-C8, c8 = SFA-C8 + LI-C8; vllm (CUDA): fp8 (fp8_ds_mla on Hopper, plain fp8 on Blackwell)")
@recipe_option("quantization recipe (default: the checkpoint's / preset's own)")
@click.option("--top", type=capped("--top"), default=10, show_default=True, help="configurations to list")
@click.option("--png", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Pareto PNG: tokens/s per die against tokens/s per user, aggregated vs disaggregated, with the "
                   "chosen deployment (a star) and the TPOT bound")
@click.option("--csv", "csv_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="every memory-feasible configuration as CSV")
@hf_overrides_option
@click.option("--max-model-len", type=Length("--max-model-len"), default=None,
              help="every instance's max_model_len (default: the workload's longest request); must hold it")
@click.option("--max-num-seqs", type=capped("--max-num-seqs"), default=None,
              help="largest batch per DP rank searched (the instances' max_num_seqs)")
@switch_option(BY_FIELD["max_num_batched_tokens"], default=None, show_default=False,
               help="pin the prefill instances' chunk (default: --prefill-batched-tokens searched)")
@switch_option(BY_FIELD["dcp"], default=None, show_default=False,
               help="decode context parallel: 1 = never; N = every DSA instance of TP N runs DCP N "
                    "(default: DCP = TP searched for inputs of 32K and more)")
@click.option("--hccl-buffsize", "hccl_buffsize", type=capped("--hccl-buffsize"), default=200, show_default=True,
              help="HCCL_BUFFSIZE in MB of every instance (the mc2 communicator's buffer)")
@output_options
def plan_command(model, dies, device_name, isl, osl, workload_csv, ttft_ms, tpot_ms, acceptance, tps, batches,
                 mtps, sp_mode, disagg, engine, util, p_tokens, n_sim, kv_cache_dtype, recipe, top, png, csv_path,
                 max_model_len, max_num_seqs, max_num_batched_tokens, dcp, hccl_buffsize, fmt, output) -> None:
    """Search aggregated and P/D-disaggregated deployments that fit the die's HBM and meet the SLA:
    every candidate estimated in steady state, the best simulated with audit bench's serving model,
    ranked by simulated output tokens/s per die; the best per die budget and the winner's vllm serve
    launch. Exit 3 when no configuration fits and meets the SLA."""
    from ..devices.profiles import load_device
    from ..parallel import ParallelPlan
    from ..planner.report import memory_levers, render_plan, write_pareto_png
    from ..context import DeploymentContext
    from ..planner.search import PlanSpace, run_plan
    from ..planner.launch import model_path, quantized_recipe, serve_launch
    from ..planner.workload import from_csv, from_lengths
    from ..source import open_model

    for path, what in ((output, "--output"), (png, "--png"), (csv_path, "--csv")):
        guard_output(path, model, what)
    if workload_csv is not None:
        wl = from_csv(workload_csv)
    elif isl is None or osl is None:
        raise AuditInputError("--isl/--osl", "give both --isl and --osl, or --workload CSV")
    else:
        wl = from_lengths(isl, osl)
    if isinstance(acceptance, tuple):
        raise AuditInputError("--mtp-acceptance", "plan takes one per-draft value (per-position rates: bench, perf)")
    if acceptance is not None and not 0 < acceptance <= 1:
        raise AuditInputError("--mtp-acceptance", f"must be in (0, 1], got {acceptance}")
    utils = _utils(util)
    batch_list = _ints(batches, "--batch")
    if max_num_seqs is not None:
        batch_list = [b for b in batch_list if b <= max_num_seqs]
        if not batch_list:
            raise AuditInputError("--max-num-seqs", f"{max_num_seqs} is below every --batch value searched")
    tp_list = _ints(tps, "--tp")
    if dcp is not None and dcp > 1:
        tp_list = [t for t in tp_list if t == dcp]
        if not tp_list:
            raise AuditInputError("--dcp", f"DCP {dcp} needs TP {dcp} (SFA: DCP == TP), which --tp does not search")
    chunks = (max_num_batched_tokens,) if max_num_batched_tokens else tuple(_ints(p_tokens, "--prefill-batched-tokens"))
    if max_model_len is not None and max_model_len < wl.max_len:
        raise AuditInputError("--max-model-len", f"{max_model_len:,} is shorter than the workload's longest request "
                                                 f"({wl.max_len:,} tokens)")
    mml = max_model_len or wl.max_len
    src = open_model(model, recipe, tables=False)
    from ..perf.program import check_timeable
    check_timeable(src.spec, engine)     # grids price KV through the engine's KV spec, pools too
    refused = warn_refusal(src, engine)
    refuse_kv(src.spec, engine, kv_cache_dtype)
    from ..perf.acceptance import plan_value, resolve, value_json
    acceptance = plan_value(resolve(src.spec, acceptance, engine=engine))
    dev = load_device(device_name)
    warn_device(engine, dev)
    sps = (True, False) if sp_mode is None else (bool(sp_mode),)
    mtp_grid, p_mtp = _drafter_grid(src.spec, mtps)
    space = PlanSpace(dies=_ints(dies, "--dies"), tps=tuple(tp_list), batches=tuple(batch_list),
                      mtps=mtp_grid, prefill_mtp=p_mtp, drafter=src.spec.drafter, sps=sps, util=utils[0], utils=utils,
                      kv_cache_dtype=kv_cache_dtype, acceptance=acceptance, disaggregated=disagg,
                      prefill_tokens=chunks, simulate=n_sim, dcp=dcp != 1, dcp_only=bool(dcp and dcp > 1),
                      hccl_buffsize_mb=hccl_buffsize, every_row=bool(csv_path or png or n_sim == 0))
    base = DeploymentContext(src.spec, None, engine, src.scheme_recipe, dev)
    announce_compiles()
    with stage(f"plan: searching {', '.join(map(str, space.dies))} {engine.device_noun}s (estimate, then simulate the shortlist)"):
        res = run_plan(base, wl, space, ttft_ms, tpot_ms)
    best = res.best(top)
    path = model_path(model, src.spec.name, src.scheme_recipe, src.kind == "preset")
    quantized = quantized_recipe(src.scheme_recipe)
    # a recipe the engine cannot start gets no launch line: it would fail at start-up
    launch = [] if refused else serve_launch(best[0], path, engine, max_model_len=mml, isl=wl.isl, kv_cache_dtype=kv_cache_dtype,
                          quantized=quantized, hccl_buffsize_mb=hccl_buffsize,
                          drafter=src.spec.drafter) if best else []
    per_budget = {n: (serve_launch(c, path, engine, max_model_len=mml, isl=wl.isl, kv_cache_dtype=kv_cache_dtype,
                                   quantized=quantized, hccl_buffsize_mb=hccl_buffsize,
                          drafter=src.spec.drafter) if c and not refused else [])
                  for n, c in res.best_per_budget().items()}
    head = {"tool": "audit plan", "model": src.spec.name, "recipe": src.scheme_recipe, "kv_cache_dtype": kv_cache_dtype,
            "device": dev.name, "engine": str(engine), "dies": space.dies, "ttft_ms": ttft_ms, "tpot_ms": tpot_ms,
            "mtp_acceptance": value_json(acceptance), "gpu_memory_utilization": list(utils), "model_path": path,
            "quantized": quantized, "max_batch": max(space.batches),
            "helps": memory_levers(base.with_plan(ParallelPlan(tp=max(space.tps))), kv_cache_dtype)}
    if refused:
        head["refused"] = refused
    with all_or_none():                 # the report, the CSV and the PNG: all written, or none changed
        emit(render_plan(res, fmt, top, launch, head, per_budget), output)
        if csv_path:
            write_output(csv_path, render_plan(res, "csv", top, launch, head), "--csv")
            when_written(lambda: click.echo(f"wrote {csv_path}", err=True))
        if png:
            write_pareto_png(res, png, f"{src.spec.name} on {'/'.join(map(str, space.dies))} x {dev.name}: isl {wl.isl} osl {wl.osl}",
                             ttft_ms=ttft_ms, tpot_ms=tpot_ms)
            when_written(lambda: click.echo(f"wrote {png}", err=True))
    if not best:
        raise SystemExit(3)           # nothing fits and meets the SLA (as `audit memory` when it does not fit)


#: DSpark drafts K >= 5 tokens (vLLM-Ascend docs/source/tutorials/models/DeepSeek-V4-Flash.md:321@182b75ea:
#: "When using DSpark, num_speculative_tokens must be at least 5"); its tutorials run 5 and 7, and the P/D
#: tutorial's P node runs the same drafter as its D node (dspark 7, :675 and :753)
DSPARK_MIN_K = 5
DSPARK_GRID = (0, 5, 6, 7)


def _drafter_grid(spec: Any, mtps: str) -> tuple[tuple[int, ...], int]:
    """(K values searched, the P nodes' K): MTP's grid as given; a DSpark checkpoint's default grid is
    DSPARK_GRID and a K of 1..4 is refused, its P nodes draft with the largest K searched."""
    ks = tuple(_ints(mtps, "--mtp"))
    if getattr(spec, "drafter", "mtp") != "dspark":
        return ks, 1
    if click.get_current_context().get_parameter_source("mtps") == click.core.ParameterSource.DEFAULT:
        ks = DSPARK_GRID
    low = [k for k in ks if 0 < k < DSPARK_MIN_K]
    if low:
        raise AuditInputError("--mtp", f"{spec.name} drafts with DSpark, which needs K >= {DSPARK_MIN_K} "
                                       f"(DeepSeek-V4-Flash.md:321), got {','.join(map(str, low))}")
    return ks, max(ks)
