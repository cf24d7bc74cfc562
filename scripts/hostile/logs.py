"""The builder log: quoted node names read as one token (a name carrying another layer's
``(key: ...)``, a name that reads as a candidate row), and the split reader leaving no
process behind when ``reprobuild log`` is killed outright."""

from __future__ import annotations

import json
from pathlib import Path

from hostile.core import ROOT, Probe, run_cli

ROW = "Tactic: 0x1 Time: 0.1"


def _named_log(root: Path) -> None:
    """m.onnx, whose second node is named after the first's key and whose third reads as a
    candidate row, built with its log (b.log) and lock (n.lock)."""
    from reprobuild.lock.yamlio import load_lock
    from tests.faults.test_names import _model

    _model(root / "a.onnx", ["fc1", "fc2", "fc3"])
    run_cli(root, "build", "a.onnx", "--lock", "a.lock", "--backend", "reference", "-q")
    fc1 = next(e.key for e in load_lock(root / "a.lock").layers if e.layer == "fc1")
    _model(root / "m.onnx", ["fc1", f"fc2(key: {fc1})", ROW])
    run_cli(root, "build", "m.onnx", "--lock", "n.lock", "--backend", "reference", "-q",
            "--log", "b.log")  # fmt: skip


def _records(text: str) -> dict[str, dict]:
    """The records of ``log --json`` (stdout, with any warnings of stderr around it)."""
    start = text.find('{"file": ')
    try:
        doc, _ = json.JSONDecoder().raw_decode(text[max(start, 0) :])
        return {r["layer"]: r for r in doc["records"]}
    except (ValueError, KeyError, TypeError):
        return {}


def _own_tables(root: Path, code: int, text: str) -> str | None:
    """Each layer's table under its own key, with its own candidates, as the lock has them."""
    if code != 0:
        return None
    from reprobuild.lock.yamlio import load_lock

    entries = {e.layer: e for e in load_lock(root / "n.lock").layers}
    records = _records(text)
    if sorted(records) != sorted(entries):
        return f"unclean: the log's layers are {sorted(records)}"
    for name, e in entries.items():
        got = sorted(int(c["tactic_hash"], 16) for c in records[name]["candidates"])
        if records[name]["key"] != e.key or got != sorted(c.tactic for c in e.candidates):
            return f"unclean: {name!r} read with another table or key"
    return "accepted"


KILL = r"""
import os, signal, subprocess, sys, time
log = subprocess.Popen([sys.executable, "-m", "reprobuild", "log", "big.log"],
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

def state(pid):
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rpartition(")")[2].split()
    except (OSError, ValueError):
        return ["X", "0"]

def alive(pid):
    return state(pid)[0] not in "ZX"

def children(pid):
    return [int(e) for e in os.listdir("/proc") if e.isdigit() and alive(e)
            and int(state(e)[1]) == pid]

t0 = time.monotonic()
second = []
while not second and log.poll() is None and time.monotonic() - t0 < 60:
    second = children(log.pid)
    time.sleep(0.01)
if not second:
    print("error: no second reader was seen; the log was read by one process")
    sys.exit(3)
log.kill()
log.wait()
t0 = time.monotonic()
while any(map(alive, second)) and time.monotonic() - t0 < 30:
    time.sleep(0.05)
left = [p for p in second if alive(p)]
for p in left:
    os.kill(p, signal.SIGKILL)
if left:
    print(f"error: the second reader {left} outlived the killed reprobuild log")
    sys.exit(1)
print(f"the second reader {second} ended with the killed reprobuild log")
"""
"""``reprobuild log`` on a log over the split size, SIGKILLed once its second reader runs."""


def _big_log(root: Path) -> None:
    from reprobuild.logs.split import MIN_BYTES

    fixtures = sorted((ROOT / "tests" / "fixtures" / "trt-logs").glob("*.log"))
    text = b"".join(p.read_bytes() for p in fixtures)
    with open(root / "big.log", "wb") as fh:
        for _ in range(MIN_BYTES // len(text) + 2):
            fh.write(text)


def _ended(_root: Path, code: int, text: str) -> str | None:
    if code == 0:
        return "accepted"
    lines = text.strip().splitlines()
    return f"unclean: {lines[-1] if lines else f'exit {code}'}"


def _three_records(_root: Path, code: int, text: str) -> str | None:
    """The table's summary: three layers, three records (a name read as a row adds none)."""
    if code != 0:
        return None
    return "accepted" if "3 record(s)" in text else "unclean: not three records"


def probes() -> list[Probe]:
    return [
        Probe(
            "log-name-carries-another-key",
            ("log", "b.log", "--json"),
            _named_log,
            check=_own_tables,
        ),  # fmt: skip
        Probe("log-name-reads-as-a-row", ("log", "b.log"), _named_log, check=_three_records),
        Probe("log-killed-leaves-no-reader", (), _big_log, driver=KILL, check=_ended),
    ]
