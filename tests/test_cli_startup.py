"""What a command loads: each imports only what it uses (issue 30: `audit memory` paid for every
command's modules before doing any work). Checked in a fresh interpreter, by the modules it ends
up holding; speed itself is measured in benchmarks/bench_memory.py, not here."""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

#: packages `audit memory` never needs (perf model, serving simulation, planner, plots, numba core)
NOT_FOR_MEMORY = ("numba", "matplotlib", "auditor_kernels", "auditor.perf", "auditor.serving", "auditor.planner",
                  "auditor.align", "auditor.evidence", "auditor.cli.perf", "auditor.cli.plan", "auditor.cli.bench",
                  "auditor.cli.align", "auditor.cli.calibrate", "auditor.cli.kernels")

_PROBE = """
import json, sys
from auditor.cli import main
rc = main(sys.argv[1:])
print(json.dumps({"rc": rc, "modules": sorted(sys.modules)}))
"""


def loaded_by(argv: list[str]) -> tuple[int, set[str]]:
    """(exit code, every module name loaded) of one fresh ``audit ARGV`` run."""
    run = subprocess.run([sys.executable, "-c", _PROBE, *argv], capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    last = json.loads(run.stdout.strip().splitlines()[-1])
    return last["rc"], set(last["modules"])


def offenders(modules: set[str], packages: tuple[str, ...]) -> list[str]:
    return sorted(m for m in modules if any(m == p or m.startswith(p + ".") for p in packages))


@pytest.mark.quick
def test_bare_import_loads_no_command() -> None:
    rc, mods = loaded_by(["--version"])
    assert rc == 0
    assert offenders(mods, NOT_FOR_MEMORY + ("auditor.cli.memory", "auditor.engines", "numpy")) == []


def test_memory_loads_nothing_it_does_not_use() -> None:
    rc, mods = loaded_by(["memory", "glm-5.1", "--tp", "16", "--ep", "16", "--format", "json", "-o", os.devnull])
    assert rc == 0
    assert "auditor.cli.memory" in mods          # the probe did run the command
    assert offenders(mods, NOT_FOR_MEMORY) == []


def test_a_command_loads_only_the_engine_family_it_runs() -> None:
    """The engine registry imports only the family a ``FAMILY@VERSION`` names: a vLLM-Ascend run never
    imports upstream vLLM's folder (its log patterns and GPU kernels) and a CUDA run never vLLM-Ascend's.
    ``--help`` still lists every family's profiles, as an unknown family's error does."""
    _, ascend = loaded_by(["memory", "glm-5.1", "--tp", "16", "--ep", "16", "--format", "json", "-o", os.devnull])
    assert "auditor.engines.vllm_ascend" in ascend and offenders(ascend, ("auditor.engines.vllm",)) == []
    _, cuda = loaded_by(["memory", "glm-5.1", "--engine", "vllm@0.28.0", "--device", "h200", "--tp", "8",
                         "--format", "json", "-o", os.devnull])
    assert "auditor.engines.vllm" in cuda and offenders(cuda, ("auditor.engines.vllm_ascend",)) == []
    from auditor.engines.registry import families
    from click.testing import CliRunner

    from auditor.cli import cli
    shown = CliRunner().invoke(cli, ["memory", "--help"], terminal_width=400).output
    assert all(f"{name} (profiles" in shown for name in families())


def test_perf_loads_no_planner_serving_or_plots() -> None:
    rc, mods = loaded_by(["perf", "glm-5.1", "--phase", "decode", "--format", "json", "-o", os.devnull])
    assert rc == 0
    assert "auditor.perf.api" in mods
    assert offenders(mods, ("matplotlib", "auditor.planner", "auditor.cli.plan", "auditor.cli.bench",
                            "auditor.align", "auditor.cli.align")) == []


def test_every_listed_command_loads() -> None:
    """The lazy table names real commands: each resolves to a click command of that name."""
    import click

    from auditor.cli import COMMANDS, cli
    for name in COMMANDS:
        cmd = cli.commands[name]
        assert isinstance(cmd, click.Command) and cmd.name == name
    assert sorted(cli.list_commands(click.Context(cli))) == sorted(COMMANDS)


def test_a_command_that_fails_to_load_is_not_reported_missing(monkeypatch):
    """A KeyError raised while a command's module imports (a missing option cap once did) surfaced as "No such
    command 'memory'. Did you mean 'memory'?"; it is an internal error and says which command failed."""
    import importlib

    import pytest

    from auditor.cli import LazyCommands

    def broken(name, *a, **k):
        raise KeyError("--block-size")
    monkeypatch.setattr(importlib, "import_module", broken)
    with pytest.raises(RuntimeError, match="'memory' failed to load"):
        LazyCommands()["memory"]
