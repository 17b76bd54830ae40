"""A recipe the engine cannot start is never silent (issue 30): memory's answer leads with it,
perf and plan warn, plan prints no launch for it; DeepSeek-V3.2's preset takes the recipe its
vLLM-Ascend tutorial serves (W8A8: /work/shared/data/published/README.md row T7)."""
from __future__ import annotations

import json

import pytest

from auditor.cli import main

V32 = ["deepseek-v3.2", "--tp", "16", "--dp", "2", "--ep", "32"]


def run(argv, capfd):
    rc = main(argv)
    out, err = capfd.readouterr()
    return rc, out, err


@pytest.mark.quick
def test_deepseek_v32_preset_is_the_tutorials_recipe(shared_dir, capfd) -> None:
    readme = (shared_dir / "data" / "published" / "README.md").read_text()
    t7 = next(line for line in readme.splitlines() if line.startswith("| T7 "))
    assert "deepseek-v3.2" in t7 and "--recipe w8a8" in t7
    rc, out, err = run(["memory", *V32], capfd)
    assert rc == 0 and "(preset, recipe w8a8)" in out
    assert "ENGINE CANNOT START" not in out


def test_memory_answer_leads_with_the_refusal(capfd) -> None:
    rc, out, err = run(["memory", *V32, "--recipe", "fp8-block"], capfd)
    answer = next(line for line in out.splitlines() if line.startswith("answer:"))
    assert answer.startswith("answer: ENGINE CANNOT START: kv_b_proj is FP8")
    rc, out, err = run(["memory", *V32, "--recipe", "fp8-block", "--format", "json"], capfd)
    assert json.loads(out)["answer"].startswith("ENGINE CANNOT START")


def test_perf_warns(capfd) -> None:
    rc, out, err = run(["perf", *V32, "--recipe", "fp8-block", "--phase", "decode"], capfd)
    assert rc == 0
    assert "audit: warning: deepseek-v3.2 with recipe fp8-block" in err
    assert out.startswith("WARNING: the engine cannot start this")
    rc, out, err = run(["perf", *V32, "--phase", "decode"], capfd)
    assert "warning" not in err and "cannot start" not in out


def test_plan_prints_no_launch_for_it(capfd) -> None:
    argv = ["plan", "deepseek-v3.2", "--dies", "16", "--isl", "2048", "--osl", "256", "--ttft-ms", "5000",
            "--tpot-ms", "80", "--simulate", "0"]
    rc, out, err = run([*argv, "--recipe", "fp8-block"], capfd)
    assert "audit: warning: deepseek-v3.2 with recipe fp8-block" in err
    assert "vllm serve" not in out and "no launch: the engine cannot start this" in out
    rc, out, err = run(argv, capfd)
    assert "vllm serve" in out and "cannot start" not in out


def test_no_kv_budget_exits_3_as_the_answer_says(capfd) -> None:
    rc, out, err = run(["memory", "deepseek-v3.2"], capfd)
    answer = next(line for line in out.splitlines() if line.startswith("answer:"))
    assert "the engine refuses to start (exit 3)" in answer
    assert rc == 3


@pytest.mark.quick
def test_readme_states_the_acceptance_default() -> None:
    """README said `--mtp-acceptance` defaults to 1; the option's own default is the source (the
    README and the docs/ pages it links, where the options are described now)."""
    import re

    from auditor import docs
    from auditor.cli.options import DEFAULT_ACCEPTANCE
    readme = "\n".join(page.read_text() for page in docs.pages())
    # the default is the family's published figure, with DEFAULT_ACCEPTANCE where none is published
    stated = re.findall(r"`--mtp-acceptance[^`]*`\s*\(default: the model family's public measurement, else "
                        r"([0-9.]+)\)", readme)
    stated += re.findall(r"([0-9.]+) per draft, named as an\s+assumption, where none is published", readme)
    assert not re.findall(r"`--mtp-acceptance[^`]*`\s*\(default [0-9.]+\)", readme)
    assert stated and all(float(v.rstrip(".")) == DEFAULT_ACCEPTANCE for v in stated), stated
