"""`audit evidence` fits the terminal and prints every source in full (issue 30: 255 columns, sources cut at 48).

Long cells wrap at spaces within their column; each row's source is printed whole below the table
(wrapped under a hanging indent); a terminal too narrow for the table gets one record per row."""
from __future__ import annotations

import io
import sys

import pytest

from auditor.cli import main
from auditor.evidence import DEFAULT_WIDTH, evaluate, load_corpus, render, table_width


@pytest.fixture(scope="module")
def results() -> list[dict]:
    return evaluate(load_corpus())


def _source_lines(text: str, row_id: str, ids: int) -> list[str]:
    """The lines of ``row_id``'s entry in the sources section: its first line and its indented continuations."""
    lines = text.splitlines()
    start = lines.index("sources:")
    out: list[str] = []
    for ln in lines[start + 1:]:
        if ln.startswith(f"  {row_id:<{ids}}  "):
            out = [ln[ids + 4:]]
        elif out and ln.startswith(" " * (ids + 4)):
            out.append(ln[ids + 4:])
        elif out:
            break
    return out


@pytest.mark.parametrize("width", [60, 80, 100, 120])
def test_every_line_fits_and_every_source_is_whole(results, width) -> None:
    text = render(results, width=width)
    too_long = [ln for ln in text.splitlines() if len(ln) > width]
    assert not too_long, too_long[:3]
    ids = max(len(r["id"]) for r in results)
    for r in results:
        parts = _source_lines(text, r["id"], ids)
        assert parts, r["id"]
        if width >= 100:        # no word of a source is longer than the line: wrapped at spaces only
            assert " ".join(parts) == r["source"]
        else:                   # a path longer than the line is broken inside: nothing is lost
            assert "".join("".join(parts).split()) == "".join(r["source"].split())


def test_the_longest_source_was_cut_before(results) -> None:
    """The corpus has sources longer than the 48 characters the old table kept (the test means something)."""
    assert max(len(r["source"]) for r in results) > 200


def test_every_row_in_the_table_once(results) -> None:
    text = render(results, width=DEFAULT_WIDTH)
    table = text.split("\n\n", 1)[0].splitlines()
    assert table[0].startswith("row ") and set(table[2]) <= {"-", " "}
    firsts = [ln.split()[0] for ln in table[3:] if ln[:1].strip()]
    assert firsts == [r["id"] for r in results]


def test_narrow_terminal_gets_records(results) -> None:
    text = render(results, width=60)
    assert not text.startswith("row ")
    first = text.splitlines()[0]
    assert first.startswith(results[0]["id"] + " ") and "audit: " in first


def test_cli_is_100_wide_off_a_terminal(capsys) -> None:
    assert main(["evidence"]) == 0
    out = capsys.readouterr().out
    assert max(len(ln) for ln in out.splitlines()) <= DEFAULT_WIDTH
    assert "sources:" in out


class _Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_terminal_width_is_respected(monkeypatch) -> None:
    monkeypatch.setenv("COLUMNS", "132")
    monkeypatch.setattr(sys, "stdout", _Tty())
    assert table_width() == 132
    monkeypatch.setenv("COLUMNS", "20")         # narrower than any layout: the records' floor
    assert table_width() == 60
    monkeypatch.setattr(sys, "stdout", io.StringIO())
    monkeypatch.setenv("COLUMNS", "132")        # not a terminal: the fixed width, whatever COLUMNS says
    assert table_width() == DEFAULT_WIDTH
