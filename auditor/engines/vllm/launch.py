"""The ``vllm serve`` command upstream vLLM takes for one instance, as a line a user can paste.

Flags are vLLM's own. MTP is ``--speculative-config`` with ``"method": "mtp"`` (vllm-project/recipes
GLM/GLM5.md @134386f2: ``--speculative-config.method mtp``). The KV dtype is a plain
``--kv-cache-dtype``; an FP8 checkpoint needs no ``--quantization`` (read from config.json).
vLLM-Ascend's switches (DSA-CP, FlashComm1, FUSED_MC2, HCCL buffers, balance scheduling) do not
exist upstream and are refused, never dropped silently.
"""
from __future__ import annotations

import json
import shlex
from typing import Any

from ...deployment import InstancePlan
from ...errors import AuditInputError

KV_CONNECTOR = "NixlConnector"     # UNCONFIRMED: the P/D connector is the user's choice
_ASCEND_ONLY = (("sp", "--sp (FlashComm1 / DSA-CP)"), ("fused_mc2", "FUSED_MC2"),
                ("balance_scheduling", "balance scheduling"), ("combine_max_tokens", "mega_moe_max_tokens"))


def launch_instance(model: str, inst: InstancePlan, *, kv_cache_dtype: str | None = None,
                    default_gmu: float | None = None) -> dict[str, Any]:
    """{'args': [...], 'env': {...}, 'command': str} of one instance; ``kv_cache_dtype`` in vLLM's
    spelling (None: the instance's, bf16 = the default, not written)."""
    for attr, what in _ASCEND_ONLY:
        if getattr(inst, attr):
            raise AuditInputError("--launch", f"{what} is a vLLM-Ascend switch; upstream vLLM has none")
    if inst.dcp > 1:
        raise AuditInputError("--dcp", "decode context parallel is not modelled for upstream vLLM")
    args = [f"vllm serve {shlex.quote(model)}", f"--tensor-parallel-size {inst.tp}"]
    if inst.dp > 1:
        args.append(f"--data-parallel-size {inst.dp}")
    if inst.pp > 1:
        args.append(f"--pipeline-parallel-size {inst.pp}")
    if inst.ep > 1:
        args.append("--enable-expert-parallel")
    args += [f"--max-num-seqs {inst.max_num_seqs}", f"--max-num-batched-tokens {inst.max_num_batched_tokens}",
             f"--max-model-len {inst.max_model_len}"]
    if default_gmu is None or inst.gpu_memory_utilization != default_gmu:
        args.append(f"--gpu-memory-utilization {inst.gpu_memory_utilization:g}")
    kv = (kv_cache_dtype or inst.kv_cache_dtype or "auto").lower()
    if kv not in ("auto", "bf16", "bfloat16"):
        args.append(f"--kv-cache-dtype {shlex.quote(kv)}")
    if inst.mtp:
        args.append("--speculative-config " + shlex.quote(json.dumps({"method": "mtp",
                                                                      "num_speculative_tokens": inst.mtp})))
    if inst.graph_tokens == 0:
        args.append("--enforce-eager")
    elif inst.graph_tokens > 0:
        args.append("--compilation-config " + shlex.quote(json.dumps({"max_cudagraph_capture_size":
                                                                      inst.graph_tokens})))
    if inst.kv_role:
        args.append("--kv-transfer-config " + shlex.quote(json.dumps({"kv_connector": KV_CONNECTOR,
                                                                     "kv_role": inst.kv_role})))
    return {"args": args, "env": {}, "command": " \\\n    ".join(args)}
