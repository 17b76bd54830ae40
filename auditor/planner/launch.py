"""The launch of a planned configuration: one typed instance plan per instance kind (aggregated,
or P and D), written by the engine as its own command (``Engine.launch``), the way aiconfigurator
emits deployment files. The same instance plans are what the serving simulation runs
(``planner.simulate``), so the figures a plan prints are those of the command it prints."""
from __future__ import annotations

from typing import Any

from ..deployment import InstancePlan
from .search import Config

#: preset name -> the model's own spelling (for the placeholder checkpoint path of a launch)
DISPLAY_NAMES = {"glm-5.1": "GLM-5.1", "glm-5": "GLM-5", "deepseek-v3.2": "DeepSeek-V3.2"}
#: recipes written by msModelSlim, which vLLM-Ascend loads with ``--quantization ascend``
ASCEND_QUANT_RECIPES = frozenset({"w8a8", "w8a8-dynamic", "w4a8"})


def quantized_recipe(recipe: str) -> bool:
    """An msModelSlim recipe: the engine loads it with ``--quantization ascend``."""
    return recipe in ASCEND_QUANT_RECIPES


def model_path(model: str | None, spec_name: str, recipe: str, preset: bool) -> str:
    """What ``vllm serve`` is given: the checkpoint directory the user named, or for a built-in
    preset a placeholder naming the checkpoint to download (``<path-to-GLM-5.1-w8a8>``)."""
    if model and not preset:
        return model
    name = DISPLAY_NAMES.get(spec_name.lower(), spec_name)
    return f"<path-to-{name}-{recipe}>"


def instance_plans(cfg: Config, *, max_model_len: int, isl: int, kv_cache_dtype: str,
                   util: float | None = None, hccl_buffsize_mb: int = 200, drafter: str = "mtp") -> list[InstancePlan]:
    """The instances of a configuration, each configured as the search modelled it (util: the row's own;
    ``drafter``: the checkpoint's, ``ModelSpec.drafter``)."""
    d = cfg.detail
    u = cfg.util if util is None else util
    dec_batched = max(8192, cfg.batch * (1 + cfg.mtp))
    common = dict(gpu_memory_utilization=u, kv_cache_dtype=kv_cache_dtype, hccl_buffsize_mb=hccl_buffsize_mb,
                  speculative_method=drafter)
    if cfg.mode == "agg":
        return [InstancePlan("aggregated", d["replicas"], d["tp"], d["dp"], d["ep"], d["sp"], cfg.batch, dec_batched,
                             max_model_len, mtp=cfg.mtp, dcp=d.get("dcp", 1), dsa_cp=d.get("dsa_cp"), **common)]
    # P chunks prompts at its own budget and runs the drafter (planner.search)
    p = InstancePlan("prefill", d["n_prefill"], d["p_tp"], d["p_dp"], d["p_ep"], d["p_sp"], d.get("p_max_num_seqs", 1),
                     d.get("p_max_num_batched_tokens", max(8192, isl)), d.get("p_max_model_len", max_model_len),
                     mtp=d.get("p_mtp", 0), kv_role="kv_producer", dsa_cp=d.get("p_dsa_cp"),
                     **{**common, "gpu_memory_utilization": d.get("p_util", u) if util is None else util})
    dd = InstancePlan("decode", d["n_decode"], d["tp"], d["dp"], d["ep"], d["sp"], cfg.batch,
                      d.get("max_num_batched_tokens", dec_batched), max_model_len, mtp=cfg.mtp,
                      kv_role="kv_consumer", dcp=d.get("dcp", 1), dsa_cp=d.get("dsa_cp"), **common)
    return [p, dd]


def serve_launch(cfg: Config, model: str, engine: Any, *, max_model_len: int, isl: int,
                 kv_cache_dtype: str, quantized: bool = False, util: float | None = None,
                 hccl_buffsize_mb: int = 200, drafter: str = "mtp") -> list[dict[str, Any]]:
    from ..engines.registry import as_engine
    eng = as_engine(engine)
    return [{"name": inst.label, **eng.launch(model, inst, quantized=quantized)}
            for inst in instance_plans(cfg, util=util, max_model_len=max_model_len, isl=isl,
                                       kv_cache_dtype=kv_cache_dtype, hccl_buffsize_mb=hccl_buffsize_mb,
                                       drafter=drafter)]
