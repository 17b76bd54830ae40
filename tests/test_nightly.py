"""vLLM-Ascend nightly CI configs as launches (``--launch FILE.yaml``) and bench clients (``--case``).

The three layouts are written here by hand (single_node test_cases, internal_dp deployment, external_dp
templates); the published configs in ../shared, when present, are read and checked against the
hand-written serving rows of tests/data/serving_published.json (same deployment, same workload, so the
same simulated throughput) and against the regex reader of test_launch_script (same argv and env)."""
from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from auditor.cli import main
from auditor.errors import AuditInputError
from auditor.launch.nightly import read_nightly

ROWS = Path(__file__).parent / "data" / "serving_published.json"

SINGLE = """
test_cases:
  - name: "T"
    model: "vllm-ascend/DeepSeek-V3.2-W8A8"
    envs:
      HCCL_BUFFSIZE: "256"
      VLLM_ASCEND_ENABLE_FUSED_MC2: 1
    server_cmd:
      - "--tensor-parallel-size"
      - 8
      - "--data-parallel-size"
      - "2"
      - "--enable-expert-parallel"
      - "--max-num-seqs"
      - "8"
      - "--max-model-len"
      - "8192"
    benchmarks:
      acc:
        case_type: accuracy
        dataset_path: vllm-ascend/aime2025
      warm:
        case_type: performance
        dataset_path: vllm-ascend/GSM8K-in4096-bs100-prefix50
        num_prompts: 3
        max_out_len: 1
        batch_size: 1
        request_rate: 0
        baseline: 0
      perf:
        case_type: performance
        dataset_path: vllm-ascend/GSM8K-in4096-bs100-prefix50
        num_prompts: 32
        max_out_len: 512
        batch_size: 8
        request_rate: 2.5
        baseline: 100.5
"""

INTERNAL = """
env_common: &env_common
  HCCL_BUFFSIZE: "400"
  VLLM_ASCEND_ENABLE_FLASHCOMM1: "1"
model: "Eco-Tech/GLM-5.1-w8a8"
deployment:
  - envs:
      <<: *env_common
    server_cmd: >
      vllm serve Eco-Tech/GLM-5.1-w8a8 --data-parallel-size 4 --data-parallel-size-local 2
      --tensor-parallel-size 4 --enable-expert-parallel --max-num-seqs 4 --max-model-len 9000
      --gpu-memory-utilization 0.92 --additional-config '{"enable_dsa_cp": true}'
  - envs:
      <<: *env_common
    server_cmd: >
      vllm serve Eco-Tech/GLM-5.1-w8a8 --headless --data-parallel-size 4 --data-parallel-size-local 2
      --tensor-parallel-size 4 --enable-expert-parallel --max-num-seqs 4 --max-model-len 9000
      --gpu-memory-utilization 0.9 --additional-config '{"enable_dsa_cp": true}'
benchmarks:
  perf:
    case_type: performance
    dataset_path: vllm-ascend/GSM8K-in3500-bs400
    num_prompts: 8
    max_out_len: 256
    batch_size: 4
    request_rate: 0
    baseline: 50
"""

EXTERNAL = """
model: "vllm-ascend/DeepSeek-V3.2-W8A8"
config:
  - {node_index: 0, dp_size: 2, tp_size: 8, dp_rank_start: 0}
  - {node_index: 1, dp_size: 4, tp_size: 4, dp_rank_start: 0}
templates:
  - node_index: 0
    envs: {HCCL_BUFFSIZE: "300"}
    server_cmd_template: [--data-parallel-size, "${DP_SIZE}", --tensor-parallel-size, "${TP_SIZE}",
                          --data-parallel-rank, "${DP_RANK}", --port, "$SERVER_PORT", --enable-expert-parallel,
                          --max-model-len, "9000", --max-num-seqs, "4", --max-num-batched-tokens, "8192",
                          --kv-transfer-config, '{"kv_connector": "MooncakeConnectorV1", "kv_role": "kv_producer"}']
  - node_index: 1
    envs: {HCCL_BUFFSIZE: "200"}
    server_cmd_template: [--data-parallel-size, "${DP_SIZE}", --tensor-parallel-size, "${TP_SIZE}",
                          --enable-expert-parallel, --max-model-len, "9000", --max-num-seqs, "8",
                          --max-num-batched-tokens, "64",
                          --kv-transfer-config, '{"kv_connector": "MooncakeConnectorV1", "kv_role": "kv_consumer"}']
benchmarks:
  perf:
    case_type: performance
    dataset_path: vllm-ascend/GSM8K-in4k-bs10
    num_prompts: 16
    max_out_len: 128
    batch_size: 8
    request_rate: 1
    baseline: 0
"""


def _write(tmp_path: Path, name: str, text: str) -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_single_node_layout(tmp_path):
    cfg = read_nightly(_write(tmp_path, "s.yaml", SINGLE))
    (node,) = cfg.nodes
    assert cfg.model == node.model == "vllm-ascend/DeepSeek-V3.2-W8A8"
    assert node.argv[:2] == ("--tensor-parallel-size", "8")          # YAML ints become words
    assert node.env == {"HCCL_BUFFSIZE": "256", "VLLM_ASCEND_ENABLE_FUSED_MC2": "1"}
    assert set(cfg.cases) == {"warm", "perf"}                          # accuracy cases are not clients
    perf = cfg.cases["perf"]
    assert (perf.isl, perf.osl, perf.concurrency, perf.num_prompts) == (4096, 512, 8, 32)
    assert perf.prefix_ratio == 0.5 and perf.request_rate == 2.5 and perf.baseline == 100.5
    assert perf.warm_prompts == 3                                      # the warm-up case ran first
    assert cfg.cases["warm"].request_rate is None and cfg.cases["warm"].warm_prompts == 0
    assert cfg.performance_case(None) is perf                          # the only one with a baseline


def test_internal_dp_layout_and_merge_keys(tmp_path):
    cfg = read_nightly(_write(tmp_path, "i.yaml", INTERNAL))
    assert [n.env for n in cfg.nodes] == [{"HCCL_BUFFSIZE": "400", "VLLM_ASCEND_ENABLE_FLASHCOMM1": "1"}] * 2
    assert "--headless" in cfg.nodes[1].argv and cfg.nodes[1].model == "Eco-Tech/GLM-5.1-w8a8"


def test_external_dp_templates_take_their_nodes_config(tmp_path):
    cfg = read_nightly(_write(tmp_path, "e.yaml", EXTERNAL))
    p, d = cfg.nodes
    assert p.argv[:6] == ("--data-parallel-size", "2", "--tensor-parallel-size", "8", "--data-parallel-rank", "0")
    assert "$SERVER_PORT" in p.argv                                    # no value: left as written
    assert d.argv[:4] == ("--data-parallel-size", "4", "--tensor-parallel-size", "4")
    assert cfg.cases["perf"].isl == 4 * 1024 and cfg.cases["perf"].prefix_ratio == 0.0


def test_bench_takes_the_deployment_and_the_case(tmp_path, capsys):
    """The aggregated config: both nodes are one DP4 instance; the node with the smaller utilisation binds
    (said on stderr); the case sets the client; the model name's recipe is taken; P/D renders both."""
    f = _write(tmp_path, "i.yaml", INTERNAL)
    assert main(["bench", "glm-5.1", "--launch", str(f), "--format", "json"]) == 0
    out = capsys.readouterr()
    got = json.loads(out.out)
    assert got["num_prompts"] == 8 and got["max_concurrency"] == 4
    assert "util node 0: 0.92 / node 1: 0.9); audit models node 1" in out.err
    assert "recipe w8a8 from the config's model name" in out.err
    same = ["bench", "glm-5.1", "--tp", "4", "--dp", "4", "--ep", "on", "--sp", "--dsa-cp", "--max-num-seqs", "4",
            "--max-model-len", "9000", "--gpu-memory-utilization", "0.9", "--hccl-buffsize", "400", "--recipe", "w8a8",
            "--concurrency", "4", "--isl", "3500", "--osl", "256", "--num-prompts", "8", "--format", "json"]
    assert main(same) == 0
    assert json.loads(capsys.readouterr().out)["output_throughput"] == got["output_throughput"]
    pd = _write(tmp_path, "e.yaml", EXTERNAL)
    assert main(["bench", "deepseek-v3.2", "--launch", str(pd), "--case", "perf", "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["completed"] == 16


def test_bad_configs_are_one_line_errors(tmp_path, capsys):
    cases = [
        ("bad.yaml", "a: [1, 2\n", "not valid YAML"),
        ("list.yaml", "- 1\n- 2\n", "not a vLLM-Ascend nightly config"),
        ("noin.yaml", SINGLE.replace("GSM8K-in4096-bs100-prefix50", "aime2025"), "names no input length"),
        ("rate.yaml", SINGLE.replace("request_rate: 2.5", "request_rate: fast"), "request_rate must be a number"),
        ("huge.yaml", SINGLE.replace("num_prompts: 32", "num_prompts: " + "9" * 400),
         "line 33: a number of 400 characters, over audit's cap of 40"),
        ("big.yaml", SINGLE.replace("num_prompts: 32", "num_prompts: " + "9" * 30),
         "benchmarks.perf.num_prompts: 99999999999999999999... is not an integer in audit's range 1..1,000,000"),
        ("cmd.yaml", INTERNAL.replace("vllm serve Eco-Tech/GLM-5.1-w8a8 --headless", "python serve.py"),
         "is not a 'vllm serve MODEL ...' command"),
    ]
    for name, text, msg in cases:
        f = _write(tmp_path, name, text)
        assert main(["memory", "glm-5.1", "--launch", str(f)]) == 2, name
        err = capsys.readouterr().err.strip().splitlines()
        assert err and msg in err[-1] and str(f) in err[-1] and "Traceback" not in "".join(err), (name, err)
    pd = _write(tmp_path, "e.yaml", EXTERNAL)
    for args, msg in ((["memory", "deepseek-v3.2", "--launch", str(pd)], "give --node N"),
                      (["memory", "deepseek-v3.2", "--launch", str(pd), "--node", "5"], "has nodes 0-1"),
                      (["bench", "deepseek-v3.2", "--launch", str(pd), "--case", "nope"], "no performance case 'nope'"),
                      (["memory", "glm-5.1", "--case", "perf"], "nightly config")):
        assert main(args) == 2
        assert msg in capsys.readouterr().err
    assert main(["memory", "deepseek-v3.2", "--launch", str(pd), "--node", "1", "--recipe", "w8a8"]) == 0
    assert "KV" in capsys.readouterr().out


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.recursive(st.none() | st.booleans() | st.integers(-5, 10**6) | st.floats(allow_nan=True)
                    | st.text(max_size=12) | st.sampled_from(["performance", "vllm serve m --tp 1", "x-in4096-prefix50"]),
                    lambda ch: st.lists(ch, max_size=4) | st.dictionaries(
                        st.sampled_from(["test_cases", "deployment", "templates", "config", "model", "server_cmd",
                                         "server_cmd_template", "envs", "benchmarks", "case_type", "dataset_path",
                                         "num_prompts", "node_index", "max_out_len", "batch_size", "x"]), ch,
                        max_size=5), max_leaves=25))
def test_any_yaml_document_is_read_or_refused_in_one_line(tmp_path, doc):
    f = tmp_path / "h.yaml"
    f.write_text(yaml.safe_dump(doc))
    try:
        cfg = read_nightly(f)
    except AuditInputError as exc:
        assert "\n" not in str(exc)
        return
    assert cfg.nodes and all(isinstance(a, str) for n in cfg.nodes for a in n.argv)


# -- the published configs ---------------------------------------------------------------------------

def _nightly_dir(shared_dir: Path) -> Path:
    return shared_dir / "data" / "published" / "nightly"


def test_published_configs_read_as_the_independent_reader_does(shared_dir: Path):
    """Every published config: the same server command and environment per node as test_launch_script's
    regex reader (no YAML library), which other tests already hold to the flag table."""
    from test_launch_script import _nightly_launches
    files = sorted(_nightly_dir(shared_dir).glob("*.yaml"))
    assert files
    for f in files:
        cfg = read_nightly(f)
        theirs = _nightly_launches(f)
        assert len(cfg.nodes) == len(theirs), f.name
        for node, (cmd, env) in zip(cfg.nodes, theirs):
            import shlex
            words = shlex.split(cmd)
            assert (node.model, list(node.argv)) == (words[2], words[3:]), f.name
            assert {k: v for k, v in node.env.items() if k in env} == {k: env[k] for k in node.env if k in env}


@pytest.mark.parametrize("rid, file, extra", [
    ("P1", "single_node__DeepSeek-V3.2-W8A8.yaml", []),
    ("P4", "single_node__GLM-5.1-W8A8-PrefillMC2.yaml", []),
    ("P5", "multi_node_internal_dp__GLM5_1-W8A8-A2-dual-nodes.yaml", ["--device", "a2-313t"]),
    ("P6", "multi_node_internal_dp__GLM5_1-W8A8-A3-dual-nodes.yaml", []),
    ("P8", "multi_node_internal_dp__GLM-5.1-W8A8C8-A3_128k_90_50.yaml", []),
])
def test_published_config_benches_as_its_serving_row(shared_dir: Path, capsys, rid, file, extra):
    """The config read as it is gives the simulation of the hand-encoded row (its flags, environment,
    warm-up and client), and the case's baseline is the row's measured figure."""
    from auditor.serving.bench import metrics
    from auditor.serving.calibrate import deployment, workload
    from auditor.serving.sim import simulate
    row = {r["id"]: r for r in json.loads(ROWS.read_text())["rows"]}[rid]
    f = _nightly_dir(shared_dir) / file
    assert main(["bench", row["model"], "--launch", str(f), "--format", "json", *extra]) == 0
    out = capsys.readouterr()
    got = json.loads(out.out)["output_throughput"]
    want = metrics(simulate(deployment(row), workload(row)))["output_throughput"]
    assert math.isclose(got, want, rel_tol=1e-9), (got, want)
    assert f"baseline {row['measured_output_tok_s']:g} output tok/s" in out.err


# -- every test case, warm-ups by role, the model's fallback (issue 29) ---------------------------------

TWO_TESTS = """
_cmd: &cmd ["--tensor-parallel-size", "8", "--data-parallel-size", "2", "--enable-expert-parallel",
            "--max-num-seqs", "8", "--max-model-len", "70000"]
_bench: &bench
  perf_a: {case_type: performance, dataset_path: x/GSM8K_prefix0_in16384_bs1, num_prompts: 4, max_out_len: 64,
           batch_size: 1, request_rate: 0, baseline: 26.1}
test_cases:
  - name: "plain"
    model: "vllm-ascend/DeepSeek-V3.2-W8A8"
    envs: {VLLM_USE_MODELSCOPE: "true"}
    server_cmd: *cmd
    benchmarks: {<<: *bench}
  - name: "mix"
    model: "vllm-ascend/DeepSeek-V3.2-W8A8"
    server_cmd: *cmd
    server_cmd_extra: ["--async-scheduling", "--max-num-batched-tokens", "2048"]
    benchmarks:
      <<: *bench
      perf_b: {case_type: performance, dataset_path: x/GSM8K-in2048-bs4, num_prompts: 8, max_out_len: 32,
               batch_size: 4, request_rate: 0, baseline: 220}
"""


def test_every_test_case_is_read_with_its_extra_arguments(tmp_path):
    cfg = read_nightly(_write(tmp_path, "w.yaml", TWO_TESTS))
    assert [t.name for t in cfg.tests] == ["plain", "mix"]
    plain, mix = cfg.tests
    assert mix.nodes[0].argv == plain.nodes[0].argv + ("--async-scheduling", "--max-num-batched-tokens", "2048")
    assert set(mix.cases) == {"perf_a", "perf_b"} and set(plain.cases) == {"perf_a"}
    # --case: a benchmark name (the first test case that has it), TEST/BENCH, or a test case's name
    sel, bench = cfg.select("perf_a")
    assert sel.tests == (plain,) and bench == "perf_a" and "mix also has a case 'perf_a'" in sel.notes[-1]
    sel, bench = cfg.select("mix/perf_a")
    assert sel.nodes == mix.nodes and bench == "perf_a"
    sel, bench = cfg.select("perf_b")
    assert sel.nodes == mix.nodes and sel.performance_case(bench).isl == 2048
    sel, bench = cfg.select("plain")
    assert sel.performance_case(bench).baseline == 26.1                 # its only measured case
    with pytest.raises(AuditInputError, match="3 performance cases have a baseline.*mix/perf_b"):
        cfg.select(None)
    with pytest.raises(AuditInputError, match="no performance case 'nope'"):
        cfg.select("nope")


def test_a_command_without_a_client_chooses_a_test_case_not_a_benchmark(tmp_path):
    """memory and perf need only a launch: test cases that launch alike need no --case; ones that differ
    need a test case named (a benchmark name still picks its test case)."""
    cfg = read_nightly(_write(tmp_path, "w.yaml", TWO_TESTS))
    with pytest.raises(AuditInputError, match="2 test cases launch differently; give --case TEST .*plain, mix"):
        cfg.select(None, client=False)
    sel, bench = cfg.select("mix", client=False)
    assert sel.tests == (cfg.tests[1],) and bench is None
    alike = TWO_TESTS.replace('    server_cmd_extra: ["--async-scheduling", "--max-num-batched-tokens", "2048"]\n',
                              "").replace('    envs: {VLLM_USE_MODELSCOPE: "true"}\n', "")
    same = read_nightly(_write(tmp_path, "same.yaml", alike))
    assert same.tests[0].nodes[0].argv == same.tests[1].nodes[0].argv
    sel, bench = same.select(None, client=False)
    assert sel.tests == (same.tests[0],) and bench is None
    with pytest.raises(AuditInputError, match="3 performance cases have a baseline"):
        same.select(None)                       # bench still needs its case


def test_memory_on_a_two_test_case_config_names_the_test_cases(tmp_path, capsys):
    path = _write(tmp_path, "w.yaml", TWO_TESTS)
    assert main(["memory", "deepseek-v3.2", "--launch", str(path), "-q"]) == 2
    err = capsys.readouterr().err
    assert "give --case TEST (one of plain, mix)" in err and "Traceback" not in err
    assert main(["memory", "deepseek-v3.2", "--launch", str(path), "--case", "perf_a", "-q"]) == 0
    assert "the performance case 'perf_a' is not used by `audit memory`" in capsys.readouterr().err


def test_a_warm_up_is_known_by_its_role_not_its_baseline(tmp_path):
    """The weekly 64k config gives its warm-up a baseline of 1 (GLM-5.1-W8A8C8-A3_64k_90_50.yaml:92): the
    measured case is still the default."""
    text = SINGLE.replace("warm:", "perf_64k_warmup:").replace("baseline: 0", "baseline: 1")
    cfg = read_nightly(_write(tmp_path, "w.yaml", text))
    assert cfg.cases["perf_64k_warmup"].warmup and not cfg.cases["perf"].warmup
    assert cfg.performance_case(None) is cfg.cases["perf"]
    assert cfg.cases["perf"].warm_prompts == 3                          # the warm-up still primes the cache


@pytest.mark.parametrize("name, preset", [
    ("Eco-Tech/GLM-5.1-w8a8", "glm-5.1"), ("Eco-Tech/GLM-5.1-w8a8c8", "glm-5.1"), ("zai-org/GLM-5", "glm-5"),
    ("vllm-ascend/DeepSeek-V3.2-W8A8", "deepseek-v3.2"), ("x/GLM-5.2-W4A8C8", "glm-5.2"),
    ("deepseek-ai/DeepSeek-V3", "deepseek-v3"), ("x/Qwen3-32B", None)])
def test_implied_preset(name, preset):
    from auditor.launch.nightly import implied_preset
    assert implied_preset(name) == preset


def test_unreachable_model_falls_back_to_its_preset_and_says_so(tmp_path, capsys, monkeypatch):
    """No MODEL given and the checkpoint cannot be read: the preset the name implies, named on stderr;
    VLLM_USE_MODELSCOPE in the node's environment makes the name a ModelScope one."""
    import auditor.source as source
    seen = []

    def unreachable(model, *a, **k):
        seen.append(str(model))
        if "/" in str(model):
            raise AuditInputError(str(model), "cannot reach the hub")
        return real(model, *a, **k)
    real = source.open_model
    monkeypatch.setattr(source, "open_model", unreachable)
    f = _write(tmp_path, "w.yaml", TWO_TESTS)
    assert main(["bench", "--launch", str(f), "--case", "plain", "--format", "json"]) == 0
    out = capsys.readouterr()
    assert seen[0] == "ms://vllm-ascend/DeepSeek-V3.2-W8A8"
    assert "models the preset deepseek-v3.2, which the name implies" in out.err
    assert json.loads(out.out)["model_id"] == "deepseek-v3.2"
    assert main(["bench", "--launch", str(f), "--case", "mix/perf_b"]) == 0
    out = capsys.readouterr().out                                       # its server_cmd_extra: --async-scheduling
    assert "vllm-ascend/DeepSeek-V3.2-W8A8" in seen and "TP8 DP2 EP16 async MTP0 seqs 8 batched 2048" in out


def test_published_weekly_configs_give_their_measured_case(shared_dir: Path, capsys):
    """Every weekly config of section E reads with --case as the README names it, and the case's baseline
    is the README's figure."""
    weekly = shared_dir / "data" / "published" / "weekly"
    for name, case, want in (("GLM-5.1-W8A8C8-A3_64k_90_50.yaml", None, 687.4133),
                             ("GLM-5.1-W8A8C8-64k-1k-90-50-PD.yaml", None, 2722.6),
                             ("DeepSeek-V3.2-W8A8_A3_weekly.yaml", "perf_32768_bs8", 32.73)):
        cfg, bench = read_nightly(weekly / name).select(case)
        assert cfg.performance_case(bench).baseline == want, name
