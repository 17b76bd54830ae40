"""Click options of the KV budget (``audit memory``, ``audit perf``): device, utilization, model
length, sequences, KV cache dtype, DCP, HCCL buffer size -> kwargs['runtime'] (a dict of
``rank_budget`` keyword arguments) and kwargs['device_name']."""
from __future__ import annotations

import functools
from typing import Callable

import click

from ..devices.profiles import DEFAULT_DEVICE
from ..engines.registry import families, loaded_kv_dtypes
from ..switches import BY_FIELD
from .options import capped, capped_float, switch_option
from .vocabulary import Length


def kv_dtype_choices() -> tuple[str, ...]:
    """Every registered engine family's cache variants (each engine refuses the ones its version lacks)."""
    out: list[str] = []
    for cls in families().values():
        out += [v for v in cls.kv_dtypes if v not in out]
    return tuple(out)


class KvDtypeChoice(click.Choice):
    """``--kv-cache-dtype``'s choices, read from the engine families when first needed (parsing or
    help), not when the command is built: building it must not import every engine folder."""

    def __init__(self, extra: tuple[str, ...] = ()) -> None:    # noqa: D107 (no Choice.__init__: lazy)
        self._extra = extra
        self.case_sensitive = True

    @property
    def choices(self) -> tuple[str, ...]:       # type: ignore[override]
        return kv_dtype_choices() + self._extra

    def convert(self, value, param, ctx):
        # a value a loaded family has (bf16, c8, ...) is accepted as the full list would; any other is
        # checked against every family (loaded now), which also words the refusal
        if isinstance(value, str) and (value in self._extra or value in loaded_kv_dtypes()):
            return value
        return super().convert(value, param, ctx)


def runtime_options(*, device: bool = True, mtp: bool = True, seqs: bool = True) -> Callable:
    def deco(f: Callable) -> Callable:
        opts = []
        if device:
            opts.append(click.option("--device", "device_name", default=DEFAULT_DEVICE, show_default=True,
                                     help="device profile name or JSON file (its usable HBM total is M_total)"))
        opts += [
            click.option("--gpu-memory-utilization", "util", type=capped_float("--gpu-memory-utilization"), default=None,
                         help="share of the device the engine may use (KV budget = util x total - the rest); "
                              "default: the engine version's own (vLLM-Ascend 0.9; vLLM 0.9 up to 0.21, 0.92 from "
                              "0.22)"),
            click.option("--max-model-len", type=Length("--max-model-len"), default=None,
                         help="model length one request must fit (default: max_position_embeddings); "
                              "exit 3 with the engine's error when it does not fit"),
        ]
        if seqs:
            opts.append(click.option("--max-num-seqs", type=capped("--max-num-seqs"), default=256, show_default=True,
                                     help="vLLM's scheduler limit: max sequences per step per DP rank (requests "
                                          "running at once); memory: also sizes the logits, sampler and workspace "
                                          "buffers"))
        opts += [
            click.option("--kv-cache-dtype", type=KvDtypeChoice(("auto",)), default="bf16", show_default=True,
                         help="bf16 (vLLM's auto); c8-indexer = LI-C8 (indexer keys int8); c8 = SFA-C8 + LI-C8"),
            switch_option(BY_FIELD["dcp"]),
            click.option("--hccl-buffsize", "hccl_buffsize", type=capped("--hccl-buffsize"), default=200, show_default=True,
                         help="HCCL_BUFFSIZE in MB (the mc2 communicator's buffer)"),
        ]
        if mtp:
            opts.append(click.option("--mtp", type=capped("--mtp"), default=0, show_default=True,
                                     help="speculative tokens K: loads the MTP drafter and its cache layer"))

        @functools.wraps(f)
        def wrapper(*args, **kw):
            util = kw.pop("util")
            if util is None:            # the engine's own default (the --engine option resolved it already)
                util = getattr(kw.get("engine"), "default_gpu_memory_utilization", 0.9)
            rt = {"util": util, "max_model_len": kw.pop("max_model_len"),
                  "kv_cache_dtype": {"auto": "bf16"}.get(kw.get("kv_cache_dtype"), kw.pop("kv_cache_dtype")), "dcp": kw.pop("dcp"),
                  "hccl_buffsize_mb": kw.pop("hccl_buffsize")}
            if seqs:
                rt["max_num_seqs"] = kw.pop("max_num_seqs")
            kw["runtime"] = rt
            return f(*args, **kw)

        for opt in reversed(opts):
            wrapper = opt(wrapper)
        return wrapper
    return deco


def hf_overrides_option(f: Callable) -> Callable:
    """``--hf-overrides JSON`` (vLLM's option): applied to config.json before the model is read.
    Additive by design: the command's own signature does not change; the parsed dict is installed
    for the duration of the command (``source.hf_overrides_scope``) and ``open_model`` applies it."""
    from ..model.config import parse_hf_overrides

    @functools.wraps(f)
    def wrapper(*args, **kw):
        from ..source import hf_overrides_scope
        with hf_overrides_scope(parse_hf_overrides(kw.pop("hf_overrides"))):
            return f(*args, **kw)

    return click.option("--hf-overrides", "hf_overrides", default=None, metavar="JSON",
                        help="vLLM --hf-overrides applied to config.json, e.g. "
                             "'{\"use_index_cache\": true, \"index_topk_freq\": 4}' (IndexCache)")(wrapper)
