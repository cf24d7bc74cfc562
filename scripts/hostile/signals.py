"""A signal after the outputs were written: one line naming them (only outputs, never a
recording's temporary files), exit 128 + the signal, even as the process ends."""

from __future__ import annotations

import signal
from pathlib import Path

from hostile.core import BUILD, PIN, Probe, last_line, named_outputs

LATE = r"""
import os, sys
from reprobuild.cli.main import main
signum = int(os.environ["PROBE_SIGNAL"])
sys.argv = ["reprobuild", *sys.argv[1:]]
try:
    main()
finally:  # lands as the interpreter shuts down, every output in place
    os.kill(os.getpid(), signum)
    for _ in range(1000):
        pass
"""


def _names(*outputs: str, signum: int) -> object:
    """The line must name ``outputs`` and only files that are there."""

    def check(root: Path, code: int, text: str) -> str | None:
        line = last_line(text)
        if code != 128 + signum:
            return f"unclean: exit {code} ({line[:80]})"
        named = named_outputs(root, line)
        if not named:
            return f"unclean: no outputs named ({line[:80]})"
        missing = [o for o in outputs if o not in named]
        gone = [n for n in named if not (root / n).is_file()]
        if missing or gone or len(line) > 2000:
            return f"unclean: named {named[:4]}; missing {missing}, not there {gone[:4]}"
        return "accepted"

    return check


def probes() -> list[Probe]:
    term, intr = signal.SIGTERM, signal.SIGINT
    stability = ("stability", "mlp.onnx", "--records", "2", "--backend", "reference", "-q")
    cases = [
        ("build", BUILD, ("mlp.engine",), term),  # the lock is unchanged: not written
        ("pin", PIN, ("t.lock",), intr),
        ("merge", ("merge", "t.lock", "--out", "m.lock"), ("m.lock",), term),
        ("stability-plot", (*stability, "--plot", "s.svg"), ("s.svg",), term),
    ]
    return [
        Probe(
            f"late-signal-{name}",
            args,
            env={"PROBE_SIGNAL": str(int(sig))},
            driver=LATE,
            check=_names(*outs, signum=int(sig)),
        )  # fmt: skip
        for name, args, outs, sig in cases
    ]
