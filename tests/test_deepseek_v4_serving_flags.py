"""What bench reads from DeepSeek-V4's CI launches beyond the parallel plan (issue 27): where its prefix hits
land on the six-group pool, a decode node without prefix caching, and a drafter the speculative config runs
eager. Expected figures are hand arithmetic from the engine's rules (cited) or the real config files
(../shared/data/published/deepseek-v4/), never the code under test."""
from __future__ import annotations

import re

import pytest

from auditor.cli import main
from auditor.engines.registry import as_engine
from auditor.launch.nightly import read_nightly
from auditor.model.presets import preset_spec
from auditor.parallel import ParallelPlan

#: the compress-128 group's page: ``bs`` rows of 128 raw tokens (dsa_v1.py:146-149@182b75ea: 32/64/128-row C128
#: pages are 4096/8192/16384 scheduler tokens); every other group's block (C4: 4 bs, window: bs, states: bs/16,
#: bs/4) divides it, so the lcm of the groups' block sizes is this
C128_RATIO = 128


def _pro(shared_dir):
    return shared_dir / "data" / "published" / "deepseek-v4" / "DeepSeek-V4-Pro-w4a8-1M-PD.yaml"


@pytest.mark.parametrize("bs", [32, 64, 128])
@pytest.mark.parametrize("model", ["deepseek-v4-flash", "deepseek-v4-pro"])
def test_pool_hits_align_to_the_lcm_of_its_group_blocks(model, bs):
    """patch_kv_cache_coordinator.py:367-375@182b75ea: the hit length is a multiple of the lcm of every
    attention group's block size (the groups share block ids); :294-298 looks hits up at that alignment."""
    kv = as_engine("vllm-ascend@main").kv_spec(preset_spec(model), ParallelPlan(tp=16, dp=2, ep=32, block_size=bs),
                                               mtp=True)
    assert kv.hit_alignment_tokens == C128_RATIO * bs


def _hit_line(text: str) -> int:
    return int(re.search(r"\(hit (\d+) tokens\)", text).group(1))


def test_pro_1m_prefix_hit_is_whole_16k_blocks(shared_dir, capsys):
    """The 1M-token, 99%-prefix case at --block-size 128: the hit is the shared prefix rounded down to
    16,384 tokens (not to the 128-token block a one-table cache would hit at), never the last prompt token."""
    path = _pro(shared_dir)
    case = read_nightly(path).performance_case(None)
    assert main(["bench", "--launch", str(path)]) == 0
    shared = min(int(case.isl * case.prefix_ratio), case.isl - 1)
    assert _hit_line(capsys.readouterr().out) == shared // (C128_RATIO * 128) * (C128_RATIO * 128)


def test_a_one_table_cache_still_hits_in_128_token_blocks(capsys):
    """GLM-5.1's cache is one block table: hits stay whole 128-token blocks (kv_cache_manager.py:212-222)."""
    assert main(["bench", "glm-5.1", "--tp", "16", "--ep", "16", "--concurrency", "1", "--isl", "1000", "--osl", "2",
                 "--prefix-ratio", "0.5", "--num-prompts", "1"]) == 0
    assert _hit_line(capsys.readouterr().out) == 500 // 128 * 128


def test_the_decode_nodes_own_prefix_caching_is_read_from_the_launch(shared_dir):
    """DeepSeek-V4-Pro's 1M P/D: its decode nodes (2, 3) say --no-enable-prefix-caching, its prefill nodes do not:
    bench keeps the P cache and gives the D instance none; the Flash PD config turns both off."""
    import yaml

    from auditor.cli.bench import bench_command
    from auditor.cli.deployment import expand
    d = shared_dir / "data" / "published" / "deepseek-v4"
    for name, case in (("DeepSeek-V4-Pro-w4a8-1M-PD.yaml", []),
                       ("DeepSeek-V4-flash-w8a8-PD-no-prefix.yaml", ["--case", "perf_TPOT20_3_5_1_5"])):
        raw = yaml.safe_load((d / name).read_text())
        nodes = {t["node_index"]: t["server_cmd_template"] for t in raw["templates"]}
        decode, prefill = raw["routing"]["groups"]["decoder"], raw["routing"]["groups"]["prefiller"]
        args, _ = expand(["--launch", str(d / name)] + case, bench_command)
        assert ("--no-decode-prefix-caching" in args) == all("--no-enable-prefix-caching" in nodes[i] for i in decode)
        assert ("--no-prefix-caching" in args) == all("--no-enable-prefix-caching" in nodes[i] for i in prefill)
    assert "--no-decode-prefix-caching" in expand(["--launch", str(d / "DeepSeek-V4-Pro-w4a8-1M-PD.yaml")],
                                                  bench_command)[0]


def test_a_decode_instance_without_prefix_caching_has_no_hits(shared_dir):
    """prefix_hits per instance: the P instance's aligned hit, and 0 on a D instance whose cache is off."""
    from auditor.context import DeploymentContext
    from auditor.deployment import InstancePlan
    from auditor.devices.profiles import load_device
    from auditor.serving.sim import BenchWorkload, Deployment, prefix_hits
    spec = preset_spec("deepseek-v4-flash")
    insts = [InstancePlan.from_plan(name, 1, ParallelPlan(tp=4, dp=4, ep=16, role=role, block_size=128),
                                    max_num_seqs=4, max_model_len=200_000, gpu_memory_utilization=0.9)
             for name, role in (("prefill", "prefill"), ("decode", "decode"))]
    dep = Deployment(DeploymentContext(spec, None, "vllm-ascend@main", "w8a8", load_device("a3-752t")), insts)
    for on in (True, False):
        wl = BenchWorkload(1, 100_000, 8, 1, prefix_ratio=0.9, decode_prefix_caching=on)
        hit = 90_000 // (C128_RATIO * 128) * (C128_RATIO * 128)
        assert prefix_hits(dep, wl).tolist() == [hit, hit if on else 0]


def _spec_eager(cmd: list[str]) -> bool:
    import json
    return bool(json.loads(cmd[cmd.index("--speculative-config") + 1]).get("enforce_eager", False))


def test_the_drafters_enforce_eager_is_read_from_the_speculative_config(shared_dir):
    """--draft-eager where a node's --speculative-config says "enforce_eager": true (A3 Flash: its one node; Pro
    1M: every node), and not where it does not (the Flash PD config's P and D)."""
    import shlex

    import yaml

    from auditor.cli.bench import bench_command
    from auditor.cli.deployment import expand
    d = shared_dir / "data" / "published" / "deepseek-v4"
    raw = yaml.safe_load((d / "DeepSeek-V4-Flash-W8A8-A3.yaml").read_text())
    args, _ = expand(["--launch", str(d / "DeepSeek-V4-Flash-W8A8-A3.yaml")], bench_command)
    assert _spec_eager(raw["test_cases"][0]["server_cmd"]) and "--draft-eager" in args
    for name, case in (("DeepSeek-V4-Pro-w4a8-1M-PD.yaml", []),
                       ("DeepSeek-V4-flash-w8a8-PD-no-prefix.yaml", ["--case", "perf_TPOT20_3_5_1_5"])):
        raw = yaml.safe_load((d / name).read_text())
        nodes = {t["node_index"]: t["server_cmd_template"] for t in raw["templates"]}
        args, _ = expand(["--launch", str(d / name)] + case, bench_command)
        for role, group in (("--prefill", "prefiller"), ("--decode", "decoder")):
            inst = shlex.split(args[args.index(role) + 1])
            assert ("--draft-eager" in inst) == all(_spec_eager(nodes[i]) for i in raw["routing"]["groups"][group])


def test_an_eager_drafter_pays_its_launches_on_a_graph_decode_step():
    """DeepSeek-V4's drafter is captured with the decode graph unless the launch says enforce_eager
    (llm_base_proposer.py:178@182b75ea: use_cuda_graph = runner._use_aclgraph() and not enforce_eager): then a
    graph decode step also launches the drafter's kernels, the launches of the decode program's drafter pass."""
    from auditor.context import DeploymentContext
    from auditor.deployment import InstancePlan
    from auditor.devices.profiles import load_device
    from auditor.perf.api import cached_program
    from auditor.perf.host import launch_counts
    from auditor.perf.program import kernel_path_of
    from auditor.serving.costs import step_costs
    spec, eng, dev = preset_spec("deepseek-v4-flash"), as_engine("vllm-ascend@main"), load_device("a3-752t")
    assert not eng.drafter_eager(spec)
    base = DeploymentContext(spec, None, eng, "w8a8", dev)
    got = {}
    for eager in (False, True):
        inst = InstancePlan.from_plan("aggregated", 1, ParallelPlan(tp=4, dp=4, ep=16, mtp=True, num_speculative_tokens=1,
                                                                    block_size=128),
                                      max_num_seqs=4, max_model_len=40_000, gpu_memory_utilization=0.9, mtp=1,
                                      draft_eager=eager)
        got[eager] = step_costs(base, inst).launches_draft
    plan = inst.parallel_plan()
    dec = cached_program(base.with_plan(plan), "decode", "repetition", True, kernel_path_of(eng, "bf16", dev))
    assert got[False] == 0.0
    assert got[True] == launch_counts(dec.arrays(), 1)[1] > 0


def test_a_command_line_no_draft_eager_wins_over_the_launch(shared_dir, capsys):
    """An option typed on the command line wins over the launch: --no-draft-eager drops the drafter's
    launches, so the A3 Flash case runs faster than as launched."""
    import json
    path = shared_dir / "data" / "published" / "deepseek-v4" / "DeepSeek-V4-Flash-W8A8-A3.yaml"
    rates = []
    for extra in ([], ["--no-draft-eager"]):
        assert main(["bench", "--launch", str(path), "--format", "json"] + extra) == 0
        rates.append(json.loads(capsys.readouterr().out)["output_throughput"])
    assert rates[0] < rates[1]
