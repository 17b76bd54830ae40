"""audit bench on DeepSeek-V4's three CI configs (../shared/data/published/deepseek-v4/, section F of its README:
given for calibration). The measured figure of each case is the config's own ``baseline``; the op program
and the joint host constants are not fitted on them (the device profile's), so these are
predictions, except the DSA-CP prefill price, fitted on the CI rows that run DSA-CP (two of these among them,
``auditor/ci_calibration.py``): three cases are within the issue's 1.3x, one is not yet (marked, with the reason)."""
from __future__ import annotations

import json

import pytest

from auditor.cli import main
from auditor.launch.nightly import read_nightly

CASES = [
    ("DeepSeek-V4-Flash-W8A8-A3.yaml", None, None),
    ("DeepSeek-V4-flash-w8a8-PD-no-prefix.yaml", "perf_TPOT20_3_5_1_5", None),
    # concurrency 1024 is prefill-bound on the DSA-CP P node: 0.70x while a DSA-CP rank paid the plain-TP
    # per-token price; 0.90x with the price the DSA-CP CI rows fit (auditor/ci_calibration.py), this row among them
    ("DeepSeek-V4-flash-w8a8-PD-no-prefix.yaml", "perf_TPOT50_3_5_1_5", None),
    ("DeepSeek-V4-Pro-w4a8-1M-PD.yaml", None,
     "1M input, 99% prefix: predicted 1.55x the measured rate (2.17x before the hits were aligned to the pool's "
     "16,384-token lcm, the D nodes' --no-enable-prefix-caching and the eager drafter were read): ~55 s a request "
     "(TTFT 21 s + 1023 x 33 ms) against 4096 / 11.93 / 4 = 86 s measured. The CI publishes only the output rate, "
     "so the rest is not located: the 17k-token suffix prefill at 1M context, decode at 1M context, or the "
     "assumed MTP acceptance (0.7)"),
]


@pytest.mark.parametrize("name,case", [
    pytest.param(n, c, marks=pytest.mark.xfail(reason=why, strict=True)) if why else (n, c) for n, c, why in CASES],
    ids=[f"{c[0][:-5]}-{c[1]}" for c in CASES])
def test_ci_throughput_within_1_3x(shared_dir, name, case, capsys):
    path = shared_dir / "data" / "published" / "deepseek-v4" / name
    baseline = read_nightly(path).performance_case(case).baseline
    args = ["bench", "--launch", str(path), "--format", "json"] + (["--case", case] if case else [])
    assert main(args) == 0
    got = json.loads(capsys.readouterr().out)["output_throughput"]
    assert 1 / 1.3 <= got / baseline <= 1.3, (got, baseline)
