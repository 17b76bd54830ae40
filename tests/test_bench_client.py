"""`audit bench` speaks `vllm bench serve`'s client flags (issue 30): --max-concurrency, --random-input-len,
--random-output-len, --dataset-name random, --num-prompts, --request-rate inf|R, --random-range-ratio 0 fill the
same workload fields as audit's --concurrency/--isl/--osl; two spellings of one setting that disagree, another
dataset and a length spread are refused by name in one line."""
from __future__ import annotations

import json
import math

import click
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from auditor.cli import main
from auditor.cli.options import CLIENT_SPELLINGS, RequestRate, client_options
from auditor.errors import AuditInputError
from auditor.limits import OPTION_CAPS
from hostile_harness import check_contract, run_in_process

DEPLOY = ["bench", "--tp", "16", "--dp", "2", "--ep", "on", "--sp", "--format", "json", "--quiet"]
SMALL = ["bench", "glm-5.1", "--tp", "16", "--format", "json", "--quiet"]
PROPS = settings(max_examples=40, deadline=None, derandomize=True,
                 suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])


@click.command()
@client_options
def _probe(**kw):
    """bench's own client decorator on a command that returns what bench would build its workload from."""
    return kw


def probe(args: list[str]) -> dict:
    return _probe.main(args=args, standalone_mode=False)


def test_vllm_spelling_of_a_workload_is_byte_identical_json(capfd) -> None:
    """The brief's workload: `vllm bench serve`'s flags and audit's give the same bytes."""
    vllm = ["--max-concurrency", "16", "--num-prompts", "64", "--random-input-len", "32768",
            "--random-output-len", "1024"]
    ours = ["--concurrency", "16", "--num-prompts", "64", "--isl", "32768", "--osl", "1024"]
    assert main(DEPLOY + vllm) == 0
    a = capfd.readouterr().out
    assert main(DEPLOY + ours) == 0
    b = capfd.readouterr().out
    assert a == b
    got = json.loads(a)
    # the workload the JSON reports is the one asked for: 64 prompts of 32768 in / 1024 out, 16 in flight
    assert (got["num_prompts"], got["max_concurrency"]) == (64, 16)
    assert got["total_input_tokens"] == 64 * 32768 and got["total_output_tokens"] == 64 * 1024


def test_dataset_random_range_ratio_zero_and_rate_inf_are_the_defaults(capfd) -> None:
    base = ["--concurrency", "2", "--isl", "1000", "--osl", "8"]
    assert main(SMALL + base) == 0
    plain = capfd.readouterr().out
    assert main(SMALL + base + ["--dataset-name", "random", "--random-range-ratio", "0", "--request-rate", "inf"]) == 0
    assert capfd.readouterr().out == plain
    assert json.loads(plain)["request_rate"] == "inf"


@pytest.mark.parametrize("ours,theirs", CLIENT_SPELLINGS)
def test_both_spellings_that_disagree_are_one_error_naming_both(ours: str, theirs: str, capfd) -> None:
    values = {"--concurrency": ("2", "3"), "--isl": ("1000", "1001"), "--osl": ("8", "9")}
    rest = [a for o, (v, _) in values.items() if o != ours for a in (o, v)]
    v1, v2 = values[ours]
    run = run_in_process(SMALL + rest + [ours, v1, theirs, v2], capfd)
    check_contract(run, "error", (f"{ours}/{theirs}", f"{ours} {v1}", f"{theirs} {v2}"))


@pytest.mark.parametrize("ours,theirs", CLIENT_SPELLINGS)
def test_a_missing_setting_names_both_spellings(ours: str, theirs: str, capfd) -> None:
    values = {"--concurrency": "2", "--isl": "1000", "--osl": "8"}
    rest = [a for o, v in values.items() if o != ours for a in (o, v)]
    check_contract(run_in_process(SMALL + rest, capfd), "error", (f"{ours}: missing", theirs))


@pytest.mark.parametrize("name", ["sharegpt", "sonnet", "hf", "random-mm", "prefix_repetition"])
def test_other_datasets_are_refused_by_name(name: str, capfd) -> None:
    run = run_in_process(SMALL + ["--concurrency", "2", "--isl", "1000", "--osl", "8", "--dataset-name", name], capfd)
    check_contract(run, "error")
    assert run.err_lines == [f"audit: error: --dataset-name {name}: audit models only the random dataset"]


@pytest.mark.parametrize("ratio,needle", [("0.5", "--random-range-ratio 0.5: audit models fixed lengths only"),
                                          ("1", "--random-range-ratio: 1"), ("-0.1", "--random-range-ratio: -0.1"),
                                          ("nan", "--random-range-ratio: 'nan' is not a finite number")])
def test_a_length_spread_is_refused_by_name(ratio: str, needle: str, capfd) -> None:
    run = run_in_process(SMALL + ["--concurrency", "2", "--isl", "1000", "--osl", "8", "--random-range-ratio", ratio],
                         capfd)
    check_contract(run, "error", (needle,))


# -- properties over values from outside ---------------------------------------------------------------

CONC = st.integers(OPTION_CAPS["--concurrency"].lo, OPTION_CAPS["--concurrency"].hi)
LEN = st.integers(OPTION_CAPS["--isl"].lo, OPTION_CAPS["--isl"].hi)


@PROPS
@given(c=CONC, i=LEN, o=LEN, both=st.booleans())
def test_either_spelling_fills_the_same_workload_fields(c: int, i: int, o: int, both: bool) -> None:
    ours = probe(["--concurrency", str(c), "--isl", str(i), "--osl", str(o)])
    theirs = probe(["--max-concurrency", str(c), "--random-input-len", str(i), "--random-output-len", str(o)]
                   + (["--concurrency", str(c), "--isl", str(i), "--osl", str(o)] if both else []))
    assert ours == theirs
    assert (ours["concurrency"], ours["isl"], ours["osl"]) == (c, i, o)
    assert ours["num_prompts"] is None and ours["request_rate"] is None


@PROPS
@given(pair=st.sampled_from(CLIENT_SPELLINGS), a=st.integers(1, 100_000), b=st.integers(1, 100_000))
def test_disagreeing_spellings_are_refused_whatever_the_values(pair, a: int, b: int) -> None:
    ours, theirs = pair
    rest = {"--concurrency": "1", "--isl": "1", "--osl": "1"}
    args = [x for k, v in rest.items() if k != ours for x in (k, v)] + [ours, str(a), theirs, str(b)]
    if a == b:
        assert probe(args)[ours[2:]] == a
        return
    with pytest.raises(AuditInputError) as exc:
        probe(args)
    assert exc.value.one_line().startswith(f"{ours}/{theirs}: {ours} {a} and {theirs} {b}")


@PROPS
@given(rate=st.floats(min_value=1e-9, max_value=1e9, allow_nan=False, allow_infinity=False))
def test_a_positive_finite_rate_is_taken_as_written(rate: float) -> None:
    assert RequestRate().convert(repr(rate), None, None) == rate


@PROPS
@given(text=st.text(max_size=12))
def test_any_rate_text_is_a_rate_or_one_bad_parameter(text: str) -> None:
    try:
        v = RequestRate().convert(text, None, None)
    except click.BadParameter as exc:
        assert "\n" not in exc.message
        return
    # accepted: the word inf, or a number in (0, 1e9]
    assert v == math.inf and text.strip().lower().lstrip("+") in ("inf", "infinity") or 0 < v <= 1e9


@pytest.mark.parametrize("text", ["nan", "-inf", "1e400", "0", "-1", "1e10", "fast", ""])
def test_rates_that_are_not_inf_or_positive_are_refused(text: str) -> None:
    with pytest.raises(click.BadParameter):
        RequestRate().convert(text, None, None)


@PROPS
@given(name=st.text(min_size=1, max_size=60).filter(lambda s: s != "random"))
def test_any_other_dataset_name_is_one_line_naming_the_option(name: str) -> None:
    with pytest.raises(AuditInputError) as exc:
        probe(["--concurrency", "1", "--isl", "1", "--osl", "1", "--dataset-name", name])
    line = exc.value.one_line()
    assert line.startswith("--dataset-name ") and line.endswith("audit models only the random dataset")
    assert "\n" not in line and len(line) < 200


# -- the nightly reader's client and vLLM's spellings -------------------------------------------------

def test_vllm_spelling_overrides_a_nightly_case_as_audits_does(tmp_path, capfd) -> None:
    """A case sets the client in audit's spelling; the user's --max-concurrency/--random-output-len win over it
    exactly as --concurrency/--osl do (not a conflict between the case and the user)."""
    from test_nightly import INTERNAL, _write
    f = str(_write(tmp_path, "i.yaml", INTERNAL))
    launch = ["bench", "glm-5.1", "--launch", f, "--format", "json", "--quiet"]
    assert main(launch + ["--concurrency", "2", "--osl", "64"]) == 0
    ours = capfd.readouterr().out
    assert main(launch + ["--max-concurrency", "2", "--random-output-len", "64"]) == 0
    theirs = capfd.readouterr()
    assert "error" not in theirs.err and theirs.out == ours
    got = json.loads(ours)
    # the user's concurrency replaced the case's batch_size 4; the case's num_prompts 8 still stands
    assert (got["max_concurrency"], got["num_prompts"]) == (2, 8)


def test_help_calls_the_scheduler_limits_what_they_are() -> None:
    from auditor.cli.bench import bench_command
    helps = {p.opts[0]: p.help for p in bench_command.params if isinstance(p, click.Option)}
    assert helps["--max-num-seqs"].startswith("vLLM's scheduler limit: max sequences per step")
    assert helps["--max-num-batched-tokens"].startswith("vLLM's scheduler limit: max tokens per step")
    for new in ("--max-concurrency", "--random-input-len", "--random-output-len", "--dataset-name",
                "--random-range-ratio", "--num-prompts", "--request-rate"):
        assert helps[new], new
