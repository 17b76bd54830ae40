"""Who printed a log line: the process prefix vLLM / vLLM-Ascend put in front of it.

Shapes seen in public logs (numbers are placeholders)::

    (Worker_DP0_TP3_EP3 pid=123)      (Worker_TP0 pid=1)      (Worker_PP1_TP3 pid=1)
    (EngineCore_DP0 pid=1)            (EngineCore pid=1)      (APIServer pid=1)
    (VllmWorker rank=7 pid=1)         (VllmWorkerProcess pid=1)
    (NPURayWorkerWrapper pid=1, ip=10.0.0.2)

optionally after a container prefix such as ``vllm-1  | `` (docker compose). The rank tags
(DP, TP, EP, PP, DCP, PCP) become numbers; anything else is kept as the process name.
"""
from __future__ import annotations

import re
from dataclasses import dataclass

_PREFIX = re.compile(
    r"^(?:(?P<container>[A-Za-z0-9][\w.-]*)\s+\|\s?)?"          # docker compose: "vllm-1  | "
    r"\((?P<proc>[A-Za-z][A-Za-z0-9]*)(?P<tags>(?:_[A-Za-z]+\d+)*)"  # Worker_DP0_TP3_EP3
    r"(?:\s+rank=(?P<rank>\d+))?"                                  # VllmWorker rank=7
    r"\s+pid=(?P<pid>\d+)(?:,\s*ip=(?P<ip>[^)]*))?\)\s?")
_CONTAINER = re.compile(r"^[A-Za-z0-9][\w.-]*\s+\|\s?")
_TAG = re.compile(r"_([A-Za-z]+)(\d+)")
RANK_TAGS = ("dp", "tp", "ep", "pp", "dcp", "pcp")


@dataclass(frozen=True)
class Worker:
    """The process a line came from, with whatever ranks its prefix names (None = not named)."""

    process: str
    dp: int | None = None
    tp: int | None = None
    ep: int | None = None
    pp: int | None = None
    dcp: int | None = None
    pcp: int | None = None
    rank: int | None = None          # "rank=N" of VllmWorker (rank inside one DP engine)
    pid: int | None = None
    ip: str | None = None
    container: str | None = None

    @property
    def is_worker(self) -> bool:
        """A model-holding process (not the API server or the engine-core front end)."""
        return not self.process.startswith(("EngineCore", "APIServer"))

    def label(self) -> str:
        tags = "".join(f"_{t.upper()}{getattr(self, t)}" for t in RANK_TAGS if getattr(self, t) is not None)
        rank = f" rank={self.rank}" if self.rank is not None else ""
        where = f"{self.container}: " if self.container else ""
        return f"{where}{self.process}{tags}{rank} pid={self.pid}"

    def identity(self) -> tuple:
        """What tells two workers apart across lines (the pid and container, else the tags)."""
        return (self.container, self.ip, self.pid, self.process,
                *(getattr(self, t) for t in RANK_TAGS), self.rank)


def split_prefix(line: str) -> tuple[Worker | None, str]:
    """(worker, rest of the line); (None, line) when the line has no process prefix."""
    m = _PREFIX.match(line)
    if m is None:
        c = _CONTAINER.match(line)
        return None, line[c.end():] if c else line
    tags = {t.lower(): int(n) for t, n in _TAG.findall(m.group("tags") or "")}
    known = {k: v for k, v in tags.items() if k in RANK_TAGS}
    w = Worker(process=m.group("proc"), rank=int(m.group("rank")) if m.group("rank") else None,
               pid=int(m.group("pid")), ip=(m.group("ip") or None), container=m.group("container"), **known)
    return w, line[m.end():]
