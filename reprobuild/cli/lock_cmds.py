"""pin / unpin / show / diff: commands that read and edit lockfiles.

Only light modules are imported here: these commands must start fast (no numpy/onnx), so
the lock modules they use are imported inside the commands, each only where it is needed.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from reprobuild.cli.render import (
    echo,
    echo_lines,
    format_table,
    print_json,
    shown,
    table_lines,
)
from reprobuild.gcpause import paused_gc
from reprobuild.lock.model import DEFAULT_LOCK
from reprobuild.words import count

if TYPE_CHECKING:
    from reprobuild.lock.diff import LockDiff
    from reprobuild.lock.edit import Edit
    from reprobuild.lock.model import LayerEntry, Lock
    from reprobuild.types import Environment

LockOpt = typer.Option(DEFAULT_LOCK, "--lock", "-l", help="Lockfile to read/edit.")
JsonOpt = typer.Option(False, "--json", help="Print machine-readable JSON.")
TargetOpt = typer.Option(
    None,
    "--target",
    help="The lock's target (a name or prefix) [default: the only one, or this machine's].",
)


def this_machine(lock: Lock) -> Environment | None:
    """This machine's environment for the backend of the lock's targets (imports that
    backend: asked only when a lock has several targets and no --target is given)."""
    from reprobuild.backends import get_backend
    from reprobuild.errors import ReprobuildError

    backends = {t.environment.backend for t in lock.targets()}
    if len(backends) != 1:
        return None
    try:
        return get_backend(backends.pop()).environment()
    except ReprobuildError:  # TensorRT not installed here: no target is this machine's
        return None


def _chosen(lock: Path, target: str | None) -> Lock:
    from reprobuild.lock.targets import choose
    from reprobuild.lock.yamlio import load_lock

    return choose(load_lock(lock), str(lock), target, this_machine)


def pin(
    selections: list[str] = typer.Argument(
        ..., metavar="layer=NAME tactic=TACTIC ...", help="Pairs of layer=/key= and tactic=."
    ),
    lock: Path = LockOpt,
    force: bool = typer.Option(False, "--force", help="Allow a tactic that is not a candidate."),
    target: str | None = TargetOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Pin layers to tactics in the lock (one target's section; the others keep theirs).

    TACTIC is a tactic hash (0x..., compared as an integer) or a kernel name, and must be
    one of the layer's recorded candidates unless --force. A layer name that appears
    more than once is selected by the tactic where it is a candidate of one of its keys
    only, else with key=0x... instead.

    \b
    Example:
      reprobuild pin layer=conv1 tactic=0x665ded9abbf88 layer=fc tactic=ref_gemm_blas
    """
    with paused_gc():
        from reprobuild.lock.edit import edit_lock

        done = edit_lock(lock, selections, force=force, target=target, here=this_machine)
        if as_json:
            print_json({"lock": str(lock), **done.to_json("pinned")})
            return
        for c in done.changes:
            was = "" if c.old_tactic == c.new_tactic else f" (was 0x{c.old_tactic:x})"
            echo(f"pinned {c.layer} [{c.key}] -> 0x{c.new_tactic:x} {c.kernel or ''}{was}")
        _say_cleared(lock, done)


def unpin(
    selections: list[str] = typer.Argument(..., metavar="layer=NAME ...", help="layer= or key="),
    lock: Path = LockOpt,
    target: str | None = TargetOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Clear the 'pinned' mark, so a re-recording build may choose the tactic again.

    The recorded tactic stays in the lock until the next recording
    (`reprobuild build --re-record`).

    \b
    Example:
      reprobuild unpin layer=conv1 key=0x1814870c44ff0f8574df6e3dda04cbd7
    """
    with paused_gc():
        from reprobuild.lock.edit import edit_lock

        done = edit_lock(lock, selections, unpin=True, target=target, here=this_machine)
        if as_json:
            print_json({"lock": str(lock), **done.to_json("unpinned")})
            return
        for c in done.changes:
            if c.was_pinned:
                echo(f"unpinned {c.layer} [{c.key}] (tactic 0x{c.new_tactic:x} kept)")
            else:
                echo(f"{c.layer} [{c.key}] was not pinned; nothing to unpin")
        _say_cleared(lock, done)


def _say_cleared(lock: Path, done: Edit) -> None:
    """Which target's expected bits an edit cleared, and the commands that record them
    again (until then, ``verify`` has no bits to compare across machines)."""
    if not done.cleared:  # nothing to say: verify still compares with the recorded bits
        return
    inputs = ", ".join(o.inputs for o in done.cleared)
    echo(
        f"target {done.target}: cleared its expected bits for {inputs} (the old tactics' "
        f"bits); record them again on a machine of this target: `reprobuild build MODEL "
        f"--lock {lock}` (without --frozen) records seeded:0, `reprobuild verify --lock "
        f"{lock} --record-digests [--inputs FILE]` any inputs"
    )


def show(
    lock: Path = LockOpt,
    as_json: bool = JsonOpt,
    precision: bool = typer.Option(False, "--precision", help="Show the precision plan."),
    target: str | None = TargetOpt,
    targets: bool = typer.Option(False, "--targets", help="List the lock's targets."),
    candidates: bool = typer.Option(
        False, "--candidates", help="List every recorded candidate of each layer (what pin takes)."
    ),
    report: Path | None = typer.Option(
        None,
        "--report",
        help="With --candidates: the recording build's ENGINE.report.json, for every "
        "candidate's time [default: the locked candidate's time only, from the lock].",
    ),
) -> None:
    """Show the locked layers of one target: layer, key, tactic, kernel, pinned.

    \b
    Example:
      reprobuild show --lock tactics.lock --json
      reprobuild show --candidates          # the tactics `reprobuild pin` can choose
      reprobuild show --candidates --report model.engine.report.json   # with their times
      reprobuild show --targets
    """
    with paused_gc():
        if targets:
            from reprobuild.lock.yamlio import load_lock

            _show_targets(lock, load_lock(lock), as_json)
            return
        data = _chosen(lock, target)
        if precision:
            _show_precision(lock, data, as_json)
            return
        if report is not None and not candidates:
            from reprobuild.errors import UsageError

            raise UsageError("--report gives the candidates' times: use it with --candidates")
        if candidates:
            _show_candidates(lock, data, as_json, report)
            return
        if as_json:
            from reprobuild.lock.edit import show_rows

            print_json(
                {
                    "lock": str(lock),
                    "model": {"path": data.model.path, "sha256": data.model.sha256},
                    "target": data.target_name,
                    "environment": data.environment.to_dict(),
                    "settings": data.settings.to_dict(),
                    "layers": show_rows(data),
                }
            )
            return
        env = data.environment
        fields = ", ".join(f"{k}={shown(v)}" for k, v in env.identity)
        echo(f"model: {shown(data.model.path)} (sha256 {data.model.sha256[:12]})")
        echo(f"target: {env.name} ({env.backend}" + (f": {fields})" if fields else ")"))
        table = [
            [
                shown(e.layer),
                e.key,
                f"0x{e.tactic:x}",
                shown(e.kernel or "-"),
                "yes" if e.pinned else "no",
            ]  # fmt: skip
            for e in data.layers
        ]
        head = ["layer", "key", "tactic", "kernel", "pinned"]
        near = sum(1 for e in data.layers if e.near_tie)
        if near:  # a column only where the recording saw near-ties (docs/stability.md)
            head.append("near-tie")
            for row, e in zip(table, data.layers, strict=True):
                row.append(f"{len(e.ties)} within {e.band_ms:.3g} ms" if e.near_tie else "")
        from reprobuild.lock.rules import violations

        denied = violations(data.settings, data.layers)
        if denied:  # a column only where a rule denies a locked tactic (a build refuses)
            head.append("denied by")
            by_key = {v.entry.key: v.rule.describe() for v in denied}
            for row, e in zip(table, data.layers, strict=True):
                row.append(by_key.get(e.key, ""))
        echo_lines(table_lines(head, table))
        for r in data.settings.deny:
            echo(f"rule: deny {shown(r.describe())}")
        pinned = sum(1 for e in data.layers if e.pinned)
        tail = f", {near} near-tie (rule-decided)" if near else ""
        tail += f", {len(denied)} denied by a rule" if denied else ""
        echo(f"{count(len(data.layers), 'layer')}, {pinned} pinned{tail}")


def diff(
    a: Path = typer.Argument(..., help="Old lock."),
    b: Path = typer.Argument(..., help="New lock."),
    target: str | None = TargetOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Compare two locks: everything that decides the engine (tactics, pins, which key a
    layer of several keys runs and those keys' times, output digests, model, settings,
    precision plan). Exit 1 if they differ: exactly when `merge` refuses them as one target.

    \b
    Example:
      reprobuild diff main.lock tactics.lock --json
    """
    with paused_gc():
        from reprobuild.lock.diff import diff_locks

        d = diff_locks(_chosen(a, target), _chosen(b, target))
        if as_json:
            print_json(d.to_json())
        else:
            _print_diff(a, b, d)
    if d.differs:
        raise typer.Exit(1)


def _print_diff(a: Path, b: Path, d: LockDiff) -> None:
    if d.model_changed:
        echo("model: different sha256")
    for what, keys in (
        ("settings", d.settings_changed),
        ("target identity", d.environment_changed),
        ("advisory fields (not a difference)", d.advisory_changed),
    ):
        if keys:
            echo(f"{what} changed: {', '.join(keys)}")
    for sign, rules in (("+", d.rules_added), ("-", d.rules_removed)):
        for r in rules:
            echo(f"rule {sign} deny {shown(r.describe())}")
    rows = [["+", e.layer, e.key, "", _entry_text(e), ""] for e in d.added]
    rows += [["-", e.layer, e.key, _entry_text(e), "", ""] for e in d.removed]
    rows += [
        ["~", c.b.layer, c.b.key, _entry_text(c.a), _entry_text(c.b)]
        + [", ".join(c.fields) + "; " + c.label]
        for c in d.changed
    ]
    if rows:
        echo_lines(table_lines(["", "layer", "key", str(a), str(b), "changed"], rows))
    for k in d.key_choice_changed:
        echo(f"key choice changed: {k.layer} runs {k.key_a or '-'} -> {k.key_b or '-'}")
    for o in d.outputs_changed:
        echo(f"output digest changed ({o.inputs}): {_short(o.sha256_a)} -> {_short(o.sha256_b)}")
    if d.precision_changed:
        echo(f"precision plan changed ({len(d.precision_changed)}):")
        echo_lines(
            [
                f"  {c.line()}" + (f"\n      {c.detail}" if c.detail else "")
                for c in d.precision_changed
            ]
        )
    summary = f"{len(d.added)} added, {len(d.removed)} removed, {len(d.changed)} changed"
    labels = [c.label for c in d.changed]
    pinned, noise = labels.count("pinned"), labels.count("noise (in band)")
    notes = [f"{pinned} pinned"] * bool(pinned) + [f"{noise} inside the tie band: noise"] * bool(
        noise
    )
    if notes:
        summary += f" ({'; '.join(notes)})"
    for n, what in (
        (len(d.key_choice_changed), "key choice"),
        (len(d.outputs_changed), "output digest"),
    ):
        if n:
            summary += f", {count(n, what)} changed"
    if d.precision_changed:
        summary += f", {count(len(d.precision_changed), 'precision plan change')}"
    echo(summary if d.differs else "locks are equivalent")


def _entry_text(e: LayerEntry) -> str:
    """A side of a diff row: tactic and kernel, the recorded time, and a pin. A pinned key
    keeps the time recorded for the builder's choice (what decides between a layer's keys),
    so that time is labelled as the key's, not shown as the pinned kernel's."""
    head = f"0x{e.tactic:x} {e.kernel or ''}".rstrip()
    if e.time_ms is None:
        return head + (" pinned" if e.pinned else "")
    if e.pinned:
        return f"{head} pinned (the key keeps {e.time_ms:.4g} ms)"
    return f"{head} {e.time_ms:.4g} ms"


def _short(digest: str | None) -> str:
    return "-" if digest is None else digest[:12]


def _show_candidates(lock: Path, data: Lock, as_json: bool, report: Path | None) -> None:
    """One row per recorded candidate with its recorded time where known; the locked one
    is marked, as ``pin`` needs a candidate's tactic or kernel name."""
    from reprobuild.lock.edit import candidate_rows, report_times

    layers = candidate_rows(data, {} if report is None else report_times(report))
    if as_json:
        print_json({"lock": str(lock), "target": data.target_name, "layers": layers})
        return
    rows = [
        [
            e["layer"],
            e["key"],
            c["tactic"],
            c["kernel"] or "-",
            "-" if c["time_ms"] is None else f"{c['time_ms']:.4g}",
            "yes" if c["tactic"] == e["tactic"] else "no",
            *([c.get("denied", "")] if data.settings.deny else []),
        ]
        for e in layers
        for c in e["candidates"]
    ]
    head = ["layer", "key", "tactic", "kernel", "time (ms)", "locked"]
    echo_lines(table_lines(head + ["denied by"] * bool(data.settings.deny), rows))
    total = sum(len(e["candidates"]) for e in layers)
    echo(f"{count(total, 'candidate')} of {count(len(layers), 'layer')}")


def _show_targets(lock: Path, data: Lock, as_json: bool) -> None:
    rows = [
        {
            "target": t.name,
            "backend": t.environment.backend,
            "identity": t.environment.identity_dict(),
            "advisory": t.environment.advisory_dict(),
            "layers": len(t.layers),
            "pinned": sum(1 for e in t.layers if e.pinned),
            "outputs": [{"inputs": o.inputs, "sha256": o.sha256} for o in t.outputs],
        }
        for t in data.targets()
    ]
    if as_json:
        print_json({"lock": str(lock), "targets": rows})
        return
    for r in rows:
        ident = ", ".join(f"{k}={shown(v)}" for k, v in r["identity"].items()) or "none recorded"
        echo(f"{r['target']}: {count(r['layers'], 'layer')}, {r['pinned']} pinned, "
             f"{count(len(r['outputs']), 'recorded digest')}")  # fmt: skip
        echo(f"  identity: {ident}")
        if r["advisory"]:
            echo("  advisory: " + ", ".join(f"{k}={shown(v)}" for k, v in r["advisory"].items()))
    n = len(rows)
    echo(f"{n} target{'s' if n != 1 else ''}")


_FIRST_SETTINGS = ("keep_fp32", "keep_fp32_ops", "max_output", "max_reduction_depth",
                   "fp32_accumulate", "keep_io_types")  # fmt: skip


def _show_precision(lock: Path, data: Lock, as_json: bool) -> None:
    plan = data.precision
    if as_json:
        print_json({"lock": str(lock), "precision": plan.to_dict() if plan else None})
    elif plan is None:
        echo(f"{lock}: no precision plan (the model was built as it is)")
    else:
        from reprobuild.lock.planwords import sentence

        s = plan.settings
        echo(
            f"mode: {plan.mode}  calibration: {plan.calibration}  "
            f"max_output: {s.max_output}  fp32_accumulate: {s.fp32_accumulate}"
        )
        later = {k: v for k, v in s.to_dict().items() if k not in _FIRST_SETTINGS}
        if not s.keep_io_types:
            later = {"keep_io_types": False, **later}
        if later:
            echo("settings: " + "  ".join(f"{k}: {v}" for k, v in later.items()))
        if plan.opset is not None:
            o = plan.opset
            echo(f"opset: {o.source} -> {o.target} (onnx {o.onnx}): {o.reason}")
        rows = [
            [
                n.node,
                n.op,
                n.precision + (f" (acc {n.accumulate})" if n.accumulate else ""),
                n.rule,
                sentence(plan, n),
            ]
            for n in plan.nodes
        ]
        echo(format_table(["node", "op", "precision", "rule", "why"], rows))
        counts: dict[str, int] = {}
        for n in plan.nodes:
            counts[n.precision] = counts.get(n.precision, 0) + 1
        echo(f"{len(plan.nodes)} nodes: " + ", ".join(f"{counts[p]} {p}" for p in sorted(counts)))
        q = plan.quantization
        if q is not None:
            extra = f"; float {q.float_precision}" if q.float_precision != "fp32" else ""
            if q.opset is not None:
                o = q.opset.to_dict()
                extra += f"; opset {o['from']} -> {o['to']} (onnx {o['onnx']})"
            echo(
                f"int8: {q.method} calibration, batch size {q.batch_size}, {q.samples} "
                f"samples, onnxruntime {q.onnxruntime}; {len(q.weights)} weights per channel"
                + extra
            )
            acts = [[a.tensor, a.scale.hex(), f"{a.scale:.6g}"] for a in q.activations]
            echo(format_table(["tensor", "scale", "(decimal)"], acts))


def register(app: typer.Typer) -> None:
    for fn in (pin, unpin, show, diff):
        app.command(fn.__name__)(fn)
