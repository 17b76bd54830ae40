"""Which engine a ``--engine`` text names: ``family@version`` resolved once into an Engine object.

Every engine family registers its class here (``register``); the text is resolved once, by the
command line, and the Engine object is passed down. Version order is generic: ``X.Y[.Z][rcN]``,
a release candidate before its release, and a version resolves to the newest profile of its
family at or below it.
"""
from __future__ import annotations

import functools
import re
from typing import TYPE_CHECKING, Union

from ..errors import AuditInputError

if TYPE_CHECKING:        # pragma: no cover
    from .base import Engine

_VERSION_RE = re.compile(r"^v?(\d{1,4})\.(\d{1,4})(?:\.(\d{1,4}))?(?:rc(\d{0,4}))?$")
_FAMILIES: dict[str, type] = {}
DEFAULT_FAMILY = "vllm-ascend"
#: what --engine is when not given
DEFAULT_ENGINE = "vllm-ascend@main"


def register(cls: type) -> type:
    """Make an engine family (an Engine subclass with ``family``, ``profiles`` and ``aliases``)
    resolvable by name. Used as a class decorator; a test may register a toy family."""
    _FAMILIES[cls.family] = cls
    resolve.cache_clear()
    return cls


def unregister(family: str) -> None:
    """Remove a family (tests that registered a toy one clean up after themselves)."""
    _FAMILIES.pop(family, None)
    resolve.cache_clear()


def families() -> dict[str, type]:
    _load_builtin()
    return dict(_FAMILIES)


def loaded_kv_dtypes() -> set[str]:
    """The cache dtypes of the families loaded so far (the default family when none is): a value among
    them needs no other family imported to be accepted."""
    if not _FAMILIES:
        _load_family(DEFAULT_FAMILY)
    return {v for cls in _FAMILIES.values() for v in getattr(cls, "kv_dtypes", ())}


_LOADED: list[bool] = []


def _load_family(family: str) -> None:
    """Import only the folder a family name names (``vllm-ascend`` -> ``engines/vllm_ascend``), so a
    command resolving one engine does not import every family's log patterns and kernels; a name with
    no such folder loads them all (the lookup then finds it, or lists the known families)."""
    if family in _FAMILIES or _LOADED:
        return
    from pathlib import Path
    folder = family.replace("-", "_")
    if folder.isidentifier() and (Path(__file__).parent / folder / "__init__.py").is_file():
        import importlib
        importlib.import_module(f"{__package__}.{folder}")
    if family not in _FAMILIES:
        _load_builtin()


def _load_builtin() -> None:
    """Import every family folder under ``engines/`` once (each registers itself): a new family is a
    sibling folder, never a line here."""
    if _LOADED:
        return
    _LOADED.append(True)
    import importlib
    import pkgutil
    from pathlib import Path
    for info in pkgutil.iter_modules([str(Path(__file__).parent)]):
        if info.ispkg:
            importlib.import_module(f"{__package__}.{info.name}")


def parse_version(text: str) -> tuple[int, int, int, int, int] | None:
    """'0.26.0rc1' -> (0, 26, 0, 0, 1): an order key in which a release candidate sorts before its
    release ('rc' without a number sorts before rc1) and a missing patch number is 0. None when
    ``text`` is no version."""
    m = _VERSION_RE.match(text.strip().lower())
    if not m:
        return None
    x, y, z, rc = m.groups()
    release = 1 if rc is None else 0
    return int(x), int(y), int(z or 0), release, int(rc or 0) if rc is not None else 0


def _versioned(cls: type) -> list[tuple[tuple[int, int, int, int, int], object]]:
    out = [(parse_version(p.version), p) for p in cls.profiles.values() if p.version is not None]
    return sorted(out, key=lambda vp: vp[0])


def _resolve_in(cls: type, raw: str, low: str, ver: str) -> tuple[str, str | None]:
    name = cls.family
    if ver in cls.aliases:
        return cls.aliases[ver], None
    if f"{name}@{ver}" in cls.profiles:          # "0.18": a profile's own short name
        return f"{name}@{ver}", None
    key = parse_version(ver)
    versioned = _versioned(cls)
    # "@main" is offered only by a family that models its main branch (vLLM's CUDA profiles are releases)
    has_main = "main" in cls.aliases or f"{name}@main" in cls.profiles
    if key is None:
        examples = ", ".join(f"{name}@{p.version}" for _, p in versioned[-2:])
        raise AuditInputError("--engine", f"cannot read engine version {raw!r} (expected {name}@X.Y[.Z][rcN], "
                                          f"e.g. {examples}" + (f", or {name}@main)" if has_main else ")"))
    # a release candidate of a modelled release is that release's series (its features are in)
    series = [vp for vp in versioned if vp[0][:3] == key[:3]]
    if key[3] == 0 and series:
        pv, prof = series[-1]
        if pv[:3] == key[:3]:
            note = None if pv[3] == 0 else (f"{name}@{ver.lstrip('v')} is a release candidate of {prof.label}: "
                                            f"modelled as {prof.name}")
            return prof.name, note
    oldest, newest = versioned[0][1], versioned[-1][1]
    if key < versioned[0][0]:
        known = ", ".join(p.version for _, p in versioned)
        raise AuditInputError("--engine", f"{raw} is older than the oldest modelled release: supported are "
                                          f"{name}@{oldest.version} and newer (profiles {known}; a version "
                                          f"resolves to the newest profile at or below it)" + (f" and {name}@main" if has_main else ""))
    pv, prof = [vp for vp in versioned if vp[0] <= key][-1]
    rc_series = pv[3] == 0 and pv[4] == 0 and prof.version.endswith("rc")
    if key == pv or (rc_series and key[:4] == pv[:4]):
        return prof.name, None
    shown = f"{name}@{ver.lstrip('v')}"
    if prof is newest and key[:3] > pv[:3]:
        return prof.name, (f"{shown} is newer than the newest versioned profile: modelled as {prof.label} "
                           f"({prof.name}); --engine {name}@main models the development head")
    return prof.name, f"{shown} modelled as {prof.label} ({prof.name}), the newest profile at or below it"


def resolve_engine(text: str) -> tuple[str, str | None]:
    """``--engine`` text -> (profile key, note or None).

    Accepts ``family@X.Y[.Z][rcN]`` (a leading 'v' allowed; the family optional, default
    vllm-ascend), ``main``/``head`` and the profile keys themselves. A version newer than every
    numbered profile resolves to the newest one (the development head is only chosen by name).
    Older than the oldest profile, not a version, or an unknown family: AuditInputError."""
    raw = str(text).strip()
    low = raw.lower()
    # FAMILY@...: only that family can hold the text (profile keys and aliases with '@' carry their
    # family); a bare word may be any family's alias ("vllm", "main"), so every family is loaded
    if "@" in low:
        _load_family(low.rpartition("@")[0])
    else:
        _load_builtin()
    for cls in _FAMILIES.values():
        if low in cls.profiles:
            return low, None
        if low in cls.aliases:
            return cls.aliases[low], None
    name, at, ver = low.rpartition("@")
    family = name if at else DEFAULT_FAMILY
    cls = _FAMILIES.get(family)
    if cls is None:
        known = ", ".join(sorted(_FAMILIES))
        raise AuditInputError("--engine", f"unknown engine {raw!r}: modelled engines are {known} "
                                          f"(FAMILY@X.Y[.Z][rcN] or FAMILY@main)")
    return _resolve_in(cls, raw, low, ver)


@functools.lru_cache(maxsize=None)
def resolve(text: str) -> "Engine":
    """The Engine object an ``--engine`` text names (one object per profile and note)."""
    key, note = resolve_engine(text)
    family = key.partition("@")[0]
    cls = _FAMILIES[family]
    return cls(cls.profiles[key], note=note)


EngineLike = Union[str, "Engine", None]


def as_engine(engine: EngineLike) -> "Engine":
    """An Engine from an Engine or its ``--engine`` text (library callers may pass either); None is the
    default engine (``DEFAULT_ENGINE``), so no caller restates the default."""
    from .base import Engine
    if isinstance(engine, Engine):
        return engine
    return resolve(DEFAULT_ENGINE if engine is None else str(engine))


def engine_help() -> str:
    _load_builtin()
    parts = []
    for cls in _FAMILIES.values():
        shown = ", ".join((p.version or "main").replace(".0rc", " (rc)").replace(".0", "")
                          if p.version else "main" for p in cls.profiles.values())
        parts.append(f"{cls.family} (profiles: {shown})")
    return ("engine and version: FAMILY@X.Y[.Z][rcN] or FAMILY@main, resolved to the newest profile at or "
            "below it; " + "; ".join(parts))
