"""Command line entry point: the click group, the error handler, and one module per command group.

Thin by design: a command parses options, calls the library, renders, exits. Bad input
(AuditInputError) becomes one line on stderr and exit code 2, never a traceback. Command modules
import their library lazily, so ``audit memory`` never pays for numba.
"""
from __future__ import annotations

import gc
import sys

import click

from .. import __version__
from ..errors import AuditInputError
from .align import align_command
from .bench import bench_command
from .calibrate import calibrate_command
from .evidence import evidence_command
from .kernels import kernels_group
from .memory import inventory_command, memory_command
from .perf import perf_command, sweep_command
from .plan import plan_command
from .synth import synth_command


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="audit")
def cli() -> None:
    """Memory and performance auditor for DeepSeek-style sparse-attention (DSA) models."""


for _command in (memory_command, inventory_command, synth_command, perf_command, sweep_command,
                 calibrate_command, kernels_group, align_command, plan_command, evidence_command, bench_command):
    cli.add_command(_command)


def usage_line(exc: click.ClickException) -> str:
    """click's own errors (bad choice, bad integer, unknown option, missing argument) as the one
    line every other input error gets: ``<option>: <problem> (see 'audit CMD --help')``."""
    ctx = getattr(exc, "ctx", None)
    hint = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
    param = getattr(exc, "param", None)
    if isinstance(exc, click.NoSuchOption):
        close = sorted(exc.possibilities or ())[:3]
        text = f"{exc.option_name}: no such option" + (f" (did you mean {', '.join(close)}?)" if close else "")
    elif isinstance(exc, click.BadParameter) and not isinstance(exc, click.MissingParameter) and param is not None:
        where = param.opts[0] if isinstance(param, click.Option) and param.opts else param.human_readable_name
        text = f"{where}: {exc.message}"
    else:
        text = exc.format_message()
    return " ".join(f"{text.rstrip('.')}{hint}".split())


def main(argv: list[str] | None = None) -> int:
    """Run the CLI; return the exit code: 0 ok, 2 bad input or usage (one ``audit: error:`` line on
    stderr), 3 does not fit (``--budget`` exceeded, or one ``--max-model-len`` request has no room
    for its KV cache), 4 ``--strict`` with an error finding or ``align --tolerance`` exceeded."""
    # A short-lived process that builds ~10^6 small objects for a full checkpoint: the cyclic GC
    # would rescan them over and over for nothing (nothing here makes reference cycles that matter).
    gc.disable()
    try:
        cli.main(args=argv, prog_name="audit", standalone_mode=False)
    except AuditInputError as exc:
        click.echo(f"audit: error: {exc.one_line()}", err=True)
        return 2
    except click.exceptions.NoArgsIsHelpError as exc:   # bare `audit` / `audit kernels`: help, not an error
        click.echo(exc.ctx.get_help())
        return 0
    except click.exceptions.Abort:
        click.echo("audit: error: aborted", err=True)
        return 2
    except click.exceptions.Exit as exc:
        return exc.exit_code
    except click.ClickException as exc:
        click.echo(f"audit: error: {usage_line(exc)}", err=True)
        return 2
    except BrokenPipeError:
        return 0
    except OSError as exc:     # last line of defence: an environment failure is bad input, not a bug
        where = f"{exc.filename}: " if exc.filename else ""
        click.echo(f"audit: error: {' '.join((where + (exc.strerror or str(exc))).split())}", err=True)
        return 2
    except SystemExit as exc:   # commands signal exit codes (e.g. --budget exceeded -> 3)
        return int(exc.code or 0)
    finally:
        gc.enable()
    return 0


def entry() -> None:
    sys.exit(main())


if __name__ == "__main__":
    entry()
