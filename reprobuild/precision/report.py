"""Plans as people read them: the ``node  op  precision  rule`` table.

Works on :class:`PrecisionPlan` values only (never numpy or onnx). The diff of two plans
lives in :mod:`reprobuild.lock.plandiff`, beside the lock diff that shows it.
"""

from __future__ import annotations

from reprobuild.lock.plan import PrecisionPlan


def format_plan_table(plan: PrecisionPlan) -> str:
    """Aligned ``node  op  precision  rule`` table, with a header line and a count summary."""
    rows = [("NODE", "OP", "PRECISION", "RULE")]
    for n in plan.nodes:
        prec = n.precision + (f" (acc {n.accumulate})" if n.accumulate else "")
        rows.append((n.node, n.op, prec, n.rule))
    widths = [max(len(r[c]) for r in rows) for c in range(3)]
    lines = [
        f"precision plan: mode {plan.mode}"
        + (f", calibration {plan.calibration}" if plan.calibration else "")
    ]
    for r in rows:
        lines.append("  ".join(r[c].ljust(widths[c]) for c in range(3)) + "  " + r[3])
    counts: dict[str, int] = {}
    for n in plan.nodes:
        counts[n.precision] = counts.get(n.precision, 0) + 1
    summary = ", ".join(f"{counts[p]} {p}" for p in sorted(counts))
    lines.append(f"{len(plan.nodes)} nodes: {summary}" if plan.nodes else "0 nodes")
    return "\n".join(line.rstrip() for line in lines)
