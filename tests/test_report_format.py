"""Report formatting: binary byte units in perf reports, fixed decimals, named columns, plurals."""
from __future__ import annotations

from auditor.cli import main
from auditor.layer_ranges import ranges
from auditor.units import binary, count


def test_binary_units_with_two_decimals():
    assert binary(0) == "0 B"
    assert binary(512) == "512 B"
    assert binary(1536) == "1.50 KiB"
    assert binary(100_683_776) == "96.02 MiB"          # 100683776 / 2^20 = 96.0195...
    assert binary(3 * 2 ** 30) == "3.00 GiB"
    assert binary(2 ** 40) == "1.00 TiB"


def test_count_plural():
    assert count(1, "rank") == "1 rank" and count(32, "rank") == "32 ranks" and count(0, "rank") == "0 ranks"


def test_ranges():
    assert ranges([5, 0, 1, 2, 2]) == "0-2,5"
    assert ranges([None, 3]) == "3"
    assert ranges([None]) == "-" and ranges([]) == "-"


def test_perf_table_units_decimals_and_headers(capsys):
    assert main(["perf", "--tp", "8", "--phase", "decode"]) == 0
    out = capsys.readouterr().out
    assert " MB" not in out and " GB" not in out and " kB" not in out
    assert "MiB" in out
    total = next(line for line in out.splitlines() if line.startswith("phase "))
    assert "time is" in total                       # the phase table's TTFT / decode step column has a name
    # every "ms total" cell of the op table keeps 3 decimals (no trailing zeros dropped)
    lines = out.splitlines()
    head = next(i for i, line in enumerate(lines) if line.startswith("op "))
    rows = lines[head + 2:lines.index("", head)]
    assert rows and all(len(r.split()[-2].split(".")[1]) == 3 for r in rows)


def test_memory_header_says_one_rank(capsys):
    assert main(["memory", "--tp", "1"]) == 3        # GLM-5.1 on one die: no KV budget left (exit 3)
    out = capsys.readouterr().out
    assert "| 1 rank\n" in out and "1 ranks" not in out
