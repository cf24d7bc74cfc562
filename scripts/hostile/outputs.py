"""Outputs that are devices, inputs or caches; values the loader would refuse; bounds.
Device nodes are the script's own (made here, as root; else FIFOs), never the system's."""

from __future__ import annotations

import os
from pathlib import Path

from hostile.core import BUILD, ROOT, Probe, edit_lock


def _node(root: Path) -> None:
    """A device node of the script's own (root only; else a FIFO), never the system's."""
    import stat

    if os.geteuid() == 0:
        os.mknod(root / "n", stat.S_IFCHR | 0o600, os.makedev(1, 3))
    else:
        os.mkfifo(root / "n")


def _still_special(root: Path, _code: int, _text: str) -> str | None:
    import stat

    mode = os.lstat(root / "n").st_mode
    if stat.S_ISLNK(mode) or stat.S_ISCHR(mode) or stat.S_ISFIFO(mode):
        return None
    return "unclean: the device node became a regular file"


def _devnull_link(root: Path) -> None:
    (root / "n").symlink_to("/dev/null")


def _report(root: Path) -> None:
    import json

    (root / "r.json").write_text(json.dumps({"target": "reference-x-abc123",
        "inputs_label": "seeded:0", "tactic_map_sha256": "a" * 64,
        "outputs_sha256": "b" * 64}))  # fmt: skip


def probes() -> list[Probe]:
    """Outputs that are devices, inputs or caches; values the loader would refuse; bounds."""
    log = str(ROOT / "tests" / "fixtures" / "logparse" / "ref_editable.log")
    dev = {"check": _still_special}
    digest = r"outputs:\n(\s+- )(\{[^}]*\})"
    probes = [
        Probe("report-on-device-node", (*BUILD, "--report", "n"), _node, **dev),
        Probe("out-on-device-node", (*BUILD, "--out", "n"), _node, **dev),
        Probe("log-on-device-node", (*BUILD, "--log", "n"), _node, **dev),
        Probe(
            "verify-report-on-device-node",
            ("verify", "--lock", "t.lock", "-n", "1", "--report", "n"),
            _node,
            **dev,
        ),  # fmt: skip
        Probe("merge-out-on-device-node", ("merge", "t.lock", "--out", "n"), _node, **dev),
        Probe("report-link-to-dev-null", (*BUILD, "--report", "n"), _devnull_link, **dev),
        Probe("merge-out-is-model", ("merge", "t.lock", "--out", "mlp.onnx")),
        Probe("merge-out-in-caches", ("merge", "t.lock", "--out", "caches/m.lock")),
        Probe("report-in-caches", (*BUILD, "--report", "caches/r.json")),
        Probe(
            "plot-link-to-lock",
            ("stability", "mlp.onnx", "--plot", "p.svg", "-q"),
            lambda r: (r / "p.svg").symlink_to("t.lock"),
        ),  # fmt: skip
        Probe(
            "seed-over-the-loader",
            (
                "verify",
                "--lock",
                "t.lock",
                "-n",
                "1",
                "--seed",
                "1000000000000000000",
                "--record-digests",
            ),
        ),  # fmt: skip
        Probe(
            "lock-time-overflow",
            ("show", "--lock", "t.lock"),
            edit_lock(r"time: \S+", 'time: "0x1p+99999999"'),
        ),  # fmt: skip
        Probe(
            "two-digests-one-inputs",
            ("show", "--lock", "t.lock"),
            edit_lock(digest, r"outputs:\n\1\2\n\1\2"),
        ),  # fmt: skip
        Probe("log-processes-yes", ("log", log), env={"REPROBUILD_LOG_PROCESSES": "yes"}),
        Probe("fleet-one-report-twice", ("fleet", "r.json", "./r.json"), _report),
        Probe("stability-records-over-50", ("stability", "mlp.onnx", "--records", "51")),
    ]
    return probes
