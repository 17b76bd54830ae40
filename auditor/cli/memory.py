"""``audit memory`` and ``audit inventory``: parse options, call the library, render; no logic here."""
from __future__ import annotations

import json
from pathlib import Path

import click

from ..errors import AuditInputError
from .deployment import DeploymentCommand, launch_option
from .feedback import is_quiet
from .refusal import lead_answer, warn_device
from .options import emit, finegrained_option, guard_output, output_options, plan_options, recipe_option
from .runtime_options import hf_overrides_option, runtime_options

BY_CHOICES = ("summary", "layer", "tensor", "all")


def _to_json(rep: dict) -> str:
    return json.dumps(rep, indent=2, default=str) + "\n"


@click.command("memory", cls=DeploymentCommand, short_help="Per-rank resident-weight ledger, bridged from the naive estimate.")
@launch_option
@click.argument("model", required=False)
@recipe_option("quant recipe for presets / config-only dirs (default: the preset's usual one)")
@plan_options
@finegrained_option
@click.option("--by", type=click.Choice(BY_CHOICES), default="summary", show_default=True,
              help="extra breakdown: per layer, per tensor, or both")
@click.option("--observed", default=None, help="per-rank figure the engine reported, e.g. 38GiB: prints the "
                                               "delta and where it could sit")
@click.option("--budget", default=None, help="per-rank budget, e.g. 60GiB: exit 3 when the worst rank exceeds it")
@click.option("--png", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="also write a PNG waterfall: naive estimate, each bridge step, resident (worst rank), "
                   "--observed as a line")
@runtime_options()
@hf_overrides_option
@click.option("--hbm-png", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="also write the rank's HBM budget as a stacked bar (PNG)")
@click.option("--strict", is_flag=True, default=False,
              help="exit with code 4 when there are error findings (e.g. the engine would refuse to start)")
@click.option("--progress/--no-progress", default=None, help="progress bar while scanning (default: on a TTY)")
@output_options
def memory_command(model, recipe, plan, engine, mtp_drafter, by, observed, budget, png, device_name, runtime, mtp,
                   hbm_png, strict, progress, fmt, output):
    """Per-rank ledger of what the engine really holds for MODEL (checkpoint dir, config-only dir or
    preset; default glm-5.1), worst rank first, with the bridge from the naive estimate."""
    from ..memory.audit import run_memory_audit
    from ..report.memory_model import memory_report
    from ..report.memory_text import render_memory, render_memory_csv
    from ..units import parse_size
    from ..source import open_model

    guard_output(output, model)
    guard_output(png, model, "--png")
    guard_output(hbm_png, model, "--hbm-png")
    from ..devices.profiles import load_device
    from ..report.hbm_budget import render_budget
    from ..runtime.budget import rank_budget
    from ..runtime.report import attach_runtime
    from ..runtime.weights import stage_worst

    if mtp < 0:
        raise AuditInputError("--mtp", f"must not be negative, got {mtp}")
    if mtp > 0:
        if mtp_drafter is False:
            raise AuditInputError("--mtp", "speculative tokens need the MTP drafter (drop --no-mtp-drafter)")
        plan = plan.with_(mtp=True, num_speculative_tokens=mtp)
    obs = parse_size(observed, "--observed") if observed is not None else None
    bud = parse_size(budget, "--budget") if budget is not None else None
    for option, value in (("--observed", obs), ("--budget", bud)):
        if value is not None and value <= 0:
            raise AuditInputError(option, "must be a positive size")
    dev = load_device(device_name)
    warn_device(engine, dev)
    src = open_model(model, recipe, progress=False if is_quiet() else progress)
    if mtp > 0 and not src.spec.mtp_layers:
        raise AuditInputError("--mtp", f"{src.spec.name} has no MTP layer (num_nextn_predict_layers = 0)")
    audit = run_memory_audit(src, plan, engine)
    rep = memory_report(audit, by=by, observed=obs, budget=bud)
    if obs is not None:
        from ..align.explain import explain_observed
        rep["observed"]["closest_configurations"] = explain_observed(src, audit.plan, obs)
    hbm = rank_budget(src.spec, audit.plan, engine, weights_bytes=stage_worst(audit.ledger.total, audit.plan),
                      device=dev, mtp=mtp, dsa_cp=audit.layout.dsa_cp, recipe=src.scheme_recipe, **runtime)
    attach_runtime(rep, hbm, dev)
    lead_answer(rep)
    if fmt == "json":
        text = _to_json(rep)
    elif fmt == "csv":
        text = render_memory_csv(rep)
    else:
        text = render_memory(rep, fmt) + render_budget(rep, fmt)
    emit(text, output)
    if png is not None:
        from ..report.memory_png import write_memory_png
        write_memory_png(rep, png)
        click.echo(f"wrote {png}", err=True)
    if hbm_png is not None:
        from ..report.hbm_png import write_hbm_png
        write_hbm_png(rep, hbm_png)
        click.echo(f"wrote {hbm_png}", err=True)
    # what the engine says at start-up: one max_model_len request does not fit, nothing is left for KV at
    # all (the answer line's "the engine refuses to start (exit 3)"), or it stops building the model
    shortfall = (runtime["max_model_len"] is not None or hbm.kv_available_bytes <= 0
                 or hbm.startup_error is not None) and hbm.error()
    if shortfall:
        from .feedback import say
        say(f"audit: {hbm.error()}")
    exit_on_findings(rep, strict)
    if shortfall:
        raise SystemExit(3)
    if bud is not None and rep["budget"]["exceeded"]:
        raise SystemExit(3)


@click.command("inventory", short_help="Classify every stored tensor, checked against the description.")
@click.argument("model", required=False)
@recipe_option("quant recipe for presets / config-only dirs")
@click.option("--by", type=click.Choice(["summary", "tensor"]), default="summary", show_default=True,
              help="'tensor' lists every tensor with its classification")
@click.option("--strict", is_flag=True, default=False,
              help="exit with code 4 when there are error findings (e.g. the engine would refuse to start)")
@click.option("--progress/--no-progress", default=None, help="progress bar while scanning (default: on a TTY)")
@output_options
def inventory_command(model, recipe, by, strict, progress, fmt, output):
    """Classify every stored tensor of MODEL (float / int8 / scale / offset, kind, block, scheme) and
    check the checkpoint against its quant description. Reads headers only."""
    from ..model.classify import classify
    from ..inventory.progress import want_progress
    from ..report.inventory_report import inventory_json, inventory_report, render_inventory
    from ..source import open_model

    guard_output(output, model)
    progress = False if is_quiet() else progress
    src = open_model(model, recipe, progress=progress)
    ct = classify(src.table, src.spec.Lyr, src.desc)
    rep = inventory_report(src, ct, by=by)
    if fmt == "json":
        text = inventory_json(rep)
    else:
        text = render_inventory(rep, fmt, progress=by == "tensor" and want_progress(progress, len(ct),
                                                                                    threshold=50_000))
    emit(text, output)
    exit_on_findings(rep, strict)


def exit_on_findings(rep: dict, strict: bool) -> None:
    """--strict: exit code 4 when the report has error findings (checked before --budget's 3: a
    configuration the engine refuses to start has no meaningful budget verdict)."""
    from ..report.findings import has_errors

    if strict and has_errors(rep["findings"]):
        raise SystemExit(4)
