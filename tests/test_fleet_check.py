"""``fleet`` takes the lock's view: a machine is odd when it does not give the recorded
bits, even where others agree with it; one report is compared with the lock; a machine
refused for lack of a target is listed, not a reason to refuse every report."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from reprobuild.lock.yamlio import load_lock, save_lock
from reprobuild.types import Environment

from .conftest import EXAMPLES

BASE = ("--backend", "reference")


@pytest.fixture(scope="module")
def report(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """One genuine ``verify --json`` report of the example CNN."""
    from .conftest import run_cli

    work = tmp_path_factory.mktemp("fleetcheck")
    shutil.copy(EXAMPLES / "cnn.onnx", work / "cnn.onnx")
    p = run_cli("build", "cnn.onnx", "--lock", "t.lock", "-q", *BASE, "--ref-timing", "seed:3",
                cwd=work)  # fmt: skip
    assert p.returncode == 0, p.stderr
    p = run_cli("verify", "--lock", "t.lock", "-n", "1", "--no-control", "--json", *BASE, cwd=work)
    assert p.returncode == 0, p.stderr
    doc = json.loads(p.stdout)
    # the same machine of another target: its verify is the JSON refusal (exit 3)
    lock = load_lock(work / "t.lock")
    env = lock.environment
    identity = {**env.identity_dict(), "blas_kernels": "Other"}
    lock.environment = Environment.make(env.backend, identity, env.advisory_dict())
    save_lock(lock, work / "o.lock")
    p = run_cli("verify", "--lock", "o.lock", "-n", "1", "--json", *BASE, cwd=work)
    assert p.returncode == 3, p.stderr
    doc["_no_target"] = json.loads(p.stdout)
    return doc


def _write(tmp_path: Path, name: str, doc: dict, **changes) -> str:
    card = {k: v for k, v in doc.items() if not k.startswith("_")}
    card.update(changes, machine={"host": name})
    (tmp_path / f"{name}.json").write_text(json.dumps(card))
    return str(tmp_path / f"{name}.json")


def test_agreeing_machines_with_other_bits_than_the_lock_are_odd(cli, report, tmp_path) -> None:
    other = {"outputs_sha256": "f" * 64, "reproducible": False}
    paths = [_write(tmp_path, f"gpu{i}", report, **other) for i in range(2)]
    r = cli("fleet", *paths)
    assert r.code == 1, r
    assert "2 of 2 machines odd" in r.out and "other bits than the lock records" in r.out
    assert "FLEET DIFFERS" in r.out
    doc = json.loads(cli("fleet", *paths, "--json").out)
    assert doc["agree"] is False and doc["targets"][0]["compared_with"] == "lock"
    assert [m["host"] for m in doc["targets"][0]["odd"]] == ["gpu0", "gpu1"]


def test_a_single_report_is_compared_with_the_lock(cli, report, tmp_path) -> None:
    r = cli("fleet", _write(tmp_path, "gpu0", report))
    assert r.code == 0, r
    assert "1 machine gives the bits the lock records" in r.out and "fleet agrees" in r.out
    lone = _write(tmp_path, "gpu1", report, recorded_sha256=None)
    r = cli("fleet", lone)
    assert r.code == 1 and "1 machine, nothing compared" in r.out, r
    assert json.loads(cli("fleet", lone, "--json").out)["targets"][0]["compared_with"] == (
        "nothing"
    )
    r = cli("fleet", lone, _write(tmp_path, "gpu2", report, recorded_sha256=None))
    assert r.code == 0 and "2 machines agree with each other" in r.out, r


def test_a_machine_of_no_target_is_listed(cli, report, tmp_path) -> None:
    refused = tmp_path / "cpu9.json"
    refused.write_text(json.dumps(report["_no_target"]))
    good = _write(tmp_path, "gpu0", report)
    r = cli("fleet", good, str(refused))
    assert r.code == 1, r
    assert f"no target: cpu9 ({refused}): " in r.out and "no target for this machine" in r.out
    assert "1 machine gives the bits the lock records" in r.out
    doc = json.loads(cli("fleet", good, str(refused), "--json").out)
    assert [u["host"] for u in doc["untargeted"]] == ["cpu9"] and doc["agree"] is False
    other = tmp_path / "bad.json"
    other.write_text(json.dumps({"error": {"code": 2, "message": "x: malformed"}}))
    assert cli("fleet", good, str(other)).code == 2
