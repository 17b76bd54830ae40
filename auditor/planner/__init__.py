"""``audit plan``: the deployment (aggregated or prefill/decode-disaggregated) that fits the device's
HBM and meets a TTFT/TPOT SLA with the most output tokens per second per die.

Modules: ``workload`` (request lengths), ``search`` (candidates, the batched perf kernel, memory
feasibility, the throughput model), ``serve`` (the ``vllm serve`` launch of the winner),
``report`` (table, JSON, CSV, Pareto PNG).
"""
