"""List every TensorRT name the tensorrt backend uses, and whether real TensorRT has it.

Usage:
    python scripts/trt_api_names.py            # fetch/reuse the pinned 10.13 and 11.4 wheels
    python scripts/trt_api_names.py --json
    python scripts/trt_api_names.py --wheel path/to/tensorrt_cu12_bindings-10.16...whl

The names come from an AST scan of the backend (see tests/tools/trt_names.py, test tooling);
the wheels are read as bytes, never imported. Exit 1 if a name is missing from every wheel,
or naming-convention violations were found.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # the scanner lives in tests/
from tests.tools import trt_names as apinames  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--wheel", action="append", type=Path, help="bindings wheel to check")
    parser.add_argument("--json", action="store_true", help="print JSON")
    args = parser.parse_args(argv)

    scan = apinames.scan_sources(apinames.scanned_paths())
    if args.wheel:
        wheels = args.wheel
    else:
        cache = apinames.default_wheel_cache()
        wheels = [apinames.fetch_wheel(spec, cache) for spec in apinames.WHEELS]
    bindings = [apinames.read_bindings_wheel(w) for w in wheels]
    guarded = scan.guarded_names()
    rows = []
    for name in sorted(scan.names(), key=str.lower):
        presence = {b.version: b.lookup(name) for b in bindings}
        rows.append(
            {
                "name": name,
                "guarded": name in guarded,
                "presence": presence,
                "used_at": scan.where(name),
            }
        )
    missing = [r["name"] for r in rows if not any(r["presence"].values())]
    if args.json:
        print(json.dumps({"names": rows, "violations": scan.violations}, indent=2))
    else:
        versions = [b.version for b in bindings]
        print(f"{'name':32} {'guarded':8} " + " ".join(f"{v:12}" for v in versions))
        for r in rows:
            cells = " ".join(f"{(r['presence'][v] or 'MISSING'):12}" for v in versions)
            print(f"{r['name']:32} {'yes' if r['guarded'] else '':8} {cells}")
        print(f"\n{len(rows)} names; missing everywhere: {missing or 'none'}")
        for v in scan.violations:
            print(f"violation: {v}")
    return 1 if missing or scan.violations else 0


if __name__ == "__main__":
    sys.exit(main())
