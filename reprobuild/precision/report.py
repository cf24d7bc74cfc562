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
    return out + _diff_quant(old, new)


def _diff_quant(old: PrecisionPlan, new: PrecisionPlan) -> list[str]:
    """INT8: calibration settings, data and every scale that changed (hex floats)."""
    qa, qb = old.quantization, new.quantization
    if qa is None or qb is None:
        return [] if qa is qb else [f"quantization: {'added' if qa is None else 'removed'}"]
    a, b = qa.to_dict(), qb.to_dict()
    keys = ("method", "batch_size", "samples", "data_sha256", "onnxruntime", "float", "opset")
    defaults = {"float": "fp32"}  # absent from older locks
    a, b = ({k: d.get(k, defaults.get(k)) for k in keys} for d in (a, b))
    out = [f"quantization.{k}: {a[k]!r} -> {b[k]!r}" for k in keys if a[k] != b[k]]
    sa, sb = qa.scales(), qb.scales()
    for t in sorted(set(sa) | set(sb)):
        if sa.get(t) != sb.get(t):
            was = "-" if t not in sa else sa[t].hex()
            now = "-" if t not in sb else sb[t].hex()
            out.append(f"scale {t}: {was} -> {now}")
    wa = {w.tensor: w for w in qa.weights}
    wb = {w.tensor: w for w in qb.weights}
    out.extend(
        f"weight scales {t}: changed" for t in sorted(set(wa) | set(wb)) if wa.get(t) != wb.get(t)
    )
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
