"""The largest graph-replayed decode step: one resolver (``Engine.graph_tokens``) for bench, plan and perf.

Expected values are vLLM-Ascend's rule worked by hand (``platform.py:1275-1312``@182b75ea):
min(max_num_seqs x (1 + K), 512), then capped by max_num_batched_tokens."""
from __future__ import annotations

import pytest

from auditor.deployment import InstancePlan
from auditor.engines.registry import as_engine
from auditor.serving.sim import graph_tokens

ENGINE = "vllm-ascend@main"


@pytest.mark.parametrize("seqs, k, batched, expected", [
    (16, 3, 4096, 64),          # 16 x 4
    (256, 3, 8192, 512),        # 1024 capped at the default's ceiling
    (14, 2, 42, 42),            # N3d: 14 x 3 = 42 = its budget
    (32, 3, 100, 100),          # 128 capped by max_num_batched_tokens
])
def test_default_when_the_launch_names_no_capture_sizes(seqs, k, batched, expected):
    eng = as_engine(ENGINE)
    assert eng.graph_tokens(-1, seqs, k, batched) == expected
    inst = InstancePlan("aggregated", 1, 4, 1, 4, False, seqs, batched, 8192, 0.9, mtp=k)
    assert graph_tokens(ENGINE, inst) == expected


@pytest.mark.parametrize("own", [0, 48, 4096])
def test_the_launchs_own_capture_sizes_win(own):
    """0 = eager (--enforce-eager), otherwise the largest cudagraph_capture_sizes entry, whatever the default."""
    assert as_engine(ENGINE).graph_tokens(own, 16, 3, 4096) == own
    inst = InstancePlan("aggregated", 1, 4, 1, 4, False, 16, 4096, 8192, 0.9, mtp=3, graph_tokens=own)
    assert graph_tokens(ENGINE, inst) == own
