"""``audit calibrate``: fit a device profile's efficiency constants to measured latencies.

The fitting lives in ``auditor.perf.calibrate``; it is imported when the command runs.
"""
from __future__ import annotations

from pathlib import Path

import click

from ..context import DeploymentContext
from ..devices.profiles import DEFAULT_DEVICE, load_device, write_device
from ..perf.calibrate import (DEFAULT_FIT, PARAMS, fit, git_head, load_scenarios, perf_evaluator, render_table,
                              uncalibrated)
from ..model.recipes import RECIPES
from ..outputs import check_output_path
from .deployment import DeploymentCommand, launch_option
from .feedback import announce_compiles, quiet_option, stage
from .options import capped, plan_options


@click.command("calibrate", cls=DeploymentCommand, short_help="Fit device efficiency constants to measured end-to-end latencies.")
@launch_option
@click.argument("measurements", type=click.Path(dir_okay=False, path_type=Path), required=False)
@click.option("--breakdown", "breakdown", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="fit the HBM budget terms (activation scale, non-torch constant) to the engine's memory "
                   "breakdown lines instead: a log with '# audit: MODEL FLAGS' lines, or an evidence JSON")
@click.option("--model", default="glm-5.1", show_default=True, help="model preset name")
@click.option("--recipe", "--quant", "recipe", type=click.Choice(RECIPES), default="w4a8", show_default=True,
              help="quantization recipe (--quant is an alias)")
@click.option("--mtp", type=capped("--mtp"), default=3, show_default=True, help="MTP draft tokens per decode step")
@click.option("--batch", type=capped("--batch"), default=1, show_default=True, help="concurrent requests")
@click.option("--device", "device_name", default=DEFAULT_DEVICE, show_default=True,
              help="base device profile (name or JSON path)")
@click.option("--fit", "fit_names", default=",".join(DEFAULT_FIT), show_default=True,
              help=f"constants to fit (of {', '.join(PARAMS)}); keep them fewer than the scenarios")
@click.option("--loo/--no-loo", default=True, show_default=True, help="report leave-one-out errors")
@click.option("--note", default="", help="free text stored in the profile's calibration block")
@click.option("--from-current", is_flag=True,
              help="start from the profile's current constants instead of undoing its recorded calibration")
@click.option("-o", "--output", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="calibrated device profile JSON to write (with --breakdown: the fitted constants as JSON)")
@plan_options
@quiet_option
def calibrate_command(measurements: Path, model: str, recipe: str, mtp: int, batch: int, device_name: str,
                      fit_names: str, loo: bool, note: str, from_current: bool, output: Path, plan, engine: str,
                      breakdown: Path | None = None, **_: object) -> None:
    """Fit device efficiency constants to measured latencies (CSV: scenario,phase,query_len,
    context_len,measured_ms) and write a calibrated device profile; or, with --breakdown, fit the
    HBM budget's activation scale and non-torch constant to the engine's memory lines."""
    from ..model.presets import preset_spec

    if breakdown is not None:
        import json
        from ..evidence.calibrate import fit_breakdown, load_rows, render_fit
        res = fit_breakdown(load_rows(breakdown))
        click.echo(render_fit(res), nl=False)
        if output is not None:
            from ..outputs import write_output
            check_output_path(output, "--output")
            write_output(output, json.dumps(res, indent=2) + "\n", "--output")
            click.echo(f"wrote {output}", err=True)
        return
    if measurements is None:
        raise click.UsageError("Missing argument 'MEASUREMENTS' (or give --breakdown FILE)")
    if output is None:
        raise click.UsageError("Missing option '-o' / '--output'")
    check_output_path(output, "--output")
    scen = load_scenarios(measurements)
    device = load_device(device_name)
    if not from_current:
        device = uncalibrated(device)     # re-running on a shipped profile reproduces it
    spec = preset_spec(model)
    plan = plan.with_(mtp=mtp > 0).validate()
    names = [n.strip() for n in fit_names.split(",") if n.strip()]
    evaluate_fn = perf_evaluator(DeploymentContext(spec, plan, engine, recipe), mtp, batch)
    provenance = {"source": measurements.name, "model": model, "recipe": recipe, "engine": str(engine),
                  "plan": plan.describe(), "mtp": mtp, "batch": batch, "fitted_on_commit": git_head()}
    if note:
        provenance["note"] = note
    announce_compiles()
    with stage(f"calibrate: fitting {', '.join(names)} to {measurements.name}"):
        res = fit(scen, evaluate_fn, device, names, leave_one_out=loo, provenance=provenance)
    write_device(res.device, output)
    click.echo(render_table(res), nl=False)
    click.echo(f"wrote {output}", err=True)

