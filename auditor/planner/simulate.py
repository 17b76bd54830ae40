"""The serving figures of a plan: its shortlist simulated with ``audit bench``'s serving model.

Every candidate is first estimated in steady state (``planner.search``, microseconds each); per die
budget and deployment kind the best ``space.simulate`` distinct deployments by that estimate (TPOT
within 1.25 x the SLA, TTFT within it: the estimate has no queueing and no host time, so it is
optimistic on TTFT; at most two per prefill or decode instance shape, so the simulation, not the
estimate, chooses between shapes) are run through ``auditor.serving`` exactly as ``audit bench`` runs
them: the instance plans the launch prints (``planner.launch.instance_plans``), their step-cost tables, and the
scheduler simulation. The operating point is a closed-loop client (``vllm bench serve
--max-concurrency c --num-prompts 2c``): c starts at the deployment's decode slots (D ranks x
max_num_seqs, or one replica's ranks x max_num_seqs) and halves until the mean TTFT and mean TPOT meet
the SLA (at most six steps). An aggregated deployment of R replicas is simulated as one replica
(replicas are independent) and its throughput multiplied by R.

Step-cost tables are built once per instance plan and shared by every deployment that uses it.
"""
from __future__ import annotations

from typing import Any

from ..deployment import InstancePlan
from .launch import instance_plans
from .search import Config, PlanResult, PlanSpace
from .workload import PlanWorkload

SLACK = 1.25        # the estimate is not a bound: shortlist rows within 1.25 x the SLA
LADDER = 6


def shortlist(res: PlanResult, space: PlanSpace, ttft_ms: float, tpot_ms: float) -> list[Config]:
    out: list[Config] = []
    for n in space.dies:
        for mode in ("agg", "disagg"):
            # DCP rows too: their instance plans carry the DCP size, so the step tables run SFA DCP (query
            # gather, LSE merge, the prefill KV gather) and the KV pool holds 1/DCP of each latent
            rows = [c for c in res.configs if c.dies == n and c.mode == mode
                    and c.ttft_ms <= ttft_ms * SLACK and c.tpot_ms <= tpot_ms * SLACK]
            rows.sort(key=lambda c: -c.tok_s_die)
            seen: set = set()
            per_shape: dict[tuple, int] = {}
            for c in rows:
                # at most two rows per instance shape (P and D counted apart): the estimate has no
                # queueing, so its ranking of shapes is the least reliable part; the simulation decides
                shapes = _shapes(c)
                if c.key in seen or any(per_shape.get(k, 0) >= 2 for k in shapes):
                    continue
                seen.add(c.key)
                for k in shapes:
                    per_shape[k] = per_shape.get(k, 0) + 1
                out.append(c)
                if len(seen) >= space.simulate:
                    break
    return out


def _shapes(c: Config) -> tuple:
    """The instance shapes of a configuration: (TP, DP, DCP) of the aggregated or decode instance, and the
    prefill instance's (TP, DP, chunk) for P/D."""
    d = c.detail
    own = ("d", d.get("tp"), d.get("dp"), d.get("dcp", 1))
    if c.mode != "disagg":
        return (own,)
    return (own, ("p", d.get("p_tp"), d.get("p_dp"), d.get("p_max_num_batched_tokens")))


def simulate_shortlist(res: PlanResult, spec: Any, engine: Any, recipe: str, device: Any, wl: PlanWorkload,
                       space: PlanSpace, ttft_ms: float, tpot_ms: float) -> int:
    """Replace the figures of the shortlisted rows by simulated ones; returns how many were simulated."""
    from ..engines.registry import as_engine
    from ..serving.bench import metrics
    from ..serving.costs import step_costs
    from ..serving.sim import BenchWorkload, Deployment, simulate

    eng = as_engine(engine)
    tables: dict[InstancePlan, Any] = {}

    def costs(inst: InstancePlan):
        key = InstancePlan(**{**inst.__dict__, "count": 1})
        if key not in tables:
            tables[key] = step_costs(spec, inst, eng, recipe, device)
        return tables[key]

    n = 0
    for c in shortlist(res, space, ttft_ms, tpot_ms):
        insts = instance_plans(c, max_model_len=wl.max_len, isl=wl.isl, kv_cache_dtype=space.kv_cache_dtype)
        reps = 1
        if c.mode == "agg":
            reps = insts[0].count
            insts = [InstancePlan(**{**insts[0].__dict__, "count": 1})]
        dep = Deployment(spec, eng, recipe, device, insts)
        dep._costs = [costs(i) for i in insts]
        dec = insts[-1]
        slots = dec.count * dec.dp * dec.max_num_seqs
        conc, m = slots, None
        for _ in range(LADDER):
            run = simulate(dep, BenchWorkload(conc, wl.isl, wl.osl, 2 * conc, acceptance=space.acceptance,
                                              prefix_caching=False))
            m = metrics(run)
            ok = m["completed"] == m["num_prompts"] and m["mean_ttft_ms"] <= ttft_ms and m["mean_tpot_ms"] <= tpot_ms
            if ok or conc == 1:
                break
            conc = max(1, conc // 2)
        n += 1
        c.estimate = {"ttft_ms": c.ttft_ms, "tpot_ms": c.tpot_ms, "tok_s_die": c.tok_s_die}
        c.simulated = True
        if m["completed"] < m["num_prompts"]:
            c.meets_sla = False         # figures stay the estimate's; the simulation says why it failed
            c.detail["simulation"] = (f"{m['failed']} of {m['num_prompts']} requests never finished "
                                      "(a prompt larger than the instance's KV pool)")
            continue
        c.concurrency = conc * reps
        c.ttft_ms, c.tpot_ms = m["mean_ttft_ms"], m["mean_tpot_ms"]
        c.tok_s_die = m["output_throughput"] * reps / c.dies_used
        c.tok_s_user = 1e3 / c.tpot_ms if c.tpot_ms > 0 else 0.0
        c.meets_sla = bool(ok)
    return n
