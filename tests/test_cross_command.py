"""One deployment, every command, one answer: memory, perf and bench report the same weights, KV
blocks per rank and KV tokens for the same flags; a sweep row carries memory's weights and pool; the
launch plan prints, read back by memory in vLLM's words, gives the figures plan reported; align's
prediction for the same flags is memory's.

Before the deployment record, bench rebuilt each instance from a subset of the flags and silently
dropped --pp, --redundant-experts and --no-dsa-cp (2,068 / 2,068 / 1,860 KV blocks per rank where
memory gave 5,999 / 1,866 / 2,095). The expected figures here are memory's: the test is that no
command reads the deployment differently (and that the flags change the figures at all).
"""
from __future__ import annotations

import json

import pytest

from auditor.cli import main

S, MML = 8, 16384          # max_num_seqs, max_model_len: the same runtime for every command

DEPLOYMENTS = {
    "pp2": ["--tp", "8", "--dp", "2", "--ep", "16", "--pp", "2"],
    "redundant-experts": ["--tp", "16", "--dp", "2", "--ep", "32", "--sp", "--dsa-cp", "--redundant-experts", "32"],
    "no-dsa-cp": ["--tp", "16", "--dp", "2", "--ep", "32", "--sp", "--no-dsa-cp"],
    "dsa-cp": ["--tp", "16", "--dp", "2", "--ep", "32", "--sp", "--dsa-cp"],
    "mtp": ["--tp", "16", "--dp", "2", "--ep", "32", "--sp", "--dsa-cp", "--mtp", "2"],
    "c8": ["--tp", "8", "--dp", "4", "--ep", "32", "--kv-cache-dtype", "c8"],
    "dcp": ["--tp", "16", "--dp", "2", "--ep", "32", "--dcp", "16"],
    "prefill": ["--tp", "16", "--dp", "2", "--ep", "32", "--sp", "--dsa-cp", "--role", "prefill"],
    "decode": ["--tp", "4", "--dp", "8", "--ep", "32", "--role", "decode"],
}
RUNTIME = ["--max-num-seqs", str(S), "--max-model-len", str(MML)]


def _json(args, capsys) -> dict:
    code = main(args)
    out = capsys.readouterr().out
    assert code in (0, 3), out[-500:]
    return json.loads(out)


def _mtp(flags) -> int:
    return int(flags[flags.index("--mtp") + 1]) if "--mtp" in flags else 0


@pytest.mark.parametrize("name", list(DEPLOYMENTS))
def test_memory_perf_and_bench_agree(name, capsys):
    flags = DEPLOYMENTS[name]
    k = _mtp(flags)
    mem_flags = flags + (["--mtp-drafter"] if k else [])
    mem = _json(["memory", "glm-5.1", "--format", "json", *mem_flags, *RUNTIME], capsys)["runtime"]
    # perf's budget is the one of its workload: a decode step of S sequences at MML tokens of context
    perf = _json(["perf", "glm-5.1", "--format", "json", *flags, "--phase", "decode", "--tokens", "1",
                  "--batch", str(S), "--context", str(MML - 1 - k)], capsys)["hbm"]["runtime"]
    role = flags[flags.index("--role") + 1] if "--role" in flags else "mixed"
    client = ["--concurrency", "1", "--isl", "64", "--osl", "4", "--num-prompts", "1"]
    if role == "mixed":
        bench = _json(["bench", "glm-5.1", "--format", "json", *flags, *RUNTIME, *client], capsys)
        inst = bench["instances"][0]
    else:
        # a P/D deployment: this instance as one side, a plain instance as the other
        other = ["--tp", "4", "--dp", "8", "--ep", "32"] + RUNTIME
        mine = [f for f in flags if f not in ("--role", role)] + RUNTIME
        sides = {"prefill": mine, "decode": other} if role == "prefill" else {"prefill": other, "decode": mine}
        bench = _json(["bench", "glm-5.1", "--format", "json", "--prefill", " ".join(sides["prefill"]),
                       "--decode", " ".join(sides["decode"]), *client], capsys)
        inst = next(i for i in bench["instances"] if i["name"] == role)
    assert mem["weights_bytes"] == perf["weights_bytes"] == inst["weights_bytes"]
    assert mem["num_blocks"] == perf["num_blocks"] == inst["kv_blocks_per_rank"]
    assert mem["kv_tokens"] == perf["kv_tokens"] == inst["kv_tokens"]


@pytest.mark.parametrize("a,b", [("dsa-cp", "no-dsa-cp"), ("dsa-cp", "redundant-experts")])
def test_the_flags_change_the_figures(a, b, capsys):
    """The flags the old bench dropped do move memory: otherwise the agreement above would prove nothing."""
    fa = _json(["memory", "glm-5.1", "--format", "json", *DEPLOYMENTS[a], *RUNTIME], capsys)["runtime"]
    fb = _json(["memory", "glm-5.1", "--format", "json", *DEPLOYMENTS[b], *RUNTIME], capsys)["runtime"]
    assert fa["weights_bytes"] != fb["weights_bytes"] and fa["num_blocks"] != fb["num_blocks"]


def test_pp2_budgets_the_worse_stage(capsys):
    one = _json(["memory", "glm-5.1", "--format", "json", "--tp", "8", "--dp", "2", "--ep", "16", *RUNTIME],
                capsys)["runtime"]
    two = _json(["memory", "glm-5.1", "--format", "json", *DEPLOYMENTS["pp2"], *RUNTIME], capsys)["runtime"]
    # half the layers per stage: the binding stage holds fewer weights and more KV blocks
    assert two["weights_bytes"] < one["weights_bytes"] and two["num_blocks"] > one["num_blocks"]


#: deployments a sweep row can spell (sweep grids TP / DP with EP = DP x TP and one role)
SWEEPABLE = ("no-dsa-cp", "dsa-cp", "c8", "decode")


@pytest.mark.parametrize("name", SWEEPABLE)
def test_sweep_row_is_memorys_budget(name, capsys):
    """A sweep row of one deployment: the same weights as memory, and its free KV is memory's pool (its
    whole blocks) less the batch's KV (S requests of max_model_len, the row's context + its one token)."""
    flags = DEPLOYMENTS[name]
    mem = _json(["memory", "glm-5.1", "--format", "json", *flags, *RUNTIME], capsys)["runtime"]
    grid = [f if f != "32" or flags[flags.index(f) - 1] != "--ep" else "on" for f in flags]
    sw = _json(["sweep", "glm-5.1", "--format", "json", *grid, "--tokens", "1", "--context", str(MML - 1),
                "--batch", str(S), "--mtp", "0", "--max-model-len", str(MML)], capsys)
    (row,) = sw["best_ttft"][:1]
    assert row["weights_gib"] == round(mem["weights_bytes"] / 2 ** 30, 4)
    assert row["kv_free_gib"] == round((mem["kv_pool_bytes"] - S * mem["kv_bytes_per_request"]) / 2 ** 30, 4)


def test_plans_own_launch_reads_back_as_its_figures(capsys, monkeypatch):
    """The launch plan prints for its best deployment, read back by memory in vLLM's own words (its flags
    and its environment), gives the weights and KV tokens plan reported for it."""
    import shlex
    doc = _json(["plan", "glm-5.1", "--dies", "32", "--isl", "2048", "--osl", "256", "--ttft-ms", "20000",
                 "--tpot-ms", "500", "--tp", "16", "--batch", "8", "--mtp", "0", "--no-disagg",
                 "--max-model-len", str(MML), "--format", "json"], capsys)
    best, launch = doc["best"][0], doc["launch"][0]
    assert launch["args"][0].startswith("vllm serve ")
    for key, value in launch["env"].items():
        monkeypatch.setenv(key, str(value))
    flat = [tok for a in launch["args"][1:] for tok in shlex.split(a)]
    mem = _json(["memory", "glm-5.1", *flat, "--format", "json"], capsys)["runtime"]
    assert mem["weights_bytes"] / 2 ** 30 == pytest.approx(best["weights_gib"], rel=1e-12)
    assert mem["kv_tokens"] == best["kv_tokens"]
    assert mem["kv_pool_bytes"] / 2 ** 30 == pytest.approx(best["kv_gib"], rel=1e-12)


@pytest.mark.parametrize("name", list(DEPLOYMENTS))
def test_aligns_prediction_is_memorys(name, tmp_path, capsys):
    """align, given the deployment's flags (and the engine) and a log with memory's own weights line,
    predicts memory's weights, KV blocks per rank and KV tokens (its ticket's ``kv.predicted``). PP 2's
    stages hold different layers, so one untagged line cannot stand for both: its log has every rank's
    line under the worker prefix vLLM prints (``Worker_PP1_DP0_TP3``), with memory's per-rank bytes."""
    flags = DEPLOYMENTS[name]
    k = _mtp(flags)
    mem_flags = flags + (["--mtp-drafter"] if k else [])
    rep = _json(["memory", "glm-5.1", "--format", "json", *mem_flags, *RUNTIME], capsys)
    mem = rep["runtime"]
    log = tmp_path / "serve.log"
    if "--pp" in flags:
        assert len({r["pp_stage"] for r in rep["ranks"]}) == 2
        log.write_text("".join(
            f"(Worker_PP{r['pp_stage']}_DP{r['dp_rank']}_TP{r['tp_rank']} pid={100 + r['rank']}) INFO "
            f"[model_runner_v1.py:3571] Loading model weights took {r['bytes'] / 2 ** 30:.4f} GB\n"
            for r in rep["ranks"]))
    else:
        log.write_text("INFO [model_runner_v1.py:3571] " + rep["vllm_log_lines"][0] + "\n")
    code = main(["align", "glm-5.1", *mem_flags, *RUNTIME, "--engine", "vllm-ascend@main", "--log", str(log),
                 "--output-dir", str(tmp_path / "t"), "--no-png"])
    capsys.readouterr()
    assert code in (0, 4)
    pred = json.loads((tmp_path / "t" / "ticket.json").read_text())["kv"]["predicted"]
    assert (pred["weights_bytes"], pred["num_blocks"], pred["kv_tokens"]) == \
        (mem["weights_bytes"], mem["num_blocks"], mem["kv_tokens"])
