"""vLLM's own spelling of prefix caching reaches bench's hits: ``--no-enable-prefix-caching`` typed on the
command line, in a launch script, or inside a ``--prefill`` / ``--decode`` instance string means what
audit's ``--no-prefix-caching`` / ``--no-decode-prefix-caching`` mean (it was read and dropped, so the
hits stayed on: a silent wrong answer). Each spelling is compared with audit's, and with caching on."""
from __future__ import annotations

import json

from auditor.cli import main

GLM = ["bench", "glm-5.1", "--tp", "16", "--dp", "2", "--ep", "32", "--sp", "--concurrency", "4",
       "--isl", "8k", "--osl", "64", "--prefix-ratio", "0.5", "--format", "json"]
PD = ["bench", "deepseek-v4-flash", "--concurrency", "8", "--isl", "40k", "--osl", "64", "--prefix-ratio", "0.5",
      "--format", "json"]


def _bench(args, capsys):
    assert main(args) == 0
    return json.loads(capsys.readouterr().out)


def test_vllm_spelling_on_the_command_line_turns_hits_off(capsys):
    on = _bench(GLM, capsys)
    ours = _bench(GLM + ["--no-prefix-caching"], capsys)
    vllms = _bench(GLM + ["--no-enable-prefix-caching"], capsys)
    assert vllms == ours
    # 8,000-token prompts, half shared: 3,968 tokens (31 whole 128-token blocks) hit with caching on
    assert ours["mean_ttft_ms"] > on["mean_ttft_ms"]


def test_launch_script_with_prefix_caching_off(tmp_path, capsys):
    script = tmp_path / "serve.sh"
    script.write_text("vllm serve glm-5.1 --tensor-parallel-size 16 --data-parallel-size 2 "
                      "--enable-expert-parallel --no-enable-prefix-caching\n")
    args = ["bench", "--launch", str(script), "glm-5.1", "--sp"] + GLM[9:]
    from_script = _bench(args, capsys)
    assert from_script == _bench(GLM + ["--no-prefix-caching"], capsys)


def test_instance_strings_carry_their_own_prefix_caching(capsys):
    pre, dec = "--tp 4 --dp 4 --ep 16 --mtp 1", "--tp 1 --dp 16 --ep 16 --mtp 1"
    on = _bench(PD + ["--prefill", pre, "--decode", dec], capsys)
    d_off = _bench(PD + ["--prefill", pre, "--decode", dec + " --no-enable-prefix-caching"], capsys)
    assert d_off == _bench(PD + ["--prefill", pre, "--decode", dec, "--no-decode-prefix-caching"], capsys)
    assert d_off != on
    p_off = _bench(PD + ["--prefill", pre + " --no-enable-prefix-caching", "--decode", dec], capsys)
    assert p_off == _bench(PD + ["--prefill", pre, "--decode", dec, "--no-prefix-caching"], capsys)
    # 40,000-token prompts, half shared: the pool's 16,384-token alignment leaves one whole multiple
    assert p_off["mean_ttft_ms"] > on["mean_ttft_ms"]
