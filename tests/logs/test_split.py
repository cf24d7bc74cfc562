"""A log read by two processes gives what one process gives, byte for byte.

``logs.split`` reads the second part of a large log in a forked process and joins the two
readings where the parser states meet. Every test here reads a log both ways, with small
reads so that a fixture spans many blocks, and compares everything the caller sees: the
text of every record in order, the counts, the warnings (with the cap), the engine layers
and the line count. Each way of joining is shown taken: joined where the states meet, read
on alone where they never meet, and read on alone when the second process fails.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from reprobuild.logs import source, split
from reprobuild.logs.parser import LogParser
from reprobuild.logs.source import open_log
from tests.logs.test_parser_streams import EDGES, mutated_logs

FIX = Path(__file__).resolve().parent.parent / "fixtures"
LOG_FIXTURES = sorted((FIX / "trt-logs").glob("*.log")) + sorted((FIX / "logparse").glob("*.log"))

pytestmark = pytest.mark.skipif(not hasattr(os, "fork"), reason="splitting needs os.fork")


@pytest.fixture(autouse=True)
def small_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    """1 KiB reads: a fixture of a few KB becomes many blocks to join between; two usable
    CPUs, whatever the machine running the tests has (one CPU reads alone)."""
    monkeypatch.setattr(source, "CHUNK", 1024)
    monkeypatch.setattr(split, "_cpus", lambda: 2)
    monkeypatch.delenv("REPROBUILD_LOG_PROCESSES", raising=False)


def render(records: list) -> str:
    return "".join(repr(r) + "\n" for r in records)


def read(
    path: Path, *, split_at: float | None, max_warnings: int = 10_000, wait: bool = True
) -> tuple:
    """Everything a caller of ``iter_pieces`` sees, read by one process (``split_at`` None)
    or split at that fraction of the file. ``wait``: this process waits for the other at
    the split, so the join is tried whatever the load (without it, which process finishes
    first depends on the machine, and only the output may be compared)."""
    parser = LogParser(source=str(path), max_warnings=max_warnings)
    kwargs: dict = {"min_bytes": 1 << 62}
    if split_at is not None:
        kwargs = {"min_bytes": 0, "at": split_at, "wait": wait}
    pieces = list(split.iter_pieces(open_log(path), parser, render, **kwargs))
    return (
        "".join(p.text for p in pieces),
        sum(p.records for p in pieces),
        sum(p.cached for p in pieces),
        repr(parser.warnings),
        parser.warnings_dropped,
        repr(parser.engine_layers),
        parser.lineno,
    )


def same_both_ways(path: Path, at: float, max_warnings: int = 10_000) -> split.Report:
    """Split or not, waiting at the split or reading on: the same; the report of the
    waiting reading (whose path through the join does not depend on timing)."""
    one = read(path, split_at=None, max_warnings=max_warnings)
    assert read(path, split_at=at, max_warnings=max_warnings, wait=False) == one
    two = read(path, split_at=at, max_warnings=max_warnings)
    assert two == one
    return split.REPORT


@pytest.mark.parametrize("at", [0.1, 0.5, 0.9])
@pytest.mark.parametrize("path", LOG_FIXTURES, ids=lambda p: p.name)
def test_every_fixture_reads_the_same_split_anywhere(path: Path, at: float) -> None:
    report = same_both_ways(path, at)
    assert report.split_at is not None  # it was split, not read alone


def test_joined_where_the_states_meet(tmp_path: Path) -> None:
    """Every fixture once after another: the second process's reading is taken from the
    first block where the states meet, and the text is still the one reading's."""
    log = tmp_path / "all.log"
    log.write_bytes(b"".join(p.read_bytes() for p in LOG_FIXTURES))
    report = same_both_ways(log, 0.5)
    assert report.joined_after is not None and report.fallback is None


def test_read_alone_where_the_states_never_meet(tmp_path: Path) -> None:
    """A 7.x log sets the legacy flag (decimal tactics) in the first half; a second half
    of 8.6+ blocks never sets it, so a fresh parser never meets the true state."""
    legacy = (FIX / "trt-logs" / "trt7x-80_legacy_python_logger_issue_excerpts.log").read_text()
    modern = (FIX / "trt-logs" / "trt862_jetson_inference_issue1855_excerpt.log").read_text()
    strip = "".join(line for line in modern.splitlines(True) if not line.startswith("# "))
    legacy = "".join(line for line in legacy.splitlines(True) if not line.startswith("# "))
    log = tmp_path / "mixed.log"
    log.write_text(legacy + strip * 20)
    report = same_both_ways(log, 0.5)
    assert report.joined_after is None and report.fallback == "the two readings never met"


@pytest.mark.parametrize("max_warnings", [0, 1, 3, 40])
def test_the_warning_cap_holds_across_the_join(tmp_path: Path, max_warnings: int) -> None:
    cache = (FIX / "trt-logs" / "trt7x-86_timing_cache_messages_issue_excerpts.log").read_bytes()
    log = tmp_path / "warnings.log"
    log.write_bytes(cache * 30)
    for at in (0.2, 0.5, 0.8):
        same_both_ways(log, at, max_warnings=max_warnings)


def test_a_failed_second_process_is_read_here(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def fail(*_args: object) -> None:
        raise OSError("no space left on device")

    monkeypatch.setattr(split, "_second_half", fail)
    log = tmp_path / "all.log"
    log.write_bytes(b"".join(p.read_bytes() for p in LOG_FIXTURES))
    report = same_both_ways(log, 0.5)
    assert report.fallback == "the second process failed"


def test_no_process_to_spare_is_read_here(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def no_fork() -> int:
        raise BlockingIOError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(split.os, "fork", no_fork)
    log = tmp_path / "all.log"
    log.write_bytes(b"".join(p.read_bytes() for p in LOG_FIXTURES))
    report = same_both_ways(log, 0.5)
    assert report.fallback == "no second process" and report.split_at is None


def test_stopping_early_ends_the_second_process(tmp_path: Path) -> None:
    """A reader that stops (Ctrl-C, a closed pipe) leaves no process behind."""
    log = tmp_path / "all.log"
    log.write_bytes(b"".join(p.read_bytes() for p in LOG_FIXTURES) * 4)
    pieces = split.iter_pieces(open_log(log), LogParser(), render, min_bytes=0)
    next(pieces)  # the first half's first block: the second process is running or done
    pid = split.REPORT.pid
    assert pid
    pieces.close()
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)  # already reaped


def test_small_files_pipes_and_the_switch_are_read_alone(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    log = tmp_path / "a.log"
    log.write_bytes(LOG_FIXTURES[0].read_bytes())
    split_size = log.stat().st_size
    list(split.iter_pieces(open_log(log), LogParser(), render, min_bytes=split_size + 1))
    assert split.REPORT.split_at is None
    monkeypatch.setattr(split, "_cpus", lambda: 1)
    list(split.iter_pieces(open_log(log), LogParser(), render, min_bytes=0))
    assert split.REPORT.split_at is None
    monkeypatch.setattr(split, "_cpus", lambda: 2)
    monkeypatch.setenv("REPROBUILD_LOG_PROCESSES", "1")
    list(split.iter_pieces(open_log(log), LogParser(), render, min_bytes=0))
    assert split.REPORT.split_at is None


@pytest.mark.parametrize("data", EDGES)
def test_edge_inputs(tmp_path: Path, data: bytes) -> None:
    log = tmp_path / "edge.log"
    log.write_bytes(data)
    same_both_ways(log, 0.5)


@settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(data=mutated_logs(), at=st.floats(0.0, 1.0), max_warnings=st.sampled_from([0, 2, 10_000]))
def test_mutated_logs(tmp_path_factory: pytest.TempPathFactory, data, at, max_warnings) -> None:
    log = tmp_path_factory.mktemp("m") / "m.log"
    log.write_bytes(data)
    same_both_ways(log, at, max_warnings)


@pytest.mark.parametrize("as_json", [False, True], ids=["table", "json"])
def test_the_command_prints_the_same_split_or_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, cli, as_json: bool
) -> None:
    """``reprobuild log`` and ``--json``: stdout, stderr and exit code alike both ways."""
    log = tmp_path / "all.log"
    log.write_bytes(b"".join(p.read_bytes() for p in LOG_FIXTURES) * 3)
    args = ["log", str(log)] + (["--json"] if as_json else [])
    monkeypatch.setattr(split, "MIN_BYTES", 0)
    monkeypatch.setattr(split, "WAIT", True)  # the join tried whatever the load
    two = cli(*args)
    assert split.REPORT.joined_after is not None
    monkeypatch.setenv("REPROBUILD_LOG_PROCESSES", "1")
    one = cli(*args)
    assert split.REPORT.split_at is None
    assert (two.code, two.out, two.err) == (one.code, one.out, one.err)
    assert one.code == 0
    assert ('"records": [' if as_json else " record(s), ") in one.out


def test_a_remembered_foreign_node_is_part_of_the_state(tmp_path: Path) -> None:
    """ForeignNode metadata printed in the first half names the ONNX layers of a cached
    result in the second: a fresh parser does not know it, so the readings never meet."""
    filler = "[V] [TRT] Tactic filler line that no handler takes\n" * 400
    log = tmp_path / "meta.log"
    log.write_text(
        "[V] [TRT] ForeignNode {ForeignNode[a...b]} metadata: [ONNX Layer: a]\x1e[ONNX Layer: b]\n"
        + filler
        + "[V] [TRT] {ForeignNode[a...b]} got cached result: Myelin, tactic 0x1, 0.5 ms\n"
    )
    report = same_both_ways(log, 0.5)
    assert report.fallback == "the two readings never met"
    text, records = read(log, split_at=None)[:2]
    assert records == 1 and "onnx_layers=('a', 'b')" in text


KILLED = """
import sys, time
from reprobuild.logs import split
from reprobuild.logs.parser import LogParser
from reprobuild.logs.source import open_log
split._cpus = lambda: 2
split._second_half = lambda *args: time.sleep(600)  # a second half that reads on and on
pieces = split.iter_pieces(open_log(sys.argv[1]), LogParser(), lambda r: "", min_bytes=0)
next(pieces)
print(split.REPORT.pid, flush=True)
time.sleep(600)
"""


def _gone(pid: int) -> bool:
    """Whether ``pid`` has ended (a zombie left for a parent that does not reap counts)."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rpartition(")")[2].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
def test_a_killed_reader_leaves_no_second_process(tmp_path: Path) -> None:
    """SIGKILL runs no ``finally``: the second process ends with its parent all the same."""
    import signal
    import subprocess
    import sys
    import time

    from tests.conftest import child_env

    log = tmp_path / "all.log"
    log.write_bytes(b"".join(p.read_bytes() for p in LOG_FIXTURES) * 4)
    env = child_env(drop=("REPROBUILD_LOG_PROCESSES",))
    proc = subprocess.Popen(
        [sys.executable, "-c", KILLED, str(log)], stdout=subprocess.PIPE, text=True, env=env
    )
    try:
        second = int(proc.stdout.readline())
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        proc.stdout.close()
    for _ in range(600):  # the kernel signals it at once; this only waits for the exit
        if _gone(second):
            break
        time.sleep(0.05)
    assert _gone(second), f"the second process {second} outlived its killed parent"
