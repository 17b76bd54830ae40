"""Write a header-exact checkpoint whose tensor data are sparse holes.

Why: the auditor's inventory, ledger and engine checks read safetensors headers, never tensor
bytes. A stand-in checkpoint with the real names, dtypes, shapes, offsets, shard names, index
and quant description lets every path run end to end on a full-size 750B model, on a laptop
disk: each shard is its header followed by ``truncate()`` to the full length, so the data
region is a hole that costs no blocks and reads back as zeros.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .errors import AuditInputError
from .limits import SYNTH_MAX_FILES
from .model.config import load_config_file, spec_from_config
from .model.expected import extra_files, expected_description, layout_rows, resolve_writer
from .model.families import declared as declared_family
from .model.presets import preset_config
from .dtypes import DTYPE_BITS, DTYPE_BYTES
from .model.spec import ModelSpec
from .outputs import check_output_dir, open_output, prepare_output_dir

# safetensors sorts a file's tensors by dtype, largest enum value first, then by name; this is
# the enum order of safetensors 0.4+ (checked against the real shards and the installed lib).
_ST_DTYPE_ORDER = tuple(DTYPE_BITS)      # the one dtype table is written in that order
_DTYPE_RANK = {d: i for i, d in enumerate(_ST_DTYPE_ORDER)}

FP8_QUANTIZATION_CONFIG = {"quant_method": "fp8", "fmt": "e4m3", "weight_block_size": [128, 128],
                           "activation_scheme": "dynamic"}

Tensor = tuple[str, str, tuple[int, ...]]


@dataclass
class SynthResult:
    out_dir: Path
    model: str = ""
    recipe: str = ""
    writer: str = ""
    files: list[Path] = field(default_factory=list)   # every file written, absolute
    tensors: int = 0                                  # tensors across all .safetensors files
    tensor_bytes: int = 0                             # their data bytes (sum of numel x dtype size)
    logical_bytes: int = 0                            # apparent size of all files written
    disk_bytes: int = 0                               # allocated blocks (st_blocks * 512)

    def summary(self) -> str:
        gib = 2 ** 30
        return (f"synth {self.model} {self.recipe} ({self.writer}): {len(self.files)} files, "
                f"{self.tensors} tensors, {self.logical_bytes / gib:.2f} GiB logical, "
                f"{self.disk_bytes / 2 ** 20:.1f} MiB on disk -> {self.out_dir}")


def _numel(shape: tuple[int, ...]) -> int:
    n = 1
    for d in shape:
        n *= d
    return n


def _nbytes(dtype: str, shape: tuple[int, ...]) -> int:
    return int(_numel(shape) * DTYPE_BYTES[dtype])


def safetensors_header(tensors: list[Tensor], metadata: dict[str, str] | None) -> tuple[bytes, int]:
    """Header bytes (length prefix included) laid out as the safetensors library writes them.

    Returns (prefix + JSON padded with spaces to a multiple of 8, data region length).
    Tensors are placed contiguously in safetensors' own order (dtype rank descending, name).
    """
    order = sorted(tensors, key=lambda t: (-_DTYPE_RANK[t[1]], t[0]))
    parts = []
    if metadata is not None:
        parts.append('"__metadata__":' + json.dumps(metadata, separators=(",", ":")))
    offset = 0
    for name, dtype, shape in order:
        if '"' in name or "\\" in name:
            raise ValueError(f"tensor name needs JSON escaping: {name!r}")
        end = offset + _nbytes(dtype, shape)
        parts.append(f'"{name}":{{"dtype":"{dtype}","shape":[{",".join(map(str, shape))}],'
                     f'"data_offsets":[{offset},{end}]}}')
        offset = end
    text = ("{" + ",".join(parts) + "}").encode("utf-8")
    text += b" " * (-len(text) % 8)
    return len(text).to_bytes(8, "little") + text, offset


def write_sparse_safetensors(path: Path, tensors: list[Tensor], metadata: dict[str, str] | None) -> int:
    """Write the header, then extend the file to full length without writing tensor bytes."""
    head, data = safetensors_header(tensors, metadata)
    path.parent.mkdir(parents=True, exist_ok=True)
    with open_output(path, "OUT_DIR", durable=False) as f:
        f.write(head)
        f.truncate(len(head) + data)
    return data


def _shard(rows: list[Tensor], shard_bytes: int) -> list[list[Tensor]]:
    """Greedy split in writing order: a new shard starts when the next tensor would overflow."""
    shards: list[list[Tensor]] = [[]]
    size = 0
    for row in rows:
        nb = _nbytes(row[1], row[2])
        if shards[-1] and size + nb > shard_bytes:
            shards.append([])
            size = 0
        shards[-1].append(row)
        size += nb
    return shards


def config_from_spec(spec: ModelSpec) -> dict[str, Any]:
    """An HF-shaped config.json that ``spec_from_config`` reads back as the same structure.

    Used when ``synthesize`` is handed a bare ModelSpec and no config.
    """
    from .model.families import declared
    fam = declared(spec)
    if fam is not None:
        return fam.config_from_spec(spec)
    dtype = {"BF16": "bfloat16", "F16": "float16", "F32": "float32"}.get(spec.pd, "bfloat16")
    cfg: dict[str, Any] = {"model_type": spec.model_type, "dtype": dtype, "hidden_size": spec.H,
                           "num_hidden_layers": spec.Lyr, "num_attention_heads": spec.NH,
                           "num_key_value_heads": spec.NKV or spec.NH, "vocab_size": spec.V,
                           "tie_word_embeddings": spec.tie_embeddings,
                           "num_nextn_predict_layers": spec.mtp_layers}
    if spec.max_position:
        cfg["max_position_embeddings"] = spec.max_position
    if spec.Id:
        cfg["intermediate_size"] = spec.Id
    if spec.mla:
        cfg.update(q_lora_rank=spec.Qr or None, kv_lora_rank=spec.Lkv, qk_nope_head_dim=spec.Dn,
                   qk_rope_head_dim=spec.Dr, v_head_dim=spec.Dv)
    else:
        cfg["head_dim"] = spec.head_dim
    if spec.dsa:
        cfg.update(index_n_heads=spec.IH, index_head_dim=spec.ID, index_topk=spec.topk_tokens,
                   indexer_types=["full" if x else "shared" for x in spec.indexer_layers])
        if any(spec.topk_shared):       # IndexCache: which layers reuse a top-k ("S"), as a pattern
            cfg["index_topk_pattern"] = "".join("S" if x else "F" for x in spec.topk_shared)
    if spec.moe:
        cfg.update(n_routed_experts=spec.E, moe_intermediate_size=spec.I, n_shared_experts=spec.S,
                   num_experts_per_tok=spec.topk_experts,
                   mlp_layer_types=["sparse" if x else "dense" for x in spec.moe_layers])
        if spec.router_bias:
            cfg["topk_method"] = "noaux_tc"
    return cfg


def _resolve_model(model: str | ModelSpec, config: dict | None) -> tuple[ModelSpec, dict]:
    if config is not None:
        name = model.name if isinstance(model, ModelSpec) else Path(str(model)).name or "model"
        return spec_from_config(config, name=name, where="--config"), dict(config)
    if isinstance(model, ModelSpec):
        return model, config_from_spec(model)
    cfg_path = Path(model) / "config.json"
    if cfg_path.is_file():
        cfg = load_config_file(cfg_path)
        return spec_from_config(cfg, name=Path(model).name, where=str(cfg_path)), cfg
    cfg = preset_config(model)
    return spec_from_config(cfg, name=model.lower(), where=f"preset {model}"), cfg


def _check_out_dir(out_dir: Path, overwrite: bool) -> None:
    check_output_dir(out_dir)
    if out_dir.is_dir() and any(out_dir.iterdir()) and not overwrite:
        raise AuditInputError(out_dir, "output directory is not empty (pass --overwrite to write into it)")


def _clear_previous(out_dir: Path) -> None:
    """Drop what a previous synth may have left, so no stale shard outlives a new layout."""
    for pattern in ("*.safetensors", "*.safetensors.index.json", "quant_model_description.json",
                        "optional/quarot.safetensors"):
            for old in out_dir.glob(pattern):
                old.unlink()


def _dump(path: Path, obj: Any, *, sort_keys: bool = False, newline: bool = True) -> None:
    text = json.dumps(obj, indent=2, sort_keys=sort_keys, ensure_ascii=False)
    with open_output(path, "OUT_DIR", text=True, durable=False) as f:
        f.write(text + ("\n" if newline else ""))


def synthesize(out_dir: Path, model: str | ModelSpec = "glm-5.1", recipe: str = "w8a8", *,
               config: dict | None = None, shard_bytes: int = 5 * 2 ** 30, include_mtp: bool = True,
               writer: str | None = None, overwrite: bool = False,
               max_files: int | None = SYNTH_MAX_FILES) -> SynthResult:
    """Write a sparse, header-exact checkpoint of ``model`` quantized by ``recipe`` into ``out_dir``.

    ``model``: preset name, directory with config.json, or a ModelSpec. ``config`` overrides both.
    More than ``max_files`` files (None: no limit) is refused before anything is written.
    """
    out_dir = Path(out_dir)
    if shard_bytes <= 0:
        raise AuditInputError("--shard-size", f"must be positive, got {shard_bytes}")
    writer = resolve_writer(recipe, writer)
    spec, cfg = _resolve_model(model, config)
    _check_out_dir(out_dir, overwrite)

    cfg = dict(cfg)
    if recipe == "fp8-block":
        fam = declared_family(spec)
        cfg.setdefault("quantization_config", dict(getattr(fam, "HF_QUANTIZATION_CONFIG", FP8_QUANTIZATION_CONFIG)))
    else:
        cfg.pop("quantization_config", None)   # an fp8 block config on int8 weights would mislead engines

    layout = layout_rows(spec, recipe, include_mtp=include_mtp, writer=writer)
    rows: list[Tensor] = [(n, d, s) for n, d, s, _ in layout]
    shards = _shard(rows, shard_bytes)
    msm = writer == "msmodelslim"
    stem = "quant_model_weights" if msm else "model"
    n = len(shards)
    n_files = n + len(extra_files(spec, recipe, writer=writer)) + 4     # + config, index, description
    if max_files is not None and n_files > max_files:
        raise AuditInputError("--shard-size", f"{shard_bytes:,}-byte shards make ~{n_files:,} files, more than "
                                              f"{max_files:,}: pass --allow-many-files or a larger --shard-size")
    prepare_output_dir(out_dir)
    if overwrite:
        _clear_previous(out_dir)
    if n == 1 and not msm:
        names = ["model.safetensors"]           # save_pretrained writes no index for one shard
    else:
        names = [f"{stem}-{i + 1:05d}-of-{n:05d}.safetensors" for i in range(n)]

    result = SynthResult(out_dir=out_dir.resolve(), model=spec.name, recipe=recipe, writer=writer)
    written: list[Path] = []
    _dump(out_dir / "config.json", cfg)
    written.append(out_dir / "config.json")
    weight_map: dict[str, str] = {}
    total = 0
    metadata = None if msm else {"format": "pt"}   # msModelSlim shards carry no __metadata__
    for fname, shard in zip(names, shards):
        total += write_sparse_safetensors(out_dir / fname, shard, metadata)
        written.append(out_dir / fname)
        for name, _, _ in shard:
            weight_map[name] = fname
    result.tensors = len(rows)
    result.tensor_bytes = total

    for rel, name, dtype, shape in extra_files(spec, recipe, writer=writer):
        result.tensor_bytes += write_sparse_safetensors(out_dir / rel, [(name, dtype, shape)], None)
        written.append(out_dir / rel)
        result.tensors += 1
        if "/" not in rel:                       # rot.safetensors is indexed, optional/ is not
            weight_map[name] = rel

    if msm:
        _dump(out_dir / "quant_model_weights.safetensors.index.json",
              {"metadata": {"total_size": total}, "weight_map": weight_map}, newline=False)
        written.append(out_dir / "quant_model_weights.safetensors.index.json")
        _dump(out_dir / "quant_model_description.json",
              expected_description(spec, recipe, include_mtp=include_mtp, writer=writer), newline=False)
        written.append(out_dir / "quant_model_description.json")
    elif n > 1:
        params = sum(_numel(s) for _, _, s in rows)
        _dump(out_dir / "model.safetensors.index.json",
              {"metadata": {"total_parameters": params, "total_size": total}, "weight_map": weight_map},
              sort_keys=True)
        written.append(out_dir / "model.safetensors.index.json")

    for p in written:
        st = os.stat(p)
        result.logical_bytes += st.st_size
        result.disk_bytes += st.st_blocks * 512
    result.files = [p.resolve() for p in written]
    return result
