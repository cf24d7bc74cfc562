"""Targets and identity: a ``target:`` label checked against its identity by every command
that reads the lock, and schema-1 sections (no identity) upgraded by a build, refused by
``--frozen`` and ``merge``, never given a digest."""

from __future__ import annotations

import shutil
from pathlib import Path

from hostile.core import BUILD, ROOT, Probe, edit_lock

FORGED = r'"Has\\nwell\\nerror: forged\\x1b[2J"'
OLD = ("cnn.onnx", "--lock", "old.lock", "--backend", "reference")


def _schema_1(root: Path) -> None:
    shutil.copy(ROOT / "tests" / "fixtures" / "locks" / "recorded_cnn.lock", root / "old.lock")
    shutil.copy(ROOT / "reprobuild" / "examples" / "cnn.onnx", root / "cnn.onnx")


def _upgraded(root: Path, code: int, _text: str) -> str | None:
    """A plain build on a schema-1 lock: this machine's target in its place, with bits."""
    if code != 0:
        return None
    from reprobuild.lock.yamlio import load_lock

    lock = load_lock(root / "old.lock")
    if lock.schema != 2 or not lock.environment.identity or lock.others:
        return "unclean: the section without identity was not replaced by this machine's"
    if not lock.outputs or not any(e.pinned for e in lock.layers):
        return "unclean: the upgraded target lacks its bits or its pin"
    return "accepted"


def _no_digest(root: Path, code: int, _text: str) -> str | None:
    if code != 0:
        return None
    from reprobuild.lock.yamlio import load_lock

    return (
        "unclean: a digest in a section without identity"
        if load_lock(root / "old.lock").outputs
        else "accepted"
    )


def _no_raw_text(_root: Path, code: int, text: str) -> str | None:
    """Lock text shown escaped: no escape character, no forged ``error:`` line."""
    if "\x1b" in text:
        return "unclean: a raw escape character from the lock"
    forged = [ln for ln in text.splitlines() if ln.startswith("error: forged")]
    return "unclean: a forged error line" if forged else None


def _for_the_label(_root: Path, _code: int, text: str) -> str | None:
    """Refused for the label and identity disagreeing, not for some later reason."""
    return None if "gives the target label" in text else "unclean: not refused for its label"


def probes() -> list[Probe]:
    identity = edit_lock(r"blas_kernels: \S+", "blas_kernels: Other")
    label = edit_lock(r"target: (\S+)-\w{6}\n", r"target: \1-000000\n")
    added = edit_lock(r"    identity:\n", "    identity:\n      extra_field: x\n")
    shown = {"check": _no_raw_text}
    edited = {"setup": identity, "check": _for_the_label}
    return [
        Probe("identity-edited-frozen-build", (*BUILD, "--frozen"), **edited),
        Probe("identity-edited-build", BUILD, **edited),
        Probe("identity-edited-show-targets", ("show", "--lock", "t.lock", "--targets"), **edited),
        Probe("identity-edited-merge", ("merge", "t.lock", "--out", "m.lock"), **edited),
        Probe("identity-edited-verify", ("verify", "--lock", "t.lock", "-n", "1"), **edited),
        Probe(
            "identity-edited-pin", ("pin", "--lock", "t.lock", "layer=fc1", "tactic=0x1"), **edited
        ),  # fmt: skip
        Probe("identity-field-added", ("show", "--lock", "t.lock"), added, check=_for_the_label),
        Probe("target-label-edited", ("show", "--lock", "t.lock"), label, check=_for_the_label),
        Probe(
            "target-label-forged-text",
            (*BUILD, "--frozen"),
            edit_lock(r"target: \S+", f"target: {FORGED}"),
            **shown,
        ),  # fmt: skip
        Probe(
            "advisory-forged-text-shown",
            ("show", "--lock", "t.lock", "--targets"),
            edit_lock(r"cpu: .*", f"cpu: {FORGED}"),
            accept=True,
            **shown,
        ),  # fmt: skip
        Probe("schema-1-frozen-build", ("build", *OLD, "--frozen", "-q"), _schema_1),
        Probe("schema-1-build-upgrades", ("build", *OLD, "-q"), _schema_1, check=_upgraded),
        Probe(
            "schema-1-record-digests",
            ("verify", *OLD, "-n", "1", "--no-control", "--record-digests", "-q"),
            _schema_1,
            check=_no_digest,
        ),  # fmt: skip
        Probe("merge-schema-1-section", ("merge", "old.lock", "--out", "m.lock"), _schema_1),
    ]
