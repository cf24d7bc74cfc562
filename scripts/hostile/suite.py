"""The suite's own cases (``tests/faults``), as child processes."""

from __future__ import annotations

import os
from pathlib import Path

from hostile.core import Probe, cache


def probes() -> list[Probe]:
    """The suite's own cases, as child processes."""
    from tests.faults import test_inputs, test_outputs, test_refusals

    probes = []
    for case, (args, replaces) in sorted(test_inputs.CASES.items()):
        for kind in test_inputs.HOSTILE:

            def setup(root: Path, args=args, replaces=replaces, kind=kind) -> None:
                if replaces == "cache":
                    target = cache(root)
                elif replaces:
                    target = root / replaces
                else:
                    target = root / next(a for a in args if a.startswith("X"))
                test_inputs.make(target, kind)

            # a bad cache is re-recorded with a warning: exit 0 is right there
            probes.append(Probe(f"{case}/{kind}", args, setup, accept=replaces == "cache"))
    for case, args in sorted(test_refusals.CASES.items()):
        extra = ("--backend", "reference") if args[0] == "build" else ()
        probes.append(Probe(case, (*args, *extra), test_refusals._files, accept=True))

    def links(root: Path) -> None:
        (root / "link.engine").symlink_to("t.lock")
        os.link(root / "mlp.onnx", root / "hard.engine")

    for case, args in sorted(test_outputs.CASES.items()):
        probes.append(Probe(case, args, links))
    return probes
