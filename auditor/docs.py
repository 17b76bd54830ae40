"""Regenerate (or check) the README's example outputs from the tool itself.

Why: an example pasted by hand goes stale the day calibration or a rule changes. Every example in
the README sits under a marker naming the command that produced it::

    <!-- example: memory glm-5.1 --tp 16 | head 12 -->
    ```
    $ audit memory glm-5.1 --tp 16
    ...output...
    ```

``python -m auditor.docs`` reruns every marked command in-process and rewrites the fenced block
under it; ``python -m auditor.docs --check`` exits 1 and names the examples that differ (the test
suite runs the check). Filters after ``|``: ``head N``, ``tail N``, ``grep REGEX`` (Python regex,
lines kept in order), ``drop REGEX`` (lines removed: wall-clock timings, which no README can
hold), ``from REGEX`` (lines from the first match on: a report's last section), and ``file PATH`` (show a file the command wrote under ``$TMP`` instead of
its stdout, e.g. a ticket). A trailing ``2>&1`` appends what the command printed on stderr, and the
exit code is shown when it is not 0. ``$TMP`` in a command is a fresh temporary directory, shown
as ``/tmp``. Commands run from the repository root (``../shared`` is the reference data beside it).
"""
from __future__ import annotations

import contextlib
import io
import os
import re
import shlex
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

MARKER = re.compile(r"^<!-- example: (?P<cmd>.+?) -->\n```[a-z]*\n(?P<body>.*?)^```\n", re.M | re.S)
README = Path(__file__).resolve().parents[1] / "README.md"


@dataclass(frozen=True)
class Example:
    command: str      # what the marker says, filters included
    start: int        # span of the fenced body in the README text
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


def run_example(spec: str) -> str:
    """Run one marked command in-process and return the block body the README should hold."""
    from .cli import main

    cmd, filters, merge_stderr = _filters(spec)
    with tempfile.TemporaryDirectory(prefix="audit-docs-") as tmp:
        argv = shlex.split(cmd.replace("$TMP", tmp))
        out, err = io.StringIO(), io.StringIO()
        with _cwd(README.parent), contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            code = main(argv)
        text = out.getvalue() + (err.getvalue() if merge_stderr else "")
        for name, arg in filters:
            if name == "file":
                text = (Path(tmp) / arg).read_text(encoding="utf-8")
        text = text.replace(tmp, "/tmp")
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
    """(new README text, commands whose block changed)."""
    changed, pieces, pos = [], [], 0
    for ex in examples(text):
        new = run_example(ex.command)
        if text[ex.start:ex.end] != new:
            changed.append(ex.command)
        pieces += [text[pos:ex.start], new]
        pos = ex.end
    pieces.append(text[pos:])
    return "".join(pieces), changed


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    check = "--check" in args
    path = Path(next((a for a in args if not a.startswith("--")), README))
    text = path.read_text(encoding="utf-8")
    new, changed = regenerate(text)
    if check:
        for c in changed:
            print(f"stale README example: {c}", file=sys.stderr)
        return 1 if changed else 0
    if changed:
        path.write_text(new, encoding="utf-8")
    print(f"{len(examples(text))} examples, {len(changed)} regenerated in {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
