"""Hostile option values (issue 31, bench options and JSON options): every value ranged and finite, including
values that arrive inside JSON options (``--hf-overrides``, ``--speculative-config``, ``--additional-config``,
``--kv-transfer-config``, dotted ``--flag.key value``) and the instance strings of ``bench --prefill/--decode``;
each a named case through the CLI with the contract of tests/hostile_harness.py, plus properties over the
option type and the JSON reader."""
from __future__ import annotations

import json
import math
from pathlib import Path

import click
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from auditor.cli.options import FiniteFloatRange
from auditor.errors import AuditInputError
from auditor.inputs import JSON_MAX_DEPTH, parse_json_text
from hostile_harness import check_contract, run_in_process, run_out_of_process
from conftest import json_leaves

BENCH = ["bench", "glm-5.1", "--tp", "16", "--concurrency", "4", "--isl", "100", "--osl", "10"]
PD = ["--decode", "--tp 16"]


def nested(depth: int, inner: str = "1") -> str:
    return '{"a": ' * depth + inner + "}" * depth


# name -> (extra argv, needles)
CASES: dict[str, tuple[list[str], tuple[str, ...]]] = {
    "request-rate-nan": (["--request-rate", "nan"], ("--request-rate", "not a finite number")),
    "request-rate-NaN": (["--request-rate", "NaN"], ("--request-rate", "not a finite number")),
    # "inf" is vLLM's all-at-once and accepted (test_bench_client); -inf, and a number that overflows, are not
    "request-rate-minus-inf": (["--request-rate", "-inf"], ("--request-rate", "not a finite number")),
    "request-rate-1e400": (["--request-rate", "1e400"], ("--request-rate",)),
    "request-rate-zero": (["--request-rate", "0"], ("--request-rate",)),
    "prefix-ratio-nan": (["--prefix-ratio", "nan"], ("--prefix-ratio", "not a finite number")),
    "prefix-ratio-minus-nan": (["--prefix-ratio", "-nan"], ("--prefix-ratio", "not a finite number")),
    "prefix-ratio-1.5": (["--prefix-ratio", "1.5"], ("--prefix-ratio",)),
    "acceptance-nan": (["--mtp", "1", "--mtp-acceptance", "nan"], ("--mtp-acceptance",)),
    "hf-overrides-deep": (["--hf-overrides", nested(5_000)], ("--hf-overrides", "nests 5000 levels")),
    "hf-overrides-deep-list": (["--hf-overrides", "[" * 30_000 + "]" * 30_000], ("--hf-overrides", "nests 30000")),
    "hf-overrides-5000-digits": (["--hf-overrides", '{"num_hidden_layers": ' + "7" * 5_000 + "}"],
                                 ("--hf-overrides", "5000-digit")),
    "hf-overrides-nan": (["--hf-overrides", '{"rope_theta": NaN}'], ("--hf-overrides", "NaN")),
    "hf-overrides-1e400": (["--hf-overrides", '{"rope_theta": 1e400}'], ("--hf-overrides", "out of range")),
    "hf-overrides-65k": (["--hf-overrides", '{"a": "' + "x" * 70_000 + '"}'], ("--hf-overrides", "KiB")),
    "speculative-config-deep": (["--speculative-config", nested(40)], ("--speculative-config", "nests 40")),
    "speculative-config-nan": (["--speculative-config", '{"num_speculative_tokens": NaN}'],
                               ("--speculative-config", "NaN")),
    "speculative-config-infinity": (["--speculative-config", '{"num_speculative_tokens": -Infinity}'],
                                    ("--speculative-config",)),
    "speculative-config-1e400": (["--speculative-config", '{"num_speculative_tokens": 1e400}'],
                                 ("--speculative-config", "out of range")),
    "additional-config-deep": (["--additional-config", nested(5_000)], ("--additional-config", "nests")),
    "additional-config-digits": (["--additional-config", '{"x": ' + "9" * 5_000 + "}"],
                                 ("--additional-config", "digit")),
    "kv-transfer-config-deep": (["--kv-transfer-config", "[" * 50_000 + "]" * 50_000], ("--kv-transfer-config",)),
    "kv-transfer-config-nan": (["--kv-transfer-config", '{"kv_role": "kv_producer", "kv_rank": NaN}'],
                               ("--kv-transfer-config", "NaN")),
    "dotted-1e999": (["--speculative-config.num_speculative_tokens", "1e999"], ("num_speculative_tokens",)),
    "dotted-deep": (["--speculative-config.num_speculative_tokens", "[" * 50_000], ("num_speculative_tokens",)),
    "prefill-10000-words": (["--prefill", "--tp 1 " * 5_000, *PD], ("--prefill", "10,000 words", "4,096")),
    "prefill-open-quote": (["--prefill", "--tp 'x", *PD], ("--prefill", "No closing quotation")),
    "prefill-huge-tp": (["--prefill", "--tp " + "9" * 60, *PD], ("--prefill", "--tp")),
    "prefill-deep-hf": (["--prefill", "--hf-overrides '" + nested(100) + "'", *PD], ("--hf-overrides", "nests")),
    "prefill-nan-util": (["--prefill", "--tp 16 --gpu-memory-utilization nan", *PD], ("--gpu-memory-utilization",)),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_hostile_option(name: str, capfd) -> None:
    extra, needles = CASES[name]
    check_contract(run_in_process(BENCH + extra, capfd, timeout=30), "error", needles)


def test_request_rate_nan_out_of_process() -> None:
    """The value that hung (a Poisson clock with a NaN rate never advances) answers in one line."""
    check_contract(run_out_of_process(BENCH + ["--request-rate", "nan"], timeout=30), "error", ("--request-rate",))


@settings(max_examples=300, deadline=None)
@given(text=st.one_of(st.sampled_from(["nan", "-nan", "NaN", "inf", "-inf", "Infinity", "1e400", "-0", "0", "1e9",
                                       "1e-320", "4.9e-324", "1_0", "0x10", " 5 ", "５"]),
                      st.floats().map(repr), st.text(max_size=8)))
def test_a_finite_range_accepts_only_finite_values_in_range(text: str) -> None:
    """Whatever the text, the option type gives a finite number in (0, 1e9] or refuses it (click's own
    FloatRange lets NaN through: every comparison with NaN is false)."""
    kind = FiniteFloatRange(0.0, 1e9, min_open=True)
    try:
        v = kind.convert(text, None, None)
    except click.BadParameter:
        return
    assert math.isfinite(v) and 0.0 < v <= 1e9
    assert v == float(text)


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-10 ** 50, 10 ** 50) | st.floats() | st.text(max_size=6),
    lambda ch: st.lists(ch, max_size=3) | st.dictionaries(st.text(max_size=4), ch, max_size=3), max_leaves=40)


def _depth(v) -> int:
    if isinstance(v, dict):
        return 1 + max((_depth(x) for x in v.values()), default=0)
    if isinstance(v, list):
        return 1 + max((_depth(x) for x in v), default=0)
    return 0


def _numbers(v):
    return json_leaves(v, lambda x: isinstance(x, (int, float)) and not isinstance(x, bool))


@settings(max_examples=300, deadline=None)
@given(value=json_values, wrap=st.integers(0, 40))
def test_json_option_values_are_finite_shallow_and_short(value, wrap: int) -> None:
    """An option's JSON is read as json.loads reads it, or refused in one line when it nests past 32 levels,
    holds a number of more than 40 characters, or a NaN / Infinity / overflowing number."""
    doc = value
    for _ in range(wrap):
        doc = [doc]
    text = json.dumps(doc)
    try:
        got = parse_json_text(text, "--speculative-config", "the JSON", cap=64 << 10)
    except AuditInputError as exc:
        assert "\n" not in str(exc) and str(exc).startswith("--speculative-config: ")
        nums = list(_numbers(doc))
        assert (_depth(doc) > JSON_MAX_DEPTH or len(text.encode()) > 64 << 10
                or any(not math.isfinite(n) or len(json.dumps(n)) > 40 for n in nums))
        return
    assert _depth(doc) <= JSON_MAX_DEPTH
    assert got == json.loads(text)
    assert all(math.isfinite(n) for n in _numbers(got))


def test_hf_overrides_deep_out_of_process(tmp_path: Path) -> None:
    run = run_out_of_process(BENCH + ["--hf-overrides", nested(10_000)], timeout=30, memory_bytes=768 << 20)
    check_contract(run, "error", ("--hf-overrides",))
