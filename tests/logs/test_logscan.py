"""Differential tests: the C scanner (``reprobuild.logs._logscan``) against the Python parser.

``reprobuild.logs.parser.LogParser`` is the specification; the native scanner must give the
same records (every field, candidates included, floats compared by ``repr``), the same line count,
warnings, dropped-warning count and engine layers, for any bytes cut into any chunks.

When the extension was not built (no C compiler at install time) the differential tests are
skipped with the reason;
where a C compiler exists (or ``REPROBUILD_REQUIRE_NATIVE=1``) a missing build fails.

A difference fails with the first differing record (or warning, or engine layer), the
differing fields only, and the source lines it came from, so it can be reproduced with
``iter_chunks([data], LogParser(), native=True)`` vs ``native=False``.
"""

from __future__ import annotations

import importlib
import json
import os
import random
import shutil
import subprocess
import sys
import sysconfig
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from reprobuild.errors import LogParseError
from reprobuild.logs import reader
from reprobuild.logs.parser import LogParser
from reprobuild.logs.reader import iter_chunks, iter_file, native_available

FIX = Path(__file__).resolve().parent.parent / "fixtures"
LOG_FIXTURES = sorted((FIX / "trt-logs").glob("*.log")) + sorted((FIX / "logparse").glob("*.log"))


def _native_missing_reason() -> str | None:
    if native_available():
        return None
    try:
        importlib.import_module("reprobuild.logs._logscan")
    except ImportError as err:
        return (
            f"reprobuild.logs._logscan is not built ({err}); reinstall with a C compiler present "
            "(pip install -e '.[dev]')"
        )
    return "native_available() is False"


_MISSING = _native_missing_reason()
needs_native = pytest.mark.skipif(
    _MISSING is not None, reason=f"native log scanner not available: {_MISSING}"
)


# --- comparing the two implementations ----------------------------------------------------------


def _num(value: Any) -> Any:
    """A number compared exactly: type and repr (so -0.0, nan, inf and int-vs-float count)."""
    return None if value is None else (type(value).__name__, repr(value))


def _record(r: Any) -> dict[str, Any]:
    d = r.to_json(candidates=True) | {"line": r.line}
    d["exact"] = {
        "type": type(r).__name__,
        "onnx_layers": (type(r.onnx_layers).__name__, r.onnx_layers),
        "chosen": _num(r.chosen),
        "chosen_cost_ms": _num(r.chosen_cost_ms),
        "candidates_type": type(r.candidates).__name__,
    }
    d["exact_candidates"] = [
        (
            type(c).__name__,
            _num(c.tactic_id),
            _num(c.tactic_hash),
            c.kernel,
            _num(c.cost_ms),
            c.runner,
        )
        for c in r.candidates
    ]
    return d


def _outcome(
    chunks: Iterable[bytes], *, native: bool, max_warnings: int = 10_000, path: Path | None = None
) -> dict[str, Any]:
    parser = LogParser(max_warnings=max_warnings)
    if path is not None:
        records = list(iter_file(path, parser, native=native))
    else:
        records = list(iter_chunks(chunks, parser, native=native))
    return {
        "records": [_record(r) for r in records],
        "lineno": parser.lineno,
        "warnings": [(type(w).__name__, w.to_json()) for w in parser.warnings],
        "warnings_dropped": parser.warnings_dropped,
        "engine_layers": [(type(e).__name__, repr(e)) for e in parser.engine_layers],
        "containers": (type(parser.warnings).__name__, type(parser.engine_layers).__name__),
    }


def _source(data: bytes, line: int, span: int = 1) -> list[str]:
    lines = data.split(b"\n")
    out = []
    for n in range(line, line + span):
        if 1 <= n <= len(lines):
            out.append(f"  source line {n}: {lines[n - 1][:400]!r}")
    return out or [f"  source line {line}: <beyond the end of the input>"]


def _first_index(a: list[Any], b: list[Any]) -> int:
    for i, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return i
    return min(len(a), len(b))


def _record_diff(a: dict[str, Any] | None, b: dict[str, Any] | None) -> list[str]:
    if a is None or b is None:
        extra, who = (b, "native") if a is None else (a, "python")
        shown = {k: v for k, v in extra.items() if k not in ("candidates", "exact_candidates")}
        return [f"  only {who} has: {shown}"]
    out = []
    for key in a:
        if key in ("candidates", "exact_candidates") or a[key] == b.get(key):
            continue
        out.append(f"  {key}: python={a[key]!r}\n  {' ' * len(key)}  native={b.get(key)!r}")
    ca, cb = a["exact_candidates"], b["exact_candidates"]
    if ca != cb:
        j = _first_index(ca, cb)
        out.append(
            f"  candidates: python has {len(ca)}, native {len(cb)}; first difference at #{j}:\n"
            f"    python={ca[j] if j < len(ca) else None!r}\n"
            f"    native={cb[j] if j < len(cb) else None!r}"
        )
    return out


def _explain(data: bytes, py: dict[str, Any], nat: dict[str, Any], what: str) -> str:
    msg = [f"{what}: the native scanner and the pure-Python parser differ"]
    for key in ("lineno", "warnings_dropped", "containers"):
        if py[key] != nat[key]:
            msg.append(f"{key}: python={py[key]!r} native={nat[key]!r}")
    a, b = py["records"], nat["records"]
    if a != b:
        i = _first_index(a, b)
        ra = a[i] if i < len(a) else None
        rb = b[i] if i < len(b) else None
        line = (ra or rb)["line"]
        msg.append(
            f"records: python {len(a)}, native {len(b)}; first difference at record #{i} "
            f"(block starting at line {line}):"
        )
        msg += _record_diff(ra, rb)
        msg += _source(data, line, 4)
    a, b = py["warnings"], nat["warnings"]
    if a != b:
        i = _first_index(a, b)
        wa = a[i] if i < len(a) else None
        wb = b[i] if i < len(b) else None
        msg.append(f"warnings: python {len(a)}, native {len(b)}; first difference at #{i}:")
        msg.append(f"  python={wa!r}\n  native={wb!r}")
        msg += _source(data, (wa or wb)[1]["line"])
    a, b = py["engine_layers"], nat["engine_layers"]
    if a != b:
        i = _first_index(a, b)
        msg.append(f"engine_layers: python {len(a)}, native {len(b)}; first difference at #{i}:")
        msg.append(f"  python={a[i] if i < len(a) else None!r}")
        msg.append(f"  native={b[i] if i < len(b) else None!r}")
    if len(data) <= 4000:
        msg.append(f"input ({len(data)} bytes): {data!r}")
    else:
        msg.append(f"input: {len(data)} bytes")
    return "\n".join(msg)


def _assert_same(data: bytes, py: dict[str, Any], nat: dict[str, Any], what: str) -> None:
    if py != nat:
        pytest.fail(_explain(data, py, nat, what), pytrace=False)


def _chunks(data: bytes, size: int) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


def _cut_at(data: bytes, points: Iterable[int]) -> list[bytes]:
    edges = [0, *sorted({min(max(p, 0), len(data)) for p in points}), len(data)]
    return [data[s:e] for s, e in zip(edges, edges[1:], strict=False)]


def _compare(data: bytes, what: str, *, max_warnings: int = 10_000) -> dict[str, Any]:
    py = _outcome([data], native=False, max_warnings=max_warnings)
    nat = _outcome([data], native=True, max_warnings=max_warnings)
    _assert_same(data, py, nat, what)
    return py


# --- the build itself ----------------------------------------------------------------------------


def _compiler() -> str | None:
    """The C compiler setuptools would have used for this interpreter, if it is installed."""
    cc = (sysconfig.get_config_var("CC") or "cc").split()
    return shutil.which(os.environ.get("CC", cc[0]).split()[0]) if cc else None


def test_native_scanner_built_where_a_compiler_exists() -> None:
    """The extension is optional only where nothing could build it: with a C compiler on
    the machine (or REPROBUILD_REQUIRE_NATIVE=1) a missing module is a broken install."""
    required = os.environ.get("REPROBUILD_REQUIRE_NATIVE") == "1" or _compiler() is not None
    if not required:
        pytest.skip("no C compiler here, so the pure-Python parser is expected")
    try:
        importlib.import_module("reprobuild.logs._logscan")
    except ImportError as err:
        pytest.fail(
            f"a C compiler ({_compiler()}) is installed but reprobuild.logs._logscan cannot be "
            f"imported ({err}): the optional extension was not built (pip install -v shows "
            "why: look for 'building extension reprobuild.logs._logscan failed')"
        )
    assert native_available()


def test_native_true_without_the_scanner_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reader, "_native_module", lambda: None)
    assert not native_available()
    with pytest.raises(LogParseError):
        list(iter_chunks([b"[V] [TRT] Tactic: 0x1 Time: 0.5\n"], native=True))
    # native=None quietly falls back to the pure-Python parser
    assert list(iter_chunks([b"hello\n"])) == []


# --- every fixture file --------------------------------------------------------------------------


@needs_native
@pytest.mark.parametrize("path", LOG_FIXTURES, ids=lambda p: p.name)
def test_fixture_file_identical(path: Path) -> None:
    data = path.read_bytes()
    py = _outcome((), native=False, path=path)
    nat = _outcome((), native=True, path=path)
    _assert_same(data, py, nat, path.name)
    assert len(nat["records"]) == len(py["records"])
    assert py["lineno"] == data.count(b"\n") + (not data.endswith(b"\n") and bool(data))


def test_fixtures_hold_records() -> None:
    """The differential tests above mean something only if the fixtures parse to records."""
    with_records = [p for p in LOG_FIXTURES if _outcome((), native=False, path=p)["records"]]
    assert len(with_records) >= 8, [p.name for p in with_records]


# --- chunking ------------------------------------------------------------------------------------

_ALL = b"".join(p.read_bytes() for p in LOG_FIXTURES)


@pytest.fixture(scope="module")
def all_python() -> dict[str, Any]:
    out = _outcome([_ALL], native=False)
    assert len(out["records"]) > 30
    return out


def _chunked(size: int | str) -> list[bytes]:
    if size == "whole":
        return [_ALL]
    if size == "random":
        rng = random.Random(20261122)
        points, pos = [], 0
        while pos < len(_ALL):
            pos += rng.choice((1, 2, 3, rng.randint(1, 64), rng.randint(1, 9000)))
            points.append(pos)
        return _cut_at(_ALL, points)
    assert isinstance(size, int)
    return _chunks(_ALL, size)


@needs_native
@pytest.mark.parametrize("size", [1, 7, 4096, "random", "whole"])
def test_concatenated_fixtures_any_chunking_native(size: int | str, all_python) -> None:
    nat = _outcome(_chunked(size), native=True)
    _assert_same(_ALL, all_python, nat, f"all fixtures, chunks of {size}")


@needs_native
@pytest.mark.parametrize("size", [7, 4096, "random"])
def test_native_streams_records_as_python_does(size: int | str) -> None:
    """Records come out with the chunk that completes them, not all at the end."""

    def per_chunk(native: bool) -> list[int]:
        counts: list[int] = []

        def chunks():
            for chunk in _chunked(size):
                counts.append(0)
                yield chunk

        for _ in iter_chunks(chunks(), LogParser(), native=native):
            counts[-1] += 1
        return counts

    py, nat = per_chunk(False), per_chunk(True)
    assert sum(nat) == sum(py) > 0
    if nat != py:
        i = _first_index(py, nat)
        pytest.fail(
            f"records per chunk differ first at chunk #{i}: python {py[i]}, native {nat[i]}"
        )


@pytest.mark.parametrize("size", [1, 7, 4096, "random"])
def test_concatenated_fixtures_any_chunking_python(size: int | str, all_python) -> None:
    """The specification itself does not depend on where chunks are cut."""
    assert _outcome(_chunked(size), native=False) == all_python


# --- hand-picked edge inputs ---------------------------------------------------------------------

_EDGES = [
    b"",
    b"\n",
    b"\n\n\n",
    b"\r",
    b"\r\n",
    b"\r\r\n",
    b"x",
    b"\x00",
    b"\x00\n\x00",
    b"\xe2",
    b"abc\xe2\x82",
    b"\xe2\x82\n\xac",
    b"\xed\xa0\x80\n",
    b"\xc0\x80\xff\xfe\n",
    b"\xf4\x90\x80\x80\n",
    # the format text starts one *character* after the literal, whatever its byte length
    b"Computing costs for c\nAutotuning format combination\xc3\x83f(1) -> g *\nTactic: 1 Time: 2\n",
    b"Computing costs for c\nAutotuning format combination\xc3:f\nTactic: 1 Time: 2\n",
    b"Computing costs for c\nAutotuning format combination\xe2\x82\nTactic: 1 Time: 2\n",
    b"# \n",
    b"#\n# x",
    b"Tactic: 0x1 Time: 0.5",
    b"Tactic: 0x1 Time: 0.5\r",
    b"Tactic:  0x1 Time: 0.5\n",
    b"Tactic: 1_0 Time: 1_0\n",
    b"Tactic: +5 Time: +inf\n",
    b"Tactic: -1 Time: nan\n",
    b"Tactic: 0x_1 Time: -0.0\n",
    b"Tactic: 0xFFFFFFFFFFFFFFFF Time: 1e400\n",
    b"Tactic: 0x10000000000000000 Time: 1\n",
    b"Tactic: -9223372036854775809 Time: 1\n",
    b"Tactic: 18446744073709551615 Time: 1\n",
    "Tactic: \u0663 Time: \u0663.\u0665\n".encode(),
    "Tactic: 0x1 Time: 0.5\u00a0\n".encode(),
    "Tactic: 0x1 Time:\u2003 0.5 ms\n".encode(),
    b"Tactic: 0x1 Time: 0.5\x1e\n",
    b"Tactic: 0x1 Time: 0.5\x00\n",
    b"Tactic Name: Tactic: 0x1 Time: 0.5\n",
    b"Tactic Name:  Tactic: 0x1 Time: 0.5\n",
    b"Fastest Tactic: 0x1 Time: 0.5\n",
    b"Timing Runner: x (y)\nTactic: 0x1 Time: 0.5\nFastest Tactic: 0x1 Time: 0.5\n",
    # "Time:" with no time: FASTEST_TAIL backtracks and reads ":" as the time (None)
    b"Timing Runner: x (y)\nTactic: 0x1 Time: 0.5\nFastest Tactic: 0x1 Time:\n",
    b"Timing Runner: x (y)\nTactic: 0x1 Time: 0.5\nFastest Tactic: 0x1 Time: ,\n",
    b"x [a -> b] got cached result: R, tactic: , 0.5 ms\n",
    # the words inside a prefix: the parser cuts the message's last character, not byte
    b"[got cached result] x (key: k, tactic:\xd9\xa3\x0b\n",
    b"Chose Runner Type: R Tactic: 0x5\n",
    b"Computing costs for a\nAutotuning format combination: x\nTactic: 3 Time: 1\n"
    b"Chose Runner Type: R Tactic: 3\n",
    b"Autotuning op a(key: 0x" + b"A" * 32 + b"):\n   0, 1, 1, 1, k, 0x1,\n",
    b"Autotuning op a(key: 0x" + b"A" * 32 + b"):\n   0\t, 1_0, 1, 1, k, 0x1_0,\n",
    "Autotuning op a:\n \u0663, 1, 1, 1, k, 0x1,\n".encode(),
    b"a [b -> c] got cached result: R, tactic 0x1, 0.5 ms\n",
    b"a [b -> c] got cached result:: , tactic: -1\n",
    b"Layers:\nName: a, LayerType: b, TacticValue: 0x1, "
    b"Metadata: [ONNX Layer: x]\x1e[ONNX Layer: y]\n",
    b"Engine Layer Information:\nLayer(T): n, Tactic: 0x2, a -> b\nLayer(): , Tactic: 99\n",
    b"ForeignNode {x} metadata: [ONNX Layer: a]\x1f[ONNX Layer: b]\n",
    b"Global timing cache in use\nLoaded 5 bytes of timing cache\nError Code 3 cache\n",
    # int() and float() strip " \t\n\v\f\r" and Unicode spaces, but not \x1c-\x1f
    # (which str.strip() and _WS do remove)
    b"Timing Runner: a (b)\nTactic: \x1e5 Time: 1\n",
    b"Timing Runner: a (b)\nTactic: 0x5 time \x1f1.5\n",
    b"Autotuning op a:\n   \x1e0, 0.01, 1, 1, k, 0x1,\n",
    b"Autotuning op a:\n   0, \x1c0.01, 1, 1, k, 0x1,\n",
    # a line starting with "Tactic: " and ending with "Fastest ": Python's
    # line.startswith("Fastest ", i - 8) with i == 0 looks at the line's last 8 characters
    b"Timing Runner: a (b)\nTactic: 1_0 Time: 5Fastest \n",
]


@needs_native
@pytest.mark.parametrize("data", _EDGES, ids=range(len(_EDGES)))
def test_edge_inputs_identical(data: bytes) -> None:
    _compare(data, "edge input")
    for size in (1, 2, 3):
        nat = _outcome(_chunks(data, size), native=True)
        _assert_same(data, _outcome([data], native=False), nat, f"edge input, chunks of {size}")


# --- warnings cap --------------------------------------------------------------------------------

_WARNING_LOG = b"".join(
    line
    for i in range(40)
    for line in (
        b"[11/21/2026-10:00:00] [I] [TRT] Global timing cache in use. Profiling results in this "
        b"builder pass will be stored.\n",
        b"[V] [TRT] Could not read cache from: /tmp/x%d.cache\n" % i,
        b"[2023-12-25 12:50:15][Error][TRT] 4: The timing cache will not be used!\n",
        b"[W] [TRT] Cache result detected as invalid for node: conv%d, tactic: 0x1\n" % i,
        b"[I] [TRT] Serialized %d timing cache entries\n" % i,
        b"Tactic: 0x%x Time: 0.%d\n" % (i, i),
    )
)


@needs_native
@pytest.mark.parametrize("cap", [-1, 0, 1, 3, 10_000])
def test_max_warnings_cap_identical(cap: int) -> None:
    py = _compare(_WARNING_LOG, f"max_warnings={cap}", max_warnings=cap)
    total = 40 * 5
    kept = min(max(cap, 0), total)
    assert len(py["warnings"]) == kept
    assert py["warnings_dropped"] == total - kept
    nat = _outcome(_chunks(_WARNING_LOG, 5), native=True, max_warnings=cap)
    _assert_same(_WARNING_LOG, py, nat, f"max_warnings={cap}, chunks of 5")


# --- the parser's size caps ----------------------------------------------------------------------


def _caps_log(kind: str) -> bytes:
    if kind == "orphans":  # candidates outside any block: the oldest half is dropped at 4096
        body = b"".join(b"[V] [TRT] Tactic: 0x%x Time: 0.%d\n" % (i, i) for i in range(5000))
        return (
            body
            + b"[V] [TRT] Timing Runner: conv (CaskConvolution[0x8])\n"
            + (b"[V] [TRT] Chose Runner Type: CaskConvolution Tactic: 0x1234\n")
        )
    if kind == "candidates":  # one block holds at most 100000 candidates
        head = b"Computing costs for big\nAutotuning format combination: Float\n"
        head += b"Timing Runner: big (R)\n"
        body = b"".join(b"Tactic: %d Time: 1.5\n" % i for i in range(100_010))
        return head + body + b"Chose Runner Type: R Tactic: 100005\n"
    if kind == "engine_layers":  # at most 100000 engine layers are kept
        body = b"".join(
            b"Layer(Conv): n%d, Tactic: 0x%x, a -> b\n" % (i, i) for i in range(100_005)
        )
        return b"Engine Layer Information:\n" + body
    raise AssertionError(kind)


@needs_native
@pytest.mark.parametrize("kind", ["orphans", "candidates", "engine_layers"])
def test_size_caps_identical(kind: str) -> None:
    data = _caps_log(kind)
    py = _compare(data, f"{kind} cap")
    if kind == "engine_layers":
        assert len(py["engine_layers"]) == 100_000
    else:
        assert len(py["records"]) == 1
        assert py["records"][0]["num_candidates"] == (2952 if kind == "orphans" else 100_000)


# --- hypothesis: mutated fixture lines -----------------------------------------------------------

_FILE_LINES = [p.read_bytes().split(b"\n") for p in LOG_FIXTURES]
_LINES = sorted({line for lines in _FILE_LINES for line in lines})
_INSERTS = [
    b"\r", b"\r\n", b"\x00", b"\x1e", b"\x1f", b"\x1c", b"\x0b", b"\x0c", b"\xff", b"\x80",
    "é".encode(), "\u00a0".encode(), "\u2003".encode(), "\u0663".encode(), "\u0085".encode(),
    "\u3000".encode(), "\ufeff".encode(), "\U0001f600".encode(), b"\xed\xa0\x80", b"\xc0\x80",
    b"\xe2\x82", b"\xf0\x9f", b"\xf4\x90\x80\x80",
    b"(", b")", b",", b":", b"[", b"]", b" ", b"\t", b"_", b"+", b"-", b".", b"e", b"*", b"#",
    b"0", b"9", b"0x", b"0X", b"inf", b"nan", b"1e400", b"-0", b"# ", b", 0x", b"ms",
    b"Tactic: ", b"Tactic Name: ", b" Time: ", b"Fastest ", b"(key: ", b"):", b"ache",
    b"Layer(", b"Name: ", b", LayerType: ", b"Autotuning ", b"Timing Runner: ",
]  # fmt: skip


@st.composite
def _mutated(draw: st.DrawFn, line: bytes) -> bytes:
    for _ in range(draw(st.integers(0, 3))):
        op = draw(st.sampled_from(("cut", "splice", "insert", "replace", "insert")))
        pos = draw(st.integers(0, len(line)))
        if op == "cut":
            line = line[:pos]
        elif op == "splice":
            other = draw(st.sampled_from(_LINES))
            line = line[:pos] + other[draw(st.integers(0, len(other))) :]
        else:
            ins = draw(st.sampled_from(_INSERTS) | st.binary(min_size=1, max_size=3))
            line = line[:pos] + ins + line[pos + (op == "replace") :]
    return line


@st.composite
def _piece(draw: st.DrawFn) -> list[bytes]:
    kind = draw(st.sampled_from(("window", "window", "line", "random")))
    if kind == "random":
        return [draw(st.binary(max_size=120))]
    if kind == "line":
        return [draw(_mutated(draw(st.sampled_from(_LINES))))]
    lines = draw(st.sampled_from(_FILE_LINES))
    start = draw(st.integers(0, len(lines) - 1))
    window = lines[start : start + draw(st.integers(1, 30))]
    mutate = draw(st.lists(st.booleans(), min_size=len(window), max_size=len(window)))
    return [draw(_mutated(line)) if m else line for line, m in zip(window, mutate, strict=True)]


@st.composite
def _log(draw: st.DrawFn) -> bytes:
    pieces = draw(st.lists(_piece(), max_size=12))
    sep = draw(st.sampled_from((b"\n", b"\n", b"\r\n")))
    data = sep.join(line for piece in pieces for line in piece)
    return data + sep if draw(st.booleans()) else data


@needs_native
@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    data=_log(),
    cuts=st.lists(st.integers(0, 1 << 16), max_size=6),
    max_warnings=st.sampled_from((10_000, 10_000, 0, 1, 2)),
)
@example(data=b"Tactic: 0x1 Time: 0.5\xe2\x82\xac\n", cuts=[20, 21, 22], max_warnings=10_000)
def test_mutated_logs_identical(data: bytes, cuts: list[int], max_warnings: int) -> None:
    py = _compare(data, "mutated log", max_warnings=max_warnings)
    pieces = _cut_at(data, [c % (len(data) + 1) for c in cuts])
    nat = _outcome(pieces, native=True, max_warnings=max_warnings)
    _assert_same(data, py, nat, f"mutated log cut at {[len(p) for p in pieces]}")


# --- hypothesis: the parser's trigger words with odd numbers -------------------------------------

_FRAGMENTS = [
    "Tactic: ", "Tactic Name: ", " Time: ", " time ", "Time:", "0x", "0X", "0x1f", "-12", "12",
    "1_0", "+3", "\u0663", "\u00a0", "\u2003", "\x1c", "\x85", "inf", "-inf", "nan", "1e400",
    "-0.0", ".5", "5.", ", ", ",", "(", ")", "[", "]", ":", "*", "Autotuning op ", "(key: ",
    "0x" + "a" * 32, "0X" + "F" * 32, "):", ": [ONNX Layer: ", "\x1e", "\x1f",
    "Autotuning format combination:", "Autotuning Reformat", "Timing Runner: ",
    " (Cask[0x80000009])", "Chose Runner Type: ", "Fastest Tactic: ",
    " profiling completed in 1 seconds. ", "Set Tactic Name: ", "Computing costs for",
    "] got cached result: ", ", tactic ", " ms", "(tactic hash, cost(in ms)):",
    "Writing the best tactic (", "Layer(", "): ", ", Tactic: ", "Name: ", ", LayerType: ",
    ", TacticName: ", ", TacticValue: ", ", Metadata: ", "ForeignNode ", " metadata: ", "Layers:",
    "Engine Layer Information:", "# ", "timing cache will not be used", "Error Code 1", "cache",
    "   3", " 0.5", "\r", "\x00", "[V] [TRT] ", "[TensorRT] VERBOSE: ", "(foreignNode) ",
    "2023-01-11 13:19:51-0600: ", "é",
]  # fmt: skip


@needs_native
@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    lines=st.lists(st.lists(st.sampled_from(_FRAGMENTS), max_size=12).map("".join), max_size=30),
    chunk=st.integers(1, 64),
)
def test_trigger_word_lines_identical(lines: list[str], chunk: int) -> None:
    data = "\n".join(lines).encode("utf-8", errors="surrogatepass")
    py = _compare(data, "trigger-word lines")
    nat = _outcome(_chunks(data, chunk), native=True)
    _assert_same(data, py, nat, f"trigger-word lines, chunks of {chunk}")


# --- hypothesis: times read by the scanner's own decimal reader -------------------------------


_DECIMAL = st.from_regex(r"[+-]?[0-9]{0,17}(\.[0-9]{0,17})?", fullmatch=True)


@needs_native
@settings(max_examples=500, deadline=None)
@given(times=st.lists(_DECIMAL | st.floats(allow_nan=False).map(repr), min_size=1, max_size=20))
def test_times_read_as_float_reads_them(times: list[str]) -> None:
    """Plain decimals up to 15 digits are read in C without strtod: the same double as
    float() (a record's cost compared by repr), and the same JSON text."""
    lines = [f"Tactic: 0x{i:x} Time: {t}" for i, t in enumerate(times)]
    data = (
        "Timing Runner: l (r)\n" + "\n".join(lines) + "\nFastest Tactic: 0x0 Time: 1\n"
    ).encode()
    py = _compare(data, "decimal times")
    assert [c[4] for c in py["records"][0]["exact_candidates"]] == [_num(_float(t)) for t in times]


def _float(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


# --- the build without the extension ----------------------------------


def test_without_the_extension_candidates_are_named_tuples() -> None:
    """Where nothing could compile the extension, reprobuild.logs falls back to the NamedTuple
    Candidate and the pure-Python parser: same records, same JSON."""
    code = (
        "import json, sys\n"
        "sys.modules['reprobuild.logs._logscan'] = None  # as if it was never built\n"
        "from reprobuild.logs import reader, records\n"
        "assert issubclass(records.Candidate, tuple), records.Candidate\n"
        "assert not reader.native_available()\n"
        "out = {}\n"
        "for path in sys.argv[1:]:\n"
        "    out[path] = [r.to_json() for r in reader.iter_file(path)]\n"
        "print(json.dumps(out))\n"
    )
    paths = [str(p) for p in LOG_FIXTURES]
    child = subprocess.run(
        [sys.executable, "-c", code, *paths], capture_output=True, text=True, check=True
    )
    fallback = json.loads(child.stdout)
    for path in paths:
        here = [r.to_json() for r in iter_file(path)]
        assert fallback[path] == here, path
    assert sum(len(v) for v in fallback.values()) > 0


# --- objects the scanner makes without calling their class ---------------------------------------


def test_dataclass_recipes_only_for_plain_frozen_slotted_classes() -> None:
    """The scanner sets a frozen slotted dataclass's fields itself only when its generated
    ``__init__`` would do nothing else; any other class is called."""
    from dataclasses import dataclass, field

    from reprobuild.logs.layerinfo import EngineLayer
    from reprobuild.logs.records import LogWarning

    @dataclass(frozen=True, slots=True)
    class Checked:
        a: int

        def __post_init__(self) -> None:
            raise ValueError

    @dataclass(slots=True)
    class Mutable:
        a: int

    @dataclass(frozen=True, slots=True)
    class Factory:
        a: int
        b: list[int] = field(default_factory=list)

    @dataclass(frozen=True)
    class NoSlots:
        a: int

    assert reader._recipe(LogWarning, 3) == (("line", "kind", "message"), ())
    assert reader._recipe(EngineLayer, 5) == (
        ("name", "layer_type", "tactic_name", "tactic_value", "metadata", "inputs", "outputs"),
        ((), ()),
    )
    assert reader._recipe(LogWarning, 2) is None  # message has no default
    for cls in (Checked, Mutable, NoSlots):
        assert reader._recipe(cls, 1) is None, cls
    assert reader._recipe(Factory, 1) is None
    assert reader._recipe(int, 1) is None


@needs_native
def test_made_warnings_and_layers_equal_called_ones() -> None:
    data = (
        b"Global timing cache in use\nLayers:\n"
        b"Name: a, LayerType: b, TacticValue: 0x1, Metadata: [ONNX Layer: x]\x1e[ONNX Layer: y]\n"
    )
    py, nat = LogParser(), LogParser()
    list(iter_chunks([data], py, native=False))
    list(iter_chunks([data], nat, native=True))
    assert nat.warnings == py.warnings and len(nat.warnings) == 1
    assert nat.engine_layers == py.engine_layers and len(nat.engine_layers) == 1
    assert hash(nat.engine_layers[0]) == hash(py.engine_layers[0])
    assert nat.engine_layers[0].metadata == ("x", "y") and nat.engine_layers[0].inputs == ()
    with pytest.raises(AttributeError):
        nat.engine_layers[0].name = "z"  # type: ignore[misc]  # still frozen
