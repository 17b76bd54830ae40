"""Every message on a line of its own (issue 30: two were printed glued, ``...details.audit: ValueError: No
available memory...``).

`audit memory` prints the engine's start-up error twice: in the report (stdout, "vLLM would print") and as
``audit: ValueError: ...`` on stderr. Merged (a terminal, ``2>&1``), the two must stay two lines, and a
message printed while a stage line is open on a terminal must start a line of its own."""
from __future__ import annotations

import io
import os
import pty
import subprocess
import sys

import pytest

from auditor.cli import feedback
from conftest import drain_pty

NO_MEMORY = ["memory", "deepseek-v3.2", "--tp", "1", "--max-model-len", "8192"]
SHORTFALL = ["memory", "glm-5.1", "--tp", "16", "--dp", "2", "--ep", "32", "--sp", "--dsa-cp",
             "--max-model-len", "400000"]
GLUED = ("details.audit:", "GiB)audit:", "saudit:")


def _shown(text: str) -> list[str]:
    """The lines a terminal shows: each line's text after its last carriage return (stage redraws)."""
    return [ln.rsplit("\r", 1)[-1].replace("\x1b[K", "") for ln in text.replace("\r\n", "\n").split("\n")]


def _assert_one_message_per_line(text: str) -> None:
    lines = _shown(text)
    assert not [ln for ln in lines if ln.count("audit:") > 1], [ln[:160] for ln in lines if ln.count("audit:") > 1]
    assert not any(g in text for g in GLUED)


def _merged(argv: list[str]) -> tuple[int, str]:
    """`python -m auditor ARGV 2>&1`: stdout and stderr into one pipe, as a shell merges them."""
    r = subprocess.run([sys.executable, "-m", "auditor", *argv], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, timeout=300)
    return r.returncode, r.stdout


def _on_a_terminal(argv: list[str]) -> tuple[int, str]:
    """`python -m auditor ARGV` with stdout and stderr on one pseudo-terminal, as a user sees it."""
    master, slave = pty.openpty()
    proc = subprocess.Popen([sys.executable, "-m", "auditor", *argv], stdout=slave, stderr=slave,
                            stdin=subprocess.DEVNULL)
    os.close(slave)
    data = drain_pty(master)
    rc = proc.wait(timeout=300)
    os.close(master)
    return rc, data.decode(errors="replace")


@pytest.mark.parametrize("argv", [NO_MEMORY, NO_MEMORY + ["--format", "markdown"], NO_MEMORY + ["--format", "json"],
                                  NO_MEMORY + ["--format", "csv", "-o", "-"], SHORTFALL],
                         ids=["no-memory", "markdown", "json", "csv-stdout", "shortfall"])
def test_report_and_engine_error_are_separate_lines(argv) -> None:
    rc, text = _merged(argv)
    assert rc == 3
    _assert_one_message_per_line(text)
    errors = [ln for ln in text.splitlines() if ln.startswith("audit: ValueError: ")]
    assert len(errors) == 1 and errors[0].endswith("for more details.")


def test_on_a_terminal_too() -> None:
    rc, text = _on_a_terminal(NO_MEMORY)
    assert rc == 3
    _assert_one_message_per_line(text)
    assert any(ln.startswith("audit: ValueError: No available memory") for ln in _shown(text))


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture()
def clean_state():
    feedback.set_quiet(False)
    feedback._line_open.clear()
    yield
    feedback._line_open.clear()


def _tty(monkeypatch) -> _Tty:
    # in the test itself: pytest's capture puts its own stderr back after fixtures run
    err = _Tty()
    monkeypatch.setattr(sys, "stderr", err)
    return err


def test_a_message_during_a_stage_starts_its_own_line(clean_state, monkeypatch) -> None:
    """A message while the stage line is open (no newline yet) goes below it, never after it."""
    tty = _tty(monkeypatch)
    with feedback.stage("plan: searching"):
        feedback._line_open.set()           # the ticker has drawn the open line
        tty.write("\r\x1b[Kaudit: plan: searching ... 1 s")
        feedback.say("audit: ValueError: No available memory for the cache blocks.")
    _assert_one_message_per_line(tty.getvalue())
    assert "\naudit: ValueError: No available memory" in tty.getvalue()


def test_no_blank_line_after_a_finished_stage(clean_state, monkeypatch) -> None:
    """A stage closes its own line; the next message follows directly (no empty line between)."""
    tty = _tty(monkeypatch)
    with feedback.stage("plan: searching"):
        feedback._line_open.set()
    feedback.say("audit: note: next")
    lines = _shown(tty.getvalue())
    assert lines[-2] == "audit: note: next" and lines[-3].startswith("audit: plan: searching ... done in")


def test_stdout_is_flushed_before_a_message(monkeypatch) -> None:
    """A report written without a flush comes out before the message that follows it."""
    order: list[str] = []

    class Stream(io.StringIO):
        def __init__(self, name: str) -> None:
            super().__init__()
            self.name, self.pending = name, ""

        def write(self, s: str) -> int:
            self.pending += s
            return len(s)

        def flush(self) -> None:
            if self.pending:
                order.append(f"{self.name}:{self.pending}")
                self.pending = ""

    out, err = Stream("out"), Stream("err")
    monkeypatch.setattr(sys, "stdout", out)
    monkeypatch.setattr(sys, "stderr", err)
    sys.stdout.write("  ValueError: ... for more details.\n")
    feedback.say("audit: ValueError: ... for more details.")
    assert order == ["out:  ValueError: ... for more details.\n", "err:audit: ValueError: ... for more details.\n"]
