"""The host model: host time of one engine step, shared by ``audit perf``, ``audit sweep`` and
``audit bench`` (one model, one set of constants: the device profile's ``serving`` block).

What runs decides what the host pays (research/serving-facts.md §6; docs/long-context-kernels.md §6):

* an eager step (any prefill chunk: under ``FULL_DECODE_ONLY`` only uniform decode batches are
  captured, ``graph_mode.md:14-45``; one eager DP rank makes every rank eager,
  ``model_runner_v1.py:4905-4911``) launches every kernel and collective of the program one by one:
  ``launches x launch_us``, plus ``prefill_token_us`` per prefill token a rank runs (work the roofline
  misses in eager prefill), plus ``step_ms``. Under DSA-CP each TP rank runs its share of the step's
  tokens through the whole layer with the attention weights whole (``sfa_cp.py:147-153``@182b75ea): a
  rank runs tokens / TP of them, at its own price ``cp_prefill_token_us``, fitted apart on the CI rows
  that run DSA-CP (``auditor.ci_calibration``): the plain-TP rows that fix ``prefill_token_us`` run every
  token through 1/TP-wide kernels, a different shape, so the plain-TP price says nothing about it;
* a graph decode step pays ``step_ms`` (replay, scheduling, sampling) and, on GLM models, whose MTP
  drafter is forced eager (``llm_base_proposer.py:178-197``), the drafter's kernels K times at
  ``draft_launch_us``: a price of its own, since the drafter's small kernels are launched back to back
  behind a replayed graph, not between the long kernels of an eager prefill step (its default, when a
  profile does not name it, is ``launch_us``);
* every step pays ``decode_token_us`` per decode token;
* with ``--async-scheduling`` (vLLM's ``AsyncScheduler``: the next step is scheduled and its inputs
  prepared while the device runs this one) the share ``async_overlap`` of ``step_ms`` overlaps the step's
  device time (what does not overlap, e.g. sampling and the replay launch, stays on the critical path);
  fitted on the rows whose launches set the flag (``serving_core.simulate``; bench only).

The formula itself is ``kernels/serving_core.step_host`` (the simulation's inner loop calls it);
this module counts the launches of a program and reads the constants.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from auditor_kernels import kinds as K

#: host-model constants when a device profile has no ``serving`` block (uncalibrated guesses)
DEFAULT_HOST = {"launch_us": 30.0, "prefill_token_us": 0.0, "decode_token_us": 0.0, "step_ms": 10.0,
                "draft_launch_us": 30.0, "async_overlap": 1.0, "cp_prefill_token_us": 0.0}
HOST_KEYS = ("launch_us", "prefill_token_us", "decode_token_us", "step_ms", "draft_launch_us", "async_overlap",
             "cp_prefill_token_us")


def host_params(device: Any) -> np.ndarray:
    """[launch s, prefill-token s, decode-token s, step s, drafter launch s, async share, DSA-CP prefill-token
    s] from the device profile's serving block (a block without ``draft_launch_us`` prices the drafter's
    launches at ``launch_us``; one without ``cp_prefill_token_us`` prices a DSA-CP rank's tokens at
    ``prefill_token_us``)."""
    blk = serving_block(device)
    return np.array([blk["launch_us"] * 1e-6, blk["prefill_token_us"] * 1e-6, blk["decode_token_us"] * 1e-6,
                     blk["step_ms"] * 1e-3, blk["draft_launch_us"] * 1e-6, blk["async_overlap"],
                     blk["cp_prefill_token_us"] * 1e-6])


def serving_block(device: Any) -> dict[str, float]:
    """Every host constant of the device profile's serving block in its own unit (us / ms / share), with the
    defaults and the two fallbacks ``host_params`` prices by: a missing ``draft_launch_us`` is ``launch_us``,
    a missing ``cp_prefill_token_us`` is ``prefill_token_us`` (``audit calibrate`` reads the same values)."""
    own = getattr(device, "serving", None) or {}
    blk = {**DEFAULT_HOST, **own}
    blk["draft_launch_us"] = own.get("draft_launch_us", blk["launch_us"])
    blk["cp_prefill_token_us"] = own.get("cp_prefill_token_us", blk["prefill_token_us"])
    return {k: float(blk[k]) for k in HOST_KEYS}


def full_host(hp: Any) -> np.ndarray:
    """A host vector in the 7-slot form: a 4-slot one (no drafter price) prices the drafter at ``launch``; a
    missing async overlap share is 1 (all of step_ms hidden under --async-scheduling); a missing DSA-CP
    token price is the plain one."""
    hp = np.asarray(hp, dtype=np.float64)
    if hp.shape[0] < 5:
        hp = np.append(hp, hp[0])
    if hp.shape[0] < 6:
        hp = np.append(hp, 1.0)
    return hp if hp.shape[0] >= 7 else np.append(hp, hp[1])


def _mult(mode: np.ndarray, mtp: int) -> np.ndarray:
    return np.where(mode == K.MULT_ALWAYS, 1.0, np.where(mode == K.MULT_FIRST_MTP, 1.0 if mtp >= 1 else 0.0,
                                                         max(mtp - 1.0, 0.0)))


def launch_counts(arrays: tuple, mtp: int) -> tuple[float, float]:
    """(launches of one step, launches of the drafter's passes) of a program: every op that launches a
    kernel (not layout ops, not the top-k fused into the indexer) and every collective, times its layer
    count and its MTP multiplicity."""
    op_i, op_f, op_m, co_i, co_f, co_m = arrays
    launches = (op_i[:, K.OPI_KIND] != K.ZERO) & (op_i[:, K.OPI_KIND] != K.IDX_TOPK)
    n_op = op_f[:, K.OPF_COUNT] * _mult(op_m, mtp) * launches
    n_co = co_f[:, K.COF_COUNT] * _mult(co_m, mtp)
    total = float(n_op.sum() + n_co.sum())
    draft = float(n_op[op_m != K.MULT_ALWAYS].sum() + n_co[co_m != K.MULT_ALWAYS].sum())
    return total, draft


@dataclass(frozen=True)
class HostModel:
    """Launch counts of one deployment's programs and the device's constants."""

    launches_eager: float       # kernels + collectives of one eager step (prefill program, drafter included)
    launches_draft: float       # kernels + collectives of the drafter's K passes when it runs eager, else 0
    hp: np.ndarray              # host_params(device)
    token_split: float = 1.0    # ranks a prefill step's tokens are split over (``Program.token_split``)

    def step_s(self, eager: bool, prefill_tokens: float, decode_tokens: float) -> float:
        from auditor_kernels.serving_core import step_host
        return float(step_host(eager, float(prefill_tokens), float(decode_tokens), self.launches_eager,
                               self.launches_draft, full_host(self.hp), self.token_split))

    def overlap_s(self, eager: bool, device_s: float) -> float:
        """Host seconds of one step that ``--async-scheduling`` hides behind its ``device_s`` of device work:
        the share ``async_overlap`` of what may overlap (``serving_core.async_host``), at most the device
        time; the simulation subtracts the same from each step (``serving_core.simulate``)."""
        from auditor_kernels.serving_core import async_host
        hp = full_host(self.hp)
        return float(hp[5] * min(async_host(eager, self.launches_draft, hp), device_s))

    def steps_s(self, eager: bool, prefill_tokens: np.ndarray, decode_tokens: np.ndarray) -> np.ndarray:
        """``step_s`` over arrays (the sweep's rows); the same formula as ``serving_core.step_host``
        (a test checks them against each other)."""
        hp = full_host(self.hp)
        h = hp[3] + np.asarray(decode_tokens, dtype=np.float64) * hp[2]
        if eager:
            per = hp[6] if self.token_split > 1.0 else hp[1]
            return h + self.launches_eager * hp[0] + np.asarray(prefill_tokens, dtype=np.float64) / self.token_split * per
        return h + self.launches_draft * hp[4]


def host_model(spec: Any, pre: Any, dec: Any, mtp: int, device: Any, hp: np.ndarray | None = None,
               engine: Any = None, draft_eager: bool = False, async_scheduling: bool = False) -> HostModel:
    """The host model of a deployment from its prefill and decode ``Program``s; the drafter runs eager when
    the launch says so (``draft_eager``: speculative_config enforce_eager, ``llm_base_proposer.py:178``@182b75ea
    ``use_cuda_graph = ... and not enforce_eager``) or the engine's version forces it, for the model or with
    ``async_scheduling`` (``Engine.drafter_eager``; None: the default engine's)."""
    n_eager, _ = launch_counts(pre.arrays(), mtp)
    _, n_draft = launch_counts(dec.arrays(), mtp)
    from ..engines.registry import as_engine
    eager = bool(draft_eager) or as_engine(engine).drafter_eager(spec, async_scheduling)
    return HostModel(n_eager, n_draft if eager else 0.0,
                     host_params(device) if hp is None else full_host(hp),
                     float(pre.token_split))


__all__ = ["DEFAULT_HOST", "HOST_KEYS", "host_params", "serving_block", "full_host", "launch_counts", "HostModel", "host_model"]
