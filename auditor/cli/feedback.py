"""What a command says on stderr while it works: one line when numba compiles the kernels (a first
run after install waits 10-40 s for it), and a ticking stage line on a terminal for work that can
take seconds. Off with ``--quiet``; stage lines only on a TTY, so logs and pipes stay clean.

Why here: a wait without a word reads as a hang (issue 30: a first ``audit plan`` sat silent for
24.6 s). Reports go to stdout and are never touched by any of this.
"""
from __future__ import annotations

import sys
import threading
import time
from contextlib import contextmanager
from typing import Any, Callable, Iterator

import click

#: what the first compile of a run prints (measured cold on this project's 2-core CI machine:
#: `audit perf` 15.6 s, `audit bench` 42.7 s, `audit plan` after those 8.6 s; later runs load numba's cache)
COMPILE_NOTICE = ("audit: note: compiling the numba kernels (first run after install or an upgrade: usually "
                  "10-40 s on 2 cores, once; later runs load them from numba's cache)")

_state = {"quiet": False, "announced": False, "listening": False}
_line_open = threading.Event()      # a stage line is on screen without its newline yet


def _set_quiet(ctx: click.Context, param: click.Parameter, value: bool) -> bool:
    if value:
        _state["quiet"] = True
    return value


def quiet_option(f: Callable) -> Callable:
    """``--quiet`` / ``-q``: no progress and no compile notice on stderr (errors and warnings stay)."""
    return click.option("--quiet", "-q", is_flag=True, default=False, expose_value=False, is_eager=True,
                        callback=_set_quiet,
                        help="no progress lines or compile notice on stderr (errors and warnings still print)")(f)


def set_quiet(value: bool) -> None:
    """Reset between in-process runs (tests call ``main`` many times in one interpreter)."""
    _state["quiet"] = value
    _state["announced"] = False


def is_quiet() -> bool:
    return bool(_state["quiet"])


def on_terminal(stream: Any = None) -> bool:
    """Progress is shown: stderr is a terminal and --quiet was not given."""
    stream = sys.stderr if stream is None else stream
    try:
        return not _state["quiet"] and bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def say(text: str) -> None:
    """One message on stderr, on a line of its own: the report on stdout is flushed first (a terminal or
    a ``2>&1`` pipe shows both streams in the order written) and an open stage line is ended, so a
    message is never glued to the end of another line."""
    try:
        sys.stdout.flush()
    except (OSError, ValueError):       # a closed or broken stdout: the message still goes to stderr
        pass
    if _line_open.is_set():          # end the stage line first: one message per line
        sys.stderr.write("\n")
        _line_open.clear()
    sys.stderr.write(text.rstrip("\n") + "\n")
    sys.stderr.flush()


def announce_compiles() -> None:
    """Print ``COMPILE_NOTICE`` once, when numba starts compiling a kernel it found no cache for.

    numba raises its ``numba:compile`` event only on a cache miss (``numba/core/dispatcher.py``,
    ``Dispatcher.compile``: ``_cache.load_overload`` first), so a warm run prints nothing. Call it
    just before the work: it imports numba, which a command that compiles kernels pays anyway."""
    if _state["listening"]:
        return
    from numba.core import event

    class _Notice(event.Listener):
        def on_start(self, ev: Any) -> None:
            if not _state["announced"] and not _state["quiet"]:
                _state["announced"] = True
                say(COMPILE_NOTICE)

        def on_end(self, ev: Any) -> None:
            pass

    event.register("numba:compile", _Notice())
    _state["listening"] = True


@contextmanager
def stage(text: str) -> Iterator[None]:
    """``audit: TEXT ... 3 s`` on stderr while the block runs (terminal only), ticking each second,
    closed with the time it took."""
    if not on_terminal():
        yield
        return
    t0 = time.perf_counter()
    stop = threading.Event()

    def draw(final: bool = False) -> None:
        secs = time.perf_counter() - t0
        tail = f"done in {secs:.1f} s" if final else f"{secs:.0f} s"
        if not _line_open.is_set() and not final:
            _line_open.set()
        sys.stderr.write(f"\r\033[Kaudit: {text} ... {tail}" + ("\n" if final else ""))
        sys.stderr.flush()

    def tick() -> None:
        while not stop.wait(1.0):
            draw()

    draw()
    ticker = threading.Thread(target=tick, daemon=True)
    ticker.start()
    try:
        yield
    finally:
        stop.set()
        ticker.join()
        draw(final=True)
        _line_open.clear()
