"""``audit plan``: parse options, call ``auditor.planner``, render. No logic here."""
from __future__ import annotations

from pathlib import Path

import click

from ..devices.profiles import DEFAULT_DEVICE
from ..errors import AuditInputError
from ..limits import OPTION_CAPS
from ..outputs import write_output
from .options import acceptance_option, capped, capped_float, emit, engine_option, guard_output, output_options, recipe_option
from .runtime_options import hf_overrides_option


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


@click.command("plan", short_help="Search deployments that fit HBM and the SLA, by tokens/s per die.")
@click.argument("model", required=False)
@click.option("--dies", default="32", show_default=True, help="die budget, or a comma list of budgets")
@click.option("--device", "device_name", default=DEFAULT_DEVICE, show_default=True, help="device profile")
@click.option("--isl", type=capped("--isl"), default=None, help="mean input length (prefill tokens)")
@click.option("--osl", type=capped("--osl"), default=None, help="mean output length")
@click.option("--workload", "workload_csv", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              default=None, help="CSV of requests (columns isl,osl) instead of --isl/--osl")
@click.option("--ttft-ms", type=capped_float("--ttft-ms"), required=True, help="SLA: time to first token, ms")
@click.option("--tpot-ms", type=capped_float("--tpot-ms"), required=True, help="SLA: time per output token, ms")
@acceptance_option
@click.option("--tp", "tps", default="1,2,4,8,16", show_default=True, help="TP sizes to search")
@click.option("--batch", "batches", default="1,2,4,8,16,24,32,48,64,96,128", show_default=True,
              help="batch per DP rank to search")
@click.option("--mtp", "mtps", default="0,1,2,3", show_default=True, help="speculative tokens K to search")
@click.option("--sp/--no-sp", "sp_mode", default=None,
              help="pin SP/FlashComm1 (DSA-CP on DSA models) on or off; default: search both")
@click.option("--disagg/--no-disagg", default=True, show_default=True, help="also search P/D-disaggregated")
@engine_option()
@click.option("--gpu-memory-utilization", "util", type=capped_float("--gpu-memory-utilization"), default=0.9,
              show_default=True, help="share of the device the engine may use")
@click.option("--kv-cache-dtype", type=click.Choice(["bf16", "c8-indexer", "c8"]), default="bf16", show_default=True,
              help="KV cache variant: bf16; c8-indexer = LI-C8; c8 = SFA-C8 + LI-C8")
@recipe_option("quantization recipe (default: the checkpoint's / preset's own)")
@click.option("--top", type=capped("--top"), default=10, show_default=True, help="configurations to list")
@click.option("--png", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="Pareto PNG: tokens/s per die against tokens/s per user, aggregated vs disaggregated")
@click.option("--csv", "csv_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="every memory-feasible configuration as CSV")
@hf_overrides_option
@output_options
def plan_command(model, dies, device_name, isl, osl, workload_csv, ttft_ms, tpot_ms, acceptance, tps, batches,
                 mtps, sp_mode, disagg, engine, util, kv_cache_dtype, recipe, top, png, csv_path, fmt, output) -> None:
    """Search aggregated and P/D-disaggregated deployments that fit the die's HBM and meet the SLA,
    ranked by output tokens/s per die; prints the winner's vllm serve launch."""
    from ..devices.profiles import load_device
    from ..planner.report import render_plan, write_pareto_png
    from ..planner.search import PlanSpace, run_plan
    from ..planner.launch import serve_launch
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
    if not 0 < acceptance <= 1:
        raise AuditInputError("--mtp-acceptance", f"must be in (0, 1], got {acceptance}")
    if not 0 < util <= 1:
        raise AuditInputError("--gpu-memory-utilization", f"must be in (0, 1], got {util}")
    src = open_model(model, recipe, tables=False)
    dev = load_device(device_name)
    sps = (True, False) if sp_mode is None else (bool(sp_mode),)
    space = PlanSpace(dies=_ints(dies, "--dies"), tps=tuple(_ints(tps, "--tp")), batches=tuple(_ints(batches, "--batch")),
                      mtps=tuple(_ints(mtps, "--mtp")), sps=sps, util=util,
                      kv_cache_dtype=kv_cache_dtype, acceptance=acceptance, disaggregated=disagg)
    res = run_plan(src.spec, engine, src.scheme_recipe, dev, wl, space, ttft_ms, tpot_ms)
    best = res.best(top)
    launch = serve_launch(best[0], model or src.spec.name, engine, util=util, max_model_len=wl.max_len, isl=wl.isl,
                          kv_cache_dtype=kv_cache_dtype) if best else []
    head = {"tool": "audit plan", "model": src.spec.name, "recipe": src.scheme_recipe, "device": dev.name,
            "engine": str(engine), "dies": space.dies, "ttft_ms": ttft_ms, "tpot_ms": tpot_ms,
            "mtp_acceptance": acceptance}
    emit(render_plan(res, fmt, top, launch, head), output)
    if csv_path:
        write_output(csv_path, render_plan(res, "csv", top, launch, head), "--csv")
        click.echo(f"wrote {csv_path}", err=True)
    if png:
        write_pareto_png(res, png, f"{src.spec.name} on {space.dies} x {dev.name}: isl {wl.isl} osl {wl.osl}")
        click.echo(f"wrote {png}", err=True)
