"""``audit memory`` and ``audit inventory``: parse options, call the library, render; no logic here."""
from __future__ import annotations

import json
from pathlib import Path

import click

from .options import emit, guard_output, output_options, plan_options, recipe_option

BY_CHOICES = ("summary", "layer", "tensor", "all")


def _to_json(rep: dict) -> str:
    return json.dumps(rep, indent=2, default=str) + "\n"


@click.command("memory")
@click.argument("model", required=False)
@recipe_option("quant recipe for presets / config-only dirs (default: the preset's usual one)")
@plan_options
@click.option("--by", type=click.Choice(BY_CHOICES), default="summary", show_default=True,
              help="extra breakdown: per layer, per tensor, or both")
@click.option("--observed", default=None, help="per-rank figure the engine reported, e.g. 38GiB: prints the "
                                               "delta and where it could sit")
@click.option("--budget", default=None, help="per-rank budget, e.g. 60GiB: exit 3 when the worst rank exceeds it")
@click.option("--png", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="also write a per-rank stacked bar chart (PNG)")
@click.option("--progress/--no-progress", default=None, help="progress bar while scanning (default: on a TTY)")
@output_options
def memory_command(model, recipe, plan, engine, mtp_drafter, by, observed, budget, png, progress, fmt, output):
    """Per-rank ledger of what the engine really holds for MODEL (checkpoint dir, config-only dir or
    preset; default glm-5.1), worst rank first, with the bridge from the naive estimate."""
    from ..memory.audit import run_memory_audit
    from ..report.memory_model import memory_report
    from ..report.memory_text import render_memory, render_memory_csv
    from ..report.units import parse_size
    from ..source import open_model

    guard_output(output, model)
    guard_output(png, model)
    obs = parse_size(observed, "--observed") if observed else None
    bud = parse_size(budget, "--budget") if budget else None
    src = open_model(model, recipe, progress=progress)
    audit = run_memory_audit(src, plan, engine)
    rep = memory_report(audit, by=by, observed=obs, budget=bud)
    if fmt == "json":
        text = _to_json(rep)
    elif fmt == "csv":
        text = render_memory_csv(rep)
    else:
        text = render_memory(rep, fmt)
    emit(text, output)
    if png is not None:
        from ..report.memory_png import write_memory_png
        write_memory_png(rep, png)
        click.echo(f"wrote {png}", err=True)
    if bud is not None and rep["budget"]["exceeded"]:
        raise SystemExit(3)


@click.command("inventory")
@click.argument("model", required=False)
@recipe_option("quant recipe for presets / config-only dirs")
@click.option("--by", type=click.Choice(["summary", "tensor"]), default="summary", show_default=True,
              help="'tensor' lists every tensor with its classification")
@click.option("--progress/--no-progress", default=None, help="progress bar while scanning (default: on a TTY)")
@output_options
def inventory_command(model, recipe, by, progress, fmt, output):
    """Classify every stored tensor of MODEL (float / int8 / scale / offset, kind, block, scheme) and
    check the checkpoint against its quant description. Reads headers only."""
    from ..model.classify import classify
    from ..report.inventory_report import inventory_report, render_inventory
    from ..source import open_model

    guard_output(output, model)
    src = open_model(model, recipe, progress=progress)
    ct = classify(src.table, src.spec.Lyr, src.desc)
    rep = inventory_report(src, ct, by=by)
    emit(_to_json(rep) if fmt == "json" else render_inventory(rep, fmt), output)
