"""Shared machinery of the hostile-input suites (issue 8): run the CLI in process or out of process,
check the bad-input contract, and fingerprint a model directory.

The contract, for every case:
* exit code 0, 2 (bad input) or 3 (--budget exceeded);
* on exit 2: exactly one stderr line, starting with ``audit: error: ``;
* no "Traceback" on stdout or stderr;
* the model directory is untouched (names, kinds, sizes, mtimes and contents of regular files).

Hangs: every in-process run is bounded by SIGALRM and every out-of-process run by a timeout, so a
regression fails the case instead of stalling the suite.
"""
from __future__ import annotations

import hashlib
import json
import os
import signal
import stat
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
from safetensors.numpy import save_file

IN_PROCESS_TIMEOUT_S = 60
OUT_OF_PROCESS_TIMEOUT_S = 60
ERROR_PREFIX = "audit: error: "

DENSE_CONFIG = {"hidden_size": 64, "num_hidden_layers": 2, "num_attention_heads": 4, "vocab_size": 128,
                "intermediate_size": 128, "max_position_embeddings": 2048, "torch_dtype": "bfloat16"}

# a small MLA + DSA indexer + MoE + MTP config (GLM-5.1's structure at toy sizes)
DSA_CONFIG = {
    "model_type": "glm_moe_dsa", "hidden_size": 64, "num_hidden_layers": 4, "num_attention_heads": 4,
    "num_key_value_heads": 4, "vocab_size": 256, "intermediate_size": 128, "moe_intermediate_size": 32,
    "n_routed_experts": 8, "n_shared_experts": 1, "num_experts_per_tok": 2, "first_k_dense_replace": 1,
    "moe_layer_freq": 1, "q_lora_rank": 32, "kv_lora_rank": 16, "qk_nope_head_dim": 16,
    "qk_rope_head_dim": 8, "v_head_dim": 16, "index_n_heads": 4, "index_head_dim": 16, "index_topk": 64,
    "num_nextn_predict_layers": 1, "max_position_embeddings": 4096, "topk_method": "noaux_tc",
    "tie_word_embeddings": False, "torch_dtype": "bfloat16",
    "rope_scaling": {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 1024},
}


class Hang(Exception):
    """An in-process run outlived IN_PROCESS_TIMEOUT_S."""


@dataclass
class Run:
    rc: int
    out: str
    err: str
    argv: list[str] = field(default_factory=list)

    @property
    def err_lines(self) -> list[str]:
        return [line for line in self.err.splitlines() if line.strip()]


def run_in_process(argv: list[str], capfd, timeout: int = IN_PROCESS_TIMEOUT_S) -> Run:
    """``auditor.cli.main(argv)`` with stdout/stderr captured at the file-descriptor level."""
    from auditor.cli import main

    def _alarm(signum, frame):
        raise Hang(f"no answer after {timeout} s: {argv}")

    capfd.readouterr()
    old = signal.signal(signal.SIGALRM, _alarm)
    signal.alarm(timeout)
    try:
        rc = main([str(a) for a in argv])
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, old)
    cap = capfd.readouterr()
    return Run(rc, cap.out, cap.err, [str(a) for a in argv])


def run_out_of_process(argv: list[str], timeout: int = OUT_OF_PROCESS_TIMEOUT_S, user: int | None = None,
                       memory_bytes: int | None = 2 * 1024 ** 3, cwd: Path | None = None) -> Run:
    """``python -m auditor argv`` in a fresh process (optionally as another uid via setpriv, with an
    address-space limit so an unbounded read fails instead of exhausting the machine). A timeout
    is reported as a hang (rc -1), never waited out."""
    cmd = [sys.executable, "-m", "auditor", *map(str, argv)]
    if user is not None:
        cmd = ["setpriv", f"--reuid={user}", f"--regid={user}", "--clear-groups", *cmd]

    def _limits():
        if memory_bytes:
            import resource
            resource.setrlimit(resource.RLIMIT_AS, (memory_bytes, memory_bytes))

    env = {**os.environ, "PYTHONDONTWRITEBYTECODE": "1"}
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, preexec_fn=_limits,
                           cwd=cwd, env=env, stdin=subprocess.DEVNULL)
    except subprocess.TimeoutExpired as exc:
        out = exc.stdout.decode() if isinstance(exc.stdout, bytes) else (exc.stdout or "")
        return Run(-1, out, f"HANG: no answer after {timeout} s", [str(a) for a in argv])
    return Run(p.returncode, p.stdout, p.stderr, [str(a) for a in argv])


def check_contract(run: Run, expect: str, needles: tuple[str, ...] = ()) -> None:
    """Assert the bad-input contract. ``expect``: "error" (exit 2), "ok" (exit 0), "budget" (exit 3)
    or "any" (0, 2 or 3). ``needles``: substrings the error line must contain."""
    text = f"argv={run.argv}\nrc={run.rc}\nstderr:\n{run.err[-2000:]}\nstdout:\n{run.out[-500:]}"
    assert run.rc != -1, "HANG\n" + text
    assert "Traceback" not in run.err and "Traceback" not in run.out, "TRACEBACK\n" + text
    allowed = (0, 2, 3, 4) if run.argv[:1] == ["align"] else (0, 2, 3)    # align: 4 = --tolerance exceeded
    assert run.rc in allowed, "UNEXPECTED EXIT CODE\n" + text
    if run.rc == 2:
        assert len(run.err_lines) == 1, "MORE THAN ONE STDERR LINE\n" + text
        assert run.err_lines[0].startswith(ERROR_PREFIX), "NOT AN audit: error: LINE\n" + text
    wanted = {"error": 2, "ok": 0, "budget": 3}.get(expect)
    if wanted is not None:
        assert run.rc == wanted, f"EXPECTED {expect.upper()} (exit {wanted})\n" + text
    for needle in needles:
        assert needle in run.err, f"ERROR LINE LACKS {needle!r}\n" + text


def fingerprint(root: Path) -> dict[str, tuple]:
    """Names, kinds, sizes, mtimes and (for regular files) content hashes of everything under
    ``root``, symlinks not followed and special files never opened (a FIFO would block)."""
    snap: dict[str, tuple] = {}
    root = Path(root)
    if not root.exists() and not root.is_symlink():
        return snap
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in sorted(dirnames + filenames):
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            rel = os.path.relpath(p, root)
            if stat.S_ISLNK(st.st_mode):
                snap[rel] = ("link", os.readlink(p))
            elif stat.S_ISREG(st.st_mode):
                h = hashlib.sha256()
                with open(p, "rb") as f:
                    for block in iter(lambda: f.read(1 << 20), b""):
                        h.update(block)
                snap[rel] = ("file", st.st_size, st.st_mtime_ns, stat.S_IMODE(st.st_mode), h.hexdigest())
            else:
                snap[rel] = (stat.S_IFMT(st.st_mode), st.st_mtime_ns, stat.S_IMODE(st.st_mode))
    return snap


def write_config(d: Path, cfg: dict | str | bytes) -> Path:
    """A model directory holding only config.json (a dict, or raw JSON text when a case needs
    a spelling json.dumps would not produce, e.g. ``1e309``)."""
    d.mkdir(parents=True, exist_ok=True)
    p = d / "config.json"
    if isinstance(cfg, dict):
        p.write_text(json.dumps(cfg))
    elif isinstance(cfg, str):
        p.write_text(cfg)
    else:
        p.write_bytes(cfg)
    return d


def tiny_checkpoint(d: Path, cfg: dict | None = None) -> Path:
    """A valid little checkpoint: config.json and two shards written by the safetensors library."""
    write_config(d, cfg or DENSE_CONFIG)
    save_file({"a.weight": np.ones((4, 4), np.float32)}, str(d / "model-00001-of-00002.safetensors"))
    save_file({"b.weight": np.ones((2, 8), np.int8)}, str(d / "model-00002-of-00002.safetensors"))
    for p in d.iterdir():
        os.chmod(p, 0o644)          # the library writes 0600; a checkpoint on shared storage is world-readable
    return d


Builder = Callable[[Path], list[str]]
