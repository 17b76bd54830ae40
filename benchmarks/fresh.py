"""Shared by the benchmarks that time `audit` as a user runs it: one fresh process per run.

Wall time says what a user waits; CPU time (user + sys of the child) says more when other jobs
share the 2 cores, so both are returned."""
from __future__ import annotations

import resource
import subprocess
import sys
import time
from pathlib import Path


def run_fresh(argv: list[str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one `python -m auditor ARGV` process."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    subprocess.run([sys.executable, "-m", "auditor", *argv], check=True, capture_output=True)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


CPU_SECONDS: list[float] = []     # CPU seconds of every run_fresh/timed call, in order


def timed(argv: list[str]) -> float:
    """Wall seconds of one fresh process; its CPU seconds are appended to CPU_SECONDS."""
    wall, cpu = run_fresh(argv)
    CPU_SECONDS.append(cpu)
    return wall


def compile_package() -> None:
    """Byte-compile auditor first, as any install or first run does (PYTHONDONTWRITEBYTECODE shells
    would otherwise recompile it in every timed process)."""
    import auditor
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(Path(auditor.__file__).parent)],
                   check=True, capture_output=True)
