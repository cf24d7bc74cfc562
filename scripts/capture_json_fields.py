"""Write the goldens of tests/test_json_fields.py from a checkout of the OLD code.

The goldens record which fields every ``--json`` output had before a restructuring, so they
must come from the code as it was, never from the tree being checked:

    cd /tmp && /work/main/.venv/bin/python /work/main/scripts/capture_json_fields.py /tmp/base

runs every scenario of tests/test_json_fields.py with ``PYTHONPATH=/tmp/base`` (each command in
its own ``python -m reprobuild`` subprocess) and writes one JSON file per output to
tests/fixtures/json_fields/ (``--out DIR`` to write elsewhere). A scenario added later has no
old code to come from: its golden is captured from the tree that adds it, alone
(``--only diff_precision``), and the old goldens stay as they are.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TEST = REPO / "tests" / "test_json_fields.py"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("base", type=Path, help="checkout of the code to capture (its repo root)")
    ap.add_argument("--out", type=Path, default=REPO / "tests" / "fixtures" / "json_fields")
    ap.add_argument("--only", action="append", help="capture only this output (repeatable)")
    args = ap.parse_args()
    base = args.base.resolve()

    where = subprocess.run(
        [sys.executable, "-c", "import reprobuild; print(reprobuild.__file__)"],
        cwd=tempfile.gettempdir(),
        env={"PYTHONPATH": str(base), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    if not Path(where).resolve().is_relative_to(base):
        print(f"reprobuild resolves to {where}, not under {base}", file=sys.stderr)
        return 2

    spec = importlib.util.spec_from_file_location("json_fields_scenarios", TEST)
    assert spec and spec.loader
    mod = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = mod  # dataclasses look their module up there
    spec.loader.exec_module(mod)

    args.out.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix="json_fields_") as tmp:
        outputs = mod.run_scenarios(Path(tmp), base)
    bad = 0
    for name, out in sorted(outputs.items()):
        if args.only and name not in args.only:
            continue
        if out.error is not None:
            print(f"{name}: {out.error}\n{out.stderr[-1000:]}", file=sys.stderr)
            bad += 1
            continue
        doc = mod.golden_document(out)
        (args.out / f"{name}.json").write_text(json.dumps(doc, indent=1) + "\n")
        print(f"{name}: exit {out.code}, {len(doc['paths'])} paths")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
