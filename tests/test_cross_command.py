"""One deployment, three commands, one answer: memory, perf and bench report the same weights, KV
blocks per rank and KV tokens for the same flags.

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
