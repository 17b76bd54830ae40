"""A deployment switch is declared once (``parallel.CARRIED_FIELDS``) and every record of a deployment
carries it: the ParallelPlan, bench's and plan's InstancePlan, the launch reader's DeploymentOptions, the
CLI's options and the launch renderer. A new switch that one of them misses fails here, not silently in
one command (bench once dropped --pp, --redundant-experts and --no-dsa-cp)."""
from __future__ import annotations

from dataclasses import fields

from hypothesis import given, settings, strategies as st

from auditor.cli import deployment as cli_deployment
from auditor.deployment import InstancePlan
from auditor.launch.records import DeploymentOptions
from auditor.parallel import CARRIED_FIELDS, DERIVED_FIELDS, ParallelPlan, carried

#: the CLI option that sets a carried field where its name is not the field's
CLI_NAMES = {"combine_max_tokens": "--mega-moe-max-tokens"}


def test_every_plan_field_is_carried_or_derived():
    names = {f.name for f in fields(ParallelPlan)}
    assert names == set(CARRIED_FIELDS) | set(DERIVED_FIELDS)
    assert not set(CARRIED_FIELDS) & set(DERIVED_FIELDS)


def test_every_record_carries_every_switch():
    for record in (InstancePlan, DeploymentOptions):
        have = {f.name for f in fields(record)}
        assert set(CARRIED_FIELDS) <= have, (record.__name__, set(CARRIED_FIELDS) - have)
    rendered = {field for field, _, _ in cli_deployment._RENDER}
    assert set(CARRIED_FIELDS) <= rendered, set(CARRIED_FIELDS) - rendered


def test_every_switch_is_an_option_of_the_deployment_commands():
    import click
    from auditor.cli import cli as group
    ctx = click.Context(group)
    for name in ("memory", "perf", "bench"):
        cmd = group.get_command(ctx, name)
        opts = {o for p in cmd.params for o in getattr(p, "opts", ())}
        for f in CARRIED_FIELDS:
            flag = CLI_NAMES.get(f, "--" + f.replace("_", "-"))
            assert flag in opts, (name, flag)


@settings(max_examples=60, deadline=None)
@given(tp=st.sampled_from([1, 2, 4, 8]), dp=st.sampled_from([1, 2, 4]), pp=st.sampled_from([1, 2]),
       sp=st.booleans(), dsa_cp=st.sampled_from([None, True, False]), nz=st.sampled_from([0, 1, 2]),
       sedp=st.booleans(), redundant=st.integers(0, 64), batched=st.integers(1, 65536),
       fused=st.sampled_from([0, 1]), combine=st.integers(0, 262144), dcp=st.sampled_from([1, 2]),
       block=st.sampled_from([0, 32, 64, 128]), role=st.sampled_from(["mixed", "prefill", "decode"]),
       k=st.integers(0, 3))
def test_instance_round_trip_keeps_every_switch(tp, dp, pp, sp, dsa_cp, nz, sedp, redundant, batched, fused, combine,
                                                dcp, block, role, k):
    dcp = dcp if tp % dcp == 0 else 1
    plan = ParallelPlan(tp=tp, dp=dp, ep=tp * dp, pp=pp, sp=sp, dsa_cp=dsa_cp, nz_mode=nz, shared_expert_dp=sedp,
                        redundant_experts=redundant, max_num_batched_tokens=batched, fused_mc2=fused,
                        combine_max_tokens=combine, dcp=dcp, block_size=block, role=role, mtp=k > 0,
                        num_speculative_tokens=k, layer_sharding=("q_b_proj",) if pp == 1 else (),
                        finegrained_tp=(("lmhead", dp),) if dp > 1 else ())
    name = {"mixed": "aggregated", "prefill": "prefill", "decode": "decode"}[role]
    inst = InstancePlan.from_plan(name, 1, plan, max_num_seqs=8, max_model_len=4096, gpu_memory_utilization=0.9,
                                  mtp=k)
    back = inst.parallel_plan()
    assert carried(back) == carried(plan)
    assert (back.role, back.mtp, back.num_speculative_tokens) == (plan.role, plan.mtp, plan.num_speculative_tokens)
