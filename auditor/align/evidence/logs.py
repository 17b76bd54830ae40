"""Engine log reader (vLLM and vLLM-Ascend): the memory and KV figures the engine printed.

Formats (spec engine-vllm-ascend-runtime.md §3.5; numbers below are placeholders):

* weights, per worker: ``Loading model weights took 31.4655 GB`` (vLLM-Ascend V1 runner; the
  value is bytes / 2^30, so the "GB" is GiB), upstream ``Model loading took 11.55 GiB memory and
  1940.36 seconds`` and its older form ``Model loading took 19.5904 GB and 724.57 seconds`` (also
  bytes / 2^30). ``Loading weights took 5.59 seconds`` is a time and is not a weights figure.
* ``Available KV cache memory: 28.73 GiB`` (may be negative); the older Ascend form
  ``Available memory: 51114070016, total memory: 65452113920`` (bytes).
* ``GPU KV cache size: 15,872 tokens``; ``Maximum concurrency for 8,192 tokens per request: 101.55x``.
* the KV shortfall ``ValueError: To serve at least one request with the models's max seq len
  (131072), (13.58 GiB KV cache is needed, which is larger than the available KV cache memory
  (1.25 GiB). Based on the available memory, the estimated maximum model length is 12032.``
  (the engine's own typo and unbalanced parenthesis).
* ``NPU out of memory. Tried to allocate 450.00 MiB (NPU 3; 60.96 GiB total capacity; 60.30 GiB
  already allocated; ...)``, also after ``torch_npu.memory: [ERROR]`` and glued to "If reserved".
* the memory breakdown after warm-up (``Free memory on device (F/T GiB) on startup ... Actual
  usage: W GiB for weights, P GiB for peak activation, N GiB for non-torch memory, G GiB for NPU
  graph memory ... Current KV cache memory: K GiB``).
* the engine-config line ``Initializing a V1 LLM engine (v0.11.0) with config: model='...', ...``.
* ``npu-smi info`` process rows ``| 2       0        | 577786   | VLLMWorker_DP   | 59217   |``.

Lines nothing matches are counted, never an error.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

from ...errors import AuditInputError, read_input_bytes
from .workers import Worker, split_prefix

GiB = 1 << 30
MiB = 1 << 20
# what sizes in engine messages mean: torch and vLLM divide by 2^30 / 2^20 whatever they print
_SIZE_UNITS = {"b": 1, "kb": 1 << 10, "kib": 1 << 10, "mb": MiB, "mib": MiB, "gb": GiB, "gib": GiB,
               "tb": 1 << 40, "tib": 1 << 40}
_NUM = r"[-+]?\d[\d,]*(?:\.\d+)?"


def engine_size(value: str, unit: str) -> int:
    """Bytes of an engine-printed size ('31.4655', 'GB' -> 31.4655 * 2^30: engine GB are GiB)."""
    return int(round(float(value.replace(",", "")) * _SIZE_UNITS[unit.lower()]))


@dataclass(frozen=True)
class Where:
    file: str
    line: int

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"


@dataclass(frozen=True)
class WeightsLine:
    worker: Worker | None
    bytes: int
    text: str                       # the number and unit as printed
    form: str                       # ascend-v1 | upstream | upstream-old
    seconds: float | None
    where: Where


@dataclass(frozen=True)
class KvAvailable:
    worker: Worker | None
    bytes: int
    total_bytes: int | None         # only the old "Available memory: A, total memory: B" form
    form: str                       # kv-cache-memory | available-memory
    where: Where


@dataclass(frozen=True)
class KvTokens:
    worker: Worker | None
    tokens: int
    where: Where


@dataclass(frozen=True)
class Concurrency:
    worker: Worker | None
    tokens_per_request: int
    factor: float
    where: Where


@dataclass(frozen=True)
class KvShortfall:
    max_seq_len: int
    needed_bytes: int
    available_bytes: int
    estimated_max_len: int | None
    where: Where


@dataclass(frozen=True)
class NpuOom:
    worker: Worker | None
    tried_bytes: int
    device: int | None
    total_bytes: int | None
    allocated_bytes: int | None
    free_bytes: int | None
    reserved_bytes: int | None
    where: Where


@dataclass(frozen=True)
class MemoryBreakdown:
    worker: Worker | None
    free_bytes: int
    total_bytes: int
    utilization: float | None
    weights_bytes: int
    activation_bytes: int
    non_torch_bytes: int
    graph_bytes: int
    kv_bytes: int | None
    where: Where


@dataclass(frozen=True)
class EngineConfig:
    version: str | None
    fields: dict
    where: Where


@dataclass(frozen=True)
class NpuSmiProcess:
    npu: int
    chip: int
    pid: int
    name: str
    memory_bytes: int               # npu-smi prints MB (MiB)
    where: Where


@dataclass
class LogEvidence:
    files: list[str] = field(default_factory=list)
    weights: list[WeightsLine] = field(default_factory=list)
    kv_available: list[KvAvailable] = field(default_factory=list)
    kv_tokens: list[KvTokens] = field(default_factory=list)
    concurrency: list[Concurrency] = field(default_factory=list)
    shortfalls: list[KvShortfall] = field(default_factory=list)
    ooms: list[NpuOom] = field(default_factory=list)
    breakdowns: list[MemoryBreakdown] = field(default_factory=list)
    configs: list[EngineConfig] = field(default_factory=list)
    npu_smi: list[NpuSmiProcess] = field(default_factory=list)
    workers: dict[tuple, Worker] = field(default_factory=dict)
    lines: int = 0

    def extend(self, other: "LogEvidence") -> None:
        for name in ("files", "weights", "kv_available", "kv_tokens", "concurrency", "shortfalls", "ooms",
                     "breakdowns", "configs", "npu_smi"):
            getattr(self, name).extend(getattr(other, name))
        self.workers.update(other.workers)
        self.lines += other.lines

    def empty(self) -> bool:
        return not any((self.weights, self.kv_available, self.kv_tokens, self.concurrency, self.shortfalls,
                        self.ooms, self.breakdowns, self.configs, self.npu_smi))


# ------------------------------------------------------------------------------- patterns
_WEIGHTS_ASCEND = re.compile(rf"Loading model weights took ({_NUM})\s*(GiB|GB|MiB|MB)\b")
_WEIGHTS_UPSTREAM = re.compile(rf"Model loading took ({_NUM})\s*(GiB|GB|MiB|MB)(?: memory)? and ({_NUM}) ?s(?:econds)?")
_KV_AVAILABLE = re.compile(rf"Available KV cache memory:\s*({_NUM})\s*(GiB|GB|MiB|MB)\b")
_AVAILABLE_OLD = re.compile(rf"Available memory:\s*({_NUM}),\s*total memory:\s*({_NUM})")
_KV_TOKENS = re.compile(rf"GPU KV cache size:\s*({_NUM})\s*tokens")
_CONCURRENCY = re.compile(rf"Maximum concurrency for ({_NUM}) tokens per request:\s*({_NUM})x")
_SHORTFALL = re.compile(
    rf"To serve at least one request with the models?'s max seq len \(({_NUM})\),\s*\(?({_NUM})\s*(GiB|GB|MiB|MB) KV "
    rf"cache is needed, which is larger than the available KV cache memory \(({_NUM})\s*(GiB|GB|MiB|MB)\)\.?"
    rf"(?:\s*Based on the available memory, the estimated maximum model length is ({_NUM}))?")
_OOM = re.compile(rf"out of memory\.?\s*Tried to allocate ({_NUM})\s*([KMGT]?i?B)")
_OOM_FIELDS = {
    "device": re.compile(r"\((?:NPU|GPU) (\d+);"),
    "total": re.compile(rf"({_NUM})\s*([KMGT]?i?B) total capacity"),
    "allocated": re.compile(rf"({_NUM})\s*([KMGT]?i?B) already allocated"),
    "free": re.compile(rf"({_NUM})\s*([KMGT]?i?B) free"),
    "reserved": re.compile(rf"({_NUM})\s*([KMGT]?i?B) reserved in total"),
}
_BREAKDOWN = re.compile(
    rf"Free memory on device \(({_NUM})/({_NUM}) GiB\) on startup\..*?"
    rf"(?:Desired GPU memory utilization is \(({_NUM}),.*?)?"
    rf"Actual usage:\s*({_NUM}) GiB for weights,\s*({_NUM}) GiB for peak activation,\s*({_NUM}) GiB for "
    rf"non-torch memory,\s*({_NUM}) GiB for [A-Z]PU graph memory"
    rf"(?:.*?Current KV cache memory:\s*({_NUM}) GiB)?")
_CONFIG = re.compile(r"Initializing a V\d LLM engine \((?P<ver>[^)]*)\) with config:\s*(?P<body>.*)$")
_NPU_SMI = re.compile(r"^\|\s*(\d+)\s+(\d+)\s*\|\s*(\d+)\s*\|\s*(\S[^|]*?)\s*\|\s*(\d+)\s*\|\s*$")


def _num(text: str) -> float:
    return float(text.replace(",", ""))


def _int(text: str) -> int:
    return int(round(_num(text)))


def config_fields(body: str) -> dict[str, str]:
    """Top-level ``key=value`` pairs of vLLM's config line; commas inside (), [], {} or quotes
    do not split."""
    out: dict[str, str] = {}
    depth, quote, start = 0, "", 0
    parts = []
    for i, ch in enumerate(body):
        if quote:
            if ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth = max(depth - 1, 0)
        elif ch == "," and depth == 0:
            parts.append(body[start:i])
            start = i + 1
    parts.append(body[start:])
    for p in parts:
        k, sep, v = p.strip().partition("=")
        if sep and re.fullmatch(r"[A-Za-z_][\w.]*", k.strip()):
            out[k.strip()] = v.strip().strip("'\"")
    return out


def parse_log_text(text: str, name: str = "<log>") -> LogEvidence:
    """Every recognised line of one log; see the module docstring for the shapes."""
    ev = LogEvidence(files=[name])
    for n, raw in enumerate(text.splitlines(), 1):
        ev.lines += 1
        worker, line = split_prefix(raw.rstrip("\r"))
        if worker is not None:
            ev.workers.setdefault(worker.identity(), worker)
        where = Where(name, n)
        if "took" in line:
            m = _WEIGHTS_ASCEND.search(line)
            if m:
                ev.weights.append(WeightsLine(worker, engine_size(m.group(1), m.group(2)),
                                              f"{m.group(1)} {m.group(2)}", "ascend-v1", None, where))
                continue
            m = _WEIGHTS_UPSTREAM.search(line)
            if m:
                form = "upstream" if "memory" in line[m.start():m.end()] else "upstream-old"
                ev.weights.append(WeightsLine(worker, engine_size(m.group(1), m.group(2)),
                                              f"{m.group(1)} {m.group(2)}", form, _num(m.group(3)), where))
                continue
        if "Available" in line:
            m = _KV_AVAILABLE.search(line)
            if m:
                ev.kv_available.append(KvAvailable(worker, engine_size(m.group(1), m.group(2)), None,
                                                   "kv-cache-memory", where))
                continue
            m = _AVAILABLE_OLD.search(line)
            if m:
                ev.kv_available.append(KvAvailable(worker, _int(m.group(1)), _int(m.group(2)),
                                                   "available-memory", where))
                continue
        m = _KV_TOKENS.search(line)
        if m:
            ev.kv_tokens.append(KvTokens(worker, _int(m.group(1)), where))
            continue
        m = _CONCURRENCY.search(line)
        if m:
            ev.concurrency.append(Concurrency(worker, _int(m.group(1)), _num(m.group(2)), where))
            continue
        m = _SHORTFALL.search(line)
        if m:
            ev.shortfalls.append(KvShortfall(_int(m.group(1)), engine_size(m.group(2), m.group(3)),
                                             engine_size(m.group(4), m.group(5)),
                                             _int(m.group(6)) if m.group(6) else None, where))
            continue
        m = _OOM.search(line)
        if m:
            tail = line[m.end():]
            got = {}
            for k, rx in _OOM_FIELDS.items():
                f = rx.search(tail)
                got[k] = (int(f.group(1)) if k == "device" else engine_size(f.group(1), f.group(2))) if f else None
            ev.ooms.append(NpuOom(worker, engine_size(m.group(1), m.group(2)), got["device"], got["total"],
                                  got["allocated"], got["free"], got["reserved"], where))
            continue
        m = _BREAKDOWN.search(line)
        if m:
            g = m.groups()
            ev.breakdowns.append(MemoryBreakdown(
                worker, engine_size(g[0], "GiB"), engine_size(g[1], "GiB"), _num(g[2]) if g[2] else None,
                engine_size(g[3], "GiB"), engine_size(g[4], "GiB"), engine_size(g[5], "GiB"),
                engine_size(g[6], "GiB"), engine_size(g[7], "GiB") if g[7] else None, where))
            continue
        m = _CONFIG.search(line)
        if m:
            ev.configs.append(EngineConfig(m.group("ver").strip() or None, config_fields(m.group("body")), where))
            continue
        m = _NPU_SMI.match(line.strip())
        if m:
            ev.npu_smi.append(NpuSmiProcess(int(m.group(1)), int(m.group(2)), int(m.group(3)), m.group(4),
                                            int(m.group(5)) * MiB, where))
    return ev


def read_logs(paths: list[str | Path]) -> LogEvidence:
    """All recognised lines of several log files; a file that cannot be read is an input error."""
    ev = LogEvidence()
    for p in paths:
        data = read_input_bytes(p, "log")
        ev.extend(parse_log_text(data.decode("utf-8", errors="replace"), str(p)))
    if paths and ev.empty():
        raise AuditInputError(paths[0] if len(paths) == 1 else "--log",
                              "no engine memory lines found (expected e.g. 'Loading model weights took X GB')")
    return ev
