"""Hostile input: generated arguments, lock bytes, log bytes and model files.

Every run must end in a documented exit code with one line and no traceback, and a failed
one must leave the project's files as they were (``helpers.assert_clean``). Example
counts are bounded so the module stays within seconds; the in-process ``cli`` is used
throughout (``test_process.py`` covers the real process boundary).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper

from reprobuild.errors import LockError
from reprobuild.lock.yamlio import loads_lock

from ..conftest import EXAMPLES, FIXTURES
from .helpers import assert_clean, project, restore, snapshot

FUZZ = settings(
    max_examples=40,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
SLOWEST: dict[str, float] = {}
"""Seconds of the slowest refusal per test (printed at the end with ``-s``)."""


def _timed(name: str, run, *args: str):
    t0 = time.perf_counter()
    r = run(*args)
    took = time.perf_counter() - t0
    if r.code != 0 and took > SLOWEST.get(name, (0.0,))[0]:
        SLOWEST[name] = (took, " ".join(args))  # type: ignore[assignment]
    return r


@pytest.fixture
def proj(tmp_path: Path, cli, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("REPROBUILD_CRASH_DIR", str(tmp_path.parent / "crashes"))
    return project(tmp_path, cli)


# ---------------------------------------------------------------- command-line arguments

PATHS = ["mlp.onnx", "t.lock", "mlp.engine", ".", "missing", "mlp.onnx/x", "caches", "-"]
VALUES = st.one_of(
    st.sampled_from(PATHS + ["0", "-1", "9", "1e400", "0x", "0xZZ", "", "input:0x8", "x:1x2"]),
    st.integers(-(2**70), 2**70).map(str),
    st.text(max_size=12),
)
OPTIONS = [
    "--lock",
    "--out",
    "--report",
    "--opt-level",
    "--workspace",
    "--shapes",
    "--min-shapes",
    "--max-shapes",
    "--max-tactics",
    "--rebuilds",
    "--inputs",
    "--precision",
    "--cache-dir",
    "--against",
    "--seed",
    "-o",
]
FLAGS = ["--json", "--frozen", "-q", "--force", "--no-control", "--allow-env-change"]
COMMANDS = [
    "build",
    "verify",
    "pin",
    "unpin",
    "show",
    "diff",
    "log",
    "bisect",
    "export-cache",
]


@st.composite
def argv(draw) -> list[str]:
    args = [draw(st.sampled_from(COMMANDS))]
    for _ in range(draw(st.integers(0, 5))):
        kind = draw(st.integers(0, 3))
        if kind == 0:
            args += [draw(st.sampled_from(OPTIONS)), draw(VALUES)]
        elif kind == 1:
            args.append(draw(st.sampled_from(FLAGS)))
        elif kind == 2:
            args.append(draw(st.sampled_from(PATHS)))
        else:
            args.append(draw(st.sampled_from(["layer=fc1", "tactic=0x1", "key=0x1", "tactic=x"])))
    if "--backend" not in args and args[0] in ("build", "verify", "bisect"):
        args += ["--backend", "reference"]
    return args


@FUZZ
@given(args=argv())
def test_generated_command_lines(proj: Path, cli, args: list[str]) -> None:
    before = snapshot(proj)
    r = _timed("arguments", cli, *args)
    assert_clean(r, proj, before, as_json="--json" in args)
    restore(proj, before)


# ---------------------------------------------------------------- lock bytes


YAML_TOKENS = ["&a ", "*a", "!!python/object:os.system ", "<<: ", "[", "{", "'", '"', "\t", "0x"]


@st.composite
def lock_bytes(draw) -> bytes:
    base = (EXAMPLES.parent.parent / "tests" / "fixtures" / "locks").glob("*.lock")
    texts = sorted(base)
    data = bytearray(texts[draw(st.integers(0, len(texts) - 1))].read_bytes()) if texts else b""
    for _ in range(draw(st.integers(1, 4))):
        pos = draw(st.integers(0, max(len(data) - 1, 0)))
        choice = draw(st.integers(0, 3))
        if choice == 0:
            data[pos:pos] = draw(st.sampled_from(YAML_TOKENS)).encode()
        elif choice == 1:
            del data[pos : pos + draw(st.integers(1, 40))]
        elif choice == 2 and data:
            data[pos] = draw(st.integers(0, 255))
        else:
            data[pos:pos] = draw(st.binary(max_size=16))
    return bytes(data)


@FUZZ
@given(data=st.one_of(lock_bytes(), st.binary(max_size=300)))
def test_lock_bytes_refused_in_one_line(data: bytes) -> None:
    try:
        loads_lock(data, "fuzz.lock")
    except LockError as err:
        assert "\n" not in str(err) and str(err).startswith("fuzz.lock")


def test_alias_bomb_is_refused_at_once() -> None:
    lines = ["a0: &a0 [x, x, x, x, x, x, x, x, x, x]"]
    lines += [f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]" for i in range(1, 12)]
    text = "\n".join(lines) + "\nschema: 1\n"
    # refused by what it is (aliases), not after expanding 10**12 items
    with pytest.raises(LockError, match="anchors and aliases"):
        loads_lock(text, "bomb.lock")


@settings(max_examples=10, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=lock_bytes())
def test_commands_on_fuzzed_locks(proj: Path, cli, data: bytes) -> None:
    (proj / "t.lock").write_bytes(data)
    before = snapshot(proj)
    for args in (
        ("show", "--lock", "t.lock"),
        ("pin", "--lock", "t.lock", "layer=fc1", "tactic=0x1", "--json"),
        ("build", "mlp.onnx", "--lock", "t.lock", "--backend", "reference", "-q", "--frozen"),
    ):
        r = _timed("locks", cli, *args)
        assert_clean(r, proj, before, as_json="--json" in args)
        restore(proj, before)


# ---------------------------------------------------------------- log bytes


@st.composite
def log_bytes(draw) -> bytes:
    logs = sorted((FIXTURES / "trt-logs").glob("*.log"))
    data = bytearray(logs[draw(st.integers(0, len(logs) - 1))].read_bytes()[:3000])
    for _ in range(draw(st.integers(0, 4))):
        pos = draw(st.integers(0, max(len(data) - 1, 0)))
        data[pos : pos + draw(st.integers(0, 30))] = draw(st.binary(max_size=20))
    return bytes(data)


@FUZZ
@given(data=st.one_of(log_bytes(), st.binary(max_size=2000)), as_json=st.booleans())
def test_log_bytes(proj: Path, cli, data: bytes, as_json: bool) -> None:
    (proj / "fuzz.log").write_bytes(data)
    before = snapshot(proj)
    r = _timed("logs", cli, "log", "fuzz.log", *(["--json"] if as_json else []))
    assert_clean(r, proj, before, as_json=as_json)
    assert r.code in (0, 2)


# ---------------------------------------------------------------- model files


def _sequence_model() -> bytes:
    seq = helper.make_tensor_sequence_value_info("s", TensorProto.FLOAT, None)
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    node = helper.make_node("SequenceAt", ["s", "i"], ["y"], name="at")
    idx = helper.make_tensor("i", TensorProto.INT64, [], [0])
    graph = helper.make_graph([node], "seq", [seq], [out], [idx])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]).SerializeToString()


def _empty_graph() -> bytes:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])
    graph = helper.make_graph([], "empty", [x], [x])
    return helper.make_model(graph).SerializeToString()


@st.composite
def model_bytes(draw) -> bytes:
    data = bytearray((EXAMPLES / "mlp.onnx").read_bytes())
    kind = draw(st.integers(0, 4))
    if kind == 0:
        return bytes(data[: draw(st.integers(0, len(data)))])
    if kind == 1:
        for _ in range(draw(st.integers(1, 6))):
            data[draw(st.integers(0, len(data) - 1))] = draw(st.integers(0, 255))
        return bytes(data)
    if kind == 2:
        return _sequence_model()
    if kind == 3:
        return _empty_graph()
    return draw(st.binary(max_size=200))


@settings(max_examples=15, deadline=None, suppress_health_check=list(HealthCheck))
@given(data=model_bytes(), as_json=st.booleans())
def test_model_files(proj: Path, cli, data: bytes, as_json: bool) -> None:
    (proj / "m.onnx").write_bytes(data)
    before = snapshot(proj)
    args = ["build", "m.onnx", "--lock", "m.lock", "--backend", "reference", "-q"]
    r = _timed("models", cli, *args, *(["--json"] if as_json else []))
    assert_clean(r, proj, before, as_json=as_json)
    restore(proj, before)


def test_known_bad_models(proj: Path, cli) -> None:
    cases = {
        "seq.onnx": (_sequence_model(), "is a sequence, not a tensor"),
        "empty_graph.onnx": (_empty_graph(), "has no nodes"),
        "zero.onnx": (b"", "empty file (0 bytes)"),
    }
    for name, (data, _) in cases.items():
        (proj / name).write_bytes(data)
    before = snapshot(proj)
    for name, (_, words) in cases.items():
        r = cli("build", name, "--lock", "n.lock", "--backend", "reference", "-q")
        assert r.code == 2 and words in r.err, r
        assert_clean(r, proj, before)


def test_print_slowest_refusals() -> None:
    """Not a check: with ``-s`` this prints the figures the issue asks for."""
    for name, (seconds, command) in sorted(SLOWEST.items()):
        print(f"slowest refusal ({name}): {seconds:.3f}s  reprobuild {command}")
