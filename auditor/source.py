"""Open what the user named: a checkpoint directory, a config-only directory, or a built-in preset.

A Hugging Face hub cache repository (``models--org--name``) or one of its snapshots is read from
its snapshot and named by its repository (``hubcache.py``); a remote repository (``hf://org/name``,
``ms://org/name``, or a bare ``org/name`` that is not a local path) is mirrored headers-only into
a cache keyed by its commit and read from there (``remote/``), errors naming the repository. Whatever it is, the result is the same: a ModelSpec, the recipe, and on request (``tables=True``,
what memory and inventory need) a TensorTable and the quant description. Config-only inputs get an
inventory synthesized from the structure, and every report says so. Every command opens its model
here, so ``perf`` and ``inventory`` can never disagree about what a directory holds.
"""
from __future__ import annotations

import contextlib
import functools
import contextvars

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from .errors import AuditInputError
from .hubcache import resolve_hub_dir
from .inventory.access import check_model_dir_access
from .inventory.quantdesc import QuantDescription, load_quant_description
from .inventory.scan import ScanResult, find_quant_description, scan_model_dir
from .inventory.table import TensorTable
from .model.classify import Finding
from .model.config import apply_hf_overrides, load_config_file, spec_from_config
from .model.expected import expected_description, expected_tensors
from .model.presets import PRESETS, preset_config
from .model.recipes import DEFAULT_RECIPE, check_recipe, guess_recipe
from .model.spec import ModelSpec
from .remote.refs import parse_remote, scheme_of


@dataclass
class ModelSource:
    spec: ModelSpec
    table: TensorTable | None        # None when opened without tables
    kind: str                        # checkpoint | config-only | preset
    label: str                       # what the user named
    desc: QuantDescription | None = None
    recipe: str | None = None        # for synthesized inventories
    scheme_recipe: str = "bf16"      # the recipe the checkpoint was made with (perf's schemes)
    scan: ScanResult | None = None
    findings: list[Finding] = field(default_factory=list)

    @property
    def synthesized(self) -> bool:
        return self.kind != "checkpoint"

    def describe(self) -> str:
        if self.kind == "checkpoint":
            return f"checkpoint {self.label} ({len(self.table)} tensors in {len(self.table.files)} files)"
        how = "config-only directory" if self.kind == "config-only" else "built-in preset"
        from .model.presets import PRESET_NOTES
        note = PRESET_NOTES.get(self.label) if self.kind == "preset" else None
        return (f"{how} {self.label}: inventory SYNTHESIZED from the structure with recipe "
                f"'{self.recipe}' (no safetensors read)" + (f"; {note}" if note else ""))


def _description_values(desc: QuantDescription | None) -> set[str]:
    return desc.scheme_values() if desc is not None else set()


@functools.lru_cache(maxsize=6)
def _synthesized(spec: ModelSpec, recipe: str) -> tuple[TensorTable, QuantDescription | None]:
    """The header-exact inventory a recipe gives ``spec`` (a frozen spec: the key is its every field).
    Shared within a process: ``plan`` and ``align`` open the same preset once per recipe and candidate,
    and a full-size DeepSeek-V4-Pro inventory takes ~2 s to build; callers never modify it."""
    recipe = check_recipe(recipe)
    rows = expected_tensors(spec, recipe)
    table = TensorTable.from_rows(rows, file="<synthesized>")
    # shared by every caller from now on: a write into a column raises instead of changing another's answer
    for col in (table.file, table.dtype, table.ndim, table.shape, table.nbytes, table.begin, table.end, table.loaded,
                table.name_spans.start, table.name_spans.length):
        if isinstance(col, np.ndarray):
            col.setflags(write=False)
    desc_doc = expected_description(spec, recipe)
    desc = QuantDescription.from_dict(desc_doc, Path("<synthesized>")) if desc_doc is not None else None
    return table, desc


def _load_prepared(path: Path) -> QuantDescription:
    from .inventory.desccache import load_description
    return load_description(path)


def _quick_recipe(path: Path, cfg: dict) -> str:
    """The checkpoint's recipe without scanning shards: description values, else config.json."""
    desc_path = find_quant_description(path)
    desc = load_quant_description(desc_path) if desc_path else None
    return guess_recipe(_description_values(desc), cfg)


def _is_dir(path: Path) -> bool:
    try:
        return path.is_dir()
    except OSError as exc:         # a parent we may not search
        raise AuditInputError(path, f"cannot access: {exc.strerror}") from None


_HF_OVERRIDES: contextvars.ContextVar[dict | None] = contextvars.ContextVar("hf_overrides", default=None)


@contextlib.contextmanager
def hf_overrides_scope(overrides: dict | None):
    """Within the block, ``open_model`` applies ``overrides`` (the CLI's ``--hf-overrides``) unless
    it is given its own."""
    token = _HF_OVERRIDES.set(overrides or None)
    try:
        yield
    finally:
        _HF_OVERRIDES.reset(token)


def open_model(model: str | Path | None, recipe: str | None = None, progress: bool | None = None,
               default_preset: str = "glm-5.1", tables: bool = True,
               hf_overrides: dict | None = None) -> ModelSource:
    """Resolve MODEL (directory, preset name or remote repository) into a ModelSource. Never
    writes anything into a model directory (a remote repository is mirrored into the cache:
    ``auditor/remote``).

    ``hf_overrides``: vLLM's ``--hf-overrides`` applied to config.json before the spec is built
    (``model.config.apply_hf_overrides``), e.g. IndexCache's use_index_cache / index_topk_freq.

    ``tables=False`` reads only config.json and the quant description (what the perf model
    needs); the inventory is then not built."""
    if model is None:
        model = default_preset
    if hf_overrides is None:
        hf_overrides = _HF_OVERRIDES.get()
    if recipe is not None:
        recipe = check_recipe(recipe)
    path = Path(model)
    remote = parse_remote(str(model)) if scheme_of(str(model)) else None
    if remote is None and _is_dir(path):
        hub = resolve_hub_dir(path)
        if hub is None:
            return _open_dir(path, recipe, progress, tables, path.resolve().name, str(path), [], hf_overrides)
        how = "refs/main -> " if hub.via_ref else ""
        note = Finding("info", None, f"Hugging Face cache: {hub.repo}, {how}snapshot {hub.revision}")
        return _open_dir(hub.path, recipe, progress, tables, hub.repo, str(hub.path), [note], hf_overrides)
    if remote is None and path.exists():
        raise AuditInputError(path, "not a directory (give the model directory, not a file)")
    key = str(model).lower()
    if remote is None and key not in PRESETS:
        if "/" in str(model) or "\\" in str(model):
            remote = parse_remote(str(model), local_exists=False)
            if remote is None:
                raise AuditInputError(path, "no such directory")
        else:
            preset_config(key)   # raises the friendly "not a preset" error
    if remote is not None:
        from .remote.mirror import open_remote
        mirror = open_remote(remote, progress)
        try:
            return mirror.relabel_source(_open_dir(mirror.path, recipe, progress, tables, remote.repo, mirror.label,
                                                   [Finding("info", None, mirror.note)], hf_overrides))
        except AuditInputError as exc:
            raise mirror.relabel(exc) from None
    pcfg = preset_config(key)
    if hf_overrides:
        pcfg = apply_hf_overrides(pcfg, hf_overrides)
    spec = spec_from_config(pcfg, name=key, where=f"preset {key}")
    rec = recipe or DEFAULT_RECIPE.get(key, "bf16")
    if not tables:
        return ModelSource(spec, None, "preset", key, None, rec, rec)
    table, desc = _synthesized(spec, rec)
    return ModelSource(spec, table, "preset", key, desc, rec, rec)


def _open_dir(path: Path, recipe: str | None, progress: bool | None, tables: bool, name: str, label: str,
              notes: list[Finding], hf_overrides: dict | None = None) -> ModelSource:
    """A checkpoint or config-only directory, named ``name`` in the spec and ``label`` in reports."""
    check_model_dir_access(path)
    config_path = path / "config.json"
    if not config_path.exists():
        raise AuditInputError(path, "no config.json in the model directory")
    cfg = load_config_file(config_path)
    if hf_overrides:
        cfg = apply_hf_overrides(cfg, hf_overrides)
    spec = spec_from_config(cfg, name=name, where=str(config_path))
    if not tables:
        return ModelSource(spec, None, "checkpoint", label, None, recipe, recipe or _quick_recipe(path, cfg))
    desc_path = find_quant_description(path)
    # the description (10 MB for GLM-5.1) is read and hashed on another core during the scan;
    # a scan error still comes first
    with ThreadPoolExecutor(max_workers=1) as pool:
        pending = pool.submit(_load_prepared, desc_path) if desc_path else None
        scan = scan_model_dir(path, progress=progress)
        desc = pending.result() if pending else None
    findings = [Finding(s, t, m) for s, t, m in scan.index_findings] + notes
    if desc is not None:
        findings += [Finding(s, k, m) for s, k, m in desc.findings]
    guessed = guess_recipe(_description_values(desc), cfg)
    if len(scan.table) == 0:
        rec = recipe or guessed
        table, synth_desc = _synthesized(spec, rec)
        return ModelSource(spec, table, "config-only", label, desc or synth_desc, rec, rec, scan, findings)
    if recipe:
        findings.append(Finding("info", None, f"--recipe {recipe} ignored: the checkpoint's own tensors are used"))
    return ModelSource(spec, scan.table, "checkpoint", label, desc, None, guessed, scan, findings)
