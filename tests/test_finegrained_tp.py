"""vLLM-Ascend's finegrained_tp_config (``auditor.finegrained``): the vocabulary tables of a decode rank.

Hand figures: GLM-5.1's lm_head is [V_p, H] = [154880, 6144] bf16 = 1,903,165,440 B (V = 154880 is already a
multiple of 64); a DP32 TP1 rank holds all of it, with lmhead_tensor_parallel_size 16 a sixteenth."""
from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from auditor.cli import main
from auditor.errors import AuditInputError
from auditor.finegrained import check, module_tp, parse
from auditor.parallel import ParallelPlan

LM_HEAD = 154880 * 6144 * 2
DECODE = ["memory", "glm-5.1", "--recipe", "w8a8", "--tp", "1", "--dp", "32", "--ep", "on", "--role", "decode",
          "--mtp", "3", "--max-model-len", "8192", "--max-num-seqs", "32", "--max-num-batched-tokens", "164",
          "--format", "json"]


def _weights(args: list[str], capsys) -> float:
    assert main(args) == 0
    return json.loads(capsys.readouterr().out)


def test_module_tp_and_parse():
    plan = ParallelPlan(tp=2, dp=32, finegrained_tp=(("lmhead", 16),))
    assert module_tp(plan, "lmhead") == 16 and module_tp(plan, "embedding") == 2
    assert parse("lmhead=16, embedding=4") == (("embedding", 4), ("lmhead", 16))
    for bad, msg in (("lmhead", "MODULE=SIZE"), ("oproj=2", "MODULE=SIZE"), ("lmhead=x", "not an integer"),
                     ("lmhead=0", "1..65536")):
        with pytest.raises(AuditInputError, match=msg):
            parse(bad)
    with pytest.raises(AuditInputError, match="must divide data_parallel_size"):
        check((("lmhead", 3),), 32, True)
    with pytest.raises(AuditInputError, match="only for MoE"):
        check((("lmhead", 2),), 2, False)


@settings(max_examples=60, deadline=None)
@given(st.text(alphabet="lmheadbingo=,0123456789 x", max_size=30))
def test_parse_takes_or_refuses_any_text_in_one_line(text):
    try:
        sizes = parse(text)
    except AuditInputError as exc:
        assert "\n" not in str(exc)
        return
    assert all(n in ("lmhead", "embedding") and 1 <= s <= 65536 for n, s in sizes)


def test_lm_head_sharded_over_the_lmhead_group(capsys):
    """The weights differ by exactly 15/16 of the lm_head (nothing else moves), and the KV pool gains it."""
    plain = _weights(DECODE, capsys)
    sharded = _weights(DECODE + ["--finegrained-tp", "lmhead=16"], capsys)
    both = _weights(DECODE + ["--finegrained-tp", "lmhead=16,embedding=16"], capsys)
    w = lambda d: d["worst_rank"]["bytes"]   # noqa: E731
    assert w(plain) - w(sharded) == LM_HEAD - LM_HEAD // 16
    assert sharded["runtime"]["kv_available_bytes"] > plain["runtime"]["kv_available_bytes"]
    assert w(sharded) - w(both) == LM_HEAD - LM_HEAD // 16          # embed_tokens is the same shape
    assert main(DECODE + ["--finegrained-tp", "lmhead=5"]) == 2
    assert "must divide data_parallel_size (32" in capsys.readouterr().err


def test_the_weekly_decode_nodes_read_their_lmhead_group(shared_dir: Path, capsys):
    """GLM-5.1-W8A8C8-3.5k-1.5k-0-50-PD.yaml's decode nodes set lmhead_tensor_parallel_size 16 (:226): node 2
    audited alone gives the same weights as the flag."""
    f = shared_dir / "data" / "published" / "weekly" / "GLM-5.1-W8A8C8-3.5k-1.5k-0-50-PD.yaml"
    assert main(["memory", "glm-5.1", "--launch", str(f), "--node", "2", "--format", "json"]) == 0
    out = capsys.readouterr()
    unmodelled = [line for line in out.err.splitlines() if "NOT modelled" in line]
    assert unmodelled and not any("finegrained_tp_config" in line for line in unmodelled)
    got = json.loads(out.out)
    assert main(["memory", "glm-5.1", "--launch", str(f), "--node", "2", "--format", "json",
                 "--finegrained-tp", "lmhead=1"]) == 0
    whole = json.loads(capsys.readouterr().out)
    w = lambda d: d["worst_rank"]["bytes"]   # noqa: E731
    assert w(whole) - w(got) == LM_HEAD - LM_HEAD // 16
