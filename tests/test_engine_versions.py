"""``--engine`` version resolution: a version resolves to the newest profile at or below it and
says which. Expectations are written by hand from the profiles' versions (0.18.0, the 0.21.0rc
series, 0.23.0, the 0.24.0rc and 0.26.0rc series, main). A release candidate of a modelled release
is that release's series (issue 16: v0.23.0rc1 carries 0.23's C8 split and IndexCache)."""
from __future__ import annotations

import json

import pytest

from auditor.cli import main
from auditor.engines.registry import parse_version, resolve_engine
from auditor.errors import AuditInputError

EXACT = [
    ("main", "vllm-ascend@main"),
    ("vllm-ascend@main", "vllm-ascend@main"),
    ("HEAD", "vllm-ascend@main"),
    ("vllm-ascend@0.18", "vllm-ascend@0.18"),
    ("0.18", "vllm-ascend@0.18"),
    ("vllm-ascend@0.18.0", "vllm-ascend@0.18"),
    ("v0.23.0", "vllm-ascend@0.23"),
    ("0.26", "vllm-ascend@0.26"),                 # the profile's own short name
    ("vllm-ascend@0.26.0rc", "vllm-ascend@0.26"),
    ("vllm-ascend@0.26.0rc1", "vllm-ascend@0.26"),  # a member of the rc series the profile models
    ("0.26.0rc3", "vllm-ascend@0.26"),
]

RESOLVED = [
    ("0.18.1", "vllm-ascend@0.18"),
    ("vllm-ascend@v0.20.2rc1", "vllm-ascend@0.18"),
    ("0.20.2", "vllm-ascend@0.18"),
    ("0.22.1rc1", "vllm-ascend@0.21"),
    ("0.23.1", "vllm-ascend@0.23"),
    ("0.25.1rc1", "vllm-ascend@0.24"),
    ("0.26.0", "vllm-ascend@0.26"),              # the release after the rc series
]

# a release candidate of a modelled release resolves to that release's row, with a note
RC_OF_RELEASE = [("0.23.0rc1", "vllm-ascend@0.23"), ("v0.23.0rc2", "vllm-ascend@0.23"),
                 ("0.18.0rc1", "vllm-ascend@0.18")]

NEWER = ["0.26.1", "0.27.0rc1", "1.0", "vllm-ascend@v2.3.4"]


@pytest.mark.parametrize("text,key", EXACT)
def test_a_profile_named_exactly_resolves_without_note(text, key):
    assert resolve_engine(text) == (key, None)


@pytest.mark.parametrize("text,key", RESOLVED)
def test_a_version_resolves_to_the_newest_profile_at_or_below_it(text, key):
    got, note = resolve_engine(text)
    assert got == key
    assert note is not None and key in note and "at or below" in note


@pytest.mark.parametrize("text,key", RC_OF_RELEASE)
def test_a_release_candidate_is_its_release_series(text, key):
    got, note = resolve_engine(text)
    assert got == key
    assert note is not None and "release candidate of" in note and key in note


@pytest.mark.parametrize("text", NEWER)
def test_newer_than_every_numbered_profile_resolves_to_the_newest_numbered_one(text):
    got, note = resolve_engine(text)
    assert got == "vllm-ascend@0.26"           # never silently the development head
    assert "newer than the newest" in note and "vllm-ascend@main" in note


@pytest.mark.parametrize("text", ["0.17.9", "0.17.0rc1", "v0.13.0"])
def test_older_than_the_oldest_is_an_error_naming_the_range(text):
    with pytest.raises(AuditInputError) as exc:
        resolve_engine(text)
    msg = exc.value.one_line()
    assert msg.startswith("--engine:") and "0.18.0" in msg and "main" in msg


@pytest.mark.parametrize("text", ["foo", "vllm-ascend@", "0.x", "vllm-ascend@0.26.0-beta", "vllm@0.18"])
def test_unreadable_or_other_engine_is_an_error(text):
    with pytest.raises(AuditInputError):
        resolve_engine(text)


@pytest.mark.parametrize("text,main_offered", [("vllm@main", False), ("vllm@0.11", False), ("vllm-ascend@foo", True),
                                               ("0.13.0", True)])
def test_an_error_offers_main_only_where_the_family_models_it(text, main_offered):
    """vLLM's CUDA profiles are releases only: its errors must not suggest vllm@main (which they refuse);
    every version an error gives as an example resolves."""
    import re
    with pytest.raises(AuditInputError) as exc:
        resolve_engine(text)
    msg = exc.value.one_line()
    assert bool(re.search(r"(or|and) [\w-]+@main", msg)) == main_offered, msg
    for example in re.findall(r"e\.g\. ([^ ,)]+)(?:, ([^ ,)]+))?", msg)[0] if "e.g." in msg else ():
        if example and not example.endswith("@main"):
            assert resolve_engine(example)[0]


def test_version_order_key():
    assert parse_version("0.26.0rc1") < parse_version("0.26.0")          # rc before release
    assert parse_version("0.26.0rc") < parse_version("0.26.0rc1")        # the series before rc1
    assert parse_version("0.26.0rc2") < parse_version("0.26.0rc10")      # numeric, not lexical
    assert parse_version("0.9.1") < parse_version("0.18.0")
    assert parse_version("0.23") == parse_version("0.23.0")
    assert parse_version("main") is None


def test_cli_says_which_profile_on_stderr_and_in_the_report(tmp_path, capsys):
    out = tmp_path / "perf.json"
    assert main(["perf", "--tp", "8", "--phase", "decode", "--engine", "vllm-ascend@0.25.1rc1",
                 "--format", "json", "-o", str(out)]) == 0
    err = capsys.readouterr().err
    assert "audit: note: vllm-ascend@0.25.1rc1 modelled as vLLM-Ascend v0.24.0rc (vllm-ascend@0.24)" in err
    js = json.loads(out.read_text())
    assert js["engine"] == "vllm-ascend@0.24"
    assert any("vllm-ascend@0.25.1rc1" in n for n in js["notes"])


def test_cli_memory_assumptions_carry_the_note(tmp_path, capsys):
    out = tmp_path / "mem.json"
    assert main(["memory", "--tp", "16", "--dp", "2", "--ep", "32", "--sp", "--engine", "0.20.2",
                 "--format", "json", "-o", str(out)]) == 0
    js = json.loads(out.read_text())
    assert js["engine"]["name"] == "vllm-ascend@0.18"
    assert any("vllm-ascend@0.20.2 modelled as vLLM-Ascend v0.18.0" in a for a in js["assumptions"])


def test_cli_old_version_is_one_line_exit_2(capsys):
    rc = main(["perf", "--engine", "vllm-ascend@0.17"])
    out, err = capsys.readouterr()
    assert rc == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("audit: error: --engine:") and "0.18.0" in lines[0]


def test_cli_sweep_accepts_a_version(capsys):
    assert main(["sweep", "--tp", "8", "--dp", "1", "--tokens", "1024", "--engine", "0.26.2",
                 "--format", "json"]) == 0
    out, err = capsys.readouterr()
    js = json.loads(out)
    assert "newer than the newest" in err
    assert js["notes"] and "vllm-ascend@0.26" in js["notes"][0]


def test_indexcache_model_on_a_version_without_it_is_flagged(capsys):
    """GLM-5.2 shares top-k over 57 of 78 layers; vLLM-Ascend adapted it in v0.23.0rc1 (PR #10441), so
    on 0.18 every layer keeps its indexer and the report says so (and on 0.23 it does not)."""
    args = ["memory", "glm-5.2", "--tp", "16", "--ep", "16", "--max-model-len", "8K", "--format", "json"]
    assert main(args + ["--engine", "vllm-ascend@0.18"]) in (0, 3)
    old = json.dumps(json.loads(capsys.readouterr().out)["findings"])
    assert main(args + ["--engine", "vllm-ascend@0.23"]) in (0, 3)
    new = json.dumps(json.loads(capsys.readouterr().out)["findings"])
    assert "no IndexCache" in old and "no IndexCache" not in new


@pytest.mark.parametrize("engine,model,async_sched,eager", [
    # v0.18: the MTP drafter is captured only without --async-scheduling (eagle_proposer.py:136-142@v0.18.0)
    ("vllm-ascend@0.18.0", "glm-5.1", False, False), ("vllm-ascend@0.18.0", "glm-5.1", True, True),
    ("vllm-ascend@0.18.0", "deepseek-v3.2", True, True), ("vllm-ascend@0.18.0", "deepseek-v3.2", False, False),
    # v0.19-v0.22: only enforce_eager (read from the launch, not the engine's rule) makes it eager
    ("vllm-ascend@0.22.1rc1", "glm-5.1", True, False), ("vllm-ascend@0.21.0rc1", "glm-5.1", False, False),
    # v0.23.0rc1 on: every GLM model's drafter is forced eager (#11327), async or not; DeepSeek's is captured
    ("vllm-ascend@0.23.0rc1", "glm-5.1", False, True), ("vllm-ascend@main", "glm-5.1", True, True),
    ("vllm-ascend@main", "deepseek-v3.2", True, False), ("vllm-ascend@0.26", "glm-5", False, True),
])
def test_the_drafter_runs_eager_by_the_versions_rule(engine, model, async_sched, eager):
    from auditor.model.presets import preset_spec
    from auditor.engines.registry import as_engine
    assert as_engine(engine).drafter_eager(preset_spec(model), async_sched) is eager


def test_the_versions_drafter_rule_reaches_the_decode_step_host_time():
    """A GLM-5.1 decode instance on v0.18 pays the drafter's launches only under --async-scheduling (the
    bench host model, ``serving.costs``): the same instance's decode host time, by hand from the two
    HostModels' launch counts and the profile's constants."""
    from auditor.context import DeploymentContext
    from auditor.deployment import InstancePlan
    from auditor.devices.profiles import load_device
    from auditor.serving.sim import Deployment
    from auditor.source import open_model
    src = open_model("glm-5.1", "w8a8", tables=False)
    costs = {}
    for a in (False, True):
        inst = InstancePlan(name="aggregated", count=1, tp=16, dp=1, ep=16, sp=False, max_num_seqs=8,
                            max_num_batched_tokens=4096, max_model_len=8192, gpu_memory_utilization=0.9, mtp=3,
                            async_scheduling=a)
        dep = Deployment(DeploymentContext(src.spec, None, "vllm-ascend@0.18.0", src.scheme_recipe,
                                           load_device("a3-752t")), [inst])
        costs[a] = dep.costs()[0]
    assert costs[False].launches_draft == 0.0
    assert costs[True].launches_draft > 100        # K = 3 passes of one decoder layer + head, op by op
