"""Command groups whose first argument may be a file: ``reprobuild log FILE`` and
``reprobuild log diff A B`` both work (likewise ``layers``), as trtexec users expect."""

from __future__ import annotations

from typing import Any

from typer.core import TyperGroup


class ShowByDefaultGroup(TyperGroup):
    """Routes ``GROUP FILE ...`` to the ``show`` subcommand when FILE is not a subcommand."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ctx.help_option_names:
            args = ["show", *args]
        return super().parse_args(ctx, args)
