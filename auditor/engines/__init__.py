"""Engines: what a serving engine decides, one folder per family (``vllm_ascend/``), resolved once
from ``--engine`` by ``registry`` into an ``base.Engine`` object that the generic flow calls.
Generic modules here (``materialize``, ``bridge``, ``placement``, ``kv_interface``, ``stored``)
must not import an engine folder."""
