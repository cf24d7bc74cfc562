"""Kernel rules: ``reprobuild deny`` / ``undeny`` and what every build checks against them.

A rule (:class:`~reprobuild.types.KernelRule`) lives in the lock's settings, shared by every
target: "never this kernel" holds on every machine. A recording never keeps a denied
candidate (the reference builder does not time it; on TensorRT, which times every tactic
before reprobuild can act, the best allowed candidate is written back through the editable
timing cache, as pins are: :mod:`reprobuild.workflow.ties`); a locked build refuses a lock
whose chosen or pinned tactic a rule denies (:func:`check_lock`), since the engine it would
build runs that kernel.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reprobuild.errors import BuildError, DriftError, UsageError
from reprobuild.fileio import exclusive
from reprobuild.lock.model import LayerEntry, Lock, by_layer
from reprobuild.lock.yamlio import load_lock, save_lock
from reprobuild.transaction import check_output_path, lock_target
from reprobuild.types import BuildSettings, KernelRule

_FIELDS = ("kernel", "layer")


def parse_rule(tokens: Sequence[str], what: str = "deny") -> KernelRule:
    """``kernel=PATTERN [layer=PATTERN]`` (each once; the layer defaults to ``*``)."""
    given: dict[str, str] = {}
    for tok in tokens:
        name, sep, value = tok.partition("=")
        if not sep or name not in _FIELDS:
            raise UsageError(
                f"{what}: cannot read {tok!r}: expected kernel=PATTERN [layer=PATTERN]"
            )
        if name in given:
            raise UsageError(f"{what}: {name}= given twice; one rule per {what}")
        if not value or not value.isprintable():
            raise UsageError(
                f"{what}: {name}= needs a pattern of printable characters, e.g. '*splitk*' "
                "(or '*' for every name)"
            )
        given[name] = value
    if "kernel" not in given:
        raise UsageError(f"{what}: no kernel=PATTERN given; e.g. kernel='*splitk*' layer=conv1")
    return KernelRule(given["kernel"], given.get("layer", "*"))


def parse_option(text: str) -> KernelRule:
    """``build --deny kernel=PATTERN[,layer=PATTERN]``."""
    return parse_rule(text.split(","), "--deny")


def deny_command(lock_path: str | Path, kernel: str, layer: str) -> str:
    """The ``reprobuild deny`` line that rules out exactly ``kernel`` in ``layer`` (glob
    characters in the names escaped, each argument quoted for a POSIX shell where needed):
    what a failing check prints as its fix."""
    import shlex

    rule = KernelRule.exact(kernel, layer)
    args = [str(lock_path), f"kernel={rule.kernel}", f"layer={rule.layer}"]
    lock, *rest = (shlex.quote(a) for a in args)
    return f"reprobuild deny --lock {lock} {' '.join(rest)}"


def with_rules(settings: BuildSettings, rules: Iterable[KernelRule]) -> BuildSettings:
    """``settings`` holding exactly ``rules`` (sorted, each once)."""
    return dataclasses.replace(settings, deny=tuple(sorted(set(rules))))


@dataclass(frozen=True)
class Violation:
    """A layer whose chosen (or pinned) tactic a rule denies."""

    entry: LayerEntry
    rule: KernelRule

    def describe(self) -> str:
        how = "is pinned to" if self.entry.pinned else "runs"
        kernel = f" ({self.entry.kernel})" if self.entry.kernel else ""
        return (
            f"layer {self.entry.layer!r} ({self.entry.key}) {how} tactic "
            f"0x{self.entry.tactic:x}{kernel}, which the rule {self.rule.describe()} denies"
        )

    def to_json(self) -> dict[str, Any]:
        e = self.entry
        return {
            "layer": e.layer,
            "key": e.key,
            "tactic": f"0x{e.tactic:x}",
            "kernel": e.kernel,
            "pinned": e.pinned,
            "rule": self.rule.to_dict(),
        }


def violations(settings: BuildSettings, layers: Iterable[LayerEntry]) -> list[Violation]:
    """Every entry whose tactic a rule of ``settings`` denies, in entry order."""
    out = []
    for e in layers:
        rule = settings.denying(e.layer, e.kernel, e.tactic)
        if rule is not None:
            out.append(Violation(e, rule))
    return out


def fix_line(lock_path: str | Path, settings: BuildSettings, v: Violation) -> str:
    """The two ways out: a recording that keeps an allowed candidate, or a pin of one."""
    e = v.entry
    allowed = settings.allowed(e.layer, e.candidates)
    pin = (
        f"`reprobuild pin --lock {lock_path} key={v.entry.key} tactic=0x{allowed[0].tactic:x}`"
        if allowed
        else "a pin of another candidate"
    )
    return f"re-record (`reprobuild build MODEL --lock {lock_path} --re-record`) or {pin}"


def check_lock(lock: Lock, lock_path: str | Path) -> None:
    """A locked build's refusal (exit 1) when the active target runs a denied tactic."""
    found = violations(lock.settings, lock.layers)
    if not found:
        return
    more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
    raise DriftError(
        f"{lock_path}: {found[0].describe()}{more}; {fix_line(lock_path, lock.settings, found[0])}"
    )


def check_candidates(
    settings: BuildSettings, layer: str, cands: Sequence[Any], where: str = ""
) -> None:
    """Refuse (exit 2) a layer every one of whose candidates (``tactic``/``kernel``
    fields, or ``tactic_hash``/``name``) a rule denies: nothing is left to build it with."""
    if not settings.deny or not cands:
        return
    rules = []
    for c in cands:
        tactic = getattr(c, "tactic", None)
        tactic = getattr(c, "tactic_hash", None) if tactic is None else tactic
        kernel = getattr(c, "kernel", None) or getattr(c, "name", None)
        rule = settings.denying(layer, kernel, int(tactic))
        if rule is None:
            return
        rules.append(rule)
    named = ", ".join(dict.fromkeys(r.describe() for r in rules))
    raise BuildError(
        f"{where}layer {layer!r}: every one of its {len(cands)} candidates is denied (rule "
        f"{named}); narrow the rule with layer=PATTERN, or remove it with `reprobuild undeny`"
    )


@dataclass
class RuleEdit:
    """What ``deny``/``undeny`` did: the rule, whether the lock changed, and (``deny``) the
    layers of any target that now run a denied tactic (a locked build refuses them)."""

    rule: KernelRule
    changed: bool
    settings: BuildSettings
    now_denied: list[tuple[str, Violation]]

    def to_json(self, verb: str) -> dict[str, Any]:
        return {
            verb: self.rule.to_dict(),
            "changed": self.changed,
            "rules": [r.to_dict() for r in self.settings.deny],
            "now_denied": [{"target": t, **v.to_json()} for t, v in self.now_denied],
        }


def edit_rules(path: str | Path, tokens: Sequence[str], *, remove: bool = False) -> RuleEdit:
    """Add (or remove) one rule, read-modify-write under the file lock; a refusal leaves
    the file as it was. Every target keeps its entries: a rule changes no tactic."""
    verb = "undeny" if remove else "deny"
    rule = parse_rule(tokens, verb)
    check_output_path(lock_target(path), "lock")
    with exclusive(path):
        lock = load_lock(path)
        rules = set(lock.settings.deny)
        if remove and rule not in rules:
            listed = ", ".join(r.describe() for r in lock.settings.deny) or "none"
            raise UsageError(
                f"{path}: no rule {rule.describe()} to remove (the lock's rules: {listed}); "
                "give it as `reprobuild show` lists it"
            )
        changed = (rule in rules) == remove
        rules = rules - {rule} if remove else rules | {rule}
        lock.settings = with_rules(lock.settings, rules)
        for t in lock.targets():  # per layer: a reference recording drops a denied key
            for layer, group in by_layer(t.layers).items():
                cands = [c for e in group for c in e.candidates]
                check_candidates(lock.settings, layer, cands, f"{path}: ")
        if changed:
            save_lock(lock, path)
    now = [(t.name, v) for t in lock.targets() for v in violations(lock.settings, t.layers)]
    return RuleEdit(rule, changed, lock.settings, now)
