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
    from reprobuild.lock.model import Lock
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
    more than once is selected with key=0x... instead.

    \b
    Example:
      reprobuild pin layer=conv1 tactic=0x665ded9abbf88 layer=fc tactic=ref_gemm_blas
    """
    with paused_gc():
        from reprobuild.lock.edit import edit_lock

        changes = edit_lock(lock, selections, force=force, target=target, here=this_machine)
        if as_json:
            print_json({"lock": str(lock), "pinned": [c.to_json() for c in changes]})
            return
        for c in changes:
            was = "" if c.old_tactic == c.new_tactic else f" (was 0x{c.old_tactic:x})"
            echo(f"pinned {c.layer} [{c.key}] -> 0x{c.new_tactic:x} {c.kernel or ''}{was}")


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

        changes = edit_lock(lock, selections, unpin=True, target=target, here=this_machine)
        if as_json:
            print_json({"lock": str(lock), "unpinned": [c.to_json() for c in changes]})
            return
        for c in changes:
            if c.was_pinned:
                echo(f"unpinned {c.layer} [{c.key}] (tactic 0x{c.new_tactic:x} kept)")
            else:
                echo(f"{c.layer} [{c.key}] was not pinned; nothing to unpin")


def show(
    lock: Path = LockOpt,
    as_json: bool = JsonOpt,
    precision: bool = typer.Option(False, "--precision", help="Show the precision plan."),
    target: str | None = TargetOpt,
    targets: bool = typer.Option(False, "--targets", help="List the lock's targets."),
    candidates: bool = typer.Option(
        False, "--candidates", help="List every recorded candidate of each layer (what pin takes)."
    ),
) -> None:
    """Show the locked layers of one target: layer, key, tactic, kernel, pinned.

    \b
    Example:
      reprobuild show --lock tactics.lock --json
      reprobuild show --candidates          # the tactics `reprobuild pin` can choose
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
        if candidates:
            _show_candidates(lock, data, as_json)
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
        echo_lines(table_lines(head, table))
        pinned = sum(1 for e in data.layers if e.pinned)
        tail = f", {near} near-tie (rule-decided)" if near else ""
        echo(f"{count(len(data.layers), 'layer')}, {pinned} pinned{tail}")


def diff(
    a: Path = typer.Argument(..., help="Old lock."),
    b: Path = typer.Argument(..., help="New lock."),
    target: str | None = TargetOpt,
    as_json: bool = JsonOpt,
) -> None:
    """Compare two locks: layers added, removed, or with a changed tactic. Exit 1 if they differ.

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
    head = ["", "layer", "key", str(a), str(b)]
    from reprobuild.lock.diff import in_band

    verdicts = [in_band(ea, eb) for ea, eb in d.changed]
    if any(v is not None for v in verdicts):  # a column only where a band was recorded
        head.append("change")
        words = {True: "noise (in band)", False: "real", None: "real"}
        for row in rows:
            row.append("")
        for row, v in zip(rows[len(rows) - len(verdicts) :], verdicts, strict=True):
            row[-1] = words[v]
    if rows:
        echo_lines(table_lines(head, rows))
    if d.precision_changed:
        echo(f"precision plan changed ({len(d.precision_changed)}):")
        echo_lines(
            [
                f"  {c.line()}" + (f"\n      {c.detail}" if c.detail else "")
                for c in d.precision_changed
            ]
        )
    summary = f"{len(d.added)} added, {len(d.removed)} removed, {len(d.changed)} changed"
    noise = sum(1 for v in verdicts if v)
    if noise:
        summary += f" ({noise} inside the tie band: noise)"
    if d.precision_changed:
        summary += f", {len(d.precision_changed)} precision plan changes"
    echo(summary if d.differs else "locks are equivalent")


def _show_candidates(lock: Path, data: Lock, as_json: bool) -> None:
    """One row per recorded candidate; the locked one is marked, as ``pin`` needs a
    candidate's tactic or kernel name."""
    if as_json:
        layers = [
            {
                "layer": e.layer,
                "key": e.key,
                "tactic": f"0x{e.tactic:x}",
                "pinned": e.pinned,
                "candidates": [
                    {"tactic": f"0x{c.tactic:x}", "kernel": c.kernel} for c in e.candidates
                ],
            }
            for e in data.layers
        ]
        print_json({"lock": str(lock), "target": data.target_name, "layers": layers})
        return
    rows = [
        [
            e.layer,
            e.key,
            f"0x{c.tactic:x}",
            c.kernel or "-",
            "yes" if c.tactic == e.tactic else "no",
        ]
        for e in data.layers
        for c in e.candidates
    ]
    echo_lines(table_lines(["layer", "key", "tactic", "kernel", "locked"], rows))
    total = sum(len(e.candidates) for e in data.layers)
    echo(f"{count(total, 'candidate')} of {count(len(data.layers), 'layer')}")


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
        ident = ", ".join(f"{k}={v}" for k, v in r["identity"].items()) or "none recorded"
        echo(f"{r['target']}: {count(r['layers'], 'layer')}, {r['pinned']} pinned, "
             f"{count(len(r['outputs']), 'recorded digest')}")  # fmt: skip
        echo(f"  identity: {ident}")
        if r["advisory"]:
            echo("  advisory: " + ", ".join(f"{k}={v}" for k, v in r["advisory"].items()))
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
