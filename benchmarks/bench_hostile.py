"""Time and memory of `audit memory` on hostile inputs, one per input kind, against the bounds
the README documents (issue 8, class 11). Each case is a fresh process; peak RSS is the child's
own (wait4). Also runs the header property test with many examples (--fuzz N).

    python benchmarks/bench_hostile.py [--only NAME] [--fuzz 5000]

Inputs are built in a temporary directory (~0.5 GB of real bytes for the 100 MB headers, the rest
sparse) and removed afterwards.
"""
from __future__ import annotations

import argparse
import json
import os
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CONFIG = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 128,
          "intermediate_size": 128, "torch_dtype": "bfloat16", "max_position_embeddings": 4096}
HEADER_CAP = 100_000_000


def _dir(root: Path, name: str) -> Path:
    d = root / name
    d.mkdir()
    (d / "config.json").write_text(json.dumps(CONFIG))
    return d


def _shard(path: Path, raw: bytes, data_len: int) -> None:
    with open(path, "wb") as fh:
        fh.write(struct.pack("<Q", len(raw)) + raw)
        fh.truncate(8 + len(raw) + data_len)


def _one_tensor(name: str = "a.weight") -> bytes:
    return b'{"' + name.encode() + b'":{"dtype":"F32","shape":[4],"data_offsets":[0,16]}}'


def _many(fmt: str, limit: int = HEADER_CAP - 1_000_000) -> tuple[bytes, int]:
    parts, size, i = [], 0, 0
    while size < limit:
        s = fmt.format(i=i, j=i + 1, layer=i // 1000, expert=i % 1000)
        parts.append(s)
        size += len(s) + 1
        i += 1
    return ("{" + ",".join(parts) + "}").encode(), i


def build(root: Path) -> dict[str, Path]:
    cases: dict[str, Path] = {}
    d = _dir(root, "header-100MB-trailing-spaces")
    raw = _one_tensor()
    _shard(d / "a.safetensors", raw + b" " * (HEADER_CAP - len(raw)), 16)
    cases[d.name] = d
    d = _dir(root, "header-100MB-leading-whitespace")
    _shard(d / "a.safetensors", b" \n\t" * ((HEADER_CAP - len(raw)) // 3) + raw, 16)
    cases[d.name] = d
    entry = '"model.layers.{layer}.mlp.experts.{expert}.w.weight":{{"dtype":"U8","shape":[1],"data_offsets":[{i},{j}]}}'
    d = _dir(root, "header-100MB-1.3M-tensors-canonical")
    raw, n = _many(entry)
    _shard(d / "a.safetensors", raw, n)
    cases[d.name] = d
    d = _dir(root, "header-100MB-1.2M-tensors-escaped")
    raw, n = _many(entry.replace(".w.weight", "\\u002ew.weight"))
    _shard(d / "a.safetensors", raw, n)
    cases[d.name] = d
    d = _dir(root, "names-1M-numbers-outside-layers")
    raw, n = _many('"t.{i}":{{"dtype":"U8","shape":[1],"data_offsets":[{i},{j}]}}', 40_000_000)
    _shard(d / "a.safetensors", raw, n)
    cases[d.name] = d
    d = _dir(root, "description-1M-entries-over-cap")
    _shard(d / "a.safetensors", _one_tensor("model.layers.0.mlp.down_proj.weight"), 16)
    doc = {"model_quant_type": "W8A8_DYNAMIC"}
    doc.update({f"model.layers.{i // 1000}.mlp.experts.{i % 1000}.down_proj.weight": "W8A8_DYNAMIC" for i in range(10 ** 6)})
    (d / "quant_model_description.json").write_text(json.dumps(doc, indent=2))
    cases[d.name] = d
    d = _dir(root, "description-850k-entries")
    _shard(d / "a.safetensors", _one_tensor("model.layers.0.mlp.down_proj.weight"), 16)
    doc = {"model_quant_type": "W8A8_DYNAMIC"}
    doc.update({f"model.layers.{i // 1000}.mlp.experts.{i % 1000}.down_proj.weight": "W8A8_DYNAMIC" for i in range(850_000)})
    (d / "quant_model_description.json").write_text(json.dumps(doc, indent=2))
    cases[d.name] = d
    d = _dir(root, "index-1M-entries")
    _shard(d / "model-00001-of-00001.safetensors", _one_tensor("model.layers.0.mlp.down_proj.weight"), 16)
    wm = {f"model.layers.{i // 1000}.mlp.experts.{i % 1000}.down_proj.weight": "model-00001-of-00001.safetensors"
          for i in range(10 ** 6)}
    (d / "model.safetensors.index.json").write_text(json.dumps({"metadata": {}, "weight_map": wm}, indent=2))
    cases[d.name] = d
    d = _dir(root, "config-4MiB-whitespace")
    text = json.dumps(CONFIG).encode()
    (d / "config.json").write_bytes(text + b" " * ((4 << 20) - len(text)))
    _shard(d / "a.safetensors", _one_tensor(), 16)
    cases[d.name] = d
    d = _dir(root, "config-4MiB-deep")
    (d / "config.json").write_bytes(b"[" * (2 << 20) + b"]" * (2 << 20))
    cases[d.name] = d
    d = _dir(root, "shard-fifo")
    os.mkfifo(d / "a.safetensors")
    cases[d.name] = d
    d = _dir(root, "config-dev-zero")
    (d / "config.json").unlink()
    os.symlink("/dev/zero", d / "config.json")
    cases[d.name] = d
    return cases


# the documented bounds (README, bad input): seconds and peak MiB on this 2-core VM
BOUNDS = {
    "header-100MB-trailing-spaces": (5, 600),
    "header-100MB-leading-whitespace": (5, 600),
    "header-100MB-1.3M-tensors-canonical": (15, 1600),
    "header-100MB-1.2M-tensors-escaped": (25, 2000),
    "names-1M-numbers-outside-layers": (30, 1600),
    "description-1M-entries-over-cap": (2, 250),
    "description-850k-entries": (8, 800),
    "index-1M-entries": (10, 1200),
    "config-4MiB-whitespace": (2.5, 300),
    "config-4MiB-deep": (2.5, 300),
    "shard-fifo": (2, 250),
    "config-dev-zero": (2, 250),
}


def run(model_dir: Path, exact: bool) -> tuple[float, float, int, str]:
    env = dict(os.environ, AUDIT_EXACT="1" if exact else "0")
    cmd = [sys.executable, "-m", "auditor", "memory", str(model_dir), "--no-progress", "--format", "json",
           "-o", os.devnull]
    t = time.perf_counter()
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    elapsed = time.perf_counter() - t
    err = proc.stderr.read().decode(errors="replace").strip().splitlines()
    proc.returncode = os.waitstatus_to_exitcode(status)
    return elapsed, usage.ru_maxrss / 1024, proc.returncode, (err[-1] if err else "")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", default=None)
    ap.add_argument("--fuzz", type=int, default=0, help="also run the header property test with N examples")
    ap.add_argument("--build", type=Path, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.build:                  # in a child, so this process stays small: a fork carries the
        build(args.build)           # parent's peak RSS into the child's ru_maxrss
        return 0
    worst = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, __file__, "--build", tmp], check=True)
        cases = {d.name: d for d in sorted(Path(tmp).iterdir(), key=lambda d: list(BOUNDS).index(d.name))}
        print(f"{'input':<40} {'mode':<6} {'exit':>4} {'s':>7} {'bound':>6} {'MiB':>7} {'bound':>6}  ratio  outcome")
        for name, d in cases.items():
            if args.only and args.only not in name:
                continue
            for exact in (False, True):
                s, mib, code, err = run(d, exact)
                bs, bm = BOUNDS[name]
                ratio = max(s / bs, mib / bm)
                worst = max(worst, ratio)
                outcome = "ok" if code == 0 else err[:70]
                print(f"{name:<40} {'exact' if exact else 'fast':<6} {code:>4} {s:>7.2f} {bs:>6} {mib:>7.0f} {bm:>6}  "
                      f"{ratio:5.2f}  {outcome}")
    print(f"worst ratio to bound: {worst:.2f} ({'all within bounds' if worst <= 1 else 'OVER A BOUND'})")
    if args.fuzz:
        env = dict(os.environ, AUDIT_FUZZ_EXAMPLES=str(args.fuzz))
        t = time.perf_counter()
        code = subprocess.call([sys.executable, "-m", "pytest", "-q", "tests/test_header_properties.py"],
                               env=env, cwd=Path(__file__).resolve().parents[1])
        print(f"header property test, {args.fuzz} examples: exit {code}, {time.perf_counter() - t:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
