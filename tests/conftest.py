"""Shared test fixtures: generic helpers only (no test logic lives here)."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

# The scan cache (auditor/inventory/scancache.py) is off in the suite unless a run asks for it: tests
# would otherwise write into the user's ~/.cache, and a test that checks which reader answered would
# depend on whether another test scanned the same files first. tests/test_scan_cache.py turns it on.
os.environ.setdefault("AUDIT_SCAN_CACHE", "0")

SHARED_SKIP_REASON = "../shared not present (reference data lives beside the checkout)"

#: the edit-test loop's subset (``pytest -m quick``, well under a minute on 2 cores): whole modules of unit
#: and hand-derived checks that run in seconds, one or more for every package (tests may also carry the
#: marker themselves). The rest of the suite (end-to-end CLI runs, the README's examples, the hostile and
#: cross-command cases) runs without ``-m``.
QUICK_MODULES = frozenset({
    "test_acceptance", "test_align_evidence", "test_align_logs", "test_blueprint", "test_bench_client",
    "test_collectives", "test_decompose", "test_deepseek_v4_perf", "test_deployment_fields", "test_devices", "test_engine_generic_seam",
    "test_engine_imports", "test_engine_owned_words", "test_engine_versions", "test_engine_vllm_budget",
    "test_engine_vllm_engine", "test_engine_vllm_gpu01", "test_engine_vllm_kv", "test_engine_vllm_materialize",
    "test_evidence", "test_evidence_width", "test_expected", "test_family_seam", "test_fastheader",
    "test_fastheader_fuzz", "test_fused_mc2", "test_header_properties", "test_hostile_bounds", "test_hostile_options",
    "test_hostile_props", "test_hubcache", "test_index_cache", "test_kv_cache_groups", "test_malformed",
    "test_measured", "test_memory_ledger", "test_mla_without_indexer", "test_names", "test_nightly",
    "test_package_layers", "test_perf_cli", "test_perf_contract", "test_perf_formulas", "test_perf_sweep",
    "test_quantdesc_spans", "test_readers", "test_remote_plan", "test_remote_refs", "test_remote_standin",
    "test_report_format", "test_runtime_budget", "test_scan", "test_synth", "test_unmodelled_structure",
    "test_vllm_cuda_perf", "test_vllm_cuda_serving",
})


@pytest.fixture(scope="session", autouse=True)
def _no_compile_notice_in_process():
    """In-process commands print no compile notice. It is once per command run, and which test first
    compiles a kernel on a cold cache depends on how the tests are spread over workers (a bad-input test
    then sees it as a second stderr line). The notice itself is tested in fresh processes, and by the unit
    tests in test_cli_feedback.py, which put the real ``say`` (``__wrapped__``) back."""
    import functools

    from auditor.cli import feedback
    real = feedback.say

    @functools.wraps(real)
    def say(text: str) -> None:
        if text != feedback.COMPILE_NOTICE:
            real(text)

    feedback.say = say
    yield
    feedback.say = real


def pytest_collection_modifyitems(config, items):
    """Mark every test of a ``QUICK_MODULES`` module ``quick``."""
    for item in items:
        if Path(str(item.fspath)).stem in QUICK_MODULES:
            item.add_marker(pytest.mark.quick)


@pytest.fixture(scope="session")
def once_per_run(tmp_path_factory, worker_id):
    """``once(name, compute)``: ``compute()``'s JSON value, computed by one worker of the run and read by the
    others. Why: a module fixture runs once per xdist worker that gets one of its tests, and worksteal
    spreads a module's tests over both workers (the serving fit's leave-one-out, ~19 s, ran twice)."""
    import fcntl
    import json
    root = tmp_path_factory.getbasetemp()
    if worker_id != "master":
        root = root.parent                      # the run's directory, shared by its workers

    def once(name: str, compute):
        path = root / f"once-{name}.json"
        with open(root / f"once-{name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if path.exists():
                return json.loads(path.read_text())
            value = compute()
            path.write_text(json.dumps(value))
            return json.loads(path.read_text())     # the value the other workers read, to the bit
    return once


@pytest.fixture(scope="session")
def shared_dir() -> Path:
    """The read-only reference tree that CI places beside the checkout; skip when it is absent."""
    path = Path(__file__).resolve().parents[1].parent / "shared"
    if not path.is_dir():
        pytest.skip(SHARED_SKIP_REASON)
    return path


@pytest.fixture(scope="session")
def ckpts(shared_dir: Path) -> Path:
    """The real tiny checkpoints written by transformers and msModelSlim (see PROVENANCE.md)."""
    return shared_dir / "data" / "checkpoints"


def unix_socket_at(path: Path) -> None:
    """Leave a UNIX socket file at ``path``. Bound by its relative name from its directory: a socket
    path is capped at 107 bytes, and a worker's tmp_path (pytest-xdist adds popen-gwN) can be longer."""
    import socket
    s = socket.socket(socket.AF_UNIX)
    cwd = os.getcwd()
    os.chdir(path.parent)
    try:
        s.bind(path.name)
    finally:
        os.chdir(cwd)
        s.close()


def json_leaves(o, keep):
    """Every leaf of a parsed JSON document for which ``keep(leaf)`` holds (dicts' values, lists' items)."""
    if isinstance(o, dict):
        for v in o.values():
            yield from json_leaves(v, keep)
    elif isinstance(o, list):
        for v in o:
            yield from json_leaves(v, keep)
    elif keep(o):
        yield o


def drain_pty(master: int) -> bytes:
    """Everything a child wrote to a pseudo-terminal until it closed (EIO or EOF ends the read)."""
    chunks = []
    while True:
        try:
            data = os.read(master, 4096)
        except OSError:
            break
        if not data:
            break
        chunks.append(data)
    return b"".join(chunks)


def tree_snapshot(root: Path) -> dict[str, tuple[str, int, int]]:
    """{relative path: (kind, size, mtime_ns)} of everything under ``root`` (symlinks not followed).

    Used to prove a command wrote nothing into a directory it only had to read.
    """
    snap: dict[str, tuple[str, int, int]] = {}
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        for name in dirnames + filenames:
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            kind = "link" if os.path.islink(p) else "dir" if os.path.isdir(p) else "file"
            snap[os.path.relpath(p, root)] = (kind, st.st_size, st.st_mtime_ns)
    return snap


@pytest.fixture
def snapshot():
    """The ``tree_snapshot`` helper as a fixture."""
    return tree_snapshot
