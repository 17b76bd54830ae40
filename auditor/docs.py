"""Regenerate (or check) the example outputs of the README and the docs/ pages from the tool itself.

Why: an example pasted by hand goes stale the day calibration or a rule changes. Every example in
the README and in every ``docs/*.md`` page (``pages()`` lists them) sits under a marker naming the
command that produced it::

    <!-- example: memory glm-5.1 --tp 16 | head 12 -->
    ```
    $ audit memory glm-5.1 --tp 16
    ...output...
    ```

``python -m auditor.docs`` reruns every marked command of every page in-process and rewrites the
fenced block under it; ``python -m auditor.docs --check`` exits 1 and names the examples that differ
(the test suite runs the check); ``python -m auditor.docs FILE`` does one file. Filters after ``|``: ``head N``, ``tail N``, ``grep REGEX`` (Python regex,
lines kept in order), ``drop REGEX`` (lines removed: wall-clock timings, which no README can
hold), ``from REGEX`` (lines from the first match on: a report's last section), and ``file PATH`` (show a file the command wrote under ``$TMP`` instead of
its stdout, e.g. a ticket). A trailing ``2>&1`` appends what the command printed on stderr, and the
exit code is shown when it is not 0. ``$TMP`` in a command is a fresh temporary directory, shown
as ``/tmp``. Commands run from the repository root whichever page holds them (``../shared`` is the
reference data beside it). A command is run once per process: examples that show the same run
through different filters share it.
"""
from __future__ import annotations

import contextlib
import functools
import io
import os
import re
import shlex
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

MARKER = re.compile(r"^<!-- example: (?P<cmd>.+?) -->\n```[a-z]*\n(?P<body>.*?)^```\n", re.M | re.S)
ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"


def pages() -> list[Path]:
    """Every file whose examples are generated: the README first, then docs/*.md by name."""
    return [README, *sorted(DOCS.glob("*.md"))]


@dataclass(frozen=True)
class Example:
    command: str      # what the marker says, filters included
    start: int        # span of the fenced body in the page's text
    end: int


def examples(text: str) -> list[Example]:
    return [Example(m.group("cmd"), m.start("body"), m.end("body")) for m in MARKER.finditer(text)]


def _filters(spec: str) -> tuple[str, list[tuple[str, str]], bool]:
    parts = [p.strip() for p in spec.split(" | ")]
    cmd, filters = parts[0], []
    merge_stderr = cmd.endswith("2>&1")
    if merge_stderr:
        cmd = cmd[: -len("2>&1")].strip()
    for f in parts[1:]:
        name, _, arg = f.partition(" ")
        if name not in ("head", "tail", "grep", "drop", "from", "file"):
            raise ValueError(f"unknown example filter {f!r}")
        filters.append((name, arg.strip()))
    return cmd, filters, merge_stderr


@contextlib.contextmanager
def _cwd(path: Path):
    """chdir for the duration (contextlib.chdir needs Python 3.11)."""
    old = os.getcwd()
    os.chdir(path)
    try:
        yield
    finally:
        os.chdir(old)


@functools.lru_cache(maxsize=None)
def _run(cmd: str, merge_stderr: bool, files: tuple[str, ...]) -> tuple[str, int]:
    """(text, exit code) of one command run in-process from the repository root: its stdout (plus
    stderr when merged), or the last of ``files`` it wrote under $TMP; $TMP shown as /tmp."""
    from .cli import main

    with tempfile.TemporaryDirectory(prefix="audit-docs-") as tmp:
        argv = shlex.split(cmd.replace("$TMP", tmp))
        out, err = io.StringIO(), io.StringIO()
        with _cwd(ROOT), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(argv)
        text = out.getvalue() + (err.getvalue() if merge_stderr else "")
        for arg in files:
            text = (Path(tmp) / arg).read_text(encoding="utf-8")
        text = text.replace(tmp, "/tmp")
    return text, code


def run_example(spec: str) -> str:
    """Run one marked command in-process and return the block body the page should hold."""
    cmd, filters, merge_stderr = _filters(spec)
    text, code = _run(cmd, merge_stderr, tuple(arg for name, arg in filters if name == "file"))
    lines = text.rstrip("\n").split("\n")
    for name, arg in filters:
        if name == "head":
            lines = lines[: int(arg)]
        elif name == "tail":
            lines = lines[-int(arg):]
        elif name == "from":
            rx = re.compile(arg)
            first = next((i for i, ln in enumerate(lines) if rx.search(ln)), len(lines))
            lines = lines[first:]
        elif name in ("grep", "drop"):
            rx = re.compile(arg)
            lines = [ln for ln in lines if bool(rx.search(ln)) == (name == "grep")]
    shown = "$ audit " + cmd.replace("$TMP", "/tmp")
    body = [shown, *lines]
    if code:
        body.append(f"(exit code {code})")
    return "\n".join(ln.rstrip() for ln in body) + "\n"


def regenerate(text: str) -> tuple[str, list[str]]:
    """(new page text, commands whose block changed)."""
    changed, pieces, pos = [], [], 0
    for ex in examples(text):
        new = run_example(ex.command)
        if text[ex.start:ex.end] != new:
            changed.append(ex.command)
        pieces += [text[pos:ex.start], new]
        pos = ex.end
    pieces.append(text[pos:])
    return "".join(pieces), changed


def _name(path: Path) -> str:
    """How a message names a page: README, or its path from the repository root (docs/perf.md)."""
    if path.resolve() == README:
        return "README"
    try:
        return str(path.resolve().relative_to(ROOT))
    except ValueError:
        return str(path)


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    check = "--check" in args
    named = [Path(a) for a in args if not a.startswith("--")]
    stale = False
    for path in named or pages():
        text = path.read_text(encoding="utf-8")
        new, changed = regenerate(text)
        if check:
            for c in changed:
                print(f"stale {_name(path)} example: {c}", file=sys.stderr)
            stale = stale or bool(changed)
            continue
        if changed:
            path.write_text(new, encoding="utf-8")
        print(f"{len(examples(text))} examples, {len(changed)} regenerated in {path}")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
