"""Where ``doctor --probe`` keeps its bundles and answers, and what a recording reads there.

Nothing unproven is on by default: the tie rule may write a tactic TensorRT did not choose
(``update()`` of a non-chosen candidate) only where an edited tactic has been shown honoured.
The probe's ``edits`` question shows it for one TensorRT version on one GPU; its answer is
stored in ``answers.json`` beside the bundles (``$XDG_CACHE_HOME/reprobuild/probe/``,
``~/.cache/...``), one entry per target identity (the lock's: full TensorRT version, GPU
name, compute capability, SM count, CUDA major), a later probe replacing an earlier one.
:func:`edit_policy` is the one decision: ``--apply-tie-rule``, a backend whose builder
applies the rule itself (nothing to edit), or a stored ``honoured`` answer for exactly this
identity; every other case keeps the builder's choices and says why.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from reprobuild.fileio import atomic_write_text, user_cache

ANSWERS = "answers.json"
SCHEMA = 1


def probe_dir() -> Path:
    """``$XDG_CACHE_HOME/reprobuild/probe/`` (``~/.cache/...``): never the current folder."""
    return user_cache() / "probe"


@dataclass(frozen=True)
class EditPolicy:
    """Whether a recording writes the tie rule's choices back, and why (for the report)."""

    write: bool
    why: str


def edit_policy(be: Any, apply_tie_rule: bool = False) -> EditPolicy:
    """The one decision for every recording (a fresh lock, and new layers of a stale one)."""
    if apply_tie_rule:
        return EditPolicy(True, "--apply-tie-rule asked for the tie rule's choices")
    if bool(getattr(be, "edits_proven", True)):
        return EditPolicy(True, f"backend '{be.name}' applies the rule while it times")
    return stored_policy(be.environment().identity_dict())


def stored_policy(identity: dict[str, Any]) -> EditPolicy:
    """The policy the stored probe answer gives a TensorRT target (``doctor`` shows it before
    anything is recorded)."""
    entry = stored_answer(identity)
    where = f"TensorRT {identity.get('tensorrt_version')} on {identity.get('gpu')}"
    if entry is None:
        return EditPolicy(
            False, f"no `reprobuild doctor --probe` answer for {where} shows an edited tactic "
            f"honoured ({probe_dir() / ANSWERS})",
        )  # fmt: skip
    kinds = ", ".join(f"{k} {v}" for k, v in sorted(entry.get("kinds", {}).items()))
    if entry.get("edits") == "honoured":
        return EditPolicy(
            True, f"`doctor --probe` showed edited tactics honoured on {where} ({kinds}; "
            f"{entry.get('probed', 'undated')})",
        )  # fmt: skip
    return EditPolicy(
        False, f"`doctor --probe` found edits {entry.get('edits')} on {where} ({kinds})"
    )


def stored_answer(identity: dict[str, Any], folder: Path | None = None) -> dict[str, Any] | None:
    """The stored entry for exactly ``identity``; an unreadable file counts as none."""
    try:
        data = json.loads(((folder or probe_dir()) / ANSWERS).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        return None
    entries = data.get("answers")
    for entry in entries if isinstance(entries, list) else []:
        if isinstance(entry, dict) and entry.get("identity") == identity:
            return entry
    return None


def store_answer(
    identity: dict[str, Any], edits: str, kinds: dict[str, str], bundle: str
) -> Path | None:
    """Record the probe's ``edits`` answer for ``identity`` (replacing an older one), written
    whole (a temporary file, then a rename). None when the target is not known."""
    if not identity.get("tensorrt_version") or not identity.get("gpu"):
        return None
    folder = probe_dir()
    path = folder / ANSWERS
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        kept = [e for e in data["answers"] if e.get("identity") != identity]
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        kept = []
    entry = {
        "identity": identity,
        "edits": edits,
        "kinds": kinds,
        "bundle": bundle,
        "probed": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    folder.mkdir(parents=True, exist_ok=True)
    text = json.dumps({"schema": SCHEMA, "answers": [*kept, entry]}, indent=2) + "\n"
    atomic_write_text(path, text)
    return path
