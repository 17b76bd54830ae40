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

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from ...errors import AuditInputError
from ...inputs import LOG_CAP, iter_lines, parse_number
from ...limits import FLOAT_OPTION_CAPS, OPTION_CAPS
from .workers import Worker, split_prefix
from ...units import GiB, MiB

# what sizes in engine messages mean: torch and vLLM divide by 2^30 / 2^20 whatever they print
_SIZE_UNITS = {"b": 1, "kb": 1 << 10, "kib": 1 << 10, "mb": MiB, "mib": MiB, "gb": GiB, "gib": GiB,
               "tb": 1 << 40, "tib": 1 << 40}
# bounded quantifiers and re.ASCII everywhere: a line of thousands of digits or spaces is scanned in
# linear time, and full-width digits are not digits
_NUM = r"[-+]?(?:\d{1,3}(?:,\d{3}){1,6}|\d{1,20})(?:\.\d{1,12})?"


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


@dataclass(frozen=True)
class NonDefaultArgs:
    """``non-default args: {...}`` (V18 vllm/entrypoints/utils.py:206-233): the flags the user changed,
    values as Python literals where they are ones (int, float, bool, None, str), else their repr text."""
    args: dict
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
    non_default: list[NonDefaultArgs] = field(default_factory=list)
    mlapo_disabled: list[Where] = field(default_factory=list)
    #: causes the text itself names that audit does not model (a CANN / driver / firmware regression)
    outside: list[tuple[str, Where]] = field(default_factory=list)
    workers: dict[tuple, Worker] = field(default_factory=dict)
    lines: int = 0

    def extend(self, other: "LogEvidence") -> None:
        for name in ("files", "weights", "kv_available", "kv_tokens", "concurrency", "shortfalls", "ooms",
                     "breakdowns", "configs", "npu_smi", "non_default", "mlapo_disabled", "outside"):
            getattr(self, name).extend(getattr(other, name))
        self.workers.update(other.workers)
        self.lines += other.lines

    def empty(self) -> bool:
        return not any((self.weights, self.kv_available, self.kv_tokens, self.concurrency, self.shortfalls,
                        self.ooms, self.breakdowns, self.configs, self.npu_smi, self.non_default))


# ------------------------------------------------------------------------------- patterns
_A = re.ASCII
_SP = r"[ \t]{0,8}"
_KV_AVAILABLE = re.compile(rf"Available KV cache memory:{_SP}({_NUM}){_SP}(GiB|GB|MiB|MB)\b", _A)
_AVAILABLE_OLD = re.compile(rf"Available memory:{_SP}({_NUM}),{_SP}total memory:{_SP}({_NUM})", _A)
_KV_TOKENS = re.compile(rf"GPU KV cache size:{_SP}({_NUM}){_SP}tokens", _A)
_CONCURRENCY = re.compile(rf"Maximum concurrency for ({_NUM}) tokens per request:{_SP}({_NUM})x", _A)
_SHORTFALL = re.compile(
    rf"To serve at least one request with the models?'s max seq len \(({_NUM})\),{_SP}\(?({_NUM}){_SP}(GiB|GB|MiB|MB) KV "
    rf"cache is needed, which is larger than the available KV cache memory \(({_NUM}){_SP}(GiB|GB|MiB|MB)\)\.?"
    rf"(?:{_SP}Based on the available memory, the estimated maximum model length is ({_NUM}))?", _A)
_SHORTFALL_START = "To serve at least one"
_OOM = re.compile(rf"out of memory\.?{_SP}Tried to allocate ({_NUM}){_SP}([KMGT]?i?B)", _A)
_OOM_FIELDS = {
    "device": re.compile(r"\((?:NPU|GPU) (\d{1,5});", _A),
    "total": re.compile(rf"({_NUM}){_SP}([KMGT]?i?B) total capacity", _A),
    "allocated": re.compile(rf"({_NUM}){_SP}([KMGT]?i?B) already allocated", _A),
    "free": re.compile(rf"({_NUM}){_SP}([KMGT]?i?B) free", _A),
    "reserved": re.compile(rf"({_NUM}){_SP}([KMGT]?i?B) reserved in total", _A),
}
_SIZE_FIELD = re.compile(rf"({_NUM}) GiB", _A)
_CONFIG_MARK = " LLM engine ("
_NON_DEFAULT_MARK = "non-default args: "

MAX_BYTES = 1 << 44                 # 16 TiB: any size one device reports
MAX_TOKENS = 1 << 40


def _num(text: str) -> float:
    return float(text.replace(",", ""))


def _int(text: str) -> int:
    return int(round(_num(text)))


class _Checker:
    """Range checks of one file's numbers: an implausible figure is one error naming file and line."""

    def __init__(self, name: str):
        self.name = name

    def size(self, value: str, unit: str, line: int, what: str, negative: bool = False) -> int:
        v = parse_number(value, self.name, f"line {line}: {what}", lo=-MAX_BYTES if negative else 0,
                         hi=MAX_BYTES, commas=True)
        b = v * _SIZE_UNITS[unit.lower()]
        if not -MAX_BYTES <= b <= MAX_BYTES:
            raise AuditInputError(self.name, f"line {line}: {what}: {value} {unit} is outside the plausible range")
        return int(round(b))

    def count(self, value: str, line: int, what: str, hi: float = MAX_TOKENS) -> int:
        return int(parse_number(value, self.name, f"line {line}: {what}", lo=0, hi=hi, integer=True, commas=True))

    def real(self, value: str, line: int, what: str, hi: float) -> float:
        return parse_number(value, self.name, f"line {line}: {what}", lo=0, hi=hi, commas=True)


#: the numbers audit takes from the engine-config line and the ``non-default args`` line, with the caps of
#: the options they stand for (``auditor.limits``): a value outside is refused with the file, line and value
#: (a log claiming TP 0 or max_model_len 10^30 is not evidence of anything audit can compare)
CONFIG_INT_KEYS = {
    "tensor_parallel_size": OPTION_CAPS["--tp"], "data_parallel_size": OPTION_CAPS["--dp"],
    "pipeline_parallel_size": OPTION_CAPS["--pp"], "decode_context_parallel_size": OPTION_CAPS["--dcp"],
    "max_model_len": OPTION_CAPS["--max-model-len"], "max_seq_len": OPTION_CAPS["--max-model-len"],
    "max_num_seqs": OPTION_CAPS["--max-num-seqs"], "max_num_batched_tokens": OPTION_CAPS["--max-num-batched-tokens"],
}
#: real-valued keys: finite, lo < value <= hi
CONFIG_FLOAT_KEYS = {"gpu_memory_utilization": FLOAT_OPTION_CAPS["--gpu-memory-utilization"]}
#: the speculative token count inside ``speculative_config`` (a repr, not a literal): every occurrence
SPEC_TOKENS = re.compile(r"num_spec(?:ulative)?_tokens['\"]?[ \t]{0,4}[:=][ \t]{0,4}([^\s,)}\]'\"]{0,41})", re.ASCII)
SPEC_TOKENS_CAP = OPTION_CAPS["--mtp"]


def checked_config(values: dict, where: str, what: str) -> dict:
    """``values`` (one config line's fields, or a ``non-default args`` dict) with every number audit reads
    from it range-checked: a whole number within its option's cap (TP, DP, PP, DCP, max_model_len /
    max_seq_len, max_num_seqs, max_num_batched_tokens), a utilization in (0, 1], a speculative token
    count in 0..16; anything else (negative, zero TP, 10^30, nan, inf, True, text) is one AuditInputError
    naming ``where`` (the file; ``what`` names the line), the key and the value. Absent values (None, "None", "") stay absent.
    Checked values come back normalized (an int, a float; the config line's strings as their digits), so
    a reader downstream sees only what was checked."""
    out = dict(values)
    for key, v in values.items():
        if key not in CONFIG_INT_KEYS and key not in CONFIG_FLOAT_KEYS and key != "speculative_config":
            continue
        if v is None or (isinstance(v, str) and v.strip().strip("'\"").strip() in ("", "None")):
            if v not in ("", "None"):   # absent however quoted ("'", "'None'"): readers see None
                out[key] = None
            continue
        if key == "speculative_config":
            for m in SPEC_TOKENS.finditer(str(v)[:4096]):
                parse_number(m.group(1), where, f"{what} speculative_config num_speculative_tokens",
                             lo=SPEC_TOKENS_CAP.lo, hi=SPEC_TOKENS_CAP.hi, integer=True)
            continue
        text = v.strip().strip("'\"") if isinstance(v, str) else repr(v) if not isinstance(v, bool) else str(v)
        if key in CONFIG_INT_KEYS:
            cap = CONFIG_INT_KEYS[key]
            n = int(parse_number(text, where, f"{what} {key}", lo=cap.lo, hi=cap.hi, integer=True))
            out[key] = str(n) if isinstance(v, str) else n
        else:
            lo, hi = CONFIG_FLOAT_KEYS[key]
            x = parse_number(text, where, f"{what} {key}", lo=-math.inf, hi=math.inf)
            if not lo < x <= hi:
                raise AuditInputError(where, f"{what} {key}: {text} is outside the plausible range ({lo:g}, {hi:g}]")
            out[key] = repr(x) if isinstance(v, str) else x
    return out


def config_fields(body: str) -> dict[str, str]:
    """Top-level ``key=value`` pairs of vLLM's config line; commas inside (), [], {} or quotes
    do not split. One linear pass."""
    out: dict[str, str] = {}
    for p in _split_top(body, ","):
        k, sep, v = p.strip().partition("=")
        k = k.strip()
        if sep and k and k.isascii() and k.replace("_", "a").replace(".", "a").isalnum() and not k[0].isdigit():
            out[k] = v.strip().strip("'\"")
    return out


def _split_top(body: str, sep: str) -> list[str]:
    """``body`` split at ``sep`` outside brackets and quotes (linear; a backslash escapes in quotes)."""
    depth, quote, start, esc = 0, "", 0, False
    parts = []
    for i, ch in enumerate(body):
        if quote:
            if esc:
                esc = False
            elif ch == "\\":
                esc = True
            elif ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch in "([{<":
            depth += 1
        elif ch in ")]}>":
            depth = max(depth - 1, 0)
        elif ch == sep and depth == 0:
            parts.append(body[start:i])
            start = i + 1
    parts.append(body[start:])
    return parts


def _literal(text: str):
    """A Python repr value as what it is when it is a simple literal (int, float, bool, None, quoted
    string without escapes), else the text itself. Never evaluates anything."""
    t = text.strip()
    if t in ("True", "False"):
        return t == "True"
    if t == "None":
        return None
    if len(t) >= 2 and t[0] == t[-1] and t[0] in "'\"" and "\\" not in t:
        return t[1:-1]
    if t.isascii() and 0 < len(t) <= 20:
        body = t[1:] if t[0] in "+-" else t
        if body.isdigit():
            return int(t)
        a, dot, b = body.partition(".")
        if dot and (a.isdigit() or not a) and (b.isdigit()) and len(b) <= 12:
            return float(t)
    return t


def non_default_args(text: str) -> dict | None:
    """The dict of a ``non-default args: {...}`` line (top-level keys only, values via ``_literal``), or
    None when the text is not a dict literal."""
    t = text.strip()
    if not (t.startswith("{") and t.endswith("}")):
        return None
    out = {}
    for item in _split_top(t[1:-1], ","):
        if not item.strip():
            continue
        k, sep, v = _key_split(item) if item.strip()[0] in "'\"" else item.partition(":")
        key = _literal(k)
        if sep and isinstance(key, str) and key:
            out[key] = _literal(v)
    return out


def _key_split(item: str) -> tuple[str, str, str]:
    s = item.strip()
    q = s[0]
    end = s.find(q, 1)
    if end < 0:
        return s, "", ""
    rest = s[end + 1:].lstrip()
    if not rest.startswith(":"):
        return s, "", ""
    return s[:end + 1], ":", rest[1:]


def parse_breakdown(line: str) -> dict | None:
    """The engine's memory breakdown line, read by the engine family that prints it
    (``Engine.parse_breakdown``; vLLM-Ascend's forms are in its ``loglines.py``), as printed number
    texts keyed free / total / util / weights / activation / non_torch / graph / kv, so the reader's
    checker range-checks them; None when no registered family knows the line."""
    from ...engines.registry import families
    for cls in families().values():
        got = cls.parse_breakdown(line)
        if got is not None:
            keys = {"free": "free_gib", "total": "total_gib", "util": "util", "weights": "weights_gib",
                    "activation": "activation_gib", "non_torch": "non_torch_gib", "graph": "graph_gib",
                    "kv": "kv_cache_gib"}
            return {k: (None if got.get(src) is None else repr(float(got[src]))) for k, src in keys.items()}
    return None


def _npu_smi(line: str) -> tuple | None:
    """``| 2       0        | 577786   | VLLMWorker_DP   | 59217   |`` split on "|" (linear)."""
    s = line.strip()
    if not (s.startswith("|") and s.endswith("|")) or s.count("|") != 5:
        return None
    cells = [c.strip() for c in s[1:-1].split("|")]
    ids = cells[0].split()
    if len(ids) != 2 or not all(x.isascii() and x.isdigit() and len(x) <= 6 for x in ids):
        return None
    pid, name, mem = cells[1], cells[2], cells[3]
    if not (pid.isascii() and pid.isdigit() and len(pid) <= 10 and mem.isascii() and mem.isdigit()
            and len(mem) <= 9 and name):
        return None
    return int(ids[0]), int(ids[1]), int(pid), name, int(mem)


def _weights_patterns() -> tuple:
    """The weights lines of every registered engine family (its ``loglines``), first match wins."""
    from ...engines.registry import families
    return tuple(p for cls in families().values() for p in cls.weights_patterns())


def parse_log_text(text: str, name: str = "<log>") -> LogEvidence:
    """Every recognised line of one log (lines end at "\\n" only); see the module docstring."""
    parts = text.split("\n")
    if parts and parts[-1] == "":
        parts.pop()
    return parse_log_lines(enumerate(parts, 1), name)


def parse_log_lines(lines: Iterable[tuple[int, str]], name: str = "<log>") -> LogEvidence:
    ev = LogEvidence(files=[name])
    chk = _Checker(name)
    pending: list | None = None       # a KV-shortfall error wrapped over several lines
    for n, raw in lines:
        ev.lines += 1
        worker, line = split_prefix(raw.rstrip("\r"))
        if worker is not None:
            ev.workers.setdefault(worker.identity(), worker)
        if pending is not None:
            pending[2] += " " + line.strip()
            pending[3] += 1
            m = _SHORTFALL.search(pending[2])
            done = m is not None and (m.group(6) or "Try increasing" in pending[2])
            if done or pending[3] >= 8:
                if m is not None:
                    _shortfall(ev, chk, m, Where(name, pending[0]), pending[0])
                pending = None
            continue
        _line(ev, chk, worker, line, n, name)
        if _SHORTFALL_START in line and (not ev.shortfalls or ev.shortfalls[-1].where.line != n):
            pending = [n, worker, line[line.find(_SHORTFALL_START):], 0]
    return ev


def _shortfall(ev: LogEvidence, chk: _Checker, m, where: Where, n: int) -> None:
    ev.shortfalls.append(KvShortfall(chk.count(m.group(1), n, "max seq len"),
                                     chk.size(m.group(2), m.group(3), n, "KV needed"),
                                     chk.size(m.group(4), m.group(5), n, "KV available", negative=True),
                                     chk.count(m.group(6), n, "estimated max len") if m.group(6) else None, where))


#: a cause outside audit's model, as a thread or log names it: the CANN toolkit, the NPU driver or firmware,
#: torch_npu, with a regression / upgrade word within the same line (bounded, ASCII)
_OUTSIDE = re.compile(r"\b(CANN|driver|firmware|torch_npu|HDK)\b[^\n]{0,120}?\b(regress\w{0,6}|upgrad\w{0,4}|"
                      r"downgrad\w{0,4})|\b(regress\w{0,6})\b[^\n]{0,120}?\b(CANN|driver|firmware|torch_npu|HDK)\b",
                      _A | re.IGNORECASE)


def _line(ev: LogEvidence, chk: _Checker, worker, line: str, n: int, name: str) -> None:
    where = Where(name, n)
    m = _OUTSIDE.search(line) if len(line) < 4096 else None
    if m:
        ev.outside.append((line[max(0, m.start() - 40):m.end() + 40].strip()[:200], where))
    for pattern, form, marker in _weights_patterns():
        if marker not in line:
            continue
        m = pattern.search(line)
        if m:
            if form == "upstream" and "memory" not in line[m.start():m.end()]:
                form = "upstream-old"
            seconds = (chk.real(m.group(3), n, "load seconds", 1e9)
                       if pattern.groups >= 3 and m.group(3) is not None else None)
            ev.weights.append(WeightsLine(worker, chk.size(m.group(1), m.group(2), n, "weights"),
                                          f"{m.group(1)} {m.group(2)}", form, seconds, where))
            return
    if "Available" in line:
        m = _KV_AVAILABLE.search(line)
        if m:
            ev.kv_available.append(KvAvailable(worker, chk.size(m.group(1), m.group(2), n, "available KV",
                                                                 negative=True), None, "kv-cache-memory", where))
            return
        m = _AVAILABLE_OLD.search(line)
        if m:
            ev.kv_available.append(KvAvailable(worker, chk.size(m.group(1), "b", n, "available memory", negative=True),
                                               chk.size(m.group(2), "b", n, "total memory"), "available-memory", where))
            return
    if "KV cache size" in line:
        m = _KV_TOKENS.search(line)
        if m:
            ev.kv_tokens.append(KvTokens(worker, chk.count(m.group(1), n, "KV tokens"), where))
            return
    if "Maximum concurrency" in line:
        m = _CONCURRENCY.search(line)
        if m:
            ev.concurrency.append(Concurrency(worker, chk.count(m.group(1), n, "tokens per request"),
                                              chk.real(m.group(2), n, "concurrency", 1e12), where))
            return
    if _SHORTFALL_START in line:
        m = _SHORTFALL.search(line)
        if m and (m.group(6) or "Try increasing" in line or "estimated maximum" not in line):
            _shortfall(ev, chk, m, where, n)
            return
    if "out of memory" in line:
        m = _OOM.search(line)
        if m:
            tail = line[m.end():]
            got = {}
            for k, rx in _OOM_FIELDS.items():
                f = rx.search(tail)
                if f is None:
                    got[k] = None
                elif k == "device":
                    got[k] = int(f.group(1))
                else:
                    got[k] = chk.size(f.group(1), f.group(2), n, f"OOM {k}")
            ev.ooms.append(NpuOom(worker, chk.size(m.group(1), m.group(2), n, "OOM allocation"), got["device"],
                                  got["total"], got["allocated"], got["free"], got["reserved"], where))
            return
    if "Actual usage:" in line or "Memory profiling takes" in line:
        b = parse_breakdown(line)
        if b is not None:
            def gib(key):
                v = b.get(key)
                return chk.size(v, "GiB", n, f"breakdown {key}") if v else None
            util = chk.real(b["util"], n, "gpu memory utilization", 1.0) if b.get("util") else None
            ev.breakdowns.append(MemoryBreakdown(worker, gib("free") or 0, gib("total") or 0, util, gib("weights"),
                                                 gib("activation"), gib("non_torch"), gib("graph"), gib("kv"), where))
            return
    if _CONFIG_MARK in line and "with config:" in line:
        i = line.find("Initializing a V")
        if i >= 0:
            ver = line[line.find("(", i) + 1:].partition(")")[0].strip()[:40]
            body = line.partition("with config:")[2]
            ev.configs.append(EngineConfig(ver or None, checked_config(config_fields(body), name,
                                                                       f"line {n}: engine config"), where))
            return
    if _NON_DEFAULT_MARK in line:
        args = non_default_args(line.partition(_NON_DEFAULT_MARK)[2])
        if args is not None:
            ev.non_default.append(NonDefaultArgs(checked_config(args, name, f"line {n}: non-default args"), where))
            return
    low = line.lower() if "lapo" in line.lower() else ""
    if "mlapo" in low and "disabl" in low:
        ev.mlapo_disabled.append(where)
        return
    if line.lstrip().startswith("|"):
        r = _npu_smi(line)
        if r is not None:
            ev.npu_smi.append(NpuSmiProcess(r[0], r[1], r[2], r[3], r[4] * MiB, where))


def read_logs(paths: list[str | Path]) -> LogEvidence:
    """All recognised lines of several log files (each read line by line through the one capped
    opener); a file that cannot be read, a bad byte or an implausible number is an input error."""
    ev = LogEvidence()
    for p in paths:
        ev.extend(parse_log_lines(iter_lines(p, "log", LOG_CAP), str(p)))
    if paths and ev.empty():
        raise AuditInputError(paths[0] if len(paths) == 1 else "--log",
                              "no engine memory lines found (expected e.g. 'Loading model weights took X GB')")
    return ev
