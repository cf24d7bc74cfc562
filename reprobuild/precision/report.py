"""Plans as people read them: a diff between two plans and the ``show --precision`` table.

Works on :class:`PrecisionPlan` values only, so showing or diffing a lock never imports
numpy or onnx.
"""

from __future__ import annotations

from reprobuild.lock.plan import NodePrecision, PrecisionPlan


def diff_plans(old: PrecisionPlan, new: PrecisionPlan) -> list[str]:
    """One line per difference (for ``--frozen``: a locked build fails if this is not empty)."""
    out: list[str] = []
    if old.mode != new.mode:
        out.append(f"mode: {old.mode} -> {new.mode}")
    a, b = old.settings.to_dict(), new.settings.to_dict()
    out.extend(f"settings.{k}: {a[k]!r} -> {b[k]!r}" for k in a if a[k] != b[k])
    before, after = old.by_node(), new.by_node()

    def show(n: NodePrecision) -> str:
        return f"{n.precision}/{n.rule}" + (f" (acc {n.accumulate})" if n.accumulate else "")

    for n in old.nodes:
        m = after.get(n.node)
        if m is None:
            out.append(f"node {n.node}: removed")
        elif (m.op, m.precision, m.rule, m.accumulate) != (n.op, n.precision, n.rule, n.accumulate):
            what = f"{n.op} -> {m.op}" if m.op != n.op else f"{show(n)} -> {show(m)}"
            out.append(f"node {n.node}: {what}")
    out.extend(f"node {n.node}: added ({show(n)})" for n in new.nodes if n.node not in before)
    return out


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
