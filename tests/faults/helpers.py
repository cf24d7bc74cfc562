"""What every failure must look like, and a project folder to fail in.

A failed command exits with a documented code, says so in one line, shows no traceback,
and leaves every file that existed before byte-for-byte as it was, with no temporary file
left behind. New files are allowed only under ``caches/`` (a recording timing cache is
kept on purpose; it is keyed by model and settings, so it can never be wrong).
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

from reprobuild.errors import DOCUMENTED_EXIT_CODES

from ..conftest import EXAMPLES

FAILURE_CODES = set(DOCUMENTED_EXIT_CODES) - {0, 4}
"""What a refusal may exit with: 4 would be a bug (an unexpected exception)."""


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` with its bytes (file locks' ``.lck`` sidecars aside)."""
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.name.endswith(".lck")
    }


def restore(root: Path, before: dict[str, bytes]) -> None:
    """Put ``root`` back to ``before`` (after a command that succeeded and wrote)."""
    for p in sorted(root.rglob("*"), reverse=True):
        rel = p.relative_to(root).as_posix()
        if p.is_file() and rel not in before:
            p.unlink()
    for rel, data in before.items():
        target = root / rel
        target.parent.mkdir(parents=True, exist_ok=True)
        if not target.is_file() or target.read_bytes() != data:
            target.write_bytes(data)


def project(root: Path, cli) -> Path:
    """``root`` holding mlp.onnx, a recorded lock, its engine, report and cache."""
    shutil.copy(EXAMPLES / "mlp.onnx", root / "mlp.onnx")
    r = cli("build", "mlp.onnx", "--lock", "t.lock", "--backend", "reference", "-q")
    assert r.code == 0, r
    return root


def assert_clean(r, root: Path, before: dict[str, bytes], *, as_json: bool = False) -> None:
    """The refusal contract, for a result ``r`` of the in-process ``cli`` fixture."""
    assert "Traceback" not in r.out + r.err, r
    assert r.code in FAILURE_CODES | {0}, r
    if r.code == 0:
        return
    lines = [ln for ln in r.err.splitlines() if ln.strip()]
    assert lines, r
    if r.code == 2 and lines[0].startswith("Usage: "):
        return  # a bare command group (`reprobuild log`) answers with its help
    last = lines[-1]
    if as_json:
        error = json.loads(last)["error"]
        assert error["code"] == r.code and "\n" not in error["message"], r
        assert r.out.strip().splitlines()[-1] == last, r
    else:
        assert last.startswith("error: "), r
    after = snapshot(root)
    for rel, data in before.items():
        assert after.get(rel) == data, f"{rel} changed by a failed command: {r}"
    extra = [rel for rel in after if rel not in before and not rel.startswith("caches/")]
    assert not extra, f"a failed command left {extra}: {r}"
    assert not [rel for rel in after if rel.endswith((".tmp", ".bak"))], after
