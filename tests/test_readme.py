"""The README cannot go stale: every example output in it is what the tool prints today, and its
quick start is what CI runs."""
from __future__ import annotations

import re
from pathlib import Path

from auditor import docs

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text(encoding="utf-8")


def test_every_readme_example_is_what_the_tool_prints():
    exs = docs.examples(README)
    assert len(exs) >= 4, "the README lost its generated examples"
    if not (ROOT.parent / "shared").is_dir():      # examples that read the reference data
        exs = [ex for ex in exs if "../shared" not in ex.command]
    stale = [ex.command for ex in exs if README[ex.start:ex.end] != docs.run_example(ex.command)]
    assert not stale, f"stale README examples (run `python -m auditor.docs`): {stale}"


def test_no_hand_pasted_tool_output():
    """A fenced block that shows an `$ audit` run must sit under an example marker."""
    covered = {README[ex.start:ex.end] for ex in docs.examples(README)}
    blocks = re.findall(r"^```[a-z]*\n(.*?)^```\n", README, re.M | re.S)
    pasted = [b.splitlines()[0] for b in blocks if b.startswith("$ audit") and b not in covered]
    assert not pasted, f"README blocks with tool output but no example marker: {pasted}"


def test_quick_start_test_command_is_what_ci_runs():
    ci = (ROOT / ".ci" / "run").read_text()
    quick = README.split("## Quick start", 1)[1].split("##", 1)[0]
    test_line = next(ln for ln in quick.splitlines() if "pytest" in ln)
    command = test_line.split("#")[0].strip()
    assert command in ci, f"README test command {command!r} is not what .ci/run calls"


def test_filters_and_exit_codes(tmp_path):
    body = docs.run_example("memory glm-5.1 --tp 16 --budget 1GiB | head 2")
    lines = body.splitlines()
    assert lines[0] == "$ audit memory glm-5.1 --tp 16 --budget 1GiB"
    assert len(lines) == 4 and lines[-1] == "(exit code 3)"      # 2 lines kept + the command + exit code
    grep = docs.run_example("memory glm-5.1 --tp 16 | grep ^worst rank")
    assert grep.splitlines()[1].startswith("worst rank")
    full = docs.run_example("memory glm-5.1 --tp 16 | head 6").splitlines()
    dropped = docs.run_example("memory glm-5.1 --tp 16 | head 6 | drop ^(NOTE|plan):").splitlines()
    assert dropped == [ln for ln in full if not ln.startswith(("NOTE", "plan:"))] and len(dropped) == len(full) - 2
    tail = docs.run_example("memory glm-5.1 --tp 16 | head 6 | from ^plan:").splitlines()
    assert tail[1:] == full[full.index(next(ln for ln in full if ln.startswith("plan:"))):]


def test_file_filter_shows_what_the_command_wrote():
    body = docs.run_example("synth $TMP/m --model dense-32b --recipe bf16 | file m/config.json | head 3")
    lines = body.splitlines()
    assert lines[0] == "$ audit synth /tmp/m --model dense-32b --recipe bf16"
    assert lines[1] == "{" and len(lines) == 4       # the written config.json, not synth's summary line
