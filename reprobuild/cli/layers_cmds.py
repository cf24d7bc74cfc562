"""``reprobuild layers FILE`` and ``reprobuild layers diff A B``: what an engine really runs.

A command of its own rather than a ``log`` subcommand: trtexec (``--exportLayerInfo``),
Polygraphy (``inspect model --show layers``) and trex all treat layer information as a
thing of the *engine*, not of the build log, and most inputs here are not logs at all
(inspector JSON, engines). It still reads the layer lines inside a log, so a Torch-TensorRT
debug log works too.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer

from reprobuild.cli.groups import ShowByDefaultGroup
from reprobuild.cli.render import format_table, print_json

JsonOpt = typer.Option(False, "--json", help="Print machine-readable JSON.")


layers_app = typer.Typer(
    cls=ShowByDefaultGroup,
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,
    help=(
        "Show what an engine runs, layer by layer: type, input/output precisions and formats, "
        "the precision the kernel sums in, kernel, tactic value and the ONNX nodes each layer "
        "came from; quantize/dequantize steps are counted apart from compute layers.\n\n"
        "Reads trtexec --exportLayerInfo / engine-inspector JSON (TensorRT 8.x, 10.x, 11.x; "
        "detailed or names-only), logs with one-line layer information or Layer(..) lines, "
        "engines built by reprobuild (or their ENGINE.layers.json).\n\n"
        "\b\n"
        "Examples:\n"
        "  reprobuild layers model.engine\n"
        "  reprobuild layers layers.json --lock tactics.lock   # check the precision plan\n"
        "  reprobuild layers diff a.layers.json b.layers.json"
    ),
)


def _types(tensors: list[dict[str, Any]], key: str) -> str:
    seen: list[str] = []
    for t in tensors:
        value = t[key] or "-"
        if value not in seen:
            seen.append(value)
    return "/".join(seen) or "-"


def _row(row: dict[str, Any]) -> list[str]:
    return [
        row["name"],
        row["layer_type"] or "-",
        _types(row["inputs"], "precision"),
        row["accumulation"] or "-",
        _types(row["outputs"], "precision"),
        _types(row["outputs"], "format"),
        row["kernel"] or "-",
        row["tactic"] or "-",
        ", ".join(row["onnx_nodes"]) or "-",
    ]


# "acc": what the kernel sums in (INT32 for an INT8 convolution), from its name; "-" where
# the name does not say (reprobuild.logs.kernelname)
_HEADERS = ["layer", "type", "in", "acc", "out", "format", "kernel", "tactic", "onnx nodes"]


@layers_app.command("show")
def show(
    file: Path = typer.Argument(
        ..., metavar="FILE", help="Layer-information JSON, a log with layer lines, or an engine."
    ),
    lock: Path | None = typer.Option(
        None,
        "--lock",
        "-l",
        help="Also check the layers against this lock: its kernels and tactics, and its "
        "precision plan if it has one.",
    ),
    target: str | None = typer.Option(
        None, "--target", help="The lock's target to check against [default: the only one]."
    ),
    as_json: bool = JsonOpt,
) -> None:
    """One row per engine layer and a summary (compute layers per precision, quantize/
    dequantize steps, reformat layers). "acc" is the precision the kernel sums in where
    its name says it (INT32 for an INT8 convolution), "-" elsewhere.

    With --lock, each locked layer's engine layer must run its locked tactic, not another
    recorded candidate, and, where the lock has a precision plan, every layer is compared
    with it through its ONNX nodes (exit 1 when either differs).

    \b
    Example:
      reprobuild layers model.engine
      reprobuild layers layers.json --json
    """
    from reprobuild.logs.layertable import layer_json, summarize
    from reprobuild.workflow.layers import read_layer_info

    info = read_layer_info(file)
    rows = [layer_json(la) for la in info.layers]
    summary = summarize(info)
    check = kernels = None
    if lock is not None:
        from reprobuild.workflow.layers import check_against_lock_kernels

        kernels, has_plan = check_against_lock_kernels(info, lock, target)
        check = _plan_check(info, lock) if has_plan else None
    if as_json:
        data: dict[str, Any] = {
            "file": info.source or str(file),
            "detailed": info.detailed,
            "bindings": list(info.bindings),
            "layers": rows,
            "summary": summary.to_json(),
        }
        if check is not None:
            data["plan_check"] = check.to_json()
        if kernels is not None:
            data["kernel_check"] = {
                "follows": not kernels.problems,
                "problems": kernels.problems,
                "warnings": kernels.warnings,
            }
        print_json(data)
    else:
        typer.echo(format_table(_HEADERS, [_row(r) for r in rows]))
        typer.echo(summary.line())
        if kernels is not None:
            _print_kernels(kernels)
        if check is not None:
            _print_check(check)
    if (check is not None and not check.follows) or (kernels is not None and kernels.problems):
        raise typer.Exit(1)


def _print_kernels(kernels: Any) -> None:
    from reprobuild.words import count

    for line in kernels.problems + kernels.warnings:
        typer.echo(line)
    verdict = "runs the locked tactics" if not kernels.problems else "DOES NOT RUN THE LOCK"
    typer.echo(
        f"kernels and tactics: {verdict}: {count(len(kernels.problems), 'layer')} on another "
        f"recorded candidate, {count(len(kernels.warnings), 'layer')} not checkable"
    )


def _plan_check(info: Any, lock: Path) -> Any:
    from reprobuild.workflow.plancheck import check_against_lock

    return check_against_lock(info, lock)


def _print_check(check: Any) -> None:
    for v in check.verdicts:
        if v.status in ("differs", "unmapped"):
            typer.echo(v.message())
    c = check.counts()
    verdict = "follows the plan" if check.follows else "DOES NOT FOLLOW THE PLAN"
    typer.echo(
        f"precision plan: {verdict}: {c['follows']} layers follow, {c['differs']} differ, "
        f"{c['unmapped']} cannot be mapped, {c['unchecked']} unchecked"
        + (f" ({check.note})" if check.note else "")
    )


def _side(layer: Any) -> str:
    tactic = "-" if layer.tactic_value is None else f"0x{layer.tactic_value:x}"
    return f"{layer.precision or '-'} {layer.tactic_name or '-'} {tactic}"


@layers_app.command("diff")
def diff(
    a: Path = typer.Argument(..., metavar="A", help="First engine's layer information."),
    b: Path = typer.Argument(..., metavar="B", help="Second engine's layer information."),
    as_json: bool = JsonOpt,
) -> None:
    """Layers whose kernel, tactic value or precisions changed between two engines.

    Layers are matched by name (and occurrence, for repeated names). Exit 1 when anything
    changed, 0 when every layer runs the same kernel in the same precisions.

    \b
    Example:
      reprobuild layers diff monday.engine tuesday.engine
    """
    from reprobuild.logs.layertable import diff_layers
    from reprobuild.workflow.layers import read_layer_info

    result = diff_layers(read_layer_info(a), read_layer_info(b))
    if as_json:
        print_json({"a": str(a), "b": str(b), **result.to_json()})
    else:
        if result.changed:
            typer.echo(
                format_table(
                    ["layer", "changed", "A", "B"],
                    [[c.name, ",".join(c.changed), _side(c.a), _side(c.b)] for c in result.changed],
                )
            )
        for path, only in ((a, result.only_a), (b, result.only_b)):
            for la in only:
                typer.echo(f"only in {path}: {la.name}")
        verdict = "same" if result.same else "different"
        typer.echo(
            f"{verdict}: {result.compared} layer(s) compared, {len(result.changed)} changed, "
            f"{len(result.only_a)} only in A, {len(result.only_b)} only in B"
        )
    if not result.same:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.add_typer(layers_app, name="layers")
