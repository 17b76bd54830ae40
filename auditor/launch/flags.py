"""vLLM launch flags, environment variables and JSON config keys -> audit's deployment options.

Why a table: which vLLM setting means which audit option (and which ones audit deliberately
ignores or does not model) is knowledge that changes with vLLM releases; as rows of data it can be
read, reviewed and tested against the published launch configs without reading parsing code.

``RULES`` holds every known name: serve flags (``--tensor-parallel-size``), environment variables
(``HCCL_BUFFSIZE``) and keys inside the JSON-valued flags (``additional_config.enable_dsa_cp``). A
row maps its value to a ``DeploymentOptions`` field, or says why the setting is ignored (it changes
neither memory nor time) or unmodelled (it does, and audit does not model it). Values equal to
audit's own assumption (``assumes``) are ignored; others are named unmodelled. Everything a launch
sets ends up in exactly one place: an option, ``ignored``, ``unmodelled`` or ``unknown``.

Flag syntax is argparse's as vLLM uses it: ``--flag value`` and ``--flag=value``, ``--no-flag``
for booleans, ``_`` for ``-`` in names, short aliases (``-tp``), ``--json-flag.key value`` merged
into that flag's JSON, and the last of two equal flags winning (noted).
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import Any

from ..engines.registry import DEFAULT_ENGINE
from ..lengths import parse_length
from ..engines.base import Engine
from ..engines.registry import EngineLike, as_engine
from ..errors import AuditInputError
from ..inputs import parse_json_text
from ..limits import FLOAT_OPTION_CAPS, MAX_COMMAND_WORDS, OPTION_CAPS
from ..parallel import NZ_MODES
from .records import DeploymentOptions, Launch, Note, Setting

_NOTHING = object()


@dataclass(frozen=True)
class Rule:
    """One vLLM setting. ``kind`` says how its value is read: flags ``int`` ``len`` (an int with
    vLLM's k/K/m/M suffixes) ``float`` ``bool`` (no value; ``--no-`` form) ``str`` ``list`` (one or
    more values) ``json`` (an object; its keys have rows named ``flag_name.key``); environment
    ``env_bool`` ``env_int`` ``env_str``; JSON keys ``j_bool`` ``j_int`` ``j_str`` ``j_list``
    ``j_any`` ``j_dict`` (its keys have rows of their own)."""

    name: str
    kind: str
    field: str | None = None    # DeploymentOptions field ("@..." : combined with others in _finish)
    effect: str = "mapped"      # mapped | ignored | unmodelled
    why: str = ""
    aliases: tuple[str, ...] = ()
    cap: str | None = None      # key of auditor.limits.OPTION_CAPS / FLOAT_OPTION_CAPS
    assumes: Any = _NOTHING     # tuple of values audit assumes; another value is named unmodelled
    rank: int = 0               # two sources of one field: the higher rank wins (then the later)


def M(name: str, kind: str, field: str, why: str = "", **kw: Any) -> Rule:
    return Rule(name, kind, field, "mapped", why, **kw)


def I(name: str, kind: str, why: str, **kw: Any) -> Rule:    # noqa: E743 - a table row
    return Rule(name, kind, None, "ignored", why, **kw)


def U(name: str, kind: str, why: str, **kw: Any) -> Rule:
    return Rule(name, kind, None, "unmodelled", why, **kw)


_HOST = "API server / process setting: no device memory or step time"
_NET = "addressing and ports of the engine processes"
_SCHED = "request scheduling across steps (throughput/latency under load); audit models one step"
_GRAPH = "graph capture: its memory lives in the (1 - util) headroom and is not counted; kernel times follow the calibration"
_FUSION = "operator fusion and multistream overlap change kernel times, not modelled op by op"

FLAG_RULES: tuple[Rule, ...] = (
    # --- mapped: audit options
    M("--model", "str", "model", "the checkpoint (vllm serve takes it as the first argument)"),
    M("--tensor-parallel-size", "int", "tp", aliases=("-tp",), cap="--tp"),
    M("--data-parallel-size", "int", "dp", "total DP over all nodes (EP = DP x TP)", aliases=("-dp",), cap="--dp"),
    M("--pipeline-parallel-size", "int", "pp", aliases=("-pp",), cap="--pp"),
    M("--enable-expert-parallel", "bool", "@ep_on", "EP size = DP x TP", aliases=("-ep",)),
    M("--decode-context-parallel-size", "int", "dcp", aliases=("-dcp",), cap="--dcp"),
    M("--max-model-len", "len", "max_model_len", cap="--max-model-len"),
    M("--max-num-seqs", "int", "max_num_seqs", cap="--max-num-seqs"),
    M("--max-num-batched-tokens", "len", "max_num_batched_tokens", cap="--max-num-batched-tokens"),
    M("--gpu-memory-utilization", "float", "util", cap="--gpu-memory-utilization"),
    M("--kv-cache-dtype", "str", "@kv_cache_dtype", "auto = bf16; the sparse C8 caches are additional_config switches"),
    M("--quantization", "str", "quantization", "ascend: the recipe comes from the checkpoint's "
      "quant_model_description.json", aliases=("-q",)),
    M("--speculative-config", "json", "@speculative", "method *mtp / dspark: the checkpoint's drafter, K = "
      "num_speculative_tokens",
      aliases=("-sc",)),
    M("--additional-config", "json", "@additional", "vLLM-Ascend switches (rows additional_config.*)"),
    M("--kv-transfer-config", "json", "@kv_transfer", "kv_role: P/D role"),
    M("--hf-overrides", "json", "hf_overrides", "recorded; each key is named (rows hf_overrides.*)"),
    M("--enable-prefix-caching", "bool", "prefix_caching", "recorded (block size is 128 either way)"),
    M("--enforce-eager", "bool", "eager", "no ACL graphs: decode host time is not the graph-mode calibration",
      assumes=(False,)),
    M("--compilation-config", "json", "compilation", "cudagraph_capture_sizes / cudagraph_mode NONE: bench's "
      "--graph-max-tokens (a larger decode step runs eager); graph memory lives in the (1 - util) headroom",
      aliases=("-cc",)),
    M("--data-parallel-size-local", "int", "dp_local", "DP ranks on this node; audit models the whole DP group",
      aliases=("-dpl",), cap="--dp"),
    M("--eplb-config", "json", "@eplb", "num_redundant_experts (rows eplb_config.*)"),
    M("--num-redundant-experts", "int", "redundant_experts", "older spelling of eplb_config.num_redundant_experts",
      cap="--redundant-experts", rank=2),
    # --- ignored: no device memory or step time
    I("--host", "str", _NET), I("--port", "str", _NET), I("--uds", "str", _NET),
    I("--served-model-name", "list", _HOST), I("--trust-remote-code", "bool", "lets config code load"),
    I("--seed", "str", "sampling seed"), I("--api-server-count", "str", _HOST, aliases=("-asc",)),
    I("--headless", "bool", "this node runs engines only (no API server)"),
    I("--data-parallel-start-rank", "str", "first DP rank on this node", aliases=("-dpr",)),
    I("--data-parallel-rank", "str", "this launch is one external DP rank", aliases=("-dpn",)),
    I("--data-parallel-address", "str", _NET, aliases=("-dpa",)),
    I("--data-parallel-rpc-port", "str", _NET, aliases=("-dpp",)),
    I("--data-parallel-backend", "str", "process launcher for DP (mp/ray)", aliases=("-dpb",)),
    I("--data-parallel-hybrid-lb", "bool", "request routing"), I("--data-parallel-external-lb", "bool", "request routing"),
    I("--nnodes", "str", _NET, aliases=("-n",)), I("--node-rank", "str", _NET, aliases=("-r",)),
    I("--master-addr", "str", _NET), I("--master-port", "str", _NET),
    I("--distributed-executor-backend", "str", "process launcher"),
    I("--tool-call-parser", "str", _HOST), I("--reasoning-parser", "str", _HOST),
    I("--enable-auto-tool-choice", "bool", _HOST), I("--tool-parser-plugin", "str", _HOST),
    I("--chat-template", "str", _HOST), I("--chat-template-content-format", "str", _HOST),
    I("--response-role", "str", _HOST), I("--tokenizer", "str", _HOST), I("--tokenizer-mode", "str", _HOST),
    I("--skip-tokenizer-init", "bool", _HOST), I("--revision", "str", "checkpoint revision to download"),
    I("--tokenizer-revision", "str", _HOST), I("--code-revision", "str", "config code revision"),
    I("--download-dir", "str", "download location"), I("--load-format", "str", "loader (same weights in memory)"),
    I("--safetensors-load-strategy", "str", "load order (start-up time only)"),
    I("--model-loader-extra-config", "json", "loader options (start-up time only)"),
    I("--max-parallel-loading-workers", "str", "start-up time only"),
    I("--disable-log-stats", "bool", _HOST), I("--disable-log-requests", "bool", _HOST),
    I("--enable-log-requests", "bool", _HOST), I("--enable-log-outputs", "bool", _HOST),
    I("--max-log-len", "str", _HOST), I("--uvicorn-log-level", "str", _HOST),
    I("--disable-uvicorn-access-log", "bool", _HOST), I("--api-key", "str", _HOST),
    I("--ssl-keyfile", "str", _HOST), I("--ssl-certfile", "str", _HOST), I("--root-path", "str", _HOST),
    I("--disable-fastapi-docs", "bool", _HOST), I("--enable-prompt-tokens-details", "bool", _HOST),
    I("--return-tokens-as-token-ids", "bool", _HOST), I("--enable-request-id-headers", "bool", _HOST),
    I("--enable-server-load-tracking", "bool", _HOST), I("--enable-force-include-usage", "bool", _HOST),
    I("--enable-tokenizer-info-endpoint", "bool", _HOST), I("--max-logprobs", "str", _HOST),
    I("--logprobs-mode", "str", _HOST), I("--generation-config", "str", "sampling defaults"),
    I("--override-generation-config", "json", "sampling defaults"),
    I("--structured-outputs-config", "json", "guided decoding backend"),
    I("--scheduling-policy", "str", "request order (fcfs/priority)"),
    I("--allowed-local-media-path", "str", _HOST),
    I("--worker-extension-cls", "str", "worker plug-in"), I("--enable-sleep-mode", "bool", "only while sleeping"),
    I("--otlp-traces-endpoint", "str", _HOST), I("--collect-detailed-traces", "str", _HOST),
    I("--kv-events-config", "json", "KV cache event publishing"),
    I("--prefix-caching-hash-algo", "str", "hash of prefix blocks"),
    # the hybrid manager is what lays compressed-attention caches out in groups over one block-id pool
    # (DeepSeek-V4's tutorials pass --no-disable-...: "otherwise, the service may OOM during startup");
    # one-group models are the same either way. Disabling it is not modelled
    I("--disable-hybrid-kv-cache-manager", "bool", "one KV cache group for MLA / GQA models either way; the "
      "compressed-attention pool needs it on", assumes=(False,)),
    I("--disable-cascade-attn", "bool", "not used by the Ascend attention backends"),
    I("--disable-custom-all-reduce", "bool", "CUDA custom all-reduce; not used on Ascend"),
    I("--swap-space", "str", "host memory for swapped blocks"),
    I("--enable-chunked-prefill", "bool", "audit assumes chunked prefill (prefill in chunks of "
      "max_num_batched_tokens)", assumes=(True,)),
    M("--block-size", "int", "block_size", "compressed-attention pools are laid out by it; the SFA backend "
      "forces 128 (said when another value is given)", cap="--block-size"),
    I("--dtype", "str", "audit assumes the bf16 model dtype", assumes=("auto", "bfloat16", "bf16")),
    # --- unmodelled: change memory or time, audit does not model them
    M("--async-scheduling", "bool", "async_scheduling", "host scheduling overlapped with the device step (bench)"),
    U("--kv-cache-memory-bytes", "len", "a fixed KV cache size replaces the utilization budget"),
    U("--kv-cache-memory", "len", "a fixed KV cache size replaces the utilization budget"),
    U("--num-gpu-blocks-override", "int", "fixes the number of KV blocks"),
    U("--cpu-offload-gb", "str", "weights offloaded to host memory"),
    U("--prefill-context-parallel-size", "int", "prefill context parallel (PCP) is not modelled", aliases=("-pcp",)),
    U("--cp-kv-cache-interleave-size", "int", "DCP token interleave: per-rank KV bytes unchanged, layout only"),
    U("--dcp-kv-cache-interleave-size", "int", "DCP token interleave: per-rank KV bytes unchanged, layout only"),
    U("--optimization-level", "str", _GRAPH, aliases=("-O",)),
    U("--max-seq-len-to-capture", "int", _GRAPH), U("--cuda-graph-sizes", "list", _GRAPH),
    U("--enable-eplb", "bool", "dynamic EPLB: per-expert weight clones and its HCCL buffer"),
    U("--expert-placement-strategy", "str", "expert placement across EP ranks (load balance)"),
    U("--all2all-backend", "str", "MoE dispatch backend"),
    U("--enable-dbo", "bool", "dual-batch overlap"),
    U("--max-num-partial-prefills", "int", _SCHED), U("--max-long-partial-prefills", "int", _SCHED),
    U("--long-prefill-token-threshold", "len", _SCHED), U("--scheduler-cls", "str", _SCHED),
    U("--enable-lora", "bool", "LoRA adapters and their buffers"), U("--max-loras", "int", "LoRA buffers"),
    U("--max-lora-rank", "int", "LoRA buffers"), U("--max-cpu-loras", "int", "LoRA host cache"),
    U("--lora-modules", "list", "LoRA adapters"), U("--fully-sharded-loras", "bool", "LoRA sharding"),
    U("--limit-mm-per-prompt", "json", "multimodal encoder cache"),
    U("--mm-processor-kwargs", "json", "multimodal processing"),
    U("--config", "str", "vLLM reads more flags from this YAML file; audit does not read it"),
    U("--hf-config-path", "str", "config.json comes from elsewhere than the checkpoint audit reads"),
    U("--num-speculative-tokens", "int", "old vLLM spelling; give --speculative-config"),
    U("--speculative-model", "str", "old vLLM spelling; give --speculative-config"),
)

ENV_RULES_LIST: tuple[Rule, ...] = (
    M("VLLM_ASCEND_ENABLE_FLASHCOMM1", "env_bool", "sp", "sequence parallel (FlashComm1)"),
    M("HCCL_BUFFSIZE", "env_int", "hccl_buffsize", "MB, the mc2 communicator's buffer", cap="--hccl-buffsize"),
    M("VLLM_ASCEND_ENABLE_NZ", "env_int", "nz_mode", "weight NZ format (additional_config.weight_nz_mode wins)"),
    M("VLLM_ASCEND_ENABLE_MLAPO", "env_bool", "mlapo", "audit counts the MLAPO copies wherever they apply",
      assumes=(True,)),
    M("VLLM_ASCEND_ENABLE_FUSED_MC2", "env_int", "fused_mc2", "fused MC2 (int64 expert scales)"),
    M("VLLM_ASCEND_BALANCE_SCHEDULING", "env_bool", "balance_scheduling",
      "deprecated spelling of additional_config.enable_balance_scheduling (envs.py:89-91)"),
    I("OMP_PROC_BIND", "env_str", "host threads"), I("OMP_NUM_THREADS", "env_str", "host threads"),
    I("VLLM_USE_MODELSCOPE", "env_str", "download source"), I("VLLM_ENGINE_READY_TIMEOUT_S", "env_str", "timeout"),
    I("VLLM_RPC_TIMEOUT", "env_str", "timeout"), I("VLLM_EXECUTE_MODEL_TIMEOUT_SECONDS", "env_str", "timeout"),
    I("VLLM_NIXL_ABORT_REQUEST_TIMEOUT", "env_str", "timeout"), I("HCCL_CONNECT_TIMEOUT", "env_str", "timeout"),
    I("HCCL_EXEC_TIMEOUT", "env_str", "timeout"), I("VLLM_SERVER_DEV_MODE", "env_str", "debug endpoints"),
    I("VLLM_WORKER_MULTIPROC_METHOD", "env_str", "process start method"),
    I("PYTHONHASHSEED", "env_str", "hash seed"), I("ASCEND_TRANSPORT_PRINT", "env_str", "logging"),
    I("VLLM_LOGGING_LEVEL", "env_str", "logging"), I("ASCEND_GLOBAL_LOG_LEVEL", "env_str", "logging"),
    I("ASCEND_SLOG_PRINT_TO_STDOUT", "env_str", "logging"),
    I("HCCL_IF_IP", "env_str", _NET), I("GLOO_SOCKET_IFNAME", "env_str", _NET), I("TP_SOCKET_IFNAME", "env_str", _NET),
    I("HCCL_SOCKET_IFNAME", "env_str", _NET), I("VLLM_HOST_IP", "env_str", _NET), I("SERVER_PORT", "env_str", _NET),
    I("MASTER_ADDR", "env_str", _NET), I("MASTER_PORT", "env_str", _NET),
    I("ASCEND_RT_VISIBLE_DEVICES", "env_str", "which devices this node uses"),
    I("DISAGGREGATED_PREFILL_RANK_TABLE_PATH", "env_str", "P/D rank table location"),
    I("VLLM_USE_V1", "env_str", "the V1 engine is the only one modelled", assumes=("1",)),
    I("VLLM_VERSION", "env_str", "build-time version override"),
    U("HCCL_OP_EXPANSION_MODE", "env_str", "collective algorithm placement (AIV): communication time"),
    U("PYTORCH_NPU_ALLOC_CONF", "env_str", "caching-allocator behaviour (fragmentation) is not modelled"),
    U("ASCEND_LAUNCH_BLOCKING", "env_str", "synchronous kernel launch: host time", assumes=("0",)),
    # level 1 is torch_npu's default ("Ascend Extension for PyTorch" environment variable reference,
    # TASK_QUEUE_ENABLE: "configured as 1 or not configured: task_queue Level 1"; "the default is 1"), the level
    # every calibration row ran at (set or not): level 0 or 2 changes the launch overhead the host model prices
    U("TASK_QUEUE_ENABLE", "env_str", "host task queue level: launch overhead (audit's host model is level 1, "
      "the default)", assumes=("1",)),
    U("CPU_AFFINITY_CONF", "env_str", "host CPU binding: launch overhead"),
    U("ASCEND_ENABLE_USE_FABRIC_MEM", "env_str", "fabric memory for communication buffers"),
    U("ACL_OP_INIT_MODE", "env_str", "operator initialisation mode"),
    U("ASCEND_AGGREGATE_ENABLE", "env_str", "aggregated transfers"),
    U("ASCEND_A3_ENABLE", "env_str", "the device generation comes from audit's --device"),
    U("HCCL_DETERMINISTIC", "env_str", "deterministic reductions: communication time"),
    U("HCCL_INTRA_ROCE_ENABLE", "env_str", "intra-node transport"),
    U("HCCL_INTRA_PCIE_ENABLE", "env_str", "intra-node transport"),
    U("DYNAMIC_EPLB", "env_str", "dynamic EPLB: per-expert weight clones and its HCCL buffer"),
    U("EXPERT_MAP_RECORD", "env_str", "EPLB expert map recording"),
    U("VLLM_ASCEND_SFA_SORT_TOPK", "env_str", "sorting of the top-k indices: kernel time"),
    U("VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS", "env_str", "graph memory deducted from the KV budget (v0.21-v0.22)"),
    U("VLLM_USE_V2_MODEL_RUNNER", "env_str", "model runner V2 (PCP and other paths)"),
)

_A, _S, _K, _E, _H = "additional_config", "speculative_config", "kv_transfer_config", "eplb_config", "hf_overrides"
_C8 = "sparse C8 KV cache switch (engine-vllm-ascend-runtime.md §1.1): selects --kv-cache-dtype by version"

JSON_RULES: tuple[Rule, ...] = (
    M(f"{_A}.enable_dsa_cp", "j_bool", "@dsa_cp", "DSA context parallel (with FlashComm1 on v0.23-v0.26)"),
    M(f"{_A}.enable_sparse_sfa_c8", "j_bool", "@kv_switch", _C8),
    M(f"{_A}.enable_sparse_li_c8", "j_bool", "@kv_switch", _C8),
    M(f"{_A}.enable_sparse_c8", "j_bool", "@kv_switch", _C8),
    M(f"{_A}.layer_sharding", "j_list", "layer_sharding", "v0.18-v0.23 P node"),
    M(f"{_A}.enable_shared_expert_dp", "j_bool", "shared_expert_dp"),
    M(f"{_A}.weight_nz_mode", "j_int", "nz_mode", rank=1),
    M(f"{_A}.enable_mlapo", "j_bool", "mlapo", "audit counts the MLAPO copies wherever they apply", assumes=(True,),
      rank=1),
    M(f"{_A}.enable_fused_mc2", "j_int", "fused_mc2", rank=1),
    Rule(f"{_A}.eplb_config", "j_dict", None, "mapped",
         "vLLM-Ascend's EPLB settings (rows additional_config.eplb_config.*)"),
    M(f"{_A}.eplb_config.num_redundant_experts", "j_int", "redundant_experts", cap="--redundant-experts", rank=1),
    U(f"{_A}.eplb_config.dynamic_eplb", "j_bool", "dynamic EPLB: per-expert weight clones and its HCCL buffer",
      assumes=(False,)),
    U(f"{_A}.eplb_config.expert_map_path", "j_any", "a static expert map: experts per rank may differ"),
    U(f"{_A}.eplb_config.expert_map_record_path", "j_any", "dynamic EPLB recording (turns dynamic EPLB on)"),
    I(f"{_A}.eplb_config.*", "j_any", "EPLB timing and policy (only with dynamic EPLB)"),
    M(f"{_A}.init_redundancy_expert", "j_int", "redundant_experts", "older spelling", cap="--redundant-experts"),
    U(f"{_A}.expert_map_path", "j_any", "a static expert map: experts per rank may differ"),
    U(f"{_A}.dynamic_eplb", "j_any", "dynamic EPLB (older spelling)", assumes=(False,)),
    U(f"{_A}.torchair_graph_config", "j_any", "torchair graph mode (older releases): " + _GRAPH),
    U(f"{_A}.ascend_scheduler_config", "j_any", "Ascend scheduler (older releases): " + _SCHED),
    U(f"{_A}.xlite_graph_config", "j_any", _GRAPH),
    # AscendCompilationConfig(**ascend_compilation_config): its defaults are the same from v0.18.0 to 182b75ea
    # (ascend_config.py:726-729@182b75ea, :265-269@v0.18.0; fuse_muls_add read from its kwargs, :770) and every
    # calibration row ran with them, so a value equal to the default is without effect; another is named
    Rule(f"{_A}.ascend_compilation_config", "j_dict", None, "mapped",
         "vLLM-Ascend's graph compiler settings (rows additional_config.ascend_compilation_config.*)"),
    *(U(f"{_A}.ascend_compilation_config.{key}", "j_any", f"{why} (audit assumes the default, {default})",
        assumes=(default,))
      for key, default, why in (("enable_npugraph_ex", True, "the npugraph_ex graph backend: decode kernel times"),
                                ("enable_static_kernel", False, "static kernels compiled per captured shape"),
                                ("fuse_norm_quant", True, _FUSION), ("fuse_qknorm_rope", True, _FUSION),
                                ("fuse_muls_add", True, _FUSION), ("fuse_allreduce_rms", False, _FUSION))),
    U(f"{_A}.ascend_compilation_config.*", "j_any", _FUSION),
    U(f"{_A}.ascend_fusion_config", "j_any", _FUSION),
    # the muls+add fusion pass reads its switch only inside ascend_compilation_config (default true,
    # graph_fusion_pass_manager.py:64@182b75ea, :67@v0.18.0); no version reads a top-level key of that name,
    # which ten of the published GLM-5.1 configs set
    I(f"{_A}.fuse_muls_add", "j_any", "not read by the engine: the fusion pass's switch is "
      "additional_config.ascend_compilation_config.fuse_muls_add (default true)"),
    U(f"{_A}.multistream_overlap_shared_expert", "j_any", _FUSION),
    U(f"{_A}.multistream_dsv4_dsa_overlap", "j_any", _FUSION), U(f"{_A}.enable_multistream_moe", "j_any", _FUSION),
    U(f"{_A}.enable_prefill_mc2", "j_any", "MC2 for prefill batches: MC2 capacity and its dummy run follow T"),
    U(f"{_A}.enable_mc2_hierarchy_comm", "j_any", "hierarchical MC2: communication time"),
    M(f"{_A}.mega_moe_max_tokens", "j_int", "combine_max_tokens",
      "dispatch_ffn_combine's max_output_size: its workspace is in the profile peak", cap="--mega-moe-max-tokens"),
    Rule(f"{_A}.finegrained_tp_config", "j_dict", None, "mapped",
         "per-module TP sizes (rows additional_config.finegrained_tp_config.*; auditor/finegrained.py)"),
    M(f"{_A}.finegrained_tp_config.lmhead_tensor_parallel_size", "j_int", "@ftp.lmhead",
      "lm_head sharded over this many DP ranks (ops/vocab_parallel_embedding.py:64-73@182b75ea)", cap="--dp"),
    M(f"{_A}.finegrained_tp_config.embedding_tensor_parallel_size", "j_int", "@ftp.embedding",
      "embed_tokens sharded over this many DP ranks (ops/vocab_parallel_embedding.py:64-73@182b75ea)", cap="--dp"),
    U(f"{_A}.finegrained_tp_config.mlp_tensor_parallel_size", "j_any", "dense-MLP TP group: its layout",
      assumes=(0,)),
    U(f"{_A}.finegrained_tp_config.oproj_tensor_parallel_size", "j_any", "o_proj TP group (decode, graph mode, TP 1)",
      assumes=(0,)),
    U(f"{_A}.finegrained_tp_config.olora_tensor_parallel_size", "j_any", "o_proj LoRA TP group", assumes=(0,)),
    U(f"{_A}.enable_pcp_o_proj_weight_sharding", "j_any", "PCP o_proj sharding"),
    U(f"{_A}.mlapo_keep_prefill_weights", "j_any", "MLAPO keeps the original weights on decode nodes"),
    U(f"{_A}.sparse_kv_offload_config", "j_any", "sparse KV offload to host memory"),
    U(f"{_A}.enable_kv_nz", "j_any", "KV cache in NZ format: kernel times"),
    U(f"{_A}.enable_transpose_kv_cache_by_block", "j_any", "KV layout: kernel times"),
    U(f"{_A}.enable_weight_nz_layout", "j_any", "older NZ switch (see weight_nz_mode)"),
    U(f"{_A}.weight_prefetch_config", "j_any", "weight prefetch: kernel overlap"),
    # true is the default of every modelled version (ascend_config.py:156@182b75ea, :91@v0.18.0), so the
    # calibration rows ran bound whether they said so or not; false changes the launch overhead the host model prices
    U(f"{_A}.enable_cpu_binding", "j_any", "host CPU binding: launch overhead (audit's host model is bound, the "
      "default)", assumes=(True, "true")),     # the worker tests its truth (worker.py:801): "true" binds too
    M(f"{_A}.enable_balance_scheduling", "j_bool", "balance_scheduling",
      "no DP rank admits while any is at max_num_seqs (bench; patch_balance_schedule.py)", rank=1),
    U(f"{_A}.recompute_scheduler_enable", "j_any", _SCHED),
    U(f"{_A}.scheduler_config", "j_any", _SCHED), U(f"{_A}.short_request_first_config", "j_any", _SCHED),
    U(f"{_A}.profiling_chunk_config", "j_any", _SCHED), U(f"{_A}.batch_job_sched_config", "j_any", _SCHED),
    U(f"{_A}.enable_reduce_sample", "j_any", "sampler"), U(f"{_A}.enable_force_eplb", "j_any", "EPLB"),
    U(f"{_A}.rejection_sampler_config", "j_any", "speculative acceptance"),
    U(f"{_A}.dynamic_spec_config", "j_any", "speculative decoding policy"),
    U(f"{_A}.draft_window_size", "j_any", "speculative decoding"), U(f"{_A}.pa_shape_list", "j_any", "kernel shapes"),
    U(f"{_A}.mix_placement", "j_any", "expert placement"), U(f"{_A}.rl_config", "j_any", "RL workloads"),
    I(f"{_A}.refresh", "j_any", "config reload"), I(f"{_A}.dump_config_path", "j_any", "debug dump"),
    I(f"{_A}.dump_config", "j_any", "debug dump"), I(f"{_A}.ascend_log_path", "j_any", "logging"),
    I(f"{_A}.msmonitor_use_daemon", "j_any", "profiling"),
    M(f"{_S}.method", "j_str", "@spec", "*mtp, dspark: the checkpoint's drafter (another method is "
      "named unmodelled)"),
    M(f"{_S}.num_speculative_tokens", "j_int", "@spec", "K draft tokens per step", cap="--mtp"),
    M(f"{_S}.enforce_eager", "j_bool", "draft_eager",
      "the drafter runs eager behind the replayed decode graph (bench; llm_base_proposer.py:178@182b75ea)"),
    I(f"{_S}.model", "j_any", "MTP drafts with the checkpoint's own MTP layer"),
    U(f"{_S}.draft_tensor_parallel_size", "j_any", "drafter TP size"),
    U(f"{_S}.quantization", "j_any", "drafter quantization"),
    U(f"{_S}.disable_padded_drafter_batch", "j_any", "drafter batch shape"),
    M(f"{_K}.kv_role", "j_str", "role", "kv_producer = prefill, kv_consumer = decode, kv_both = mixed"),
    U(f"{_K}.kv_connector", "j_str", "connector buffers outside the KV budget (e.g. Mooncake layer-wise) are not counted"),
    U(f"{_K}.kv_buffer_size", "j_any", "connector transfer buffer"),
    I(f"{_K}.*", "j_any", "connector addressing and ids"),
    M(f"{_E}.num_redundant_experts", "j_int", "redundant_experts", "EPLB redundant experts", cap="--redundant-experts",
      rank=2),
    I(f"{_E}.*", "j_any", "EPLB timing and policy (only with --enable-eplb)"),
    # --hf-overrides is applied to config.json as vLLM applies it (model.config.apply_hf_overrides):
    # IndexCache's keys change which layers compute top-k (and, by version, hold an indexer)
    M(f"{_H}.use_index_cache", "j_any", "@parent", "applied to config.json (IndexCache)"),
    M(f"{_H}.index_topk_freq", "j_any", "@parent", "applied to config.json (IndexCache)"),
    M(f"{_H}.index_topk_pattern", "j_any", "@parent", "applied to config.json (IndexCache)"),
    M(f"{_H}.index_skip_topk_offset", "j_any", "@parent", "applied to config.json (IndexCache)"),
    I(f"{_H}.*", "j_any", "applied to config.json; a key audit does not read changes nothing it models"),
)

_JSON_FLAGS = {"--additional-config": _A, "--speculative-config": _S, "--kv-transfer-config": _K,
               "--eplb-config": _E, "--hf-overrides": _H}

RULES: dict[str, Rule] = {r.name: r for r in FLAG_RULES + ENV_RULES_LIST + JSON_RULES}
ENV_RULES: dict[str, Rule] = {r.name: r for r in ENV_RULES_LIST}
_ALIASES: dict[str, str] = {a: r.name for r in FLAG_RULES for a in r.aliases}
assert len(RULES) == len(FLAG_RULES) + len(ENV_RULES_LIST) + len(JSON_RULES), "duplicate rule name"
assert not set(_ALIASES) & set(RULES), "an alias shadows a flag"

# environment variables under these prefixes are engine settings: unknown ones are named
_ENGINE_ENV_PREFIXES = ("VLLM_", "HCCL_", "ASCEND_", "ACL_", "PYTORCH_NPU", "TASK_QUEUE", "HCCL")

KV_CACHE_DTYPES = {"auto": "bf16", "bfloat16": "bf16", "bf16": "bf16"}
KV_ROLES = {"kv_producer": "prefill", "kv_consumer": "decode", "kv_both": "mixed"}


def names(effect: str) -> tuple[str, ...]:
    """Every rule name with ``effect`` (mapped / ignored / unmodelled): the documented lists."""
    return tuple(r.name for r in RULES.values() if r.effect == effect and not r.name.endswith(".*"))


# ---------------------------------------------------------------- argv walking


@dataclass(frozen=True)
class _Occ:
    name: str                   # canonical flag name (or the token's own name when unknown)
    rule: Rule | None
    value: Any                  # str, list[str], bool (bool flags), or None (unknown flag alone)
    sub: str | None             # dotted key path of "--json-flag.key"
    line: int
    token: str


def _looks_like_flag(tok: str) -> bool:
    if not tok.startswith("-") or tok == "-":
        return False
    try:
        float(tok)
        return False                        # "-1": argparse takes a negative number as a value
    except ValueError:
        return True


def canonical_flag(head: str) -> tuple[str, str | None]:
    """('--flag-name', dotted sub-key or None) of a flag token's name part (before any '=')."""
    base, dot, sub = head.partition(".")
    if base.startswith("--"):
        base = "--" + base[2:].replace("_", "-")
    return _ALIASES.get(base, base), (sub if dot else None)


def _walk(argv: tuple[str, ...] | list[str], lines: tuple[int, ...] | list[int], where: str
          ) -> tuple[list[_Occ], list[tuple[int, str]], list[Note]]:
    """(flag occurrences in order, positional arguments as (index, token), notes)."""
    occs: list[_Occ] = []
    pos: list[tuple[int, str]] = []
    notes: list[Note] = []
    i, n = 0, len(argv)
    while i < n:
        tok, line = argv[i], lines[i]
        i += 1
        if tok == "--":
            pos.extend((k, argv[k]) for k in range(i, n))
            break
        if not _looks_like_flag(tok):
            pos.append((i - 1, tok))
            continue
        head, eq, val = tok.partition("=")
        if head.startswith("-O") and not head.startswith("--") and len(head) > 2 and head[2:3] != ".":
            head, eq, val = "-O", "=", head[2:] + eq + val          # -O3: the level glued to the flag
        name, sub = canonical_flag(head)
        negated = False
        rule = RULES.get(name)
        if rule is None and name.startswith("--no-") and RULES.get("--" + name[5:], Rule("", "")).kind == "bool":
            name, negated, rule = "--" + name[5:], True, RULES["--" + name[5:]]
        if name == "--optimization-level" and (sub is not None or (not eq and i < n and argv[i].lstrip().startswith("{"))
                                               or (eq and val.lstrip().startswith("{"))):
            rule = RULES["--compilation-config"]                 # -O '{...}', -O.key: older spelling of -cc
            name = rule.name
        if rule is None:
            value: Any = None
            if eq:
                value = val
            elif i < n and not _looks_like_flag(argv[i]):
                value = argv[i]
                i += 1
            occs.append(_Occ(name, None, value, sub, line, tok))
            continue
        if sub is not None and rule.kind != "json":
            raise AuditInputError(where, f"{_at(line)}{tok}: only JSON-valued flags take .key sub-options")
        if rule.kind == "bool":
            if eq:
                raise AuditInputError(where, f"{_at(line)}{head} takes no value (vLLM refuses {tok!r}); "
                                             f"use {head} or --no-{head[2:]}")
            value = not negated
            if i < n and argv[i] in ("True", "False", "true", "false"):
                value = (argv[i].lower() == "true") != negated
                notes.append(Note("info", line, f"{head} {argv[i]}: older vLLM spelling of a boolean flag"))
                i += 1
        elif eq:
            value = val
        elif rule.kind == "list":
            k = i
            while k < n and not _looks_like_flag(argv[k]):
                k += 1
            if k == i:
                raise AuditInputError(where, f"{_at(line)}{head} expects at least one value")
            value, i = list(argv[i:k]), k
        else:
            if i >= n or (_looks_like_flag(argv[i]) and not argv[i].lstrip().startswith("{")):
                raise AuditInputError(where, f"{_at(line)}{head} expects a value")
            value = argv[i]
            i += 1
        occs.append(_Occ(name, rule, value, sub, line, tok))
    return occs, pos, notes


def split_model(args: list[str], lines: list[int], *, positional: bool, where: str, line: int
                ) -> tuple[str, list[str], list[int], list[Note]]:
    """(model, argv without the model argument, their lines, notes) of a launch's arguments.
    ``positional``: ``vllm serve MODEL`` (else the API server, which takes ``--model``)."""
    occs, pos, notes = _walk(args, lines, where)
    by_flag = [o for o in occs if o.name == "--model"]
    flag_model = str(by_flag[-1].value) if by_flag else None
    model, skip = None, None
    if positional and pos:
        skip, model = pos[0]
        if skip:
            notes.append(Note("info", lines[skip], f"model {model!r} given after options"))
        if flag_model is not None:
            notes.append(Note("warning", by_flag[-1].line, "the model is given both as an argument and with --model "
                                                            "(recent vLLM refuses this); the argument is used"))
    if model is None:
        model = flag_model
    if model is None:
        how = ("right after 'vllm serve' or with --model" if positional
               else "with --model (the API server would load its default)")
        raise AuditInputError(where, f"{_at(line)}the launch names no model; give it {how}")
    for k, tok in pos[1 if skip is not None else 0:]:
        notes.append(Note("warning", lines[k], f"stray argument {tok!r} (not a value of any flag audit knows; "
                                               "vLLM would refuse it unless an unknown flag before it takes it)"))
    argv = [a for k, a in enumerate(args) if k != skip]
    arg_lines = [ln for k, ln in enumerate(lines) if k != skip]
    return model, argv, arg_lines, notes


# ---------------------------------------------------------------- values


def _at(line: int) -> str:
    """'line N: ' for a setting read from a file; nothing for one typed on the command line (line 0)."""
    return f"line {line}: " if line else ""


def _fail(where: str, line: int, name: str, problem: str) -> None:
    raise AuditInputError(where, f"{_at(line)}{name}: {problem}")


def _lax_bool(v: Any) -> bool | None:
    if isinstance(v, bool):
        return v
    if isinstance(v, int) and v in (0, 1):
        return bool(v)
    if isinstance(v, str) and v.strip().lower() in ("1", "true", "yes", "on", "t", "y"):
        return True
    if isinstance(v, str) and v.strip().lower() in ("0", "false", "no", "off", "f", "n", ""):
        return False
    return None


def _capped(where: str, line: int, name: str, v: int | float, cap: str | None) -> int | float:
    if cap in OPTION_CAPS:
        c = OPTION_CAPS[cap]
        if not c.lo <= v <= c.hi:
            shown = f"{v:,}" if abs(v) < 10 ** 24 else f"{str(v)[:20]}... ({len(str(abs(v)))} digits)"
            _fail(where, line, name, f"{shown} is outside audit's plausible range {c.lo:,}..{c.hi:,} (as {cap})")
    elif cap in FLOAT_OPTION_CAPS:
        lo, hi = FLOAT_OPTION_CAPS[cap]
        if not lo < v <= hi:
            _fail(where, line, name, f"{v:g} is outside ({lo:g}, {hi:g}]")
    return v


def _json(where: str, line: int, name: str, text: str) -> Any:
    """A JSON option value (``--speculative-config '{...}'``) with the evidence rules (auditor.inputs): at most
    64 KiB, 32 levels, numbers of at most 40 characters and finite."""
    try:
        return parse_json_text(text, where, "the JSON", cap=64 << 10)
    except AuditInputError as exc:
        _fail(where, line, name, exc.problem)


def _value(rule: Rule, raw: Any, where: str, line: int, name: str) -> Any:
    """The typed, range-checked value of ``raw`` for ``rule`` (AuditInputError naming it)."""
    k = rule.kind
    if k in ("int", "env_int", "j_int"):
        if isinstance(raw, bool) or not isinstance(raw, (int, str)):
            _fail(where, line, name, f"{_q(raw)} is not an integer")
        try:
            v = int(raw) if isinstance(raw, int) or len(raw) < 40 else None
        except ValueError:
            v = None
        if v is None:
            _fail(where, line, name, f"{_q(raw)} is not an integer")
        return _capped(where, line, name, v, rule.cap)
    if k == "len":                               # audit's one length vocabulary: vLLM's 128k / 128K
        if str(raw).strip() == "-1" and rule.field == "max_model_len":
            return -1
        try:
            return parse_length(str(raw), rule.cap or name)
        except AuditInputError as exc:
            _fail(where, line, name, exc.problem)
    if k == "float":
        try:
            v = float(raw)
        except ValueError:
            v = math.nan
        if not math.isfinite(v):
            _fail(where, line, name, f"{_q(raw)} is not a finite number")
        return _capped(where, line, name, v, rule.cap)
    if k in ("env_bool", "j_bool"):
        v = _lax_bool(raw)
        if v is None:
            _fail(where, line, name, f"{_q(raw)} is not a boolean (1/0, true/false)")
        return v
    if k == "j_str":
        if not isinstance(raw, str):
            _fail(where, line, name, f"{_q(raw)} is not a string")
        return raw
    if k == "j_list":
        if not isinstance(raw, list) or not all(isinstance(x, str) for x in raw):
            _fail(where, line, name, f"{_show(raw)} is not a list of strings")
        return tuple(raw)
    if k == "json":
        v = _json(where, line, name, raw) if isinstance(raw, str) else raw
        if not isinstance(v, dict):
            _fail(where, line, name, f"must be a JSON object ({{...}}), got {_show(v)}")
        return v
    return raw                                   # str, list, bool, env_str, j_any


def _q(v: Any) -> str:
    """A value in a message: strings quoted, anything else as JSON."""
    return repr(_show(v)) if isinstance(v, str) else _show(v)


def _show(v: Any, width: int = 60) -> str:
    text = v if isinstance(v, str) else json.dumps(v, sort_keys=True) if isinstance(v, (dict, list)) else str(v)
    text = " ".join(text.split())
    return text if len(text) <= width else text[:width - 3] + "..."


def _set_path(d: dict, path: str, value: Any) -> None:
    keys = path.split(".")
    for key in keys[:-1]:
        nxt = d.get(key)
        if not isinstance(nxt, dict):
            nxt = d[key] = {}
        d = nxt
    d[keys[-1]] = value


# ---------------------------------------------------------------- to_options


class _Ctx:
    def __init__(self, where: str):
        self.where = where
        self.cands: dict[str, list[tuple[int, int, Any, str, int]]] = {}
        self.seq = 0
        self.ignored: list[Setting] = []
        self.unmodelled: list[Setting] = []
        self.unknown: list[Setting] = []
        self.notes: list[Note] = []
        self.explicit: set[str] = set()
        self.c8: dict[str, tuple[bool, int]] = {}
        self.special: dict[str, tuple[Any, int, str]] = {}

    def apply(self, rule: Rule, raw: Any, line: int, name: str) -> None:
        value = _value(rule, raw, self.where, line, name)
        shown = _show(raw)
        assumed = rule.assumes is not _NOTHING
        differs = assumed and _norm(value) not in [_norm(a) for a in rule.assumes]
        why = f"not audit's assumption: {rule.why}" if differs else rule.why
        if rule.kind == "j_dict" and rule.field is None:
            return self.walk(name, value, line)
        if rule.field == "@parent":
            return              # applied with its parent flag's whole value (--hf-overrides' keys)
        if rule.field is None:
            if (not differs) if assumed else rule.effect == "ignored":
                self.ignored.append(Setting(name, shown, line, rule.why))
            else:
                self.unmodelled.append(Setting(name, shown, line, why))
            return
        if differs or (not assumed and rule.effect == "unmodelled"):
            self.unmodelled.append(Setting(name, shown, line, why))
        if rule.field == "@kv_switch":
            self.c8[name.rpartition(".")[2]] = (value, line)
        elif rule.field.startswith("@"):
            self.special[rule.field] = (value, line, name)
            if rule.kind == "json" and name in _JSON_FLAGS:
                self.walk(_JSON_FLAGS[name], value, line)
        else:
            self.seq += 1
            self.cands.setdefault(rule.field, []).append((rule.rank, self.seq, value, name, line))
            if rule.kind == "json" and name in _JSON_FLAGS:
                self.walk(_JSON_FLAGS[name], value, line)

    def walk(self, prefix: str, obj: dict, line: int) -> None:
        for key, val in obj.items():
            name = f"{prefix}.{key}"
            rule = RULES.get(name) or RULES.get(f"{prefix}.*")
            if rule is None:
                self.unknown.append(Setting(name, _show(val), line, "not in audit's table: its effect is unknown"))
            elif rule.kind == "j_dict" and not isinstance(val, dict):
                _fail(self.where, line, name, f"must be a JSON object, got {_show(val)}")
            else:
                self.apply(rule, val, line, name)

    def pick(self, field_name: str, default: Any) -> Any:
        cands = self.cands.get(field_name)
        if not cands:
            return default
        best = max(cands, key=lambda c: (c[0], c[1]))
        others = {(c[3], _show(c[2])) for c in cands if _norm(c[2]) != _norm(best[2])}
        if others:
            lost = ", ".join(f"{n} = {v}" for n, v in sorted(others))
            self.notes.append(Note("warning", best[4], f"{field_name}: {best[3]} = {_show(best[2])} is used over {lost}"))
        self.explicit.add(field_name)
        return best[2]


def _norm(v: Any) -> Any:
    return v.lower() if isinstance(v, str) else v


def to_options(launch: Launch, engine: EngineLike = DEFAULT_ENGINE) -> DeploymentOptions:
    """The deployment options ``launch`` sets, read as engine ``engine`` would (the sparse C8 switch
    names and the DSA-CP trigger differ by version); every setting that is not an option is named
    in ``ignored`` / ``unmodelled`` / ``unknown``. AuditInputError (naming the launch and the line)
    for a value vLLM or audit would refuse."""
    where = launch.where
    if len(launch.argv) > MAX_COMMAND_WORDS:
        raise AuditInputError(where, f"{len(launch.argv):,} arguments, over audit's cap of {MAX_COMMAND_WORDS:,} words "
                                     "for one launch command")
    eng = as_engine(engine)
    ctx = _Ctx(where)
    if eng.note:
        ctx.notes.append(Note("info", 0, eng.note))
    occs, _, walk_notes = _walk(launch.argv, launch.arg_lines, where)
    ctx.notes.extend(walk_notes)
    # last wins per flag (argparse); dotted keys merge into their JSON flag
    last: dict[str, _Occ] = {}
    dotted: dict[str, list[_Occ]] = {}
    for o in occs:
        if o.sub is not None and o.rule is not None:
            dotted.setdefault(o.name, []).append(o)
            continue
        if o.name in last and o.rule is not None:
            prev = last[o.name]
            ctx.notes.append(Note("warning", o.line, f"{o.name} given twice (lines {prev.line} and {o.line}): the last "
                                                     f"({_show(o.value)}) wins, as in argparse"))
        last[o.name] = o
    for o in last.values():
        if o.rule is None:
            ctx.unknown.append(Setting(o.name, "" if o.value is None else _show(o.value), o.line,
                                       "not in audit's table: its effect is unknown"
                                       + ("; the next argument was taken as its value" if o.value is not None
                                          and "=" not in o.token else "")))
            continue
        value = o.value
        if o.name in dotted:                    # --flag '{...}' and --flag.key v: the keys go on top
            value = _merge(_value(o.rule, value, where, o.line, o.name), dotted.pop(o.name))
        ctx.apply(o.rule, value, o.line, o.name)
    for name, subs in dotted.items():
        ctx.apply(RULES[name], _merge({}, subs), subs[0].line, name)
    for name, value in launch.env.items():
        rule = ENV_RULES.get(name)
        line = launch.env_lines.get(name, 0)
        if rule is not None:
            ctx.apply(rule, value, line, name)
        elif name.startswith(_ENGINE_ENV_PREFIXES):
            ctx.unknown.append(Setting(name, _show(value), line, "engine-looking variable not in audit's table: "
                                                                 "its effect is unknown"))
    return _finish(ctx, launch, eng)


def _merge(base: dict, subs: list[_Occ]) -> dict:
    """``base`` with each ``--flag.a.b value`` set (the value read as JSON when it is JSON, as
    vLLM does)."""
    out = dict(base)
    for o in subs:
        try:
            v = parse_json_text(o.value, o.name, "the value", cap=64 << 10)
        except AuditInputError:             # not JSON (or past audit's JSON caps): the text itself
            v = o.value
        _set_path(out, o.sub, v)
    return out


def _engine_overrides(ctx: _Ctx, eng: Engine, options: dict[str, Any]) -> None:
    """A setting the engine itself turns off given the others (``Engine.launch_overrides``) has no effect:
    it moves from unmodelled to ignored, and the engine's own warning is a note at its line."""
    for name, why, logline in eng.launch_overrides(options):
        for st in [x for x in ctx.unmodelled if x.name == name and _norm(x.value) not in ("false", "0")]:
            ctx.unmodelled.remove(st)
            ctx.ignored.append(Setting(st.name, st.value, st.line, why))
            ctx.notes.append(Note("warning", st.line, f"{name}: the engine logs \"{logline}\""))


def _finish(ctx: _Ctx, launch: Launch, eng: Engine) -> DeploymentOptions:
    where = launch.where
    d = DeploymentOptions()
    o: dict[str, Any] = {}
    for f in ("tp", "dp", "pp", "dcp", "max_num_seqs", "max_num_batched_tokens", "util", "hccl_buffsize",
              "redundant_experts", "dp_local", "quantization", "prefix_caching", "eager", "compilation",
              "hf_overrides", "shared_expert_dp", "layer_sharding", "mlapo", "sp", "block_size"):
        o[f] = ctx.pick(f, getattr(d, f))
    o["model"] = launch.model
    mml = ctx.pick("max_model_len", None)
    if mml == -1:
        ctx.notes.append(Note("warning", 0, "--max-model-len -1 (the largest that fits) is not modelled; audit uses "
                                            "the model's max_position_embeddings"))
        mml = None
    o["max_model_len"] = mml
    nz = ctx.pick("nz_mode", d.nz_mode)
    if nz not in NZ_MODES:
        raise AuditInputError(where, f"weight NZ mode must be 0, 1 or 2, got {nz!r}")
    o["nz_mode"] = nz
    fm = ctx.pick("fused_mc2", 0)
    if fm not in (0, 1, 2):
        raise AuditInputError(where, f"VLLM_ASCEND_ENABLE_FUSED_MC2 must be 0, 1 or 2, got {fm!r}")
    o["fused_mc2"] = int(fm)
    o["balance_scheduling"] = bool(ctx.pick("balance_scheduling", False))
    o["async_scheduling"] = bool(ctx.pick("async_scheduling", False))
    o["draft_eager"] = bool(ctx.pick("draft_eager", False))
    o["combine_max_tokens"] = ctx.pick("combine_max_tokens", 0)
    ftp = tuple(sorted((k[5:], int(v[0])) for k, v in ctx.special.items() if k.startswith("@ftp.") and int(v[0]) > 0))
    if ftp:
        from ..finegrained import check
        check(ftp, o["dp"], True, f"{where}: additional_config.finegrained_tp_config")
        ctx.explicit.add("finegrained_tp")
    o["finegrained_tp"] = ftp
    for s in o["layer_sharding"]:
        if s not in ("q_b_proj", "o_proj"):
            raise AuditInputError(where, f"additional_config.layer_sharding: unknown series {s!r} (q_b_proj, o_proj)")
    # EP: one switch, size DP x TP
    ep_on = ctx.special.get("@ep_on", (False,))[0]
    o["ep"] = o["tp"] * o["dp"] if ep_on and o["tp"] * o["dp"] > 1 else 1
    if ep_on:
        ctx.explicit.add("ep")
    # KV cache dtype: --kv-cache-dtype, then the engine version's sparse C8 switches
    kv = d.kv_cache_dtype
    if "@kv_cache_dtype" in ctx.special:
        raw, line, name = ctx.special["@kv_cache_dtype"]
        kv = KV_CACHE_DTYPES.get(str(raw).lower())
        if kv is None and str(raw).lower() in eng.launch_kv_cache_dtypes:
            kv = str(raw).lower()         # the engine reads this --kv-cache-dtype as one of its variants
        if kv is None:
            ctx.unmodelled.append(Setting(name, str(raw), line, "audit models the sparse C8 caches through "
                                          "additional_config switches; this dtype is not modelled (bf16 assumed)"))
            kv = d.kv_cache_dtype
        ctx.explicit.add("kv_cache_dtype")
    if ctx.c8:
        kv = _kv_from_switches(ctx, eng, kv)
    o["kv_cache_dtype"] = kv
    # speculative decoding: *mtp methods load the drafter
    o["mtp"], o["mtp_drafter"] = _speculative(ctx)
    if o["mtp_drafter"]:
        method = str(ctx.special["@speculative"][0].get("method")).lower()
        o["speculative_method"] = "dspark" if method == "dspark" else "mtp"
        ctx.explicit.add("speculative_method")
    # P/D role
    role = ctx.pick("role", None)
    if role is None:
        o["role"] = d.role
    elif role not in KV_ROLES:
        line = next(c[4] for c in ctx.cands["role"])
        raise AuditInputError(where, f"{_at(line)}kv_transfer_config.kv_role: {role!r} is not one of "
                                     f"{', '.join(KV_ROLES)}")
    else:
        o["role"] = KV_ROLES[role]
        if role == "kv_both":
            ctx.notes.append(Note("info", 0, "kv_role kv_both: modelled as role mixed (audit's mixed has no KV "
                                             "transfer; the 2 MiB alignment per KV tensor is not counted)"))
    o["dsa_cp"] = _dsa_cp(ctx)
    o["graph_tokens"] = _graph_tokens(o["eager"], o["compilation"])
    if o["graph_tokens"] != -1:
        ctx.explicit.add("graph_tokens")
    if o["quantization"] is not None:
        ctx.notes.append(Note("info", 0, f"--quantization {o['quantization']}: audit takes the recipe from the "
                                         "checkpoint (quant_model_description.json / quantization_config), not from "
                                         "this flag"))
    if o["dp_local"] is not None and o["dp_local"] != o["dp"]:
        ctx.notes.append(Note("info", 0, f"this node runs {o['dp_local']} of the {o['dp']} DP ranks; audit models the "
                                         f"whole group (DP {o['dp']}, EP {o['ep']}), the same on every node"))
    _engine_overrides(ctx, eng, o)
    opts = DeploymentOptions(**o, where=where, engine=eng.key, env=dict(launch.env),
                             explicit=frozenset(ctx.explicit), ignored=tuple(ctx.ignored),
                             unmodelled=tuple(ctx.unmodelled), unknown=tuple(ctx.unknown),
                             notes=tuple(launch.notes) + tuple(ctx.notes))
    try:
        opts.plan()
    except AuditInputError as exc:
        raise AuditInputError(where, f"{exc.where}: {exc.problem}" if exc.where else exc.problem) from None
    return opts


def _graph_tokens(eager: bool, compilation: dict) -> int:
    """The largest decode step a launch replays as a graph (vLLM pads a step up to the next captured
    size and runs it eager above the largest one): 0 when eager, the max of cudagraph_capture_sizes
    when given, -1 (no limit) otherwise."""
    if eager or str((compilation or {}).get("cudagraph_mode", "")).upper() == "NONE":
        return 0
    sizes = (compilation or {}).get("cudagraph_capture_sizes")
    if isinstance(sizes, list) and sizes and all(isinstance(v, int) and not isinstance(v, bool) and 0 < v <= 1 << 20
                                                 for v in sizes):
        return max(sizes)
    return -1


def _kv_from_switches(ctx: _Ctx, eng: Engine, kv: str) -> str:
    """The cache variant whose switches (``Engine.kv_switches``) are exactly the ones turned on."""
    profile = eng.key
    switches = {v: eng.kv_switches(v) for v in eng.kv_dtypes}
    on = {k for k, (v, _) in ctx.c8.items() if v}
    line = max(ln for _, ln in ctx.c8.values())
    unknown = sorted(k for k in ctx.c8 if not any(k in sw for sw in switches.values()))
    if unknown:
        ctx.notes.append(Note("warning", line, f"additional_config.{', '.join(unknown)}: not a switch of {profile} "
                                               "(another version's name); ignored"))
        on -= set(unknown)
    if not on:
        return kv
    match = [dtype for dtype, sw in switches.items() if sw and set(sw) == on]
    if not match:
        ctx.unmodelled.append(Setting("additional_config." + "+".join(sorted(on)), "true", line,
                                      f"this C8 combination is not one of audit's KV variants on {profile} "
                                      f"({', '.join(f'{k}: {sorted(v)}' for k, v in switches.items() if v)}); "
                                      f"{kv} assumed"))
        return kv
    if "kv_cache_dtype" in ctx.explicit and kv != "bf16":
        ctx.notes.append(Note("warning", line, f"--kv-cache-dtype and the C8 switches both given; the switches "
                                               f"({match[0]}) are used"))
    ctx.explicit.add("kv_cache_dtype")
    return match[0]


def _speculative(ctx: _Ctx) -> tuple[int, bool]:
    if "@speculative" not in ctx.special:
        return 0, False
    spec, line, name = ctx.special["@speculative"]
    method = spec.get("method")
    k = spec.get("num_speculative_tokens")
    ctx.explicit.update(("mtp", "mtp_drafter"))
    # method dspark: the DSpark drafter of a Flash-0731 / Flash-DSpark checkpoint (model-deepseek-v4.md §1.6;
    # DSparkDeepseekV4ForCausalLM, models/deepseek_v4/dspark.py:65-200@182b75ea); which drafter is loaded
    # is the checkpoint's (its dspark_* keys), as for MTP
    if isinstance(method, str) and (method.lower().endswith("mtp") or method.lower() == "dspark"):
        if k is None:
            ctx.notes.append(Note("warning", line, f"{name}: no num_speculative_tokens; 1 assumed"))
            k = 1
        return int(k), int(k) > 0
    what = f"method {method!r}" if method else "a draft model" if spec.get("model") else "no method"
    ctx.unmodelled.append(Setting(name, _show(spec), line, f"speculative decoding with {what}: only MTP and DSpark "
                                                           "drafters are modelled"))
    return 0, False


def _dsa_cp(ctx: _Ctx) -> bool | None:
    """additional_config.enable_dsa_cp as the launch sets it (None: not set). What it turns on with
    FlashComm1 is the engine version's rule, decided where ``--dsa-cp`` is (the engine's placement),
    so a launch and audit's own options cannot read it differently."""
    flag = ctx.special.get("@dsa_cp")
    if flag is None:
        return None
    ctx.explicit.add("dsa_cp")
    return bool(flag[0])