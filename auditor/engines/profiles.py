"""Engine profiles: the version-dependent behaviour of vLLM-Ascend, as one data table.

Every row of the spec's version matrix (engine-vllm-ascend.md §0) is a field here; code elsewhere
reads these fields and never tests a version string. Per-scheme tensor rules live in ``rules.py``.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import AuditInputError


@dataclass(frozen=True)
class EngineProfile:
    name: str
    label: str
    # the oldest release this profile models ("X.Y.Z" or "X.Y.ZrcN"; "rc" alone = the whole rc series,
    # ordered before rc1); None for the development head. ``resolve_engine`` orders by it.
    version: str | None
    # DSA-CP switch: "sp" (index_topk and enable_sp), "flag+sp" (additional_config and enable_sp),
    # "flag" (additional_config only). audit infers the flag from --sp, --dsa-cp overrides.
    dsa_cp_trigger: str
    # o_proj under DSA-CP:
    #   "p_node_replicated": kv_producer gets a full replicated o_proj; every other node is TP + one
    #                        shared full-size gather pool (v0.18-v0.22)
    #   "p_node_replicated_pool_if_no_kv": as above but the pool exists only without kv transfer (v0.23)
    #   "tp_pool_if_no_kv_or_producer": always TP; the pool exists without kv transfer or on a producer
    o_proj_dsa_cp: str
    layer_sharding: bool              # additional_config.layer_sharding exists (v0.13-v0.23)
    gate_dtype: str                   # router gate weight dtype: "pd" or "F32"
    gate_dtype_confirmed: bool
    indexer_fused_wk: bool            # wk + weights_proj fused into wk_weights_proj
    # shared experts replicated when: "sp" (SP/FlashComm1 or SEDP), "sedp" (only --shared-expert-dp)
    shared_experts_replicated: str
    o_proj_gather_input_copy: bool    # unquantized o_proj keeps a per-layer transposed gather input
    notes: tuple[str, ...] = ()


PROFILES: dict[str, EngineProfile] = {
    "vllm-ascend@0.18": EngineProfile(
        name="vllm-ascend@0.18", label="vLLM-Ascend v0.18.0", version="0.18.0",
        dsa_cp_trigger="sp", o_proj_dsa_cp="p_node_replicated", layer_sharding=True,
        gate_dtype="pd", gate_dtype_confirmed=False, indexer_fused_wk=False,
        shared_experts_replicated="sp", o_proj_gather_input_copy=False,
        notes=("DSA-CP = index_topk and FlashComm1 (VLLM_ASCEND_ENABLE_FLASHCOMM1=1)",),
    ),
    "vllm-ascend@0.23": EngineProfile(
        name="vllm-ascend@0.23", label="vLLM-Ascend v0.23.0", version="0.23.0",
        dsa_cp_trigger="flag+sp", o_proj_dsa_cp="p_node_replicated_pool_if_no_kv", layer_sharding=True,
        gate_dtype="F32", gate_dtype_confirmed=True, indexer_fused_wk=True,
        shared_experts_replicated="sp", o_proj_gather_input_copy=True,
    ),
    "vllm-ascend@0.26": EngineProfile(
        name="vllm-ascend@0.26", label="vLLM-Ascend v0.26.0rc", version="0.26.0rc",
        dsa_cp_trigger="flag+sp", o_proj_dsa_cp="tp_pool_if_no_kv_or_producer", layer_sharding=False,
        gate_dtype="F32", gate_dtype_confirmed=True, indexer_fused_wk=True,
        shared_experts_replicated="sedp", o_proj_gather_input_copy=True,
        notes=("shared experts replicated only with SEDP / enable_sp_by_pass / vLLM disable_tp",),
    ),
    "vllm-ascend@main": EngineProfile(
        name="vllm-ascend@main", label="vLLM-Ascend main @182b75ea", version=None,
        dsa_cp_trigger="flag", o_proj_dsa_cp="tp_pool_if_no_kv_or_producer", layer_sharding=False,
        gate_dtype="F32", gate_dtype_confirmed=True, indexer_fused_wk=True,
        shared_experts_replicated="sedp", o_proj_gather_input_copy=True,
    ),
}

ALIASES = {"vllm-ascend@head": "vllm-ascend@main", "head": "vllm-ascend@main", "main": "vllm-ascend@main"}

DEFAULT_ENGINE = "vllm-ascend@main"
ENGINE_NAME = "vllm-ascend"

_VERSION_RE = re.compile(r"^v?(\d{1,4})\.(\d{1,4})(?:\.(\d{1,4}))?(?:rc(\d{0,4}))?$")
ENGINE_HELP = ("engine version: vllm-ascend@X.Y[.Z][rcN] or vllm-ascend@main; resolved to the newest "
               "profile at or below it (profiles: 0.18, 0.23, 0.26 (rc), main)")


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


def _versioned() -> list[tuple[tuple[int, int, int, int, int], EngineProfile]]:
    """Numbered profiles, oldest first."""
    out = [(parse_version(p.version), p) for p in PROFILES.values() if p.version is not None]
    return sorted(out, key=lambda vp: vp[0])


def resolve_engine(text: str) -> tuple[str, str | None]:
    """``--engine`` text -> (profile key, note or None).

    Accepts ``vllm-ascend@X.Y[.Z][rcN]`` (a leading 'v' allowed, the ``vllm-ascend@`` prefix
    optional), ``main``/``head`` and the profile keys themselves. A version resolves to the newest
    profile whose ``version`` is at or below it; the note says which, unless the text names that
    profile's own version. A version newer than every numbered profile resolves to the newest one
    (the development head is only ever chosen by name). Older than the oldest profile, or not a
    version at all: AuditInputError."""
    raw = str(text).strip()
    low = raw.lower()
    if low in PROFILES:
        return low, None
    if low in ALIASES:
        return ALIASES[low], None
    name, at, ver = low.rpartition("@")
    if at and name != ENGINE_NAME:
        raise AuditInputError("--engine", f"unknown engine {raw!r}: only {ENGINE_NAME} is modelled "
                                          f"({ENGINE_NAME}@X.Y[.Z][rcN] or {ENGINE_NAME}@main)")
    if ver in ALIASES:
        return ALIASES[ver], None
    if f"{ENGINE_NAME}@{ver}" in PROFILES:          # "0.18": a profile's own short name
        return f"{ENGINE_NAME}@{ver}", None
    key = parse_version(ver)
    versioned = _versioned()
    if key is None:
        raise AuditInputError("--engine", f"cannot read engine version {raw!r} (expected {ENGINE_NAME}@X.Y[.Z][rcN], "
                                          f"e.g. {ENGINE_NAME}@0.23.0 or {ENGINE_NAME}@0.26.0rc1, or {ENGINE_NAME}@main)")
    oldest, newest = versioned[0][1], versioned[-1][1]
    if key < versioned[0][0]:
        known = ", ".join(p.version for _, p in versioned)
        raise AuditInputError("--engine", f"{raw} is older than the oldest modelled release: supported are "
                                          f"{ENGINE_NAME}@{oldest.version} and newer (profiles {known}; a version "
                                          f"resolves to the newest profile at or below it) and {ENGINE_NAME}@main")
    pv, prof = [vp for vp in versioned if vp[0] <= key][-1]
    rc_series = pv[3] == 0 and pv[4] == 0 and prof.version.endswith("rc")
    if key == pv or (rc_series and key[:4] == pv[:4]):
        return prof.name, None
    shown = f"{ENGINE_NAME}@{ver.lstrip('v')}"
    if prof is newest and key[:3] > pv[:3]:
        return prof.name, (f"{shown} is newer than the newest versioned profile: modelled as {prof.label} "
                           f"({prof.name}); --engine {ENGINE_NAME}@main models the development head")
    return prof.name, f"{shown} modelled as {prof.label} ({prof.name}), the newest profile at or below it"


def get_profile(name: str) -> EngineProfile:
    """The profile an ``--engine`` text resolves to (see ``resolve_engine``)."""
    return PROFILES[resolve_engine(name)[0]]
