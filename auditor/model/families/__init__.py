"""Model families: one module per family declares its layers, its modules and its checkpoint names.

A family is chosen from the config's structure keys (``claims``), never from ``model_type``. The
default family (MLA / GQA decoders: DeepSeek-V3/V3.2, GLM-5.x, dense models) is the code in
``model.config`` / ``model.expected`` / ``engines.materialize``; a family whose layers differ from
each other (DeepSeek-V4: window-only, compress-4 and compress-128 layers) is a module here with:

* ``claims(cfg)``: whether the config has this family's structure keys;
* ``spec_from_config(cfg, name, where)``: the ModelSpec with ``layer_kinds`` (one LayerKind per
  main and MTP layer);
* ``layer_modules(spec, layer)`` / ``global_modules(spec)``: the modules of every layer and of the
  model (``blueprint.ModuleDecl``), which the engine's materializer walks through its rules;
* ``layout_rows(spec, recipe, writer, include_mtp)``: every stored tensor a writer emits
  (name, dtype, shape, scheme), read by ``synth`` and by config-only inventories; best read from
  ``layer_modules`` (DeepSeek-V4 does) so a module is declared once;
* ``description(spec, recipe, include_mtp)``: the quant description a writer emits, or None;
* ``structure_summary(spec)``: the report header's lines;
* ``config_from_spec(spec)``: a config.json that reads back as ``spec`` (synth of a bare spec).

To add a family: write its module with these names and list it in ``_MODULES``.
"""
from __future__ import annotations

import importlib
from types import ModuleType
from typing import Any

#: family modules of this package, asked in order; the first whose ``claims`` is true reads the config
_MODULES = ("deepseek_v4",)
#: families registered from outside the package (``register``): name -> module-like object
_EXTRA: dict[str, Any] = {}


def register(fam: Any) -> None:
    """Add a family defined elsewhere (an object with a module's names and ``NAME``); it is asked
    before the built-in ones."""
    _EXTRA[fam.NAME] = fam


def unregister(name: str) -> None:
    _EXTRA.pop(name, None)


def family(name: str) -> ModuleType:
    """The family module called ``name`` (the value of ``ModelSpec.family``)."""
    if name in _EXTRA:
        return _EXTRA[name]
    if name not in _MODULES:
        raise KeyError(f"no model family {name!r} (families: {', '.join((*_EXTRA, *_MODULES))})")
    return importlib.import_module(f"{__name__}.{name}")


def family_for_config(cfg: dict[str, Any]) -> ModuleType | None:
    """The family module whose structure keys ``cfg`` has, or None (the default MLA/GQA family)."""
    for name in (*_EXTRA, *_MODULES):
        mod = family(name)
        if mod.claims(cfg):
            return mod
    return None


def declared(spec: Any) -> ModuleType | None:
    """The family module of ``spec`` when it is not the default family."""
    return family(spec.family) if (spec.family in _MODULES or spec.family in _EXTRA) else None


def recipes_of(spec: Any) -> tuple[str, ...]:
    """The recipes ``spec``'s checkpoints exist in: a declared family's own (``RECIPE_SCHEMES``), else
    every recipe of ``model.recipes``."""
    from ..recipes import RECIPES
    fam = declared(spec)
    return tuple(getattr(fam, "RECIPE_SCHEMES", None) or RECIPES) if fam is not None else RECIPES
