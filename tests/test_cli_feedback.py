"""What commands say on stderr while they work (issue 30: first runs sat silent for 20-40 s while
numba compiled; warm plan/align/calibrate showed nothing on a terminal for seconds).

Stage lines only on a terminal and never with --quiet; the compile notice once, only when numba
really compiles (a cache miss), never on a warm run."""
from __future__ import annotations

import io
import os
import pty
import subprocess
import sys
from pathlib import Path

import pytest

from auditor.cli import feedback
from auditor.cli.feedback import COMPILE_NOTICE
from conftest import drain_pty


class FakeTTY(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.fixture(autouse=True)
def _loud():
    feedback.set_quiet(False)
    yield
    feedback.set_quiet(False)


@pytest.mark.quick
def test_stage_line_on_a_terminal(monkeypatch) -> None:
    err = FakeTTY()
    monkeypatch.setattr(sys, "stderr", err)
    with feedback.stage("plan: searching 32 dies"):
        pass
    text = err.getvalue()
    assert "audit: plan: searching 32 dies ... " in text and text.endswith(" s\n")
    assert "done in" in text


@pytest.mark.quick
def test_no_stage_line_off_a_terminal_or_quiet(monkeypatch) -> None:
    err = io.StringIO()
    monkeypatch.setattr(sys, "stderr", err)
    with feedback.stage("plan: searching"):
        pass
    assert err.getvalue() == ""
    tty = FakeTTY()
    monkeypatch.setattr(sys, "stderr", tty)
    feedback.set_quiet(True)
    with feedback.stage("plan: searching"):
        pass
    assert tty.getvalue() == ""


@pytest.mark.quick
def test_compile_notice_once_on_a_real_compile(capsys, monkeypatch) -> None:
    """A function numba has never seen compiles: the notice prints once, however many compile."""
    from numba import njit
    monkeypatch.setattr(feedback, "say", feedback.say.__wrapped__)   # conftest drops it in-process

    feedback.announce_compiles()

    @njit(cache=False)
    def twice(x):
        return 2 * x

    @njit(cache=False)
    def thrice(x):
        return 3 * x

    assert twice(2) == 4 and thrice(2) == 6
    err = capsys.readouterr().err
    assert err.count(COMPILE_NOTICE) == 1


@pytest.mark.quick
def test_compile_notice_silent_when_quiet(capsys, monkeypatch) -> None:
    from numba import njit
    monkeypatch.setattr(feedback, "say", feedback.say.__wrapped__)

    feedback.announce_compiles()
    feedback.set_quiet(True)

    @njit(cache=False)
    def plus(x):
        return x + 1

    assert plus(1) == 2
    assert COMPILE_NOTICE not in capsys.readouterr().err


def _run_with_tty_stderr(argv: list[str], env: dict[str, str] | None = None) -> tuple[int, str, str]:
    """(rc, stdout, stderr) of `python -m auditor ARGV` with stderr on a pseudo-terminal."""
    import tempfile
    master, slave = pty.openpty()
    sink = tempfile.TemporaryFile()          # a file, not a pipe: a full pipe would block the child
    proc = subprocess.Popen([sys.executable, "-m", "auditor", *argv], stdout=sink, stderr=slave, env=env)
    os.close(slave)
    data = drain_pty(master)
    rc = proc.wait(timeout=300)
    os.close(master)
    sink.seek(0)
    out = sink.read().decode()
    return rc, out, data.decode(errors="replace")


PERF = ["perf", "glm-5.1", "--phase", "decode", "--format", "json"]


def test_perf_shows_its_stage_on_a_terminal_only() -> None:
    rc, out, err = _run_with_tty_stderr(PERF)
    assert rc == 0 and "audit: perf: modelling decode ... " in err and "done in" in err
    piped = subprocess.run([sys.executable, "-m", "auditor", *PERF], capture_output=True, text=True, timeout=300)
    assert piped.returncode == 0 and "audit: perf:" not in piped.stderr
    assert piped.stdout == out                     # the report itself never changes
    rc, out_q, err_q = _run_with_tty_stderr(PERF + ["--quiet"])
    assert rc == 0 and "audit: perf:" not in err_q and out_q == out


CACHED_RUNS = [
    ["perf", "glm-5.1", "--tp", "16", "--dp", "2", "--ep", "32", "--sp", "--mtp", "1"],
    ["sweep", "glm-5.1", "--tp", "8,16", "--dp", "1,2", "--batch", "1,4"],
    ["bench", "glm-5.1", "--tp", "16", "--dp", "2", "--ep", "on", "--sp", "--concurrency", "8", "--isl", "2048",
     "--osl", "64"],
    ["plan", "glm-5.1", "--dies", "16", "--isl", "2048", "--osl", "256", "--ttft-ms", "4000", "--tpot-ms", "60"],
]


@pytest.mark.slow
def test_numba_cache_covers_every_command(tmp_path: Path) -> None:
    """Cold cache: the first run of the commands compiles (the notice prints); a second round with the
    same cache compiles nothing, so every kernel signature these commands use is in numba's cache."""
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path / "numba"))
    first = [subprocess.run([sys.executable, "-m", "auditor", *a], capture_output=True, text=True, env=env,
                            timeout=900) for a in CACHED_RUNS]
    assert all(r.returncode == 0 for r in first), [r.stderr[-400:] for r in first]
    assert COMPILE_NOTICE in first[0].stderr
    assert sum(r.stderr.count(COMPILE_NOTICE) for r in first) >= 1
    for argv in CACHED_RUNS:
        again = subprocess.run([sys.executable, "-m", "auditor", *argv], capture_output=True, text=True, env=env,
                               timeout=900)
        assert again.returncode == 0 and COMPILE_NOTICE not in again.stderr, (argv, again.stderr[-400:])
