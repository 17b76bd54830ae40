"""Hostile nightly CI configs (issue 31, CI configs): alias bombs, deep nesting, huge numbers, tags, timestamps and
over-long lists in a ``--launch CONFIG.yaml``, each through the CLI with the bad-input contract of
tests/hostile_harness.py (one short ``audit: error:`` line naming the file, or a clean run; never a traceback, a
hang or a line of megabytes), and the capped YAML reader checked against PyYAML's own safe loader on what both
read."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from auditor.errors import MAX_ERROR_CHARS, AuditInputError
from auditor.launch import yaml_caps
from hostile_harness import ERROR_PREFIX, check_contract, run_in_process, run_out_of_process

PERF = """
benchmarks:
  perf:
    case_type: performance
    dataset_path: {dataset}
    num_prompts: 8
    max_out_len: 64
    batch_size: 4
    request_rate: {rate}
    baseline: 10
"""


def single(args: str = '["--tensor-parallel-size", "16", "--enable-expert-parallel"]', name: str = '"T"',
           env: str = '"1"', dataset: str = "vllm-ascend/GSM8K-in4096-bs100", rate: str = "0", head: str = "") -> str:
    return (head + f"test_cases:\n  - name: {name}\n    model: zai-org/GLM-5.1\n    envs:\n      HCCL_BUFFSIZE: {env}\n"
            f"    server_cmd: {args}\n" + PERF.format(dataset=dataset, rate=rate).replace("\n", "\n    ").rstrip(" "))


def external(index: str = "0", value: str = '"${TP_SIZE}"', head: str = "") -> str:
    return (head + "model: zai-org/GLM-5.1\nconfig:\n  - {node_index: " + index + ", tp_size: 16, dp_size: 1}\n"
            "templates:\n  - node_index: 0\n    server_cmd_template: [--tensor-parallel-size, " + value + "]\n")


def internal(cmd: str) -> str:
    return f"model: zai-org/GLM-5.1\ndeployment:\n  - server_cmd: {cmd}\n"


def laughs(levels: int = 10, width: int = 9) -> str:
    """The 'billion laughs' document: each anchor a list of ``width`` aliases of the one before."""
    out = "bomb0: &l0 [" + ", ".join(['"lol"'] * width) + "]\n"
    for i in range(1, levels):
        out += f"bomb{i}: &l{i} [" + ", ".join([f"*l{i - 1}"] * width) + "]\n"
    return out


BOMB = laughs()
TOP = f"*l{9}"
DEEP_SEQ = "[" * 50_000 + "]" * 50_000
DEEP_MAP = "{a: " * 50_000 + "1" + "}" * 50_000

# name -> (yaml text, command, expect, needles)
CASES: dict[str, tuple[str, str, str, tuple[str, ...]]] = {}


def case(name: str, text: str, command: str = "memory", expect: str = "error", needles=()) -> None:
    assert name not in CASES, name
    CASES[name] = (text, command, expect, tuple(needles))


EXPANDS = ("expands to more than",)
case("laughs-in-name", single(name=TOP, head=BOMB), needles=EXPANDS)
case("laughs-in-server-arg", single(args=f'["--tensor-parallel-size", {TOP}]', head=BOMB), needles=EXPANDS)
case("laughs-in-env", single(env=TOP, head=BOMB), needles=EXPANDS)
case("laughs-in-dataset", single(dataset=TOP, head=BOMB), "bench", needles=EXPANDS)
case("laughs-in-template", external(value=TOP, head=BOMB), needles=EXPANDS)
case("laughs-as-merge", BOMB + "x: &m {a: *l9}\n" + single().replace("    envs:\n", "    envs:\n      <<: *m\n"),
     needles=EXPANDS)
case("laughs-small-in-server-arg", single(args=f'["--tensor-parallel-size", *l3]', head=laughs(4)),
     needles=("server_cmd",))
case("deep-flow-sequence", single(args=DEEP_SEQ), needles=("nest",))
case("deep-flow-mapping", single(env=DEEP_MAP), needles=("nest",))
case("deep-block-mapping", "".join("  " * i + f"k{i}:\n" for i in range(40)) + "  " * 40 + "v: 1\n",
     needles=("line 33", "nested more than 32"))
case("integer-100000-digits", single(rate="9" * 100_000), "bench", needles=("line",))
case("integer-5000-digit-node-index", external(index="7" * 5_000), needles=("line 3", "a number of 5,000 characters"))
case("integer-5000-digit-case-name", single().replace("  perf:", "  " + "8" * 5_000 + ":"), "bench",
     needles=("a number of 5,000 characters",))
case("float-5000-digits", single(rate="1." + "5" * 5_000), "bench", needles=("a number of 5,002 characters",))
case("nan-rate", single(rate=".nan"), "bench", needles=("not a finite number",))
case("inf-rate", single(rate="-.inf"), "bench", needles=("not a finite number",))
case("timestamp-invalid-env", single(env="2026-13-45"), needles=("HCCL_BUFFSIZE: '2026-13-45' is not an integer",))
case("timestamp-valid-model-name", single().replace("zai-org/GLM-5.1", "2026-01-01"), "memory", "any")
case("binary-tag", single(env="!!binary aGVsbG8="), needles=("!!binary",))
case("python-tag", single(env="!!python/object/apply:os.system [echo pwned]"), needles=("audit does not read",))
case("custom-tag", single(env="!vault secret"), needles=("audit does not read",))
case("set-tag", single(env="!!set {a, b}"), needles=("!!set",))
case("recursive-alias", single(args="&r [--tensor-parallel-size, *r]"), needles=("recursive",))
case("undefined-alias", single(args="[--tensor-parallel-size, *nowhere]"), needles=("alias *nowhere names no anchor",))
case("duplicate-key", single().replace("    envs:\n", "    model: other/model\n    envs:\n"),
     needles=("written twice",))
case("two-documents", single() + "---\n" + single(), needles=("more than one YAML document",))
case("complex-key", single().replace("    envs:\n", "    ? [a, b]\n    : 1\n    envs:\n"), needles=("mapping key",))
case("server-args-10000", single(args="[" + ", ".join(["--x"] * 10_000) + "]"), needles=("4,096",))
case("server-cmd-5000-words", internal("vllm serve m " + " ".join(["-x"] * 5_000)),
     needles=("5,000 arguments", "4,096"))
case("test-cases-300", "test_cases:\n" + "".join(f"  - {{name: t{i}, model: m, server_cmd: []}}\n" for i in range(300)),
     needles=("test_cases has 300 entries",))
case("nodes-300", "model: m\ndeployment:\n" + "  - {server_cmd: vllm serve m}\n" * 300, needles=("256",))
case("scalar-100k", single(name='"' + "n" * 100_000 + '"'), needles=("over audit's cap of 64 KiB",))
case("aliases-2000", "a: &a 1\nb: [" + ", ".join(["*a"] * 2_000) + "]\n" + single(), needles=("aliases",))
case("merge-of-a-list", "x: &x [1]\n" + single().replace("    envs:\n", "    envs:\n      <<: *x\n"),
     needles=("merge key",))
case("control-character", single(name='"a\x07b"'), needles=("not valid YAML",))


def test_case_count():
    assert len(CASES) >= 30


@pytest.mark.parametrize("name", sorted(CASES))
def test_hostile_nightly(name: str, tmp_path: Path, capfd) -> None:
    text, command, expect, needles = CASES[name]
    f = tmp_path / "nightly.yaml"
    f.write_text(text)
    before = f.read_bytes()
    run = run_in_process([command, "glm-5.1", "--launch", f, "--node", "0"], capfd, timeout=30)
    check_contract(run, expect, needles)
    if run.rc == 2:
        assert str(f) in run.err_lines[0]
        assert len(run.err_lines[0]) <= len(ERROR_PREFIX) + MAX_ERROR_CHARS
    assert f.read_bytes() == before


@pytest.mark.parametrize("name", ["laughs-in-server-arg", "deep-flow-sequence", "server-args-10000"])
def test_hostile_nightly_out_of_process(name: str, tmp_path: Path) -> None:
    """A fresh process under a 768 MiB address-space limit answers in one line (an alias bomb expanded by a
    reader or a message would need gigabytes)."""
    text, command, _, needles = CASES[name]
    f = tmp_path / "nightly.yaml"
    f.write_text(text)
    run = run_out_of_process([command, "glm-5.1", "--launch", f, "--node", "0"], timeout=30, memory_bytes=768 << 20)
    check_contract(run, "error", needles)


# -- the capped reader against PyYAML's safe loader -----------------------------------------------------------

plain = st.recursive(
    st.none() | st.booleans() | st.integers(-10 ** 30, 10 ** 30)
    | st.floats(allow_nan=False, allow_infinity=False) | st.text(max_size=20),
    lambda ch: st.lists(ch, max_size=5) | st.dictionaries(st.text(max_size=8) | st.integers(-99, 99), ch, max_size=5),
    max_leaves=30)


@settings(max_examples=150, deadline=None)
@given(doc=plain, shared=plain)
def test_plain_documents_read_as_pyyaml_reads_them(doc, shared) -> None:
    """Anything PyYAML writes (a shared value becomes an anchor and its aliases) reads back equal, as PyYAML's
    own safe loader reads it."""
    whole = {"doc": doc, "again": [shared, shared], "more": {"x": shared}}
    text = yaml.safe_dump(whole)
    got = yaml_caps.loads(text, "t.yaml")
    assert got == whole
    assert got == yaml.safe_load(text)


FRAGMENTS = ["a: &a [1, 2]\n", "b: *a\n", "c: [*a, *a, *a]\n", "d: &d {x: *a, y: *a}\n", "e: {<<: *d, z: 1}\n",
             "f: !!binary aGk=\n", "g: 2001-02-30\n", "h: 2001-02-03\n", "i: " + "9" * 60 + "\n", "j: .inf\n",
             "k: [[[[[[[[[[1]]]]]]]]]]\n", "l: {m: {n: {o: 1}}}\n", "m: 0x1F\n", "n: 1:30\n", "o: ~\n", "p: yes\n",
             "q: '1'\n", "r: !!str 5\n", "s: !!int '7'\n", "t: &t x\n", "u: *t\n", "a: 3\n", "v: !!float 1\n",
             "w: [*a, *d, *a, *d]\n", "x: *x\n", "? y\n", "z: 1e5\n", "A: -.5\n", "B: !foo 1\n", "C: [\n", "D: '\n",
             "E: 0o17\n", "F: 1_000\n", "G: +12.5e3\n", "H: \"\\u00e9\\t\"\n"]


class DatesAsText(yaml.SafeLoader):
    """PyYAML's safe loader with implicit timestamps read as text, as the capped reader reads them."""


DatesAsText.yaml_implicit_resolvers = {
    first: [(tag, rx) for tag, rx in resolvers if tag != "tag:yaml.org,2002:timestamp"]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()}


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(parts=st.lists(st.sampled_from(FRAGMENTS), max_size=12),
       deep=st.integers(0, 70), digits=st.integers(0, 200))
def test_any_yaml_text_is_read_as_pyyaml_or_refused_in_one_line(parts, deep, digits) -> None:
    text = "".join(parts) + ("deep: " + "[" * deep + "]" * deep + "\n" if deep else "") \
        + (f"num: {'4' * digits}\n" if digits else "")
    try:
        got = yaml_caps.loads(text, "t.yaml")
    except AuditInputError as exc:
        line = str(exc)
        assert "\n" not in line and line.startswith("t.yaml: ") and len(line) <= MAX_ERROR_CHARS
        return
    assert deep <= yaml_caps.MAX_DEPTH and digits <= yaml_caps.MAX_NUMBER_CHARS
    assert got == yaml.load(text, Loader=DatesAsText)      # what we read, PyYAML reads the same way
