"""DSA context parallel is the engine version's rule over two switches, whatever spelling sets them.

``--sp`` is exactly ``VLLM_ASCEND_ENABLE_FLASHCOMM1=1`` and ``--dsa-cp`` exactly
``additional_config.enable_dsa_cp``. The table below is written by hand from
``vllm_ascend/utils.py::enable_dsa_cp`` at each release:

* v0.18.0 (``utils.py:1240-1247@releases/v0.18.0``): ``index_topk and enable_sp()``; no flag.
* v0.21.0rc1 .. v0.26.0rc (``utils.py:1345-1365@v0.21.0rc1``, ``:1515-1535@releases/v0.23.0``):
  ``flag and enable_sp()``, and ``raise ValueError("DSA CP requires SP ...")`` for the flag alone.
* main (``utils.py:1308-1328@182b75ea``): the flag alone.
"""
from __future__ import annotations

import json

import pytest

from auditor.cli import main
from auditor.engines.registry import as_engine
from auditor.errors import AuditInputError
from auditor.model.presets import preset_names, preset_spec
from auditor.parallel import ParallelPlan

ON, OFF, RAISES = "on", "off", "raises"
#: (sp, enable_dsa_cp) -> what each version does; None = the flag not set
TABLE = {
    #                 v0.18  v0.21    v0.23    v0.26    main
    (False, None):  (OFF,   OFF,     OFF,     OFF,     OFF),
    (True, None):   (ON,    OFF,     OFF,     OFF,     OFF),
    (False, True):  (OFF,   RAISES,  RAISES,  RAISES,  ON),
    (True, True):   (ON,    ON,      ON,      ON,      ON),
    (True, False):  (ON,    OFF,     OFF,     OFF,     OFF),
    (False, False): (OFF,   OFF,     OFF,     OFF,     OFF),
}
VERSIONS = ("vllm-ascend@0.18", "vllm-ascend@0.21", "vllm-ascend@0.23", "vllm-ascend@0.26", "vllm-ascend@main")


@pytest.fixture(scope="module")
def glm51():
    return preset_spec("glm-5.1")


@pytest.mark.parametrize("switches", list(TABLE))
@pytest.mark.parametrize("column", range(len(VERSIONS)))
def test_each_version_decides_dsa_cp_by_its_own_rule(glm51, switches, column):
    sp, flag = switches
    want = TABLE[switches][column]
    eng = as_engine(VERSIONS[column])
    plan = ParallelPlan(tp=16, dp=2, ep=32, sp=sp, dsa_cp=flag)
    if want == RAISES:
        with pytest.raises(AuditInputError, match="raises ValueError at start.*DSA CP requires SP"):
            eng.placement(glm51, plan)
        return
    pl = eng.placement(glm51, plan)
    assert pl.dsa_cp is (want == ON)
    # DSA-CP replicates q_b_proj / kv_b_proj: all 64 heads on each of the 16 ranks, else 64 / 16
    assert pl.heads_local == (64 if want == ON else 4)
    # v0.18 has no enable_dsa_cp: a flag that asks for the other answer is named, never silently obeyed
    named = any("not a switch" in m for _, m in pl.findings)
    assert named is (column == 0 and flag is not None and flag != sp)


def test_a_model_without_an_indexer_never_runs_dsa_cp():
    """enable_dsa_cp returns False without index_topk (utils.py:1312-1317@182b75ea): FlashComm1 on a
    plain model is no DSA-CP, and asking for it is refused by name."""
    plain = [n for n in preset_names() if not preset_spec(n).dsa]
    if not plain:
        pytest.skip("every preset has a DSA indexer")
    spec = preset_spec(plain[0])
    eng = as_engine("vllm-ascend@main")
    tp = next(t for t in (8, 4, 2, 1) if spec.NH % t == 0)
    assert not eng.placement(spec, ParallelPlan(tp=tp, sp=True)).dsa_cp
    with pytest.raises(AuditInputError, match="no DSA indexer"):
        eng.placement(spec, ParallelPlan(tp=tp, sp=True, dsa_cp=True))


def _memory_json(args, capsys) -> tuple[int, str]:
    code = main(["memory", "glm-5.1", "--format", "json", "--max-model-len", "32K", *args])
    out = capsys.readouterr().out
    return code, out


@pytest.mark.parametrize("engine", ["vllm-ascend@0.18", "vllm-ascend@0.23", "vllm-ascend@main"])
@pytest.mark.parametrize("sp,flag", [(True, None), (True, True), (False, None)])
def test_both_spellings_give_byte_identical_reports(engine, sp, flag, monkeypatch, capsys):
    short = ["--engine", engine, "--tp", "16", "--dp", "2", "--ep", "32", "--mtp", "1", "--mtp-drafter"]
    vllm = ["--engine", engine, "--tensor-parallel-size", "16", "--data-parallel-size", "2",
            "--enable-expert-parallel", "--speculative-config",
            json.dumps({"method": "deepseek_mtp", "num_speculative_tokens": 1})]
    if sp:
        short.append("--sp")
    if flag:
        short.append("--dsa-cp")
        vllm += ["--additional-config", json.dumps({"enable_dsa_cp": True})]
    code_a, a = _memory_json(short, capsys)
    if sp:
        monkeypatch.setenv("VLLM_ASCEND_ENABLE_FLASHCOMM1", "1")
    code_b, b = _memory_json(vllm, capsys)
    assert code_a == code_b and code_a in (0, 3)
    assert a == b and a
    doc = json.loads(a)
    heads = TABLE[(sp, flag)][VERSIONS.index(engine)] == ON
    assert ("DSA-CP on" in json.dumps(doc["assumptions"])) is heads


def test_flag_without_sp_is_the_engines_start_error_on_v023(capsys):
    code = main(["memory", "glm-5.1", "--engine", "vllm-ascend@0.23", "--tp", "16", "--dsa-cp"])
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2
    assert len(err) == 1 and err[0].startswith("audit: error: --dsa-cp:") and "DSA CP requires SP" in err[0]


def test_sp_alone_on_main_is_flashcomm1_without_dsa_cp(capsys):
    """The issue's case: `--sp` on main used to turn DSA-CP on (30.35 GB of weights) while the engine's
    FlashComm1 alone does not; now --sp alone gives the ledger of the plain TP layout."""
    _, with_sp = _memory_json(["--tp", "16", "--dp", "2", "--ep", "32", "--sp"], capsys)
    _, plain = _memory_json(["--tp", "16", "--dp", "2", "--ep", "32"], capsys)
    _, cp = _memory_json(["--tp", "16", "--dp", "2", "--ep", "32", "--sp", "--dsa-cp"], capsys)
    w = {k: json.loads(t)["worst_rank"]["bytes"] for k, t in (("sp", with_sp), ("plain", plain), ("cp", cp))}
    assert w["sp"] == w["plain"]            # main replicates shared experts only with SEDP (spec §0)
    assert w["cp"] > w["plain"]             # DSA-CP replicates q_b_proj and kv_b_proj on every rank
