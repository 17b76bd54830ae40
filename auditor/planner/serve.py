"""The ``vllm serve`` launch of a planned configuration: arguments and environment, one command per
instance kind (aggregated, or P and D), the way aiconfigurator emits deployment files."""
from __future__ import annotations

import json
from typing import Any

from ..engines.runtime_profiles import get_runtime_profile
from .search import Config


def _instance(model: str, engine: str, *, tp: int, dp: int, ep: int, sp: bool, max_num_seqs: int,
              max_batched: int, max_model_len: int, util: float, mtp: int, kv_cache_dtype: str,
              kv_role: str | None) -> dict[str, Any]:
    args = [f"vllm serve {model}", f"--tensor-parallel-size {tp}", f"--data-parallel-size {dp}"]
    if ep > 1:
        args.append("--enable-expert-parallel")
    args += [f"--max-num-seqs {max_num_seqs}", f"--max-num-batched-tokens {max_batched}",
             f"--max-model-len {max_model_len}", f"--gpu-memory-utilization {util:g}"]
    if mtp:
        args.append("--speculative-config '" + json.dumps({"method": "deepseek_mtp",
                                                           "num_speculative_tokens": mtp}) + "'")
    extra: dict[str, Any] = dict(get_runtime_profile(engine).kv_switches.get(kv_cache_dtype, {}))
    if sp:
        extra["enable_dsa_cp"] = True
    if extra:
        args.append("--additional-config '" + json.dumps(extra) + "'")
    if kv_role:
        args.append("--kv-transfer-config '" + json.dumps({"kv_connector": "MooncakeConnectorV1",
                                                           "kv_role": kv_role}) + "'")
    env = {"HCCL_BUFFSIZE": "200"}
    if sp:
        env["VLLM_ASCEND_ENABLE_FLASHCOMM1"] = "1"
    return {"args": args, "env": env, "command": " \\\n    ".join(args)}


def serve_launch(cfg: Config, model: str, engine: str, *, util: float, max_model_len: int, isl: int,
                 kv_cache_dtype: str) -> list[dict[str, Any]]:
    d = cfg.detail
    dec_batched = max(8192, cfg.batch * (1 + cfg.mtp))
    common = dict(util=util, max_model_len=max_model_len, kv_cache_dtype=kv_cache_dtype)
    if cfg.mode == "agg":
        inst = _instance(model, engine, tp=d["tp"], dp=d["dp"], ep=d["ep"], sp=d["sp"], max_num_seqs=cfg.batch,
                         max_batched=dec_batched, mtp=cfg.mtp, kv_role=None, **common)
        return [{"name": f"aggregated x{d['replicas']}", **inst}]
    # each role as the search modelled it (planner.search: P prefills one prompt per step, no drafter)
    p = _instance(model, engine, tp=d["p_tp"], dp=d["p_dp"], ep=d["p_ep"], sp=d["p_sp"], max_num_seqs=1,
                  max_batched=d.get("p_max_num_batched_tokens", max(8192, isl)), util=util,
                  max_model_len=d.get("p_max_model_len", max_model_len), kv_cache_dtype=kv_cache_dtype, mtp=0,
                  kv_role="kv_producer")
    dd = _instance(model, engine, tp=d["tp"], dp=d["dp"], ep=d["ep"], sp=d["sp"], max_num_seqs=cfg.batch,
                   max_batched=d.get("max_num_batched_tokens", dec_batched), mtp=cfg.mtp, kv_role="kv_consumer",
                   **common)
    return [{"name": f"prefill x{d['n_prefill']}", **p}, {"name": f"decode x{d['n_decode']}", **dd}]
