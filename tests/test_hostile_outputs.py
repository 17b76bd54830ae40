"""A failed multi-output command changes nothing (issue 31): ``plan --output X --png /dev/full``, ``align
--output-dir`` whose ticket.md is a directory, and the one writer's all-or-none block (auditor.outputs) under
failures injected at every step, with the bad-input contract of tests/hostile_harness.py."""
from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from auditor import outputs
from auditor.errors import AuditInputError
from hostile_harness import check_contract, fingerprint, run_in_process

PLAN = ["plan", "glm-5.1", "--isl", "1000", "--osl", "100", "--ttft-ms", "5000", "--tpot-ms", "100", "--dies", "16"]
LOG = "(Worker_DP0_TP0_EP0 pid=1) INFO 05-20 09:50:58 [model_runner_v1.py:3150] Loading model weights took 38.2 GB\n"
ALIGN = ["align", "glm-5.1", "--tp", "16", "--dp", "2", "--ep", "32", "--sp", "--recipe", "w8a8"]


def test_plan_png_on_a_full_disk_keeps_the_old_report(tmp_path: Path, capfd) -> None:
    old = tmp_path / "plan.txt"
    old.write_text("the old report\n")
    csv = tmp_path / "plan.csv"
    before = fingerprint(tmp_path)
    run = run_in_process(PLAN + ["--output", old, "--csv", csv, "--png", "/dev/full"], capfd)
    check_contract(run, "error", ("/dev/full", "--png", "No space left"))
    assert fingerprint(tmp_path) == before            # the report kept, no CSV, no temporary file left


def test_plan_writes_all_three_when_it_can(tmp_path: Path, capfd) -> None:
    out, csv, png = tmp_path / "plan.txt", tmp_path / "plan.csv", tmp_path / "plan.png"
    out.write_text("the old report\n")
    run = run_in_process(PLAN + ["--output", out, "--csv", csv, "--png", png], capfd)
    check_contract(run, "any")
    assert out.read_text() != "the old report\n" and csv.stat().st_size and png.read_bytes()[:4] == b"\x89PNG"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["plan.csv", "plan.png", "plan.txt"]
    assert run.err.count("wrote ") == 3


def test_align_with_ticket_md_a_directory_writes_nothing(tmp_path: Path, capfd) -> None:
    log = tmp_path / "l.log"
    log.write_text(LOG)
    out = tmp_path / "out"
    (out / "ticket.md").mkdir(parents=True)
    (out / "ticket.json").write_text("{}\n")
    before = fingerprint(tmp_path)
    run = run_in_process(ALIGN + ["--log", log, "--output-dir", out], capfd)
    check_contract(run, "error", ("ticket.md", "is a directory"))
    assert fingerprint(tmp_path) == before            # ticket.json as it was, no PNG, no temporary file


def test_align_into_a_new_directory_leaves_no_directory_on_failure(tmp_path: Path, capfd) -> None:
    log = tmp_path / "l.log"
    log.write_text(LOG)
    run = run_in_process(ALIGN + ["--log", log, "--no-png", "--output-dir", tmp_path / "new",
                                  "--output", "/dev/full"], capfd)
    check_contract(run, "error", ("/dev/full",))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["l.log"]


@pytest.mark.parametrize("empty", ["", " "])
def test_an_empty_output_dir_is_refused(empty: str, tmp_path: Path, capfd, monkeypatch) -> None:
    """``Path("")`` is the current directory: an empty --output-dir must not write the ticket there."""
    log = tmp_path / "l.log"
    log.write_text(LOG)
    monkeypatch.chdir(tmp_path)
    run = run_in_process(ALIGN + ["--log", log, "--output-dir", empty], capfd)
    check_contract(run, "error", ("--output-dir", "empty path"))
    assert sorted(p.name for p in tmp_path.iterdir()) == ["l.log"]


# -- the all-or-none block itself -------------------------------------------------------------------------------

@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(existing=st.lists(st.booleans(), min_size=1, max_size=5), fail_at=st.integers(0, 12),
       step=st.sampled_from(["write", "replace", "link"]))
def test_a_failure_at_any_step_leaves_every_target_as_it_was(tmp_path_factory, monkeypatch, existing, fail_at,
                                                            step) -> None:
    """Targets (some existing, some new) written in one block; an OSError injected at the n-th write, rename or
    backup link: either every target holds its new content, or every one holds its old content (or is absent
    when it was new), and no temporary file is left beside them."""
    d = tmp_path_factory.mktemp("out")
    targets = [d / f"t{i}.txt" for i in range(len(existing))]
    for t, there in zip(targets, existing):
        if there:
            t.write_text(f"old {t.name}\n")
    before = fingerprint(d)
    calls = {"n": 0}

    def failing(real):
        def wrapped(*a, **k):
            calls["n"] += 1
            if calls["n"] == fail_at + 1:
                raise OSError(28, "No space left on device")
            return real(*a, **k)
        return wrapped

    with monkeypatch.context() as m:
        if step == "replace":
            m.setattr(os, "replace", failing(os.replace))
        elif step == "link":
            m.setattr(os, "link", failing(os.link))
        try:
            with outputs.all_or_none():
                for t in targets:
                    with outputs.open_output(t, "--output", text=True) as f:
                        if step == "write":
                            failing(lambda s: None)(None)
                        f.write(f"new {t.name}\n")
        except AuditInputError as exc:
            assert "\n" not in str(exc)
            assert fingerprint(d) == before
            return
    assert [t.read_text() for t in targets] == [f"new {t.name}\n" for t in targets]
    assert sorted(p.name for p in d.iterdir()) == sorted(t.name for t in targets)


def test_a_device_target_is_written_only_when_the_files_are_staged(tmp_path: Path) -> None:
    """/dev/full fails before any regular target is replaced; /dev/null is written in place."""
    keep = tmp_path / "keep.txt"
    keep.write_text("old\n")
    with pytest.raises(AuditInputError, match="/dev/full"):
        with outputs.all_or_none():
            outputs.write_output(keep, "new\n")
            outputs.write_output("/dev/full", "x" * 10, "--png")
    assert keep.read_text() == "old\n" and sorted(p.name for p in tmp_path.iterdir()) == ["keep.txt"]
    with outputs.all_or_none():
        outputs.write_output(keep, "new\n")
        outputs.write_output("/dev/null", "x", "--png")
    assert keep.read_text() == "new\n"
