"""deny / undeny: the lock's kernel rules (:mod:`reprobuild.lock.rules` decides; this
module only renders). Light imports only, as for ``pin``."""

from __future__ import annotations

from pathlib import Path

import typer

from reprobuild.cli.groups import RuleArgs
from reprobuild.cli.lock_cmds import JsonOpt, LockOpt
from reprobuild.cli.render import echo, print_json, shown
from reprobuild.gcpause import paused_gc


def deny(rule: list[str] = RuleArgs, lock: Path = LockOpt, as_json: bool = JsonOpt) -> None:
    """Add a kernel rule to the lock: no build of it may run a matching candidate.

    A recording never keeps a denied candidate; a locked build refuses (exit 1) a lock
    whose chosen or pinned tactic a rule denies, naming the fix (re-record, or pin another
    candidate). A rule that would deny every candidate of a layer is refused (exit 2).

    \b
    Example:
      reprobuild deny --lock tactics.lock kernel='*splitk*' layer='conv*'
    """
    _edit(rule, lock, as_json, remove=False)


def undeny(rule: list[str] = RuleArgs, lock: Path = LockOpt, as_json: bool = JsonOpt) -> None:
    """Remove a kernel rule from the lock, given as `deny` took it (exit 2 if absent).

    \b
    Example:
      reprobuild undeny --lock tactics.lock kernel='*splitk*' layer='conv*'
    """
    _edit(rule, lock, as_json, remove=True)


def _edit(tokens: list[str], lock: Path, as_json: bool, *, remove: bool) -> None:
    with paused_gc():
        from reprobuild.lock.rules import edit_rules, fix_line

        done = edit_rules(lock, tokens, remove=remove)
        verb = "undeny" if remove else "deny"
        if as_json:
            print_json({"lock": str(lock), **done.to_json(verb)})
            return
        rule = shown(done.rule.describe())
        if not done.changed:
            echo(f"{lock}: already denies {rule}; nothing changed")
        else:
            echo(f"{'removed' if remove else 'added'} rule: deny {rule}")
        for target, v in done.now_denied:
            fix = fix_line(lock, done.settings, v)
            echo(f"target {target}: {shown(v.describe())}; a locked build refuses it: {fix}")


def register(app: typer.Typer) -> None:
    app.command("deny")(deny)
    app.command("undeny")(undeny)
