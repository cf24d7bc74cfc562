"""pin / unpin / show / diff: commands that read and edit lockfiles.

Only light modules are imported here: these commands must start fast (no numpy/onnx).
"""

from __future__ import annotations

from pathlib import Path

import typer

from reprobuild.cli.render import print_json
from reprobuild.lock.model import DEFAULT_LOCK

LockOpt = typer.Option(DEFAULT_LOCK, "--lock", "-l", help="Lockfile to read/edit.")
JsonOpt = typer.Option(False, "--json", help="Print machine-readable JSON.")


def pin(
    selections: list[str] = typer.Argument(
        ..., metavar="layer=NAME tactic=TACTIC ...", help="Pairs of layer=/key= and tactic=."
    ),
    lock: Path = LockOpt,
    force: bool = typer.Option(False, "--force", help="Allow a tactic that is not a candidate."),
    as_json: bool = JsonOpt,
) -> None:
    """Pin layers to tactics in the lock.

    TACTIC is a tactic hash (0x..., compared as an integer) or a kernel name, and must be
    one of the layer's recorded candidates unless --force. A layer name that appears
    more than once is selected with key=0x... instead.

    \b
    Example:
      reprobuild pin layer=conv1 tactic=0x665ded9abbf88 layer=fc tactic=ref_gemm_blas
    """
    from reprobuild.lock.edit import edit_lock

    changes = edit_lock(lock, selections, force=force)
    if as_json:
        print_json({"lock": str(lock), "pinned": [c.to_json() for c in changes]})
        return
    for c in changes:
        was = "" if c.old_tactic == c.new_tactic else f" (was 0x{c.old_tactic:x})"
        typer.echo(f"pinned {c.layer} [{c.key}] -> 0x{c.new_tactic:x} {c.kernel or ''}{was}")


def unpin(
    selections: list[str] = typer.Argument(..., metavar="layer=NAME ...", help="layer= or key="),
    lock: Path = LockOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Clear the 'pinned' mark, so a re-recording build may choose the tactic again.

    The recorded tactic stays in the lock until the next recording.

    \b
    Example:
      reprobuild unpin layer=conv1 key=0x1814870c44ff0f8574df6e3dda04cbd7
    """
    from reprobuild.lock.edit import edit_lock

    changes = edit_lock(lock, selections, unpin=True)
    if as_json:
        print_json({"lock": str(lock), "unpinned": [c.to_json() for c in changes]})
        return
    for c in changes:
        typer.echo(f"unpinned {c.layer} [{c.key}] (tactic 0x{c.new_tactic:x} kept)")


def show(
    lock: Path = LockOpt,
    as_json: bool = JsonOpt,
    precision: bool = typer.Option(False, "--precision", help="Show the precision plan."),
) -> None:
    """Show the locked layers: layer, key, tactic, kernel, pinned.

    \b
    Example:
      reprobuild show --lock tactics.lock --json
    """
    from reprobuild.cli.render import format_table, print_json
    from reprobuild.lock.edit import show_rows
    from reprobuild.lock.yamlio import load_lock

    data = load_lock(lock)
    if precision:
        plan = data.precision
        if as_json:
            print_json({"lock": str(lock), "precision": plan.to_dict() if plan else None})
        elif plan is None:
            typer.echo(f"{lock}: no precision plan (the model was built as it is)")
        else:
            s = plan.settings
            typer.echo(
                f"mode: {plan.mode}  calibration: {plan.calibration}  "
                f"max_output: {s.max_output}  fp32_accumulate: {s.fp32_accumulate}"
            )
            rows = [
                [
                    n.node,
                    n.op,
                    n.precision + (f" (acc {n.accumulate})" if n.accumulate else ""),
                    n.rule,
                ]
                for n in plan.nodes
            ]
            typer.echo(format_table(["node", "op", "precision", "rule"], rows))
            counts: dict[str, int] = {}
            for n in plan.nodes:
                counts[n.precision] = counts.get(n.precision, 0) + 1
            typer.echo(
                f"{len(plan.nodes)} nodes: " + ", ".join(f"{counts[p]} {p}" for p in sorted(counts))
            )
            q = plan.quantization
            if q is not None:
                typer.echo(
                    f"int8: {q.method} calibration, batch size {q.batch_size}, {q.samples} "
                    f"samples, onnxruntime {q.onnxruntime}; {len(q.weights)} weights per channel"
                )
                acts = [[a.tensor, a.scale.hex(), f"{a.scale:.6g}"] for a in q.activations]
                typer.echo(format_table(["tensor", "scale", "(decimal)"], acts))
        return
    rows = show_rows(data)
    if as_json:
        print_json(
            {
                "lock": str(lock),
                "model": {"path": data.model.path, "sha256": data.model.sha256},
                "environment": data.environment.to_dict(),
                "settings": data.settings.to_dict(),
                "layers": rows,
            }
        )
        return
    env = data.environment
    target = ", ".join(
        f"{k}={v}" for k, v in env.to_dict().items() if v is not None and k != "backend"
    )
    typer.echo(f"model: {data.model.path} (sha256 {data.model.sha256[:12]})")
    typer.echo(f"environment: {env.backend}" + (f" ({target})" if target else ""))
    table = [
        [r["layer"], r["key"], r["tactic"], r["kernel"] or "-", "yes" if r["pinned"] else "no"]
        for r in rows
    ]
    typer.echo(format_table(["layer", "key", "tactic", "kernel", "pinned"], table))
    pinned = sum(1 for r in rows if r["pinned"])
    typer.echo(f"{len(rows)} layers, {pinned} pinned")


def diff(
    a: Path = typer.Argument(..., help="Old lock."),
    b: Path = typer.Argument(..., help="New lock."),
    as_json: bool = JsonOpt,
) -> None:
    """Compare two locks: layers added, removed, or with a changed tactic. Exit 1 if they differ.

    The precision plans are compared too: each node whose precision or deciding rule
    changed, and for INT8 locks the calibration settings and every scale that changed
    (hex float and decimal).

    \b
    Example:
      reprobuild diff main.lock tactics.lock --json
    """
    from reprobuild.cli.render import format_table
    from reprobuild.lock.diff import diff_locks
    from reprobuild.lock.yamlio import load_lock

    d = diff_locks(load_lock(a), load_lock(b))
    if as_json:
        print_json(d.to_json())
    else:
        if d.model_changed:
            typer.echo("model: different sha256")
        for what, keys in (
            ("settings", d.settings_changed),
            ("environment", d.environment_changed),
        ):
            if keys:
                typer.echo(f"{what} changed: {', '.join(keys)}")
        rows = [["+", e.layer, e.key, "", f"0x{e.tactic:x}"] for e in d.added]
        rows += [["-", e.layer, e.key, f"0x{e.tactic:x}", ""] for e in d.removed]
        rows += [
            [
                "~",
                eb.layer,
                eb.key,
                f"0x{ea.tactic:x} {ea.kernel or ''}".rstrip(),
                f"0x{eb.tactic:x} {eb.kernel or ''}".rstrip(),
            ]
            for ea, eb in d.changed
        ]
        if rows:
            typer.echo(format_table(["", "layer", "key", str(a), str(b)], rows))
        if d.precision_changed:
            typer.echo(f"precision plan changed ({len(d.precision_changed)}):")
            for c in d.precision_changed:
                typer.echo(f"  {c.line()}")
        summary = f"{len(d.added)} added, {len(d.removed)} removed, {len(d.changed)} changed"
        if d.precision_changed:
            summary += f", {len(d.precision_changed)} precision plan changes"
        typer.echo(summary if d.differs else "locks are equivalent")
    if d.differs:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    for fn in (pin, unpin, show, diff):
        app.command(fn.__name__)(fn)
