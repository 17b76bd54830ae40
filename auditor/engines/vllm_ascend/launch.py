"""The ``vllm serve`` command vLLM-Ascend takes for one instance: arguments and environment.

Flags are vLLM's (``--tensor-parallel-size``, ``--enable-expert-parallel``, ...); the engine's own
switches go into ``--additional-config`` (DSA-CP, the C8 cache variants of the version row) and
its environment (``HCCL_BUFFSIZE``, ``VLLM_ASCEND_ENABLE_FLASHCOMM1``). An msModelSlim
checkpoint needs ``--quantization ascend``.
"""
from __future__ import annotations

import json
from typing import Any

from ...deployment import InstancePlan

KV_CONNECTOR = "MooncakeConnectorV1"


def launch_instance(model: str, inst: InstancePlan, kv_switches: dict, *, quantized: bool,
                    dsa_cp_switch: bool = True) -> dict[str, Any]:
    """``dsa_cp_switch``: the version has additional_config.enable_dsa_cp (v0.18 has none: DSA-CP
    follows FlashComm1 there)."""
    args = [f"vllm serve {model}", f"--tensor-parallel-size {inst.tp}", f"--data-parallel-size {inst.dp}"]
    if inst.pp > 1:
        args.append(f"--pipeline-parallel-size {inst.pp}")
    if inst.ep > 1:
        args.append("--enable-expert-parallel")
    if inst.dcp > 1:
        args.append(f"--decode-context-parallel-size {inst.dcp}")
    if quantized:
        args.append("--quantization ascend")
    args += [f"--max-num-seqs {inst.max_num_seqs}", f"--max-num-batched-tokens {inst.max_num_batched_tokens}",
             f"--max-model-len {inst.max_model_len}", f"--gpu-memory-utilization {inst.gpu_memory_utilization:g}"]
    if inst.mtp:
        # DSpark's method is "dspark" (docs/source/tutorials/models/DeepSeek-V4-Flash.md:219, :321@182b75ea)
        method = "dspark" if getattr(inst, "speculative_method", "mtp") == "dspark" else "deepseek_mtp"
        args.append("--speculative-config '" + json.dumps({"method": method,
                                                           "num_speculative_tokens": inst.mtp}) + "'")
    extra: dict[str, Any] = dict(kv_switches)
    if inst.dsa_cp is not None and dsa_cp_switch:
        extra["enable_dsa_cp"] = bool(inst.dsa_cp)
    if extra:
        args.append("--additional-config '" + json.dumps(extra) + "'")
    if inst.kv_role:
        args.append("--kv-transfer-config '" + json.dumps({"kv_connector": KV_CONNECTOR,
                                                           "kv_role": inst.kv_role}) + "'")
    env = {"HCCL_BUFFSIZE": str(inst.hccl_buffsize_mb)}
    if inst.sp:
        env["VLLM_ASCEND_ENABLE_FLASHCOMM1"] = "1"
    if inst.fused_mc2:
        env["VLLM_ASCEND_ENABLE_FUSED_MC2"] = str(inst.fused_mc2)
    return {"args": args, "env": env, "command": " \\\n    ".join(args)}
