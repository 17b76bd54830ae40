"""``audit align``: alignment tickets from the engine's own evidence (logs, profiler kernels,
benchmark results), with the engine configuration that explains them."""
