"""A nightly config's Ascend generation picks the device (issue 30: an A2 config was modelled on A3 without a word).

The CI names the generation in the file name, ``test_name`` or a test case's name (``...-A2-dual-nodes.yaml``,
``multi-node-GLM-5.1-w8a8-A2``) and A3 nodes export ``ASCEND_A3_ENABLE=1``. Read without --device, an A2
config is modelled on the A2 profile and stderr says so; a --device of the other generation, or a config
naming both, gets one ``audit: warning:`` line naming the device used. The configs are written here from
the published file's facts (the shared copy is checked too when present)."""
from __future__ import annotations

from pathlib import Path

import pytest

from auditor.cli import main
from auditor.devices.profiles import DEFAULT_DEVICE, GENERATION_DEVICES, generation_of
from auditor.launch.nightly import read_nightly

SERVE = ("vllm serve Eco-Tech/GLM-5.1-w8a8 --data-parallel-size 2 --tensor-parallel-size 8 --enable-expert-parallel "
         "--max-num-seqs 64 --max-model-len 38000 --max-num-batched-tokens 4096 --gpu-memory-utilization 0.95")
A2_DEVICE = GENERATION_DEVICES["A2"]


def _config(tmp_path: Path, file: str, test_name: str, env: str = "HCCL_BUFFSIZE: 200") -> Path:
    path = tmp_path / file
    path.write_text(f'test_name: "{test_name}"\nmodel: "Eco-Tech/GLM-5.1-w8a8"\ndeployment:\n'
                    f'  - envs: {{{env}}}\n    server_cmd: "{SERVE}"\n', encoding="utf-8")
    return path


def _memory(path: Path, capsys, *extra: str) -> tuple[int, str, str]:
    # MODEL given: the preset, not the hub name (no network)
    code = main(["memory", "glm-5.1", "--launch", str(path), *extra])
    out, err = capsys.readouterr()
    return code, out, err


def _budget_device(out: str) -> str:
    line = next(ln for ln in out.splitlines() if ln.startswith("HBM budget per rank ("))
    return line.split("(", 1)[1].split(",", 1)[0]


def test_generation_words_in_names() -> None:
    assert generation_of("a2-313t") == "A2" and generation_of("a3-752t") == "A3"
    assert generation_of("/x/a2-280t-32g-pcie.json") == "A2" and generation_of("h200") is None


def test_a2_config_is_modelled_on_the_a2_profile(tmp_path, capsys) -> None:
    path = _config(tmp_path, "multi_node_internal_dp__GLM5_1-W8A8-A2-dual-nodes.yaml", "multi-node-GLM-5.1-w8a8-A2")
    gens = read_nightly(path).generations()
    assert {g for g, _ in gens} == {"A2"} and len(gens) == 2        # the file name and test_name
    code, out, err = _memory(path, capsys)
    assert code == 0
    said = [ln for ln in err.splitlines() if "the config is for A2" in ln]
    assert len(said) == 1 and said[0].startswith("audit: note: ") and f"device {A2_DEVICE}" in said[0]
    assert "test_name 'multi-node-GLM-5.1-w8a8-A2'" in said[0]
    assert _budget_device(out) == A2_DEVICE != DEFAULT_DEVICE


def test_a2_config_on_an_a3_device_warns_once(tmp_path, capsys) -> None:
    path = _config(tmp_path, "glm.yaml", "multi-node-GLM-5.1-w8a8-A2")
    code, out, err = _memory(path, capsys, "--device", "a3-752t")
    assert code == 0 and _budget_device(out) == "a3-752t"           # the user's --device wins
    warnings = [ln for ln in err.splitlines() if ln.startswith("audit: warning:")]
    assert len(warnings) == 1, err
    assert "the config is for A2" in warnings[0] and "--device a3-752t is an A3 profile" in warnings[0]
    assert "audit models device a3-752t" in warnings[0]


def test_a2_config_on_an_a2_device_is_quiet(tmp_path, capsys) -> None:
    path = _config(tmp_path, "glm-A2.yaml", "glm")
    code, out, err = _memory(path, capsys, "--device", "a2-376t")
    assert code == 0 and _budget_device(out) == "a2-376t"
    assert "audit: warning:" not in err and "the config is for" not in err


def test_a3_config_keeps_the_default_and_says_nothing(tmp_path, capsys) -> None:
    path = _config(tmp_path, "GLM5_1-W8A8-A3-dual-nodes.yaml", "multi-node-GLM-5.1-w8a8-A3",
                   env='ASCEND_A3_ENABLE: "1"')
    assert {g for g, _ in read_nightly(path).generations()} == {"A3"}
    code, out, err = _memory(path, capsys)
    assert code == 0 and _budget_device(out) == DEFAULT_DEVICE
    assert "the config is for" not in err and "audit: warning:" not in err


def test_a_config_naming_both_generations_warns(tmp_path, capsys) -> None:
    path = _config(tmp_path, "glm-A2.yaml", "glm", env='ASCEND_A3_ENABLE: "1"')
    code, out, err = _memory(path, capsys)
    warnings = [ln for ln in err.splitlines() if ln.startswith("audit: warning:")]
    assert code == 0 and len(warnings) == 1 and "names both A2" in warnings[0]
    assert f"audit models device {DEFAULT_DEVICE}" in warnings[0] and _budget_device(out) == DEFAULT_DEVICE


def test_no_generation_in_w8a8_or_plain_names(tmp_path) -> None:
    """A2/A3 count only as words: W8A8, W8A8C8 and A22 name no generation."""
    path = _config(tmp_path, "GLM-5.1-W8A8C8-A22.yaml", "multi-node-GLM-5.1-W8A8C8")
    assert read_nightly(path).generations() == []


def test_the_published_a2_config(shared_dir, capsys) -> None:
    path = shared_dir / "data" / "published" / "nightly" / "multi_node_internal_dp__GLM5_1-W8A8-A2-dual-nodes.yaml"
    if not path.is_file():
        pytest.skip(f"{path} not present")
    code, out, err = _memory(path, capsys)
    assert code == 0 and _budget_device(out) == A2_DEVICE
    assert sum("the config is for A2" in ln for ln in err.splitlines()) == 1
