"""A deployment switch is declared once (``auditor.switches``; ``parallel.CARRIED_FIELDS`` is its fields) and
every record of a deployment carries it: the ParallelPlan, bench's and plan's InstancePlan, the launch reader's DeploymentOptions, the
CLI's options and the launch renderer. A new switch that one of them misses fails here, not silently in
one command (bench once dropped --pp, --redundant-experts and --no-dsa-cp)."""
from __future__ import annotations

from dataclasses import fields

from hypothesis import given, settings, strategies as st

from auditor.cli import deployment as cli_deployment
from auditor.deployment import InstancePlan
from auditor.launch.records import DeploymentOptions
from auditor.parallel import CARRIED_FIELDS, DERIVED_FIELDS, ParallelPlan, carried

from auditor.switches import BY_FIELD, SWITCHES

#: the CLI option that sets a carried field where its name is not the field's (written here, not read
#: from the declaration, so a renamed option fails)
CLI_NAMES = {"combine_max_tokens": "--mega-moe-max-tokens"}

#: (command, option) -> what that command declares instead of the switch's own: a default None is a search
#: ("not pinned"), and its --help says so; a help-only override words the command's own use
OVERRIDES = {("plan", "--dcp"): {"default": None}, ("plan", "--max-num-batched-tokens"): {"default": None},
             ("sweep", "--dsa-cp"): {"help": "rows with TP > 1"}}
#: (command, option) that takes a comma list of values to search, not one switch
GRIDS = {("plan", "--tp"), ("plan", "--sp"), ("sweep", "--tp"), ("sweep", "--dp"), ("sweep", "--ep")}


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


def test_the_declaration_is_the_plan_records():
    assert tuple(sw.field for sw in SWITCHES) == CARRIED_FIELDS
    for sw in SWITCHES:
        assert sw.option == CLI_NAMES.get(sw.field, "--" + sw.field.replace("_", "-"))
        if sw.kind not in ("names", "pairs", "ep"):         # a comma / pair / on-off text, parsed to the field's
            assert getattr(ParallelPlan(), sw.field) == sw.default, sw.field


def _commands():
    import click
    from auditor.cli import cli as group

    def walk(g, prefix=""):
        for name in g.list_commands(click.Context(g)):
            cmd = g.commands[name]
            if isinstance(cmd, click.Group):
                yield from walk(cmd, f"{prefix}{name} ")
            else:
                yield f"{prefix}{name}", cmd
    return list(walk(group))


def test_every_command_reads_the_one_declaration():
    """Help-walk: wherever a command takes a switch's option, it has the declared default, help, flag
    form and type (an override only where OVERRIDES says; its help is the command's own)."""
    import click
    from auditor.cli.vocabulary import ExpertParallel, Length
    seen = set()
    for path, cmd in _commands():
        for p in cmd.params:
            if not isinstance(p, click.Option):
                continue
            sw = next((s for s in SWITCHES if s.option in p.opts), None)
            if sw is None:
                continue
            seen.add((path, sw.field))
            over = OVERRIDES.get((path, sw.option), {})
            if "default" in over:
                assert p.default == over["default"] and "default" in p.help, (path, sw.option)
                continue
            if (path, sw.option) in GRIDS:
                continue
            assert p.default == sw.default, (path, sw.option, p.default)
            assert over["help"] in p.help if "help" in over else p.help == sw.help, (path, sw.option)
            assert p.is_flag == (sw.kind in ("flag", "tristate")), (path, sw.option)
            if p.is_flag:
                assert p.secondary_opts == ["--no-" + sw.option[2:]], (path, sw.option)
            want = {"size": click.IntRange, "range": click.IntRange, "length": Length, "ep": ExpertParallel}
            if sw.kind in want:
                assert isinstance(p.type, want[sw.kind]), (path, sw.option, p.type)
            if sw.kind == "range":
                assert (p.type.min, p.type.max) == sw.lo_hi
    for name in ("memory", "perf", "bench", "align"):
        missing = [sw.field for sw in SWITCHES if (name, sw.field) not in seen
                   and not (name == "align" and sw.group != "plan")]
        assert not missing, (name, missing)
    assert BY_FIELD["dcp"].group == "runtime" and ("plan", "dcp") in seen


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


#: switches a launch sets through a combining reader (``launch.flags._finish``), not a one-field rule
COMBINED = {"ep": "--enable-expert-parallel", "dsa_cp": "additional_config.enable_dsa_cp",
            "finegrained_tp": "additional_config.finegrained_tp_config"}


def test_every_switch_has_a_launch_spelling():
    """A switch a launch script cannot set would be dropped silently by --launch: each has a mapped
    vLLM flag, environment variable or additional_config key."""
    from auditor.launch.flags import RULES
    for sw in SWITCHES:
        named = [r.name for r in RULES.values() if r.field == sw.field and r.effect == "mapped"]
        assert named or (sw.field in COMBINED and RULES[COMBINED[sw.field]].effect == "mapped"), sw.field
