"""The serving model behind ``audit bench`` (and, through it, the serving figures of ``plan``):
a step simulation of vLLM v1's scheduler over per-deployment step-cost tables from the perf model.

* ``costs``: one deployment instance -> StepCosts (device-time tables from the perf kernel, plus a
  host model derived from what runs: eager kernel launches, graph replay, the eager GLM drafter).
* ``sim``: the numba event/step simulation (token budget, max_num_seqs, KV admission and
  preemption, DP lockstep, MTP acceptance, prefix-cache hits, P/D with KV transfer).
* ``bench``: the client (``vllm bench serve`` / aisbench) and the metrics it prints.
"""
