"""Device profiles as data: one JSON file per accelerator in this package, or any JSON file a
user points at with ``--device path/to/file.json``.

Profiles are data rather than code so that a calibration run can write a variant profile (same
schema, fitted constants, provenance in ``calibration``) and so that users can describe their own
hardware without touching the package. The schema is documented in ``SCHEMA`` below and in the
README; ``load_device`` validates every file and reports problems as one line naming the file.

Units are SI throughout the dataclass (FLOP/s, bytes/s, bytes, seconds for tier latency) except
``static_us`` (microseconds, as device datasheets and TensorCast state them). In the JSON the tier
latency is given in microseconds (``latency_us``) for readability and converted on load.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from ..errors import AuditInputError

DEFAULT_DEVICE = "a3-752t"
#: the profile a config that names only its Ascend generation runs on: A2 -> the 313T die (the published A2
#: rows, the nightly GLM-5.1 A2 config and the GLM-5 A2 tutorial, are modelled on it and the joint serving fit
#: writes it: serving/calibrate.py); A3 -> the default
GENERATION_DEVICES = {"A2": "a2-313t", "A3": DEFAULT_DEVICE}
_DIR = Path(__file__).resolve().parent

#: dtype keys allowed in ``mma_flops`` / ``vector_flops`` (F8 omitted where the device has none)
DTYPES = ("F32", "BF16", "F16", "I8", "F8")
#: efficiency keys every profile must define (fractions of peak, 0 < x <= 1 unless noted)
EFFICIENCY_KEYS = ("compute", "memory", "sfa_kv", "indexer_cache", "comm")
STATIC_KEYS = ("mma", "gp", "comm")
HOST_KEYS = ("prefill", "decode")
#: FULL_MESH tiers scale bandwidth by (n-1)/(dim-1); every other topology is a switch/ring
TOPOLOGIES = ("CLOS", "SWITCH", "SIO", "FULL_MESH")

SCHEMA = """\
name                str    short id used on the command line (e.g. a3-752t)
label               str    human readable description
source              str    where the figures come from (optional)
mma_flops           {dtype: FLOP/s}  matrix-unit peak per dtype; dtypes F32 BF16 F16 I8 [F8]
vector_flops        {dtype: FLOP/s}  vector-unit (GP) peak per dtype
hbm_bytes_per_s     float  HBM peak bandwidth, bytes/s
hbm_capacity_bytes  int    HBM capacity, bytes
hbm_usable_bytes    int    total the engine's worker sees (torch_npu total_memory; optional, default
                           hbm_capacity_bytes): the M_total of the KV budget, e.g. 61.27 GiB on an A3 die
efficiency          {key: fraction}  compute (MMA+vector), memory (dense HBM streams),
                           sfa_kv (paged sparse KV gathers of SparseFlashAttention, relative to
                           'memory'), indexer_cache (LightningIndexer cache reads, relative to
                           'memory'), comm (link bandwidth); extra keys are kept and passed through
static_us           {mma, gp, comm: microseconds}  fixed cost per kernel / per collective
vector_sort_ops_per_s  float  sort/merge element ops per second of the vector cores (the indexer's
                           fused top-k); optional, default vector_flops F32 / 16 (8 elements per
                           cycle per core of 64 fp32 lanes, counted as 2 FLOPs each)
host_ms             {prefill, decode: milliseconds}  host time per forward step the device idles
                           (scheduling, input preparation, graph launch, the eager MTP drafter,
                           sampling); optional, default 0
grid                [int, ...]  ranks per topology dimension, outermost first
tiers               [{name, topology, bytes_per_s, latency_us}, ...]  one per grid dimension;
                           bytes_per_s is unidirectional per rank
calibration         {...}  provenance of fitted constants (free form; status, source, date, errors)
"""


@dataclass(frozen=True)
class Device:
    """One accelerator (one die for Atlas A3) and the interconnect it sits in."""

    name: str
    label: str
    mma_flops: dict[str, float]
    vector_flops: dict[str, float]
    hbm_bytes_per_s: float
    hbm_capacity_bytes: int
    efficiency: dict[str, float]
    static_us: dict[str, float]
    tiers: list[tuple[float, float]]          # (bytes_per_s, latency_s) per tier, outermost first
    grid: tuple[int, ...]
    calibration: dict = field(default_factory=dict)
    tier_topologies: tuple[str, ...] = ()      # parallel to tiers; "FULL_MESH" changes bandwidth
    tier_names: tuple[str, ...] = ()
    source: str = ""
    hbm_usable_bytes: int = 0                  # 0: same as hbm_capacity_bytes
    path: str = ""                             # file it was loaded from ("" for built-in copies)
    vector_sort_ops_per_s: float = 0.0         # 0: vector_flops F32 / 16 (see SCHEMA)
    host_ms: dict = field(default_factory=lambda: {"prefill": 0.0, "decode": 0.0})
    #: host model of the serving simulation (auditor.serving.costs: launch_us, prefill_token_us,
    #: decode_token_us, step_ms); empty: the uncalibrated defaults
    serving: dict = field(default_factory=dict)

    @property
    def sort_rate(self) -> float:
        """Sort/merge element ops per second of the vector cores (the fused top-k)."""
        if self.vector_sort_ops_per_s:
            return self.vector_sort_ops_per_s
        f32 = self.vector_flops.get("F32") or max(self.vector_flops.values()) / 2.0
        return f32 / 16.0

    def with_efficiency(self, **kw: float) -> "Device":
        """A copy with some efficiency constants replaced (used by calibration)."""
        return replace(self, efficiency={**self.efficiency, **kw})

    def with_static(self, **kw: float) -> "Device":
        return replace(self, static_us={**self.static_us, **kw})

    def with_host(self, **kw: float) -> "Device":
        """A copy with some per-step host overheads (ms) replaced (used by calibration)."""
        return replace(self, host_ms={**self.host_ms, **kw})

    def to_json(self) -> dict[str, Any]:
        """The JSON document ``load_device`` reads back to an equal Device."""
        return {
            "name": self.name,
            "label": self.label,
            "source": self.source,
            "mma_flops": dict(self.mma_flops),
            "vector_flops": dict(self.vector_flops),
            "hbm_bytes_per_s": self.hbm_bytes_per_s,
            "hbm_capacity_bytes": self.hbm_capacity_bytes,
            **({"hbm_usable_bytes": self.hbm_usable_bytes} if self.hbm_usable_bytes else {}),
            "efficiency": dict(self.efficiency),
            "static_us": dict(self.static_us),
            **({"vector_sort_ops_per_s": self.vector_sort_ops_per_s} if self.vector_sort_ops_per_s else {}),
            "host_ms": dict(self.host_ms),
            **({"serving": dict(self.serving)} if self.serving else {}),
            "grid": list(self.grid),
            "tiers": [
                {"name": n, "topology": t, "bytes_per_s": bw, "latency_us": lat * 1e6}
                for (bw, lat), t, n in zip(self.tiers, self.tier_topologies, self.tier_names)
            ],
            "calibration": self.calibration,
        }


def generation_of(name: str | Path) -> str | None:
    """"A2" / "A3" for a shipped Ascend profile's name (a2-313t, a3-752t) or a JSON file named so; else None
    (a GPU, or a user's profile whose name does not say)."""
    stem = Path(str(name)).name.lower().removesuffix(".json")
    for gen in GENERATION_DEVICES:
        if stem.startswith(gen.lower() + "-"):
            return gen
    return None


def device_names() -> list[str]:
    """Names of the built-in profiles (the JSON files shipped in this package)."""
    return sorted(p.stem for p in _DIR.glob("*.json"))


def load_device(name: str | Path | None = None) -> Device:
    """A built-in profile by name, or a JSON file by path (anything ending in .json or existing
    on disk). ``None`` gives the default (A3 752T die)."""
    if name is None:
        name = DEFAULT_DEVICE
    if isinstance(name, Device):
        return name
    text = str(name)
    path = Path(text)
    if text.endswith(".json") or path.is_file():
        if not path.is_file():
            raise AuditInputError(path, "device profile file not found")
    else:
        path = _DIR / f"{text}.json"
        if not path.is_file():
            raise AuditInputError("--device", f"unknown device {text!r}; built-in: {', '.join(device_names())}"
                                              " (or give a path to a JSON profile)")
    from ..inputs import load_json
    doc = load_json(path, "device profile", cap=1 << 20)
    dev = device_from_json(doc, path)
    return replace(dev, path=str(path))


def _num(doc: dict, key: str, where: Path | str, positive: bool = True) -> float:
    v = doc.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
        raise AuditInputError(where, f"'{key}' must be a number, got {v!r}")
    if positive and v <= 0:
        raise AuditInputError(where, f"'{key}' must be positive, got {v!r}")
    if abs(v) > MAX_DEVICE_NUMBER:
        raise AuditInputError(where, f"'{key}' = {v:g} is over the plausible {MAX_DEVICE_NUMBER:g}")
    return float(v)


#: no device figure (FLOP/s, bytes/s, bytes, us) is larger: 1e18 = an exaFLOP/s or an exabyte
MAX_DEVICE_NUMBER = 1e18


def _num_map(doc: dict, key: str, where: Path | str, allowed: tuple[str, ...] | None,
             required: tuple[str, ...] = (), positive: bool = True) -> dict[str, float]:
    m = doc.get(key)
    if not isinstance(m, dict) or not m:
        raise AuditInputError(where, f"'{key}' must be a non-empty object")
    out: dict[str, float] = {}
    for k in m:
        if allowed is not None and k not in allowed:
            raise AuditInputError(where, f"'{key}' has unknown key {k!r} (allowed: {', '.join(allowed)})")
        out[k] = _num(m, k, where, positive=positive)
        if positive is False and out[k] < 0:
            raise AuditInputError(where, f"'{key}.{k}' must not be negative")
    missing = [k for k in required if k not in out]
    if missing:
        raise AuditInputError(where, f"'{key}' is missing {', '.join(missing)}")
    return out


def device_from_json(doc: Any, where: Path | str = "<device>") -> Device:
    """Validate a parsed profile document and build the Device (raises AuditInputError)."""
    if not isinstance(doc, dict):
        raise AuditInputError(where, "device profile must be a JSON object")
    required = ("name", "mma_flops", "vector_flops", "hbm_bytes_per_s", "hbm_capacity_bytes",
                "efficiency", "static_us", "grid", "tiers")
    missing = [k for k in required if k not in doc]
    if missing:
        raise AuditInputError(where, f"device profile is missing {', '.join(missing)}")
    name = doc["name"]
    if not isinstance(name, str) or not name:
        raise AuditInputError(where, "'name' must be a non-empty string")
    mma = _num_map(doc, "mma_flops", where, DTYPES)
    vec = _num_map(doc, "vector_flops", where, DTYPES)
    eff = _num_map(doc, "efficiency", where, None, EFFICIENCY_KEYS)
    static = _num_map(doc, "static_us", where, None, STATIC_KEYS, positive=False)
    grid = doc["grid"]
    if (not isinstance(grid, list) or not grid
            or not all(isinstance(g, int) and not isinstance(g, bool) and g >= 1 for g in grid)):
        raise AuditInputError(where, f"'grid' must be a non-empty list of positive integers, got {grid!r}")
    tiers_doc = doc["tiers"]
    if not isinstance(tiers_doc, list) or len(tiers_doc) != len(grid):
        raise AuditInputError(where, f"'tiers' must be a list with one entry per grid dimension ({len(grid)})")
    tiers: list[tuple[float, float]] = []
    topos: list[str] = []
    names: list[str] = []
    for i, t in enumerate(tiers_doc):
        if not isinstance(t, dict):
            raise AuditInputError(where, f"tiers[{i}] must be an object")
        bw = _num(t, "bytes_per_s", f"{where}: tiers[{i}]")
        lat = _num(t, "latency_us", f"{where}: tiers[{i}]", positive=False)
        if lat < 0:
            raise AuditInputError(where, f"tiers[{i}].latency_us must not be negative")
        topo = str(t.get("topology", "SWITCH")).upper()
        if topo not in TOPOLOGIES:
            raise AuditInputError(where, f"tiers[{i}].topology {topo!r} unknown ({', '.join(TOPOLOGIES)})")
        tiers.append((bw, lat * 1e-6))
        topos.append(topo)
        names.append(str(t.get("name", f"tier {i}")))
    cap = doc["hbm_capacity_bytes"]
    if isinstance(cap, bool) or not isinstance(cap, (int, float)) or cap <= 0:
        raise AuditInputError(where, f"'hbm_capacity_bytes' must be a positive integer, got {cap!r}")
    usable = doc.get("hbm_usable_bytes", 0)
    if isinstance(usable, bool) or not isinstance(usable, (int, float)) or usable < 0 or usable > cap:
        raise AuditInputError(where, f"'hbm_usable_bytes' must be a number between 0 and hbm_capacity_bytes, "
                                     f"got {usable!r}")
    calib = doc.get("calibration", {})
    if not isinstance(calib, dict):
        raise AuditInputError(where, "'calibration' must be an object")
    sort_rate = _num(doc, "vector_sort_ops_per_s", where) if "vector_sort_ops_per_s" in doc else 0.0
    host = {"prefill": 0.0, "decode": 0.0}
    serving = _serving_block(doc, where)
    if "host_ms" in doc:
        host.update(_num_map(doc, "host_ms", where, HOST_KEYS, positive=False))
    elif serving:
        host = derived_host_ms(serving)
    return Device(
        name=name, label=str(doc.get("label", name)), mma_flops=mma, vector_flops=vec,
        hbm_bytes_per_s=_num(doc, "hbm_bytes_per_s", where), hbm_capacity_bytes=int(cap),
        efficiency=eff, static_us=static, tiers=tiers, grid=tuple(grid), calibration=calib,
        tier_topologies=tuple(topos), tier_names=tuple(names), source=str(doc.get("source", "")),
        hbm_usable_bytes=int(usable), vector_sort_ops_per_s=sort_rate, host_ms=host,
        serving=serving,
    )


#: the reference step of ``derived_host_ms``: GLM-5.1 at TP16 EP16 MTP3 launches 2,600 kernels and
#: collectives in an eager step and 120 in its eager drafter's passes (auditor.perf.host.launch_counts),
#: and a prefill chunk is 4,096 tokens
REF_EAGER_LAUNCHES, REF_DRAFT_LAUNCHES, REF_CHUNK_TOKENS = 2600, 120, 4096


def derived_host_ms(serving: dict) -> dict:
    """Per-step host constants of the device vector's host slots (``perf_core.host_time``): the serving
    block's host model at the reference step. No command adds them: ``perf``, ``sweep``, ``bench`` and
    ``plan`` zero those slots (``perf.device.kernel_vector``) and count their own program's launches
    (``auditor.perf.host``); the kernel's tests read them through ``device_vector``."""
    g = {"launch_us": 30.0, "prefill_token_us": 0.0, "decode_token_us": 0.0, "step_ms": 10.0, **serving}
    return {"prefill": g["step_ms"] + (REF_EAGER_LAUNCHES * g["launch_us"]
                                       + REF_CHUNK_TOKENS * g["prefill_token_us"]) * 1e-3,
            "decode": g["step_ms"] + REF_DRAFT_LAUNCHES * g["launch_us"] * 1e-3}


#: the serving block's numbers (``auditor.perf.host.HOST_KEYS``) and their largest values: times in us / ms,
#: and the share of step_ms that --async-scheduling hides
_SERVING_NUMBERS = {"launch_us": 1e6, "prefill_token_us": 1e6, "decode_token_us": 1e6, "step_ms": 1e6,
                    "draft_launch_us": 1e6, "cp_prefill_token_us": 1e6, "async_overlap": 1.0}


def _serving_block(doc: dict, where: Any) -> dict:
    """The optional ``serving`` object: non-negative numbers (ms / us) plus free-text provenance."""
    blk = doc.get("serving", {})
    if not isinstance(blk, dict):
        raise AuditInputError(where, "'serving' must be an object")
    out = {}
    for k, v in blk.items():
        if k in _SERVING_NUMBERS:
            top = _SERVING_NUMBERS[k]
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 <= v <= top:
                raise AuditInputError(where, f"'serving.{k}' must be a number from 0 to {top:g}, got {v!r}")
            out[k] = float(v)
        else:
            out[k] = v
    return out


def write_device(dev: Device, path: Path) -> None:
    """Write a profile JSON (the calibration output); re-loadable with ``load_device(path)``."""
    from ..outputs import write_output
    try:                            # a profile is read back by load_json, which refuses NaN and Infinity
        text = json.dumps(dev.to_json(), indent=2, allow_nan=False) + "\n"
    except ValueError:
        raise AuditInputError(path, "the device profile holds a non-finite number (from a measurement?); not "
                                    "written") from None
    write_output(path, text, "--output")


__all__ = ["Device", "DEFAULT_DEVICE", "SCHEMA", "device_names", "load_device", "device_from_json",
           "write_device"]
