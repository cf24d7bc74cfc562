"""Arguments given more than one way, as users of other tools expect: command groups whose
first argument may be a file (``reprobuild log FILE`` and ``reprobuild log diff A B``,
likewise ``layers``, as with trtexec), and the model of the commands that read a lock
(``verify MODEL`` or ``verify --model MODEL``, the same for ``bisect`` and
``export-cache``)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer
from typer.core import TyperGroup

from reprobuild.errors import UsageError

ModelArg: Any = typer.Argument(
    None, help="ONNX model (or --model) [default: the lock's model].", show_default=False
)
ModelOpt: Any = typer.Option(
    None, "--model", help="ONNX model, the same as the MODEL argument.", show_default=False
)


def model_of(positional: Path | None, option: Path | None) -> Path | None:
    """The model of a command that takes it as ``MODEL`` or ``--model`` (None: the
    lock's); two different ones are refused rather than one silently dropped."""
    if positional is not None and option is not None and positional != option:
        raise UsageError(
            f"two models given: {positional} and --model {option}; give the model once"
        )
    return positional if positional is not None else option


class ShowByDefaultGroup(TyperGroup):
    """Routes ``GROUP FILE ...`` to the ``show`` subcommand when FILE is not a subcommand."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ctx.help_option_names:
            args = ["show", *args]
        return super().parse_args(ctx, args)


RuleArgs: Any = typer.Argument(
    ...,
    metavar="kernel=PATTERN [layer=PATTERN]",
    help="A kernel rule: shell-style globs (*, ?, [seq]) over the whole kernel name (or "
    "tactic hash, 0x...) and layer name [default layer: *, every layer].",
    show_default=False,
)
"""The one rule ``deny`` and ``undeny`` take (``build --deny`` takes it comma-joined)."""
