"""``reprobuild log FILE`` and ``reprobuild log diff A B``: read builder logs, no build needed.

Both work without TensorRT: they only parse text. Output is streamed, so a multi-GB log is
printed without being held in memory.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import typer

from reprobuild.cli.groups import ShowByDefaultGroup

JsonOpt = typer.Option(False, "--json", help="Print machine-readable JSON.")


log_app = typer.Typer(
    cls=ShowByDefaultGroup,
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,
    help=(
        "Read TensorRT (or reference backend) verbose builder logs: per-layer tactic "
        "records, timing-cache warnings, and differences between two builds.\n\n"
        "\b\n"
        "Examples:\n"
        "  reprobuild log build.log\n"
        "  reprobuild log build.log --json\n"
        "  reprobuild log diff before.log after.log"
    ),
)


def _open_checked(path: Path) -> Any:
    """The log opened once (``-``: standard input), checked before anything is printed, so
    a bad path never leaves half a JSON document: unreadable, over the size cap, holding
    no builder log line, or layer information / an engine instead of a log."""
    from reprobuild.logs.sniff import check_log_source
    from reprobuild.logs.source import open_log

    src = open_log(path)
    try:
        head = check_log_source(src)
        _refuse_layer_information(src, head)
    except BaseException:
        src.close()
        raise
    return src


def _refuse_layer_information(src: Any, head: bytes) -> None:
    """A layer-information JSON or an engine is not a log: parsing one would print "0
    record(s)" and exit 0, so name the command that reads it instead (exit 2)."""
    from reprobuild.errors import LogParseError
    from reprobuild.limits import cap
    from reprobuild.logs.layerinfo import looks_like_json, parse_layer_info

    path = src.name
    if head.startswith(b"RBREFENG"):
        raise LogParseError(
            f"{path}: is an engine built by the reference backend, not a builder log; "
            f"`reprobuild layers {path}` shows its layers"
        )
    if not looks_like_json(head[:65536]):
        return
    try:
        parse_layer_info(src.read_all(cap("layers"), "layer information"), source=path)
    except LogParseError:
        raise LogParseError(
            f"{path}: is JSON, not a verbose builder log; pass the text TensorRT logged "
            "(trtexec --verbose or a VERBOSE logger)"
        ) from None
    raise LogParseError(
        f"{path}: is engine layer information (trtexec --exportLayerInfo / engine "
        f"inspector JSON), not a builder log; read it with `reprobuild layers {path}`"
    )


def _short(text: str | None, width: int) -> str:
    if not text:
        return "-"
    return text if len(text) <= width else text[: width - 1] + "…"


@log_app.command("show")
def show(
    file: Path = typer.Argument(
        ..., metavar="FILE", help="Verbose builder log to read; - reads standard input."
    ),
    as_json: bool = JsonOpt,
) -> None:
    """Print one row per autotuned layer: layer, key, candidates, chosen tactic, kernel.

    Records come from every TensorRT log format (7.x to 11.x, trtexec, Python logger, other
    apps) and from the reference backend. Timing-cache warnings follow the table on stderr
    (in the JSON object with --json).

    \b
    Example:
      reprobuild log build.log
      reprobuild log build.log --json > records.json
      trtexec --verbose ... | reprobuild log -
    """
    from reprobuild.logs.parser import LogParser
    from reprobuild.logs.split import iter_pieces

    src = _open_checked(file)
    parser = LogParser(source=str(file))
    out = sys.stdout
    if as_json:
        from reprobuild.logs.jsonout import write_log_json_file

        write_log_json_file(out, src, parser)
        return
    header = (
        f"{'LINE':>7}  {'LAYER':<40}  {'KEY':<34}  {'CANDS':>5}  {'CHOSEN':<18}  CACHED  KERNEL"
    )
    out.write(header + "\n")
    n = cached = 0
    for piece in iter_pieces(src, parser, _rows):
        n += piece.records
        cached += piece.cached
        out.write(piece.text)
    out.write(
        f"{n} record(s), {cached} from the timing cache, "
        f"{len(parser.engine_layers)} engine layer(s), "
        f"{len(parser.warnings) + parser.warnings_dropped} warning(s)\n"
    )
    out.flush()
    if parser.engine_layers:
        typer.echo(
            f"note: {file} holds engine layer information; `reprobuild layers {file}` "
            "prints each layer's precisions, kernel and ONNX nodes",
            err=True,
        )
    if parser.warnings:  # one write: a log can hold 10,000 of them
        typer.echo(
            "\n".join(f"warning: {file}:{w.line}: {w.kind}: {w.message}" for w in parser.warnings),
            err=True,
        )
    if parser.warnings_dropped:
        typer.echo(f"warning: {parser.warnings_dropped} more warning(s) not shown", err=True)


def _rows(records: list[Any]) -> str:
    """The summary table's rows for ``records`` (made in a second process for half of a
    large log, so a plain function of the records)."""
    return "".join(
        [
            f"{rec.line:>7}  {_short(rec.layer, 40):<40}  {rec.key or '-':<34}  "
            f"{len(rec.candidates):>5}  {rec.chosen_hex or '-':<18}  "
            f"{'yes' if rec.from_cache else 'no':<6}  {rec.chosen_kernel or '-'}\n"
            for rec in records
        ]
    )


def _side(rec: Any) -> str:
    if rec.chosen is None:
        return "- (not printed)"
    kernel = f" {rec.chosen_kernel}" if rec.chosen_kernel else ""
    cached = " [cached]" if rec.from_cache else ""
    return f"0x{rec.chosen:x}{kernel}{cached}"


@log_app.command("diff")
def diff(
    a: Path = typer.Argument(..., metavar="A", help="First builder log."),
    b: Path = typer.Argument(..., metavar="B", help="Second builder log (same model)."),
    as_json: bool = JsonOpt,
) -> None:
    """Show the layers whose chosen tactic differs between two logs of the same model.

    Records are matched by timing-cache key when both logs print keys (editable timing
    cache), otherwise by layer name and occurrence index, so logs of any TensorRT version
    can be compared. Tactics are compared as integers. Exit code 1 when they differ, 0
    when every matched layer chose the same tactic.

    \b
    Example:
      reprobuild log diff build-monday.log build-tuesday.log
      reprobuild log diff a.log b.log --json
    """
    from reprobuild.errors import UsageError
    from reprobuild.logs.diff import diff_records
    from reprobuild.logs.parser import LogParser
    from reprobuild.logs.reader import iter_source

    if str(a) == str(b) == "-":
        raise UsageError("log diff: standard input (-) can be read once; give one file path")
    src_a = _open_checked(a)
    try:
        src_b = _open_checked(b)
    except BaseException:
        src_a.close()
        raise
    result = diff_records(
        iter_source(src_a, LogParser(source=str(a))), iter_source(src_b, LogParser(source=str(b)))
    )
    if as_json:
        data = {
            "a": str(a),
            "b": str(b),
            "matched_by": result.matched_by,
            "compared": result.compared,
            "same": result.same,
            "changed": [
                {
                    "layer": ra.layer,
                    "key": ra.key,
                    "a": ra.to_json(),
                    "b": rb.to_json(),
                }
                for ra, rb in result.changed
            ],
            "only_a": [r.to_json() for r in result.only_a],
            "only_b": [r.to_json() for r in result.only_b],
        }
        typer.echo(json.dumps(data, indent=2, ensure_ascii=False))
    else:
        if result.changed:
            typer.echo(f"{'LAYER':<40}  {'KEY':<34}  A -> B")
            for ra, rb in result.changed:
                typer.echo(
                    f"{_short(ra.layer, 40):<40}  {ra.key or '-':<34}  {_side(ra)}  ->  {_side(rb)}"
                )
        for path, only in ((a, result.only_a), (b, result.only_b)):
            for r in only:
                key = f" [{r.key}]" if r.key else ""
                typer.echo(f"only in {path}: {r.layer}{key} (line {r.line})")
        verdict = "same" if result.same else "different"
        typer.echo(
            f"{verdict}: {result.compared} record(s) matched by {result.matched_by}, "
            f"{len(result.changed)} changed, {len(result.only_a)} only in A, "
            f"{len(result.only_b)} only in B"
        )
    if not result.same:
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.add_typer(log_app, name="log")
