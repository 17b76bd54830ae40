"""``audit align``: write an alignment ticket (markdown, JSON, PNGs) from engine logs, profiler
kernels and benchmark results. Parses options and calls ``auditor.align``; nothing else."""
from __future__ import annotations

import contextlib
import json
import math
import os
from pathlib import Path

import click
from click.core import ParameterSource

from ..errors import AuditInputError
from ..outputs import all_or_none, check_output_dir, check_output_path, prepare_output_dir, write_output
from .deployment import DeploymentCommand, launch_option
from .feedback import announce_compiles, stage
from .options import NonEmptyPath, capped, output_options, plan_options, recipe_option, refuse_model_dir
from .runtime_options import hf_overrides_option, runtime_options
from .vocabulary import Length

#: runtime option -> kv_settings key, taken only when given on the command line (else the log says)
_RUNTIME = {"util": "util", "max_model_len": "max_model_len", "max_num_seqs": "max_num_seqs",
            "kv_cache_dtype": "kv_cache_dtype", "dcp": "dcp", "hccl_buffsize": "hccl_buffsize_mb"}

# click parameter -> ParallelPlan / request field, for "did the user pin it?"
_PINNABLE = {"tp": "tp", "dp": "dp", "ep": "ep", "pp": "pp", "sp": "sp", "dsa_cp": "dsa_cp", "engine": "engine",
             "role": "role", "mtp_drafter": "mtp", "layer_sharding": "layer_sharding", "nz_mode": "nz_mode",
             "shared_expert_dp": "shared_expert_dp"}


def parse_tolerance(text: str | None) -> float | None:
    """'5%' -> 0.05, '0.05' -> 0.05."""
    if text is None:
        return None
    t = text.strip()
    if not t.isascii() or len(t) > 24:
        raise AuditInputError("--tolerance", f"expected a percentage like 5% or a fraction like 0.05, got {text[:40]!r}")
    try:
        v = float(t[:-1]) / 100 if t.endswith("%") else float(t)
    except ValueError:
        raise AuditInputError("--tolerance", f"expected a percentage like 5% or a fraction like 0.05, got {text!r}") \
            from None
    if not (math.isfinite(v) and 0 <= v <= 10):
        raise AuditInputError("--tolerance", f"must be a finite share between 0 and 1000%, got {text!r}")
    return v


@click.command("align", cls=DeploymentCommand, short_help="Alignment ticket from engine logs, profiles and benchmarks.")
@launch_option
@click.argument("model", required=False)
@recipe_option("quant recipe for presets / config-only dirs (default: the preset's usual one)")
@plan_options
@click.option("--log", "logs", multiple=True, type=click.Path(dir_okay=False, path_type=Path),
              help="engine log (vLLM / vLLM-Ascend), repeatable")
@click.option("--profile", "profiles", multiple=True, type=click.Path(dir_okay=False, path_type=Path),
              help="Ascend profiler kernel_details.csv, one per rank, repeatable")
@click.option("--bench", "benches", multiple=True, type=click.Path(dir_okay=False, path_type=Path),
              help="vllm bench serve JSON or our latency CSV, repeatable")
@click.option("--output-dir", default=None, type=NonEmptyPath(file_okay=False, path_type=Path),
              help="where ticket.md, ticket.json and the PNGs are written (or give --output)")
@click.option("--tolerance", default=None, help="e.g. 5%%: exit 4 when any compared figure deviates by more")
@click.option("--phase", type=click.Choice(["prefill", "decode"]), default="prefill", show_default=True,
              help="the phase the profile recorded")
@click.option("--tokens", type=Length("--tokens"), default=4096, show_default=True, help="prefill query length per request")
@click.option("--context", type=Length("--context"), default=0, show_default=True, help="tokens already in the cache")
@click.option("--batch", type=capped("--batch"), default=1, show_default=True, help="requests per DP rank")
@click.option("--mtp", type=capped("--mtp"), default=0, show_default=True, help="speculative tokens K (decode)")
@click.option("--device", "device_name", default=None, help="device profile for the time model")
@click.option("--top", type=capped("--top"), default=10, show_default=True, help="candidates and discrepancies to list")
@click.option("--png/--no-png", default=True, show_default=True, help="write the PNG figures")
@runtime_options(device=False, mtp=False)
@hf_overrides_option
@output_options
def align_command(model, recipe, plan, engine, mtp_drafter, logs, profiles, benches, output_dir, tolerance, phase,
                  tokens, context, batch, mtp, device_name, top, png, runtime, fmt, output):
    """Alignment ticket for MODEL from the engine's own evidence: observed memory per rank against
    the ledger (with the engine configuration that best reproduces it), KV figures, measured kernel
    time against the perf model, benchmark latency against the phase totals."""
    from ..align.run import AlignRequest, run_align
    from ..align.ticket_md import render_ticket

    if not (logs or profiles or benches):
        raise AuditInputError("audit align", "give at least one --log, --profile or --bench")
    if output_dir is None and output is None:
        raise AuditInputError("audit align", "give --output-dir DIR (ticket.md, ticket.json, PNGs) or --output FILE")
    if output_dir is not None:
        if not str(output_dir):
            raise AuditInputError("--output-dir", "empty directory name")
        check_output_dir(output_dir, "--output-dir")
        refuse_model_dir(output_dir / "ticket.md", model)
    if output is not None:
        from .options import guard_output
        guard_output(output, model, "--output")
    ctx = click.get_current_context()
    given_runtime = {}
    for param, key in _RUNTIME.items():
        if ctx.get_parameter_source(param) in (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT):
            given_runtime[key] = runtime[key]
    pinned = {}
    for param, field in _PINNABLE.items():
        if ctx.get_parameter_source(param) in (ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT):
            pinned[field] = engine if field == "engine" else getattr(plan, field, None)
    if "mtp" in pinned:
        pinned["mtp"] = bool(mtp_drafter)
    req = AlignRequest(model=model, recipe=recipe, plan=plan, engine=engine, pinned=pinned, logs=list(logs),
                       profiles=list(profiles), benches=list(benches), device=device_name, phase=phase,
                       tokens=tokens, context=context, batch=batch, mtp=mtp, tolerance=parse_tolerance(tolerance),
                       top=top, runtime=given_runtime,
                       recipe_pinned=ctx.get_parameter_source("recipe") == ParameterSource.COMMANDLINE)
    announce_compiles()
    with stage("align: matching the evidence against the memory and perf models"):
        ticket = run_align(req)
    timings = ticket.pop("_timings", {})
    # everything rendered before anything is written: a failure leaves every existing file as it was
    ticket["figures"] = []
    md = render_ticket(ticket)
    js = json.dumps(ticket, indent=2, default=str) + "\n"
    created = output_dir is not None and not check_output_dir(output_dir, "--output-dir")
    if output_dir is not None and not created:      # every target checked before any is staged
        from ..align.ticket_png import figure_names
        for name in ["ticket.json", "ticket.md", *(figure_names(ticket) if png else [])]:
            check_output_path(output_dir / name, "--output-dir")
    try:
        with all_or_none():         # --output, ticket.json, ticket.md and the PNGs: all written, or none changed
            if output is not None:
                write_output(output, js if fmt == "json" else md, "--output")
            if output_dir is not None:
                prepare_output_dir(output_dir, "--output-dir")
                if png:
                    from ..align.ticket_png import figure_names, write_figures
                    ticket["figures"] = figure_names(ticket)
                    md = render_ticket(ticket)
                    js = json.dumps(ticket, indent=2, default=str) + "\n"
                    write_figures(ticket, output_dir)
                write_output(output_dir / "ticket.json", js, "--output-dir")
                write_output(output_dir / "ticket.md", md, "--output-dir")
    except BaseException:
        if created:                 # the directory audit made for this ticket goes with it
            with contextlib.suppress(OSError):
                os.rmdir(output_dir)
        raise
    if output_dir is None:
        click.echo(ticket["title"])
        click.echo(f"wrote {output} (memory search {timings.get('memory_search_s', 0):.2f} s)", err=True)
        if ticket["tolerance"]["ok"] is False:
            raise SystemExit(4)
        return
    click.echo(ticket["title"])
    if ticket["memory"] and ticket["memory"]["candidates"]:
        click.echo(f"best candidate: {ticket['memory']['candidates'][0]['label']}")
    click.echo(f"wrote {output_dir / 'ticket.md'}, ticket.json" +
               "".join(f", {f}" for f in ticket["figures"])
               + f" (memory search {timings.get('memory_search_s', 0):.2f} s)", err=True)
    if ticket["tolerance"]["ok"] is False:
        raise SystemExit(4)
