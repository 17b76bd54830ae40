"""vLLM-Ascend's nightly CI configs (``tests/e2e/nightly/**/*.yaml``) read as launches and workloads.

Why: the engine's own published deployments and throughput baselines are written down in these files
(the launch of every node, its environment, and the aisbench cases with their baselines), so audit
should take one as it is: ``audit bench MODEL --launch config.yaml --case perf``.

Three layouts exist at 182b75ea, all read here:

* ``single_node/models/configs/*.yaml`` (and the weekly suite's): ``test_cases[]`` of ``{name, model, envs,
  server_cmd: [args], server_cmd_extra: [args], benchmarks}``; every test case is read (the CI launches
  ``server_cmd + server_cmd_extra``), and ``--case`` picks one: a test case's name, a benchmark's name (the
  first test case that has it), or ``TEST/BENCH``;
* ``multi_node/internal_dp/config/*.yaml``: ``model``, ``deployment[]`` of ``{envs, server_cmd: "vllm
  serve MODEL ..."}`` (one entry per node) and top-level ``benchmarks``;
* ``multi_node/external_dp/config/*.yaml``: ``config[]`` of per-node ``{node_index, dp_size, tp_size,
  dp_rank_start, ...}`` and ``templates[]`` of ``{node_index, envs, server_cmd_template: [args]}`` whose
  ``${DP_SIZE}``, ``${TP_SIZE}``, ``${DP_RANK}`` ... are that node's ``config`` values.

Each node becomes a :class:`Launch` (its environment and ``vllm serve`` arguments) for the flag table
(``flags.to_options``); which instance a node belongs to comes from its own ``--kv-transfer-config``.
A performance case becomes a :class:`Case`: the aisbench dataset name carries the input length
(``in131072``) and the shared-prefix share (``prefix90``), ``max_out_len`` is the output length,
``batch_size`` the client's concurrency, ``request_rate`` below 0.1 sends everything at once (aisbench),
and the performance cases before it on the same dataset are prompts whose prefix is cached when it
starts. A warm-up case is known by its role, which the CI writes in its name (``perf_64k_warmup``,
``perf_warmup``), not by its baseline (the files give warm-ups 0 or 1): it is never the default case. YAML through
the capped reader (yaml_caps: the files use anchors and merge keys); the file
through the project's one opener and its cap.
"""
from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import AuditInputError
from ..limits import OPTION_CAPS
from . import yaml_caps
from .records import Launch

NIGHTLY_CAP = 1 << 20           # real configs are 2-20 KB
#: nodes and test cases of one config (real: <= 4 nodes, 1-3 cases); every other list is capped by yaml_caps
NIGHTLY_LIST_CAPS = {"test_cases": 256, "deployment": 256, "config": 256, "templates": 256}
SUFFIXES = (".yaml", ".yml")
#: aisbench sends every request at once below this rate (research serving-facts §3, models.md:48)
ALL_AT_ONCE_RATE = 0.1
#: ``server_cmd_template`` placeholders -> the node's ``config`` keys (external_dp/scripts)
_TEMPLATE_KEYS = {"DP_SIZE": "dp_size", "TP_SIZE": "tp_size", "DP_RANK": "dp_rank_start",
                  "DP_SIZE_LOCAL": "dp_size_local", "DP_RPC_PORT": "dp_rpc_port", "DP_ADDRESS": "dp_address"}
_PLACEHOLDER = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}|\$([A-Za-z_][A-Za-z0-9_]*)")


@dataclass(frozen=True)
class Case:
    """One aisbench performance case as ``audit bench`` options."""

    name: str
    isl: int
    osl: int
    concurrency: int
    num_prompts: int
    request_rate: float | None      # None: all at once
    prefix_ratio: float
    warm_prompts: int               # prompts of earlier performance cases on the same dataset
    baseline: float                 # output tok/s the CI holds the deployment to (0: none)
    dataset: str
    warmup: bool = False            # the case's role is warming the cache (its name says so)


@dataclass(frozen=True)
class TestCase:
    """One ``test_cases`` entry: its own launch and its own benchmarks."""

    name: str
    model: str
    nodes: tuple[Launch, ...]
    cases: dict[str, "Case"]


#: "A2" / "A3" as a word of a name (``...-W8A8-A2-dual-nodes``, ``GLM-5.1-W8A8C8-A3_128k``), not inside one (W8A8)
_GENERATION = re.compile(r"(?<![A-Za-z0-9])(A2|A3)(?![A-Za-z0-9])", re.IGNORECASE)


def _generations_in(text: str, what: str) -> list[tuple[str, str]]:
    return [(g.upper(), what) for g in dict.fromkeys(m.group(1).upper() for m in _GENERATION.finditer(text))]


@dataclass(frozen=True)
class Nightly:
    where: str
    model: str
    nodes: tuple[Launch, ...]       # one per node, in the file's order
    cases: dict[str, Case]
    notes: tuple[str, ...] = ()
    tests: tuple[TestCase, ...] = ()        # a test_cases file: every entry (nodes/cases are the first's)
    test_name: str = ""                     # the file's ``test_name`` (multi-node configs)

    def generations(self) -> list[tuple[str, str]]:
        """The Ascend generations ("A2", "A3") the config states, each with where it says so: its file
        name, ``test_name``, the test case's name, or a node's ``ASCEND_A3_ENABLE=1``. The CI runs A2 and
        A3 suites from the same files and says which in these names; audit's device comes from --device,
        so the caller compares the two (an A2 config modelled on the default A3 die is a wrong answer)."""
        out = _generations_in(Path(self.where).stem, f"file name {Path(self.where).name}")
        if self.test_name:
            out += _generations_in(self.test_name, f"test_name {self.test_name!r}")
        for t in self.tests if len(self.tests) == 1 else ():
            out += _generations_in(t.name, f"test case {t.name!r}")
        for i, n in enumerate(self.nodes):
            if n.env.get("ASCEND_A3_ENABLE", "").strip().lower() in ("1", "true", "yes"):
                out.append(("A3", f"ASCEND_A3_ENABLE={n.env['ASCEND_A3_ENABLE']} (node {i})"))
        return out

    def select(self, name: str | None, client: bool = True) -> tuple["Nightly", str | None]:
        """The test case ``--case`` names (``TEST``, ``TEST/BENCH``, or a benchmark's name) as a config of
        its own, and the benchmark name left to pick within it. One test case (or none): unchanged.
        ``client=False`` (a command with no client: memory, perf): only the launch matters, so with no
        name the test cases need a choice only when their launches differ, and it is a test case's."""
        if len(self.tests) < 2:
            return self, name
        if name is None and not client:
            launches = {tuple((n.argv, tuple(sorted(n.env.items()))) for n in t.nodes) for t in self.tests}
            if len(launches) > 1:
                raise AuditInputError(self.where, f"{len(self.tests)} test cases launch differently; give --case "
                                                  f"TEST (one of {', '.join(t.name for t in self.tests)})")
            name = self.tests[0].name
        by_name = {t.name: t for t in self.tests}
        test, bench = None, name
        if name is not None and "/" in name and name.split("/", 1)[0] in by_name:
            test, bench = by_name[name.split("/", 1)[0]], name.split("/", 1)[1]
        elif name is not None and name in by_name:
            test, bench = by_name[name], None
        elif name is not None:
            having = [t for t in self.tests if name in t.cases]
            if not having:
                raise AuditInputError(self.where, f"no performance case {name!r}; the file has: "
                                                  f"{', '.join(self._choices()) or 'none'}")
            test = having[0]
        else:
            measured = [(t, c) for t in self.tests for c in t.cases.values() if c.baseline > 0 and not c.warmup]
            if len(measured) != 1:
                raise AuditInputError(self.where, f"{len(measured)} performance cases have a baseline; give --case "
                                                  f"(one of {', '.join(self._choices()) or 'none'})")
            test = measured[0][0]
        others = [t.name for t in self.tests if t is not test and bench is not None and bench in t.cases]
        note = f"test case {test.name} ({self.tests.index(test) + 1} of {len(self.tests)})" + (
            f"; {', '.join(others)} also has a case {bench!r} (--case TEST/{bench} picks it)" if others else "")
        return Nightly(self.where, test.model, test.nodes, test.cases, self.notes + (note,), (test,),
                       self.test_name), bench

    def _choices(self) -> list[str]:
        if len(self.tests) < 2:
            return list(self.cases)
        return [f"{t.name}/{c}" for t in self.tests for c in t.cases]

    def performance_case(self, name: str | None) -> Case:
        """The case ``name``, or with no name the only measured case (a baseline, and not a warm-up)."""
        if name is not None:
            if name not in self.cases:
                raise AuditInputError(self.where, f"no performance case {name!r}; the file has: "
                                                  f"{', '.join(self.cases) or 'none'}")
            return self.cases[name]
        measured = [c for c in self.cases.values() if c.baseline > 0 and not c.warmup]
        if len(measured) != 1:
            raise AuditInputError(self.where, f"{len(measured)} performance cases have a baseline; give --case "
                                              f"(one of {', '.join(self.cases) or 'none'})")
        return measured[0]


def is_nightly(path: str | Path) -> bool:
    return Path(str(path)).suffix.lower() in SUFFIXES


def read_nightly(path: str | Path) -> Nightly:
    """The nodes and performance cases of a nightly config (AuditInputError naming the file)."""
    where = str(path)
    doc = yaml_caps.load_file(path, "nightly config", NIGHTLY_CAP, NIGHTLY_LIST_CAPS)
    if not isinstance(doc, dict):
        raise AuditInputError(where, "not a vLLM-Ascend nightly config (a YAML mapping)")
    notes: list[str] = []
    if "test_cases" in doc:
        tcs = _list(doc["test_cases"], where, "test_cases")
        if not tcs:
            raise AuditInputError(where, "test_cases is empty")
        tests = tuple(_test_case(_map(tc, where, f"test_cases[{i}]"), i, where) for i, tc in enumerate(tcs))
        names = [t.name for t in tests]
        if len(set(names)) != len(names):
            raise AuditInputError(where, "two test_cases have the same name")
        first = tests[0]
        return Nightly(where, first.model, first.nodes, first.cases, tuple(notes), tests, _test_name(doc))
    elif "deployment" in doc:
        model = str(doc.get("model") or "")
        nodes = tuple(_serve_node(_map(d, where, f"deployment[{i}]"), i, where, model)
                      for i, d in enumerate(_list(doc["deployment"], where, "deployment")))
        cases = _cases(doc.get("benchmarks"), where)
    elif "templates" in doc:
        model = _text(doc.get("model"), where, "model")
        config = {}
        for i, c in enumerate(_list(doc.get("config"), where, "config")):
            c = _map(c, where, f"config[{i}]")
            config[_index(c.get("node_index", i), where, f"config[{i}].node_index")] = c
        nodes = tuple(_template_node(_map(t, where, f"templates[{i}]"), i, where, model, config)
                      for i, t in enumerate(_list(doc["templates"], where, "templates")))
        cases = _cases(doc.get("benchmarks"), where)
    else:
        raise AuditInputError(where, "not a vLLM-Ascend nightly config (no test_cases, deployment or templates)")
    if not nodes:
        raise AuditInputError(where, "the config launches no node")
    return Nightly(where, model, nodes, cases, tuple(notes), test_name=_test_name(doc))


def _test_name(doc: dict) -> str:
    name = doc.get("test_name")
    return name[:200] if isinstance(name, str) else ""


# ------------------------------------------------------------------ nodes

def _test_case(tc: dict, i: int, where: str) -> TestCase:
    """single_node / weekly: one ``test_cases`` entry, launched as ``server_cmd + server_cmd_extra``."""
    name = str(tc.get("name", i))
    model = _text(tc.get("model"), where, f"test_cases[{i}].model")
    args = [_scalar(a, where, "server_cmd") for a in _list(tc.get("server_cmd"), where, f"test_cases[{i}].server_cmd")]
    extra = tc.get("server_cmd_extra")
    if extra is not None:
        args += [_scalar(a, where, "server_cmd_extra")
                 for a in _list(extra, where, f"test_cases[{i}].server_cmd_extra")]
    nodes = (_launch(f"{where}: test case {name}", model, _env(tc.get("envs"), where), args),)
    return TestCase(name, model, nodes, _cases(tc.get("benchmarks"), where))


def _serve_node(d: dict, i: int, where: str, model: str) -> Launch:
    """internal_dp: ``server_cmd`` is one ``vllm serve MODEL ...`` command line."""
    cmd = _text(d.get("server_cmd"), where, f"deployment[{i}].server_cmd")
    try:
        words = shlex.split(cmd)
    except ValueError as exc:
        raise AuditInputError(where, f"deployment[{i}].server_cmd: {exc}") from None
    if len(words) < 3 or words[0] != "vllm" or words[1] != "serve":
        raise AuditInputError(where, f"deployment[{i}].server_cmd is not a 'vllm serve MODEL ...' command")
    return _launch(f"{where}: node {i}", words[2] or model, _env(d.get("envs"), where), words[3:])


def _template_node(t: dict, i: int, where: str, model: str, config: dict) -> Launch:
    """external_dp: ``server_cmd_template`` arguments with the node's ``config`` values substituted."""
    idx = _index(t.get("node_index", i), where, f"templates[{i}].node_index")
    cfg = config.get(idx, {})
    env = _env(t.get("envs"), where)

    def value(m: re.Match) -> str:
        name = m.group(1) or m.group(2)
        key = _TEMPLATE_KEYS.get(name)
        if key is not None and key in cfg:
            return str(cfg[key])
        return env.get(name, m.group(0))
    args = [_PLACEHOLDER.sub(value, _scalar(a, where, "server_cmd_template"))
            for a in _list(t.get("server_cmd_template"), where, f"templates[{i}].server_cmd_template")]
    return _launch(f"{where}: node {idx}", model, env, args)


def _launch(where: str, model: str, env: dict[str, str], args: list[str]) -> Launch:
    return Launch(where=where, model=model, env=env, argv=tuple(args), arg_lines=(0,) * len(args), env_lines={},
                  line=0, program="vllm serve")


# ------------------------------------------------------------------ cases

def is_warmup(name: str) -> bool:
    """A case whose role is warming the prefix cache: the CI names them so (``perf_64k_warmup``,
    ``perf_128k_warmup``, ``perf_warmup``, ``perf_short_warmup``)."""
    return "warm" in name.lower()


#: hub names of the checkpoints the CI serves -> audit's preset (the first match wins, newest first)
_PRESET_NAMES = (("glm-5.2", r"glm-?5[._]2"), ("glm-5.1", r"glm-?5[._]1"), ("glm-5", r"glm-?5(?![._]?\d)"),
                 ("deepseek-v3.2", r"deepseek-v3[._]2"), ("deepseek-v3", r"deepseek-v3(?![._]?\d)"),
                 # DeepSeek-V4: the DSpark checkpoints (Flash-0731, Flash-DSpark) carry a drafter the preset lacks
                 ("deepseek-v4-flash-0731", r"deepseek-v4-flash-(?:0731|dspark)"), ("deepseek-v4-flash", r"deepseek-v4-flash(?!-0731|-dspark)"), ("deepseek-v4-pro", r"deepseek-v4-pro"))


def implied_preset(model: str) -> str | None:
    """The preset a checkpoint's hub name implies (``Eco-Tech/GLM-5.1-w8a8`` -> glm-5.1,
    ``vllm-ascend/DeepSeek-V3.2-W8A8`` -> deepseek-v3.2), or None."""
    low = model.lower().rsplit("/", 1)[-1]
    for preset, pat in _PRESET_NAMES:
        if re.search(pat, low):
            return preset
    return None


def _cases(benchmarks: Any, where: str) -> dict[str, Case]:
    if benchmarks is None:
        return {}
    out: dict[str, Case] = {}
    seen: dict[str, int] = {}           # dataset -> performance prompts sent before
    for name, b in _map(benchmarks, where, "benchmarks").items():
        b = _map(b, where, f"benchmarks.{name}")
        if b.get("case_type") != "performance":
            continue
        ds = str(b.get("dataset_path", ""))
        what = f"benchmarks.{name}"
        # in3500, in128k (x 1024), in1M: 10^6 (DeepSeek-V4-Pro's 1M case runs 1M + 1,024 output tokens within
        # --max-model-len 1048576, which 1024^2 + 1024 would not fit)
        m = re.search(r"(?:^|[-_/])in(\d+)([km]?)(?=$|[-_])", ds, re.IGNORECASE)
        if m is None:
            raise AuditInputError(where, f"{what}: dataset {ds!r} names no input length (inNNNN)")
        unit = {"": 1, "k": 1024, "m": 1_000_000}[m.group(2).lower()]
        isl = _capped(int(m.group(1)) * unit, "--isl", where, f"{what}: dataset {ds!r}")
        p = re.search(r"prefix(\d+)", ds, re.IGNORECASE)
        prefix = int(p.group(1)) / 100 if p else 0.0
        if not 0 <= prefix <= 1:
            raise AuditInputError(where, f"{what}: dataset {ds!r}: prefix share {prefix:g} is not a fraction")
        rate = float(_num(b.get("request_rate", 0), where, what + ".request_rate"))
        if rate > 1e9:
            raise AuditInputError(where, f"{what}.request_rate: {rate:g} requests/s is over audit's 1e9 (as --request-rate)")
        prompts = _capped(_num(b.get("num_prompts"), where, what + ".num_prompts"), "--num-prompts", where,
                          what + ".num_prompts")
        out[name] = Case(name, isl, _capped(_num(b.get("max_out_len"), where, what + ".max_out_len"), "--osl", where,
                                            what + ".max_out_len"),
                         _capped(_num(b.get("batch_size"), where, what + ".batch_size"), "--concurrency", where,
                                 what + ".batch_size"), prompts,
                         None if rate < ALL_AT_ONCE_RATE else rate, prefix, seen.get(ds, 0),
                         float(_num(b.get("baseline", 0) or 0, where, what + ".baseline")), ds,
                         is_warmup(str(name)))
        seen[ds] = seen.get(ds, 0) + prompts
    return out


# ------------------------------------------------------------------ checked access

def _map(v: Any, where: str, what: str) -> dict:
    if not isinstance(v, dict):
        raise AuditInputError(where, f"{what} must be a mapping")
    return v


def _list(v: Any, where: str, what: str) -> list:
    if not isinstance(v, list):
        raise AuditInputError(where, f"{what} must be a list")
    return v


def _text(v: Any, where: str, what: str) -> str:
    if not isinstance(v, str) or not v.strip():
        raise AuditInputError(where, f"{what} must be a non-empty string")
    return v


def _scalar(v: Any, where: str, what: str) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, (str, int, float)):
        return str(v)
    raise AuditInputError(where, f"{what}: {v!r} is not a command-line word")


def _num(v: Any, where: str, what: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise AuditInputError(where, f"{what} must be a number, got {v!r}")
    if v != v or v in (float("inf"), float("-inf")):
        raise AuditInputError(where, f"{what} must be finite")
    return v


def _index(v: Any, where: str, what: str) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise AuditInputError(where, f"{what} must be an integer, got {v!r}")
    return v


def _capped(v: float, option: str, where: str, what: str) -> int:
    """An integer within the plausibility cap of the bench option it becomes (auditor.limits)."""
    cap = OPTION_CAPS[option]
    if v != int(v) or not cap.lo <= v <= cap.hi:
        shown = f"{v:g}" if isinstance(v, float) else (str(v) if len(str(v)) <= 24 else str(v)[:20] + "...")
        raise AuditInputError(where, f"{what}: {shown} is not an integer in audit's range {cap.lo:,}..{cap.hi:,} "
                                     f"(as {option})")
    return int(v)


def _env(v: Any, where: str) -> dict[str, str]:
    if v is None:
        return {}
    return {str(k): _scalar(x, where, f"envs.{k}") for k, x in _map(v, where, "envs").items()}
