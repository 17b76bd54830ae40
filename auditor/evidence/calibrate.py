"""Fit the budget terms to the engine's own memory lines (``audit calibrate --breakdown FILE``).

FILE is either an evidence JSON (``auditor/evidence/published.json`` format: rows with flags and
observed activation / non-torch figures or a ``breakdown`` line) or a text log in which a comment
line ``# audit: MODEL FLAGS...`` (e.g. ``# audit: glm-5.1 --tp 8 --dp 2 --ep 16 --sp --device a2-313t
--engine 0.21.0rc1 --max-num-batched-tokens 4096 --max-num-seqs 8``) names the deployment of the log
lines after it; lines the parser (``loglines.parse_breakdown``) recognises are its observations.

Two constants are fitted: the activation scale ``s`` (observed P_act = s x audit's profile-run peak;
least squares through the origin) and the non-torch runtime constant ``c`` (observed N = audit's
touched HCCL buffers + c; the mean residual). With three or more rows each row is also predicted
from the others (leave-one-out).
"""
from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from ..errors import AuditInputError
from . import GiB, Row, load_corpus, parse_flags


def _rows_from_text(path: Path) -> list[Row]:
    from ..engines.registry import DEFAULT_FAMILY, as_engine
    parse_breakdown = as_engine(DEFAULT_FAMILY + "@main").parse_breakdown
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as exc:
        raise AuditInputError(path, f"cannot read: {exc.strerror}") from None
    rows: list[Row] = []
    cur: dict[str, Any] | None = None
    for n, line in enumerate(text.splitlines()[:200000], 1):
        s = line.strip()
        if s.startswith("# audit:"):
            toks = shlex.split(s[len("# audit:"):]) if s[len("# audit:"):].strip() else []
            if not toks:
                raise AuditInputError(path, f"line {n}: '# audit:' needs a model and flags")
            model, rest = toks[0], toks[1:]
            engine = "main"
            if "--engine" in rest:
                i = rest.index("--engine")
                if i + 1 >= len(rest):
                    raise AuditInputError(path, f"line {n}: --engine needs a value")
                engine = rest[i + 1]
                del rest[i:i + 2]
            cur = {"model": model, "engine": engine, "flags": parse_flags(shlex.join(rest), f"{path}: line {n}"),
                   "n": n}
            continue
        p = parse_breakdown(s)
        if p is None:
            continue
        if cur is None:
            raise AuditInputError(path, f"line {n}: a memory line before any '# audit: MODEL FLAGS' line")
        obs = {"runs": True, "weights_gib": p["weights_gib"], "activation_gib": p["activation_gib"],
               "non_torch_gib": p["non_torch_gib"]}
        rows.append(Row(f"line {n}", f"{path.name}:{n}", cur["model"], cur["engine"], cur["flags"], "", obs))
    if not rows:
        raise AuditInputError(path, "no memory breakdown / profiling line under a '# audit:' line")
    return rows


def load_rows(path: str | Path) -> list[Row]:
    path = Path(path)
    if path.suffix.lower() == ".json":
        rows = load_corpus(path)
    else:
        rows = _rows_from_text(path)
    return rows


def _terms(row: Row) -> tuple[float, float] | None:
    """(audit's activation peak, audit's touched HCCL bytes) in GiB for a row in the family."""
    from .. import evidence
    if row.model is None:
        return None
    pred = evidence.predict(row)
    if pred is None:
        return None
    from ..engines.registry import as_engine
    return pred["activation_gib"], pred["non_torch_gib"] - as_engine(row.engine).runtime_non_torch_bytes / GiB


def fit_breakdown(rows: list[Row]) -> dict[str, Any]:
    """Fitted constants, per-row residuals and leave-one-out errors."""
    data = []
    for r in rows:
        obs = r.observed
        if obs.get("activation_gib") is None and obs.get("non_torch_gib") is None:
            continue
        t = _terms(r)
        if t is None:
            continue
        data.append((r.id, t[0], t[1], obs.get("activation_gib"), obs.get("non_torch_gib")))
    if not data:
        raise AuditInputError("--breakdown", "no row of audit's model family with activation / non-torch figures")

    def fit(sub: list) -> tuple[float, float]:
        act = [(p, o) for _, p, _, o, _ in sub if o is not None and p > 0]
        s = sum(p * o for p, o in act) / sum(p * p for p, _ in act) if act else 1.0
        nt = [o - h for _, _, h, _, o in sub if o is not None]
        c = sum(nt) / len(nt) if nt else 0.0
        return s, c

    s, c = fit(data)
    out_rows = []
    for i, (rid, p, h, oa, on) in enumerate(data):
        row = {"id": rid, "activation_pred_gib": p * s, "activation_obs_gib": oa,
               "non_torch_pred_gib": h + c, "non_torch_obs_gib": on}
        if len(data) >= 3:
            s_i, c_i = fit(data[:i] + data[i + 1:])
            row["activation_loo_gib"] = p * s_i
            row["non_torch_loo_gib"] = h + c_i
        out_rows.append(row)
    return {"activation_scale": s, "non_torch_runtime_gib": c, "rows": out_rows}


def render_fit(res: dict[str, Any]) -> str:
    from tabulate import tabulate

    def g(x: Any) -> str:
        return "-" if x is None else f"{x:.2f}"
    body = [[r["id"], g(r["activation_obs_gib"]), g(r["activation_pred_gib"]), g(r.get("activation_loo_gib")),
             g(r["non_torch_obs_gib"]), g(r["non_torch_pred_gib"]), g(r.get("non_torch_loo_gib"))]
            for r in res["rows"]]
    head = ["row", "act obs", "act fit", "act LOO", "non-torch obs", "non-torch fit", "non-torch LOO"]
    return (f"activation scale {res['activation_scale']:.3f} x audit's profile-run peak; non-torch runtime "
            f"constant {res['non_torch_runtime_gib']:.3f} GiB (besides the HCCL buffers the profile run touches)\n"
            + tabulate(body, headers=head, tablefmt="simple", disable_numparse=True) + "\n")
