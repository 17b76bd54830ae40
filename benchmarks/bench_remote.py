"""Remote checkpoints: `audit memory hf://org/name` (and ms://) against a local stand-in of the hub
holding a full-size synthesized GLM-5.1 W8A8 (181 `quant_model_weights-*` shards, sparse data).

    python benchmarks/bench_remote.py                 # synthesize into a temp dir, serve, time
    python benchmarks/bench_remote.py --repeats 5

What it prints, and checks (exit status 1 when a target is missed or a check fails):
* cold (empty cache) and cached seconds of a fresh `audit memory` process, best of --repeats, for
  hf:// and ms://, beside the local directory; targets <= 5 s cold, <= 1.5 s cached;
* that the ledger and HBM budget equal the local directory's (the JSON report, less the lines
  naming the source);
* requests per shard (from the server's log), the bytes the first range asked for past each
  header's end (the estimate's margin: asked for, not read), and that no shard was read past its
  header: each mirrored shard holds bytes [0, 8+N) and only holes after;
* that a cached run makes no request at all.

The stand-in (tests/test_remote_standin.py) runs in its own process, as a real server would: in
the same process its threads would compete with the client for the GIL.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))

from fresh import CPU_SECONDS, compile_package, timed  # noqa: E402

ARGS = ["--tp", "16", "--dp", "2", "--ep", "32", "--sp", "--format", "json"]
REPO = "zai-org/GLM-5.1-w8a8"
COLD_TARGET, CACHED_TARGET = 5.0, 1.5


def serve(root: str) -> None:
    """Server process: print the URL, then answer 'log PATH' / 'clear' lines on stdin until EOF."""
    from dataclasses import asdict

    from test_remote_standin import Repo, StandIn

    hub = StandIn({REPO: Repo(Path(root))})
    print(hub.url, flush=True)
    for line in sys.stdin:
        cmd, _, arg = line.strip().partition(" ")
        if cmd == "log":
            Path(arg).write_text(json.dumps([asdict(e) for e in hub.log]))
        elif cmd == "clear":
            hub.clear()
        print("ok", flush=True)
    hub.close()


class Server:
    def __init__(self, root: Path):
        self.proc = subprocess.Popen([sys.executable, __file__, "--serve", str(root)], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)
        self.url = self.proc.stdout.readline().strip()

    def _ask(self, line: str) -> None:
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        assert self.proc.stdout.readline().strip() == "ok"

    def log(self, tmp: Path) -> list[dict]:
        path = tmp / "log.json"
        self._ask(f"log {path}")
        return json.loads(path.read_text())

    def clear(self) -> None:
        self._ask("clear")

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait(timeout=30)


def report(argv: list[str]) -> dict:
    out = subprocess.run([sys.executable, "-m", "auditor", *argv], check=True, capture_output=True, text=True)
    return json.loads(out.stdout)


def comparable(rep: dict) -> dict:
    rep = json.loads(json.dumps(rep))
    rep["model"].pop("name"), rep["model"].pop("path")
    src = ("Hugging Face Hub", "ModelScope")
    rep["findings"] = [f for f in rep["findings"] if not (f["tensor"] is None and f["message"].startswith(src))]
    rep["finding_groups"] = [g for g in rep["finding_groups"] if not g["message"].startswith(src)]
    return rep


def header_end(path: Path) -> int:
    with open(path, "rb") as fh:
        return 8 + int.from_bytes(fh.read(8), "little")


def check_mirror(cache: Path, root: Path) -> tuple[int, int]:
    """(shards checked, shards with anything past the header) in the mirrored snapshot."""
    (files,) = list(cache.glob("remote/*/*/*/*/snapshots/*/files"))
    bad = 0
    shards = sorted(p.relative_to(root).as_posix() for p in root.rglob("*.safetensors"))
    for rel in shards:
        end = header_end(root / rel)
        mirrored = files / rel
        with open(mirrored, "rb") as fh:
            head = fh.read(end)
            after = fh.read(1 << 20)
        with open(root / rel, "rb") as fh:
            same = fh.read(end) == head
        allocated = os.stat(mirrored).st_blocks * 512
        if not same or any(after) or allocated > end + (1 << 16) or mirrored.stat().st_size != (root / rel).stat().st_size:
            bad += 1
    return len(shards), bad


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--serve", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.serve:
        serve(args.serve)
        return 0
    compile_package()
    tmp = Path(tempfile.mkdtemp(prefix="bench-remote-"))
    root = tmp / "glm"
    subprocess.run([sys.executable, "-m", "auditor", "synth", str(root), "--shard-size", "4GiB"], check=True,
                   capture_output=True)
    n_shards = len(list(root.rglob("quant_model_weights-*.safetensors")))
    server = Server(root)
    failures: list[str] = []
    rows = []
    try:
        local = report(["memory", str(root), *ARGS])
        t_local = min(timed(["memory", str(root), *ARGS]) for _ in range(args.repeats))
        rows.append(("local directory", f"{t_local:.2f}", "-", f"CPU {min(CPU_SECONDS[-args.repeats:]):.2f} s"))
        for hub, var in (("hf", "HF_ENDPOINT"), ("ms", "MODELSCOPE_ENDPOINT")):
            os.environ[var] = server.url
            model = f"{hub}://{REPO}"
            colds, cacheds, cold_cpu, cached_cpu = [], [], [], []
            for rep in range(args.repeats):
                cache = tmp / f"cache-{hub}-{rep}"
                os.environ["AUDIT_CACHE"] = str(cache)
                server.clear()
                colds.append(timed(["memory", model, *ARGS]))
                cold_cpu.append(CPU_SECONDS[-1])
                log = server.log(tmp)
                server.clear()
                cacheds.append(timed(["memory", model, *ARGS]))
                cached_cpu.append(CPU_SECONDS[-1])
                if server.log(tmp):
                    failures.append(f"{hub}: the cached run made requests")
            rem = report(["memory", model, *ARGS])          # (from the cache)
            if comparable(rem) != comparable(local):
                failures.append(f"{hub}: the report differs from the local directory's")
            reads = [e for e in log if e["file"] is not None and e["method"] == "GET"]
            shard_reads = [e for e in reads if e["file"].endswith(".safetensors")]
            per_shard: dict[str, int] = {}
            for e in shard_reads:
                per_shard[e["file"]] = per_shard.get(e["file"], 0) + 1
            api = len(log) - len(reads)
            asked_past = 0
            header_bytes = 0
            for e in shard_reads:
                end = header_end(root / e["file"])
                last = int(e["range"].split("-")[1])
                asked_past += max(0, last + 1 - end)
                header_bytes += end if e["range"].startswith("bytes=0-") else 0
            checked, past = check_mirror(cache, root)
            if past:
                failures.append(f"{hub}: {past} mirrored shards hold bytes past their header")
            cold, cached = min(colds), min(cacheds)
            for what, got, target in (("cold", cold, COLD_TARGET), ("cached", cached, CACHED_TARGET)):
                if got > target:
                    failures.append(f"{hub} {what}: {got:.2f} s > {target} s")
            rows.append((f"{model} cold", f"{cold:.2f}", f"<= {COLD_TARGET}",
                         f"CPU {min(cold_cpu):.2f} s; {len(log)} requests: {api} API, {len(reads) - len(shard_reads)} whole files, "
                         f"{len(shard_reads)} ranges for {len(per_shard)} shards "
                         f"({max(per_shard.values())} per shard at most); headers {header_bytes / 2**20:.1f} MiB, "
                         f"first ranges asked {asked_past / 2**20:.2f} MiB past header ends (not read); "
                         f"{checked} mirrored shards hold their header only: {'yes' if not past else 'NO'}"))
            rows.append((f"{model} cached", f"{cached:.2f}", f"<= {CACHED_TARGET}",
                         f"CPU {min(cached_cpu):.2f} s; 0 requests"))
    finally:
        server.close()
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"GLM-5.1 W8A8 synthesized: {n_shards} quant_model_weights shards; best of {args.repeats} fresh processes")
    width = max(len(r[0]) for r in rows)
    for name, secs, target, note in rows:
        print(f"{name:<{width}}  {secs:>6} s  {target:>8}  {note}")
    for f in failures:
        print("FAIL:", f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
