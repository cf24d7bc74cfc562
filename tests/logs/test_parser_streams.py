"""The parser reads a log the same way whichever entry point it comes through.

``LogParser.feed`` takes one line at a time (a build's logger callback); ``iter_chunks`` and
``iter_file`` take bytes cut anywhere, and that is where the speed work lives (large chunks,
lines that cannot matter skipped without a handler). On every fixture, every chunking,
hand-picked edge inputs and hypothesis-made logs, both give the same records (every field,
numbers compared by type and ``repr``), line count, warnings and engine layers. The edge
inputs are also held to what the parser made of them before that speed work
(``tests/fixtures/logparse/edge_outcomes.json``), so a change of meaning on odd input fails
even where both entry points would change together.

A difference fails with the first differing record, warning or engine layer and the source
lines it came from.
"""

from __future__ import annotations

import itertools
import json
import random
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from reprobuild.logs.parser import LogParser
from reprobuild.logs.reader import iter_chunks, iter_file

FIX = Path(__file__).resolve().parent.parent / "fixtures"
LOG_FIXTURES = sorted((FIX / "trt-logs").glob("*.log")) + sorted((FIX / "logparse").glob("*.log"))
EDGE_OUTCOMES = FIX / "logparse" / "edge_outcomes.json"


# --- one outcome, two ways to reach it ----------------------------------------------------------


def _num(value: Any) -> Any:
    """A number compared exactly: type and repr (so -0.0, nan, inf and int-vs-float count)."""
    return None if value is None else [type(value).__name__, repr(value)]


def _record(r: Any) -> dict[str, Any]:
    return {
        "layer": r.layer,
        "key": r.key,
        "onnx_layers": list(r.onnx_layers),
        "format": r.format,
        "formats": r.formats,
        "line": r.line,
        "runner": r.runner,
        "from_cache": r.from_cache,
        "chosen": _num(r.chosen),
        "chosen_kernel": r.chosen_kernel,
        "chosen_cost_ms": _num(r.chosen_cost_ms),
        "candidates": [
            [_num(c.tactic_id), _num(c.tactic_hash), c.kernel, _num(c.cost_ms), c.runner]
            for c in r.candidates
        ],
    }


def _outcome(records: Iterable[Any], parser: LogParser) -> dict[str, Any]:
    recs = [_record(r) for r in records]  # drains the records before the parser is read
    return {
        "records": recs,
        "lineno": parser.lineno,
        "warnings": [w.to_json() for w in parser.warnings],
        "warnings_dropped": parser.warnings_dropped,
        "engine_layers": [repr(e) for e in parser.engine_layers],
    }


def _chunked(pieces: Iterable[bytes], max_warnings: int = 10_000) -> dict[str, Any]:
    parser = LogParser(max_warnings=max_warnings)
    return _outcome(iter_chunks(pieces, parser), parser)


def _fed(data: bytes, max_warnings: int = 10_000) -> dict[str, Any]:
    """The same bytes through ``feed``, one line per call, as a logger callback hands them."""
    lines = data.decode("utf-8", errors="replace").split("\n")
    if lines[-1] == "":
        lines.pop()  # the newline ends the last line; it does not start another
    parser = LogParser(max_warnings=max_warnings)
    records = [r for line in lines for r in parser.feed(line)] + parser.finish()
    return _outcome(records, parser)


def _source(data: bytes, line: int, span: int = 1) -> list[str]:
    lines = data.split(b"\n")
    out = [f"  source line {n}: {lines[n - 1][:400]!r}" for n in range(line, line + span)]
    return out[: max(0, len(lines) - line + 1)] or [f"  source line {line}: <past the end>"]


def _first_index(a: list[Any], b: list[Any]) -> int:
    return next(
        (i for i, (x, y) in enumerate(zip(a, b, strict=False)) if x != y), min(len(a), len(b))
    )


def _explain(data: bytes, fed: dict[str, Any], got: dict[str, Any], what: str) -> str:
    msg = [f"{what}: the chunked reader and line-by-line feed differ"]
    for key in ("lineno", "warnings_dropped"):
        if fed[key] != got[key]:
            msg.append(f"{key}: fed={fed[key]!r} chunked={got[key]!r}")
    for key in ("records", "warnings", "engine_layers"):
        a, b = fed[key], got[key]
        if a == b:
            continue
        i = _first_index(a, b)
        x, y = (a[i] if i < len(a) else None), (b[i] if i < len(b) else None)
        msg.append(f"{key}: fed {len(a)}, chunked {len(b)}; first difference at #{i}:")
        msg.append(f"  fed    ={x!r}\n  chunked={y!r}")
        line = (x or y).get("line") if isinstance(x or y, dict) else None
        if line:
            msg += _source(data, line, 4 if key == "records" else 1)
    msg.append(f"input ({len(data)} bytes): {data[:4000]!r}")
    return "\n".join(msg)


def _assert_same(data: bytes, fed: dict[str, Any], got: dict[str, Any], what: str) -> None:
    if fed != got:
        pytest.fail(_explain(data, fed, got, what), pytrace=False)


def _chunks(data: bytes, size: int) -> list[bytes]:
    return [data[i : i + size] for i in range(0, len(data), size)]


def _cut_at(data: bytes, points: Iterable[int]) -> list[bytes]:
    edges = [0, *sorted({min(max(p, 0), len(data)) for p in points}), len(data)]
    return [data[s:e] for s, e in zip(edges, edges[1:], strict=False)]


def _compare(data: bytes, what: str, *, max_warnings: int = 10_000) -> dict[str, Any]:
    fed = _fed(data, max_warnings)
    _assert_same(data, fed, _chunked([data], max_warnings), what)
    return fed


# --- every fixture file --------------------------------------------------------------------------


@pytest.mark.parametrize("path", LOG_FIXTURES, ids=lambda p: p.name)
def test_fixture_file_reads_as_its_lines(path: Path) -> None:
    data = path.read_bytes()
    parser = LogParser()
    from_file = _outcome(iter_file(path, parser), parser)
    _assert_same(data, _fed(data), from_file, path.name)
    assert from_file["lineno"] == data.count(b"\n") + (not data.endswith(b"\n") and bool(data))


def test_fixtures_hold_records() -> None:
    """The comparisons above mean something only if the fixtures parse to records."""
    with_records = [p for p in LOG_FIXTURES if _fed(p.read_bytes())["records"]]
    assert len(with_records) >= 8, [p.name for p in with_records]


# --- chunking ------------------------------------------------------------------------------------

_ALL = b"".join(p.read_bytes() for p in LOG_FIXTURES)


@pytest.fixture(scope="module")
def all_fed() -> dict[str, Any]:
    out = _fed(_ALL)
    assert len(out["records"]) > 30
    return out


def _chunked_all(size: int | str) -> list[bytes]:
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


@pytest.mark.parametrize("size", [1, 7, 4096, "random", "whole"])
def test_concatenated_fixtures_any_chunking(size: int | str, all_fed) -> None:
    _assert_same(_ALL, all_fed, _chunked(_chunked_all(size)), f"all fixtures, chunks of {size}")


@pytest.mark.parametrize("size", [7, 4096, "random"])
def test_records_come_out_with_the_chunk_that_completes_them(size: int | str) -> None:
    """A pipe's records are not held back until the end: each comes out once the chunk
    holding the newline of the line that completes it has been read."""
    pieces = _chunked_all(size)
    got = [0] * (len(pieces) + 1)  # per chunk, then what came after the last one (finish)
    taken = 0

    def chunks():
        nonlocal taken
        for chunk in pieces:
            taken += 1
            yield chunk
        taken += 1

    for _ in iter_chunks(chunks(), LogParser()):
        got[taken - 1] += 1
    # Expected: feed the lines; a line belongs to the chunk that holds its newline.
    expected = [0] * (len(pieces) + 1)
    ends = list(itertools.accumulate(len(p) for p in pieces))
    parser, start, k = LogParser(), 0, 0
    while (nl := _ALL.find(b"\n", start)) >= 0:
        while ends[k] <= nl:
            k += 1
        expected[k] += len(parser.feed(_ALL[start:nl].decode("utf-8", errors="replace")))
        start = nl + 1
    if start < len(_ALL):
        expected[-1] += len(parser.feed(_ALL[start:].decode("utf-8", errors="replace")))
    expected[-1] += len(parser.finish())
    assert sum(got) == sum(expected) > 30
    assert got == expected, f"first difference at chunk #{_first_index(got, expected)}"


# --- hand-picked edge inputs ---------------------------------------------------------------------

EDGES = [
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
    # the words inside a prefix: the message's last character is cut, not its last byte
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
    # (which str.strip() and WS do remove)
    b"Timing Runner: a (b)\nTactic: \x1e5 Time: 1\n",
    b"Timing Runner: a (b)\nTactic: 0x5 time \x1f1.5\n",
    b"Autotuning op a:\n   \x1e0, 0.01, 1, 1, k, 0x1,\n",
    b"Autotuning op a:\n   0, \x1c0.01, 1, 1, k, 0x1,\n",
    # a line starting with "Tactic: " and ending with "Fastest "
    b"Timing Runner: a (b)\nTactic: 1_0 Time: 5Fastest \n",
]


def _edge_key(data: bytes) -> str:
    return data.decode("latin-1")


@pytest.fixture(scope="module")
def edge_outcomes() -> dict[str, Any]:
    return json.loads(EDGE_OUTCOMES.read_text(encoding="utf-8"))


@pytest.mark.parametrize("data", EDGES, ids=range(len(EDGES)))
def test_edge_inputs(data: bytes, edge_outcomes: dict[str, Any]) -> None:
    fed = _compare(data, "edge input")
    for size in (1, 2, 3):
        _assert_same(data, fed, _chunked(_chunks(data, size)), f"edge input, chunks of {size}")
    assert fed == edge_outcomes[_edge_key(data)]


def test_edge_outcomes_file_covers_the_edges_and_holds_records(edge_outcomes) -> None:
    assert set(edge_outcomes) == {_edge_key(d) for d in EDGES}
    assert sum(len(o["records"]) for o in edge_outcomes.values()) >= 10


# --- lines past 1 MiB ----------------------------------------------------------------------------


def test_a_line_past_1_mib_is_cut_whatever_the_chunking() -> None:
    """Binary noise without newlines must not grow memory: the reader keeps a line's first
    1 MiB, wherever the chunks were cut, and reads the lines after it as usual."""
    block = (
        b"Timing Runner: conv (Cask)\nTactic: 0x5 Time: 0.5\nChose Runner Type: Cask Tactic: 0x5\n"
    )
    data = b"x" * (3 << 20) + b" Global timing cache in use\n" + block
    outs = [_chunked(_chunks(data, size)) for size in (1 << 16, 1 << 20, 3 << 20, len(data))]
    assert all(o == outs[0] for o in outs)
    (rec,) = outs[0]["records"]
    assert (rec["layer"], rec["chosen"], rec["line"], outs[0]["lineno"]) == (
        "conv",
        ["int", "5"],
        2,
        4,
    )
    assert outs[0]["warnings"] == []  # the message past the first 1 MiB was cut off


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


@pytest.mark.parametrize("cap", [-1, 0, 1, 3, 10_000])
def test_max_warnings_cap(cap: int) -> None:
    fed = _compare(_WARNING_LOG, f"max_warnings={cap}", max_warnings=cap)
    total = 40 * 5
    kept = min(max(cap, 0), total)
    assert len(fed["warnings"]) == kept
    assert fed["warnings_dropped"] == total - kept
    got = _chunked(_chunks(_WARNING_LOG, 5), max_warnings=cap)
    _assert_same(_WARNING_LOG, fed, got, f"max_warnings={cap}, chunks of 5")


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


@pytest.mark.parametrize("kind", ["orphans", "candidates", "engine_layers"])
def test_size_caps(kind: str) -> None:
    out = _compare(_caps_log(kind), f"{kind} cap")
    if kind == "engine_layers":
        assert len(out["engine_layers"]) == 100_000
    else:
        assert len(out["records"]) == 1
        assert len(out["records"][0]["candidates"]) == (2952 if kind == "orphans" else 100_000)


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
def mutated_logs(draw: st.DrawFn) -> bytes:
    """Windows of real fixture lines, some mutated, mixed with random bytes."""
    pieces = draw(st.lists(_piece(), max_size=12))
    sep = draw(st.sampled_from((b"\n", b"\n", b"\r\n")))
    data = sep.join(line for piece in pieces for line in piece)
    return data + sep if draw(st.booleans()) else data


@settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(
    data=mutated_logs(),
    cuts=st.lists(st.integers(0, 1 << 16), max_size=6),
    max_warnings=st.sampled_from((10_000, 10_000, 0, 1, 2)),
)
@example(data=b"Tactic: 0x1 Time: 0.5\xe2\x82\xac\n", cuts=[20, 21, 22], max_warnings=10_000)
def test_mutated_logs(data: bytes, cuts: list[int], max_warnings: int) -> None:
    fed = _compare(data, "mutated log", max_warnings=max_warnings)
    pieces = _cut_at(data, [c % (len(data) + 1) for c in cuts])
    got = _chunked(pieces, max_warnings=max_warnings)
    _assert_same(data, fed, got, f"mutated log cut at {[len(p) for p in pieces]}")


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


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    lines=st.lists(st.lists(st.sampled_from(_FRAGMENTS), max_size=12).map("".join), max_size=30),
    chunk=st.integers(1, 64),
)
def test_trigger_word_lines(lines: list[str], chunk: int) -> None:
    data = "\n".join(lines).encode("utf-8", errors="surrogatepass")
    fed = _compare(data, "trigger-word lines")
    _assert_same(
        data, fed, _chunked(_chunks(data, chunk)), f"trigger-word lines, chunks of {chunk}"
    )


# --- hypothesis: times are read as float() reads them --------------------------------------------

_DECIMAL = st.from_regex(r"[+-]?[0-9]{0,17}(\.[0-9]{0,17})?", fullmatch=True)


def _float(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


@settings(max_examples=300, deadline=None)
@given(times=st.lists(_DECIMAL | st.floats(allow_nan=False).map(repr), min_size=1, max_size=20))
def test_times_read_as_float_reads_them(times: list[str]) -> None:
    lines = [f"Tactic: 0x{i:x} Time: {t}" for i, t in enumerate(times)]
    data = (
        "Timing Runner: l (r)\n" + "\n".join(lines) + "\nFastest Tactic: 0x0 Time: 1\n"
    ).encode()
    out = _compare(data, "decimal times")
    assert [c[3] for c in out["records"][0]["candidates"]] == [_num(_float(t)) for t in times]
