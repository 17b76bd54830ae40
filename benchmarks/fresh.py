"""Shared by the benchmarks that time `audit` as a user runs it: one fresh process per run.

Wall time says what a user waits; CPU time (user + sys of the child) says more when other jobs
share the 2 cores, so both are returned."""
from __future__ import annotations

import resource
import subprocess
import sys
import time
from pathlib import Path


def run_fresh(argv: list[str], env: dict[str, str] | None = None) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one `python -m auditor ARGV` process."""
    return run_python(["-m", "auditor", *argv], env)


def run_python(argv: list[str], env: dict[str, str] | None = None) -> tuple[float, float]:
    """(wall seconds, CPU seconds) of one fresh `python ARGV` process (``-c CODE`` or ``-m MODULE ...``)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t = time.perf_counter()
    subprocess.run([sys.executable, *argv], check=True, capture_output=True, env=env)
    wall = time.perf_counter() - t
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


CPU_SECONDS: list[float] = []     # CPU seconds of every run_fresh/timed call, in order


def timed(argv: list[str]) -> float:
    """Wall seconds of one fresh process; its CPU seconds are appended to CPU_SECONDS."""
    wall, cpu = run_fresh(argv)
    CPU_SECONDS.append(cpu)
    return wall


#: what a user would write to inventory a checkpoint: every shard opened with safetensors' own
#: safe_open, every tensor's name, dtype and shape read (the bar `audit memory` is held to)
SAFE_OPEN_SCAN = """
import sys
from pathlib import Path
from safetensors import safe_open
rows = 0
for path in sorted(Path(sys.argv[1]).glob("*.safetensors")):
    with safe_open(str(path), framework="numpy") as f:
        for k in f.keys():
            sl = f.get_slice(k)
            sl.get_dtype(), sl.get_shape()
            rows += 1
print(rows)
"""


def safe_open_scan(model_dir: Path) -> tuple[float, float]:
    """(wall, CPU) seconds of a fresh process running ``SAFE_OPEN_SCAN`` over MODEL_DIR's shards."""
    return run_python(["-c", SAFE_OPEN_SCAN, str(model_dir)])


def compile_package() -> None:
    """Byte-compile auditor first, as any install or first run does (PYTHONDONTWRITEBYTECODE shells
    would otherwise recompile it in every timed process)."""
    import auditor
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(Path(auditor.__file__).parent)],
                   check=True, capture_output=True)


#: a fixed pure-Python loop, timed in a fresh process: this machine's speed swings ~2-4x over a day, so
#: every timing benchmark prints it beside its figures (compare runs by their ratio to it, or side by side)
MACHINE_REFERENCE = "import time; t = time.perf_counter(); sum(range(10**8)); print(time.perf_counter() - t)"


def machine_reference() -> float:
    """Seconds of ``MACHINE_REFERENCE`` (1.1-1.2 s on an idle machine of this kind, 2-4 s when it is loaded)."""
    out = subprocess.run([sys.executable, "-c", MACHINE_REFERENCE], check=True, capture_output=True, text=True)
    return float(out.stdout)
