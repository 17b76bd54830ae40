"""``audit perf`` and ``audit sweep`` (plus ``audit calibrate`` / ``audit kernels`` when their
modules exist). Thin: parse options, call the library, render. numba is imported only when a
perf command actually runs, so ``audit memory`` never pays for it."""
from __future__ import annotations

import sys
from pathlib import Path

import click

from ..cli_options import emit, output_options, plan_options
from ..devices import DEFAULT_DEVICE
from ..engines.profiles import DEFAULT_ENGINE, PROFILES
from ..errors import AuditInputError
from ..model.spec import ModelSpec
from ..plan import ParallelPlan
from .quant import QUANTS

DEFAULT_MODEL = "glm-5.1"


def load_model(model: str | None) -> tuple[ModelSpec, str]:
    """(spec, default quant) of MODEL: a directory with config.json (checkpoint or config-only),
    or a preset name. Only config.json and the quant description are read (no safetensors)."""
    from ..model.config import load_spec
    from ..model.presets import DEFAULT_RECIPE, PRESETS, preset_spec
    name = model or DEFAULT_MODEL
    path = Path(name)
    if path.is_dir():
        cfg = path / "config.json"
        if not cfg.is_file():
            raise AuditInputError(path, "no config.json in the model directory")
        spec = load_spec(cfg, name=path.resolve().name)
        return spec, _guess_quant(path)
    if path.exists():
        raise AuditInputError(path, "not a directory (give the model directory, not a file)")
    if name.lower() not in PRESETS and ("/" in name or "\\" in name):
        raise AuditInputError(path, "no such directory")
    return preset_spec(name), DEFAULT_RECIPE.get(name.lower(), "bf16")


def _guess_quant(path: Path) -> str:
    desc = path / "quant_model_description.json"
    if not desc.is_file():
        return "bf16"
    text = desc.read_text(encoding="utf-8", errors="replace")
    if "W4A8_DYNAMIC" in text:
        return "w4a8"
    if '"W8A8' in text:
        return "w8a8"
    return "bf16"


def _phases(phase: str) -> list[str]:
    return ["prefill", "decode"] if phase == "both" else [phase]


def _load_table(path: Path | None):
    if path is None:
        return None
    from .measured import load_kernel_table
    return load_kernel_table(path)


@click.command("perf")
@click.argument("model", required=False)
@plan_options
@click.option("--phase", type=click.Choice(["prefill", "decode", "both"]), default="both", show_default=True)
@click.option("--tokens", type=int, default=4096, show_default=True, help="prefill query length per request")
@click.option("--context", type=int, default=0, show_default=True, help="tokens already in the cache")
@click.option("--batch", type=int, default=1, show_default=True,
              help="requests per DP rank (decode: each brings 1 + MTP tokens)")
@click.option("--mtp", type=int, default=0, show_default=True,
              help="speculative tokens K: decode verifies K+1 per request; the MTP layer runs K times")
@click.option("--quant", type=click.Choice(QUANTS), default=None,
              help="quantization scheme (default: the checkpoint's / preset's own)")
@click.option("--device", "device_name", default=DEFAULT_DEVICE, show_default=True,
              help="device profile name or JSON file")
@click.option("--graph", type=click.Choice(["expanded", "repetition"]), default="expanded", show_default=True)
@click.option("--trace", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="write a Chrome trace JSON (open in Perfetto)")
@click.option("--png", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="write a PNG of time per op class per layer")
@click.option("--measured", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="measured kernel table CSV (ops it covers are tagged measured/interpolated)")
@output_options
def perf_command(model, plan: ParallelPlan, engine: str, mtp_drafter, phase, tokens, context, batch, mtp, quant,
                 device_name, graph, trace, png, measured, fmt, output) -> None:
    """Per-op performance model of MODEL (checkpoint dir, config-only dir or preset; default
    glm-5.1): token layout, FLOPs, bytes, collectives and time for every op of every layer."""
    from ..devices import load_device
    from .api import PerfResult, Workload, evaluate_phase, result_notes
    from .report import render

    spec, default_quant = load_model(model)
    if mtp_drafter is False and mtp > 0:
        raise AuditInputError("--mtp", "speculative tokens need the MTP drafter (drop --no-mtp-drafter)")
    recipe = quant or default_quant
    dev = load_device(device_name)
    table = _load_table(measured)
    phases = {}
    for ph in _phases(phase):
        wl = Workload(ph, tokens, context, batch, mtp)
        phases[ph] = evaluate_phase(spec, plan, engine, wl, dev, recipe, graph, table)
    first = next(iter(phases.values()))
    res = PerfResult(spec.name, plan, engine, recipe, dev.name, graph, phases,
                     result_notes(first.program, plan, mtp))
    if trace:
        from .render_trace import write_trace
        write_trace(res, trace)
        click.echo(f"wrote {trace}", err=True)
    if png:
        from .render_png import write_png
        write_png(res, png)
        click.echo(f"wrote {png}", err=True)
    emit(render(res, fmt), output)


@click.command("sweep")
@click.argument("model", required=False)
@click.option("--tp", "tps", default="4,8,16", show_default=True, help="comma list of TP sizes")
@click.option("--dp", "dps", default="1,2", show_default=True, help="comma list of DP sizes")
@click.option("--ep", "ep_mode", type=click.Choice(["on", "off"]), default="on", show_default=True,
              help="expert parallel: on = DP x TP, off = experts TP-sharded")
@click.option("--sp/--no-sp", default=False, show_default=True, help="sequence parallel (DSA-CP on DSA models)")
@click.option("--engine", default=DEFAULT_ENGINE, show_default=True, type=click.Choice(sorted(PROFILES)))
@click.option("--role", type=click.Choice(["mixed", "prefill", "decode"]), default="mixed", show_default=True)
@click.option("--tokens", default="4096", show_default=True, help="comma list of prefill lengths")
@click.option("--context", default="0", show_default=True, help="comma list of cached tokens")
@click.option("--batch", default="1", show_default=True, help="comma list of requests per DP rank")
@click.option("--mtp", default="0", show_default=True, help="comma list of speculative tokens")
@click.option("--quant", type=click.Choice(QUANTS), default=None)
@click.option("--device", "device_name", default=DEFAULT_DEVICE, show_default=True)
@click.option("--csv", "csv_path", type=click.Path(dir_okay=False, path_type=Path), default=None,
              help="write every configuration to this CSV")
@click.option("--top", type=int, default=5, show_default=True, help="best configurations to print")
@output_options
def sweep_command(model, tps, dps, ep_mode, sp, engine, role, tokens, context, batch, mtp, quant, device_name,
                  csv_path, top, fmt, output) -> None:
    """Evaluate a grid of TP x DP x workloads (batched kernel) and print the best configurations
    by TTFT and by decode tokens/s per device."""
    from ..devices import load_device
    from .render_sweep import render_sweep, write_sweep_csv
    from .sweep import parse_grid, run_sweep

    spec, default_quant = load_model(model)
    grids = {k: parse_grid(v, k) for k, v in (("tp", tps), ("dp", dps), ("tokens", tokens),
                                                ("context", context), ("batch", batch), ("mtp", mtp))}
    base = ParallelPlan(sp=sp, role=role)
    dev = load_device(device_name)
    n_plans = len(grids["tp"]) * len(grids["dp"])
    tty = sys.stderr.isatty()
    args = (spec, base, engine, quant or default_quant, dev, grids["tp"], grids["dp"], grids["tokens"],
            grids["context"], grids["batch"], grids["mtp"], ep_mode == "on")
    if tty:
        with click.progressbar(length=n_plans, label="sweep", file=sys.stderr) as bar:
            res = run_sweep(*args, progress=bar.update)
    else:
        res = run_sweep(*args)
    if csv_path:
        write_sweep_csv(res, csv_path)
        click.echo(f"wrote {csv_path} ({res.n_configs} configurations)", err=True)
    emit(render_sweep(res, fmt, top), output)


class _LazyCommand(click.Command):
    """A command whose module is imported only when it runs (or its --help is shown), so the
    other commands do not pay for its imports (calibrate brings the whole perf evaluator and fitter)."""

    def __init__(self, name: str, loader, short_help: str):
        super().__init__(name, short_help=short_help, help=short_help)
        self._loader = loader
        self._real: click.Command | None = None

    def real(self) -> click.Command:
        if self._real is None:
            self._real = self._loader()
        return self._real

    def make_context(self, info_name, args, parent=None, **extra):
        return self.real().make_context(info_name, args, parent=parent, **extra)

    def invoke(self, ctx):
        return self.real().invoke(ctx)

    def get_help(self, ctx) -> str:
        return self.real().get_help(ctx)


def _load_calibrate() -> click.Command:
    from .calibrate import calibrate_command
    return calibrate_command


def register_perf_commands(group: click.Group) -> None:
    group.add_command(perf_command)
    group.add_command(sweep_command)
    here = Path(__file__).resolve().parent
    if (here / "calibrate.py").is_file():
        group.add_command(_LazyCommand("calibrate", _load_calibrate,
                                       "Fit a device profile's efficiency constants to measured latencies."))
    try:
        from .measured_cli import kernels_group
    except ImportError:
        kernels_group = None
    if kernels_group is not None:
        group.add_command(kernels_group)
