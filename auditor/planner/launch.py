"""The launch of a planned configuration: one typed instance plan per instance kind (aggregated,
or P and D), written by the engine as its own command (``Engine.launch``), the way aiconfigurator
emits deployment files."""
from __future__ import annotations

from typing import Any

from ..deployment import InstancePlan
from .search import Config


def instance_plans(cfg: Config, *, util: float, max_model_len: int, isl: int, kv_cache_dtype: str,
                   hccl_buffsize_mb: int = 200) -> list[InstancePlan]:
    """The instances of a configuration, each configured as the search modelled it."""
    d = cfg.detail
    dec_batched = max(8192, cfg.batch * (1 + cfg.mtp))
    common = dict(gpu_memory_utilization=util, kv_cache_dtype=kv_cache_dtype, hccl_buffsize_mb=hccl_buffsize_mb)
    if cfg.mode == "agg":
        return [InstancePlan("aggregated", d["replicas"], d["tp"], d["dp"], d["ep"], d["sp"], cfg.batch, dec_batched,
                             max_model_len, mtp=cfg.mtp, **common)]
    # P prefills one prompt per step without the drafter (planner.search)
    p = InstancePlan("prefill", d["n_prefill"], d["p_tp"], d["p_dp"], d["p_ep"], d["p_sp"], 1,
                     d.get("p_max_num_batched_tokens", max(8192, isl)), d.get("p_max_model_len", max_model_len),
                     mtp=0, kv_role="kv_producer", **common)
    dd = InstancePlan("decode", d["n_decode"], d["tp"], d["dp"], d["ep"], d["sp"], cfg.batch,
                      d.get("max_num_batched_tokens", dec_batched), max_model_len, mtp=cfg.mtp,
                      kv_role="kv_consumer", **common)
    return [p, dd]


def serve_launch(cfg: Config, model: str, engine: Any, *, util: float, max_model_len: int, isl: int,
                 kv_cache_dtype: str, quantized: bool = False) -> list[dict[str, Any]]:
    from ..engines.registry import as_engine
    eng = as_engine(engine)
    return [{"name": inst.label, **eng.launch(model, inst, quantized=quantized)}
            for inst in instance_plans(cfg, util=util, max_model_len=max_model_len, isl=isl,
                                       kv_cache_dtype=kv_cache_dtype)]
