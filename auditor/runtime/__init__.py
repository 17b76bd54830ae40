"""Runtime (non-weight) memory of a rank: KV cache spec, activation peak, HCCL buffers, the
engine's available-memory budget and the log lines vLLM prints about it.

Public API (used by ``audit memory``, ``audit perf``, ``audit sweep``, ``audit plan`` and
``audit align``)::

    from auditor.runtime.budget import rank_budget, RuntimeBudget
    b = rank_budget(spec, plan, engine, weights_bytes=W, device="a3-752t", max_model_len=131072)
    b.to_json()          # the "runtime" object of the JSON reports
    b.log_lines()        # the lines vLLM would print
"""
