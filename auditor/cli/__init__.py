"""Command line entry point: the click group, the error handler, and one module per command group.

Thin by design: a command parses options, calls the library, renders, exits. Bad input
(AuditInputError) becomes one line on stderr and exit code 2, never a traceback. Command modules
import their library lazily, so ``audit memory`` never pays for numba.
"""
from __future__ import annotations

import gc
import sys
from collections.abc import MutableMapping

import click

from .. import __version__
from ..errors import AuditInputError
#: command name -> (module under auditor.cli, attribute): a command's module (and what it imports) is
#: loaded only when that command runs, so ``audit memory`` never pays for perf, serving, planner or
#: matplotlib.
COMMANDS: dict[str, tuple[str, str]] = {
    "memory": ("memory", "memory_command"), "inventory": ("memory", "inventory_command"),
    "synth": ("synth", "synth_command"), "perf": ("perf", "perf_command"), "sweep": ("perf", "sweep_command"),
    "calibrate": ("calibrate", "calibrate_command"), "kernels": ("kernels", "kernels_group"),
    "align": ("align", "align_command"), "plan": ("plan", "plan_command"),
    "evidence": ("evidence", "evidence_command"), "bench": ("bench", "bench_command"),
}


class LazyCommands(MutableMapping):
    """``group.commands`` whose values are imported by name when first looked up (``COMMANDS``);
    iteration lists the names without importing anything."""

    def __init__(self) -> None:
        self._loaded: dict[str, click.Command] = {}

    def __getitem__(self, name: str) -> click.Command:
        if name not in self._loaded:
            if name not in COMMANDS:
                raise KeyError(name)
            import importlib
            module, attr = COMMANDS[name]
            try:
                mod = importlib.import_module(f"{__name__}.{module}")
            except KeyError as exc:
                # a KeyError would read as "no such command" (Mapping.get): a command that fails to load is a
                # bug of audit's and must say so
                raise RuntimeError(f"audit's command {name!r} failed to load: KeyError {exc}") from exc
            self._loaded[name] = getattr(mod, attr)
        return self._loaded[name]

    def __setitem__(self, name: str, command: click.Command) -> None:
        self._loaded[name] = command

    def __delitem__(self, name: str) -> None:
        del self._loaded[name]

    def __iter__(self):
        return iter(list(COMMANDS) + [n for n in self._loaded if n not in COMMANDS])

    def __len__(self) -> int:
        return len(set(COMMANDS) | set(self._loaded))


class LazyGroup(click.Group):
    """A click group whose commands load lazily (``LazyCommands``)."""

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self.commands = LazyCommands()


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="audit")
def cli() -> None:
    """Memory and performance auditor for DeepSeek-style sparse-attention (DSA) models."""


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
    from .feedback import set_quiet
    set_quiet(False)
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
    code = main()
    # The process ends here: without this the interpreter's last collection at exit walks every
    # object the command left (measured ~40 ms of a 0.7 s `audit memory`); frozen objects are
    # skipped, and everything is still released and flushed as at any exit.
    gc.freeze()
    sys.exit(code)


if __name__ == "__main__":
    entry()
