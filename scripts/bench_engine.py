"""Reference engine inference against ONNX Runtime on the re-weighted model zoo.

Goal: the reference engine's inference <= 2x ONNX Runtime's, on each model. Both sides run
the same model file on the same input (the onnx test runner's ``arange(n) / n``) with the
same thread count: the engine with its default of one BLAS thread
(:mod:`reprobuild.backends.reference.threads`), ONNX Runtime with
``intra_op_num_threads=1, inter_op_num_threads=1``. ONNX Runtime with its own default
(every core; spinning of idle workers off, or they take the cores from the next round) is
printed beside them for reference. Rounds are interleaved (engine, ORT 1
thread, ORT default, then again) and the minimum of ``--runs`` rounds is kept. The rounds
are spread over ``--passes`` passes over the models, so that a slowdown of the host lasting
seconds (a shared machine's neighbours: it slows the engine's memory-bound passes more than
ONNX Runtime) does not fall on every round of one model. The
``GEMM`` column is the time spent inside the locked kernels' BLAS calls (one more engine run
per round, with ``kernels._mm`` timed; not counted in the engine's time): the part of the
engine that the kernels' arithmetic, which locks record, fixes. ``CPU ratio`` divides the
process CPU times (minimum over rounds) of the engine and ONNX Runtime at one thread: on a
machine shared with other work it is steadier than the wall-clock ratio.

Output check (``--record DIR`` then ``--compare DIR``): ``--record`` keeps each model's
timing cache and engine outputs; ``--compare`` builds from the recorded cache (so every
layer gets the recorded tactic, nothing is timed), runs the engine, and prints the largest
difference from the recorded outputs relative to the outputs' largest magnitude (goal:
<= 1e-6). Every run also builds the engine twice and checks the two engines' outputs are
bit-identical. Usage::

    python scripts/bench_engine.py [--models resnet50 vgg19] [--runs 6] [--passes 3] [--zoo DIR]
        [--record DIR | --compare DIR]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnxruntime as ort

from reprobuild.backends.reference import ReferenceBackend
from reprobuild.types import BuildSettings

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))  # the re-weighted zoo lives in tests/models
from tests.models import zoo  # noqa: E402

MODELS = ("bvlc_alexnet", "squeezenet", "resnet50", "inception_v2", "densenet121", "vgg19")
GOAL = 2.0


def _session(path: Path, threads: int) -> ort.InferenceSession:
    options = ort.SessionOptions()
    options.log_severity_level = 3
    if threads:
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = threads
    else:  # its idle workers would spin on the cores the next engine round needs
        options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])


def _timed(fn) -> tuple[float, float]:
    """(wall seconds, CPU seconds of this process) of one call."""
    start, cpu = time.perf_counter(), time.process_time()
    fn()
    return time.perf_counter() - start, time.process_time() - cpu


def _gemm_time(run) -> float:
    """Seconds spent in :func:`kernels._mm` (every BLAS call of a locked kernel) during run."""
    from reprobuild.backends.reference import kernels

    real, spent = kernels._mm, [0.0]

    def timed(a, b):
        start = time.perf_counter()
        try:
            return real(a, b)
        finally:
            spent[0] += time.perf_counter() - start

    kernels._mm = timed
    try:
        run()
    finally:
        kernels._mm = real
    return spent[0]


def _build(backend: ReferenceBackend, path: Path, cache_bytes: bytes) -> tuple[bytes, bytes]:
    """(engine, serialized timing cache): from ``cache_bytes`` when given (nothing timed)."""
    cache = backend.create_timing_cache(cache_bytes)
    out = backend.build(str(path), BuildSettings(), cache, lambda _line: None)
    return out.engine, cache.serialize()


def _same_bits(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> bool:
    return a.keys() == b.keys() and all(
        a[k].dtype == b[k].dtype and a[k].tobytes() == b[k].tobytes() for k in a
    )


def _relative(new: dict[str, np.ndarray], old: dict[str, np.ndarray]) -> float:
    """max |new - old| / max |old| over every output."""
    worst = 0.0
    for name, ref in old.items():
        ref64, got = ref.astype(np.float64), np.asarray(new[name], np.float64)
        scale = float(np.max(np.abs(ref64))) or 1.0
        worst = max(worst, float(np.max(np.abs(got - ref64))) / scale)
    return worst


@dataclass
class Subject:
    """One model under test: its engine and ONNX Runtime sessions, kept across passes."""

    name: str
    backend: ReferenceBackend
    engine: bytes
    cache_bytes: bytes
    feeds: dict[str, np.ndarray]
    first: dict[str, np.ndarray]  # the engine's outputs on its first run
    steady: bool  # a rebuilt engine gave the same bits
    sessions: dict[int, ort.InferenceSession]
    times: dict[str, list[float]] = field(
        default_factory=lambda: {k: [] for k in ("engine", "ort1", "ort", "gemm", "cpu", "cpu1")}
    )


def prepare(name: str, zoo_dir: Path, compare: Path | None) -> Subject:
    """Build ``name``'s engine (from the recorded cache with ``compare``), build it again to
    check the bits are steady, and open its ONNX Runtime sessions."""
    path = zoo.reweighted_path(name, zoo_dir)
    backend = ReferenceBackend()
    recorded = (compare / f"{name}.cache").read_bytes() if compare else b""
    engine, cache_bytes = _build(backend, path, recorded)
    feeds = zoo.runner_inputs(onnx.load(str(path), load_external_data=False))
    first = backend.run(engine, feeds)  # load + fold once, as a deserialized engine would
    rebuilt, _ = _build(backend, path, cache_bytes)
    steady = _same_bits(first, backend.run(rebuilt, feeds))
    del rebuilt
    sessions = {1: _session(path, 1), 0: _session(path, 0)}
    return Subject(name, backend, engine, cache_bytes, feeds, first, steady, sessions)


def measure(subject: Subject, rounds: int) -> None:
    """``rounds`` interleaved rounds, after one untimed run of each side (the engine folds
    its model again when another model ran since: that is loading, not inference)."""
    s, times = subject, subject.times
    s.backend.run(s.engine, s.feeds)
    for session in s.sessions.values():
        session.run(None, s.feeds)
    for _ in range(rounds):
        wall, cpu = _timed(lambda: s.backend.run(s.engine, s.feeds))
        times["engine"].append(wall)
        times["cpu"].append(cpu)
        times["gemm"].append(_gemm_time(lambda: s.backend.run(s.engine, s.feeds)))
        wall, cpu = _timed(lambda: s.sessions[1].run(None, s.feeds))
        times["ort1"].append(wall)
        times["cpu1"].append(cpu)
        times["ort"].append(_timed(lambda: s.sessions[0].run(None, s.feeds))[0])


def result(subject: Subject, record: Path | None, compare: Path | None) -> dict[str, Any]:
    """The minimum of each time over every round, and the output checks."""
    row: dict[str, Any] = {k: min(v) for k, v in subject.times.items()}
    row["steady"] = subject.steady
    name = subject.name
    if record:
        record.mkdir(parents=True, exist_ok=True)
        (record / f"{name}.cache").write_bytes(subject.cache_bytes)
        np.savez(record / f"{name}.npz", **subject.first)
    if compare:
        with np.load(compare / f"{name}.npz", allow_pickle=False) as old:
            row["relative"] = _relative(subject.first, {k: old[k] for k in old.files})
    return row


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", choices=zoo.MODELS, default=list(MODELS))
    parser.add_argument("--runs", type=int, default=6, help="rounds (the minimum is kept)")
    parser.add_argument(
        "--passes", type=int, default=3, help="passes over the models the rounds are spread over"
    )
    parser.add_argument("--zoo", type=Path, help="directory of re-weighted models (kept)")
    group = parser.add_mutually_exclusive_group()
    group.add_argument("--record", type=Path, help="keep timing caches and outputs here")
    group.add_argument("--compare", type=Path, help="build from, and compare with, a record")
    args = parser.parse_args()
    tmp = tempfile.TemporaryDirectory(prefix="bench-engine-")
    zoo_dir = args.zoo or Path(tmp.name)
    passes = max(1, min(args.passes, args.runs))
    print(
        f"min of {args.runs} interleaved rounds in {passes} passes over the models; engine: 1 "
        f"BLAS thread; ORT-1: intra/inter_op_num_threads=1; ORT: its default threads; goal "
        f"engine/ORT-1 <= {GOAL}"
    )
    head = (
        f"{'model':<14}{'engine ms':>10}{'ORT-1 ms':>10}{'ratio':>7}{'ORT ms':>9}"
        f"{'GEMM ms':>9}{'GEMM/ORT-1':>11}{'CPU ratio':>10}  steady"
    )
    print(head + ("  rel.diff" if args.compare else ""))
    subjects = [prepare(name, zoo_dir, args.compare) for name in args.models]
    for done in range(passes):
        start = time.perf_counter()
        for subject in subjects:
            measure(subject, args.runs // passes + (done < args.runs % passes))
        print(f"pass {done + 1}/{passes}: {time.perf_counter() - start:.0f} s", file=sys.stderr)
    for subject in subjects:
        r = result(subject, args.record, args.compare)
        name = subject.name
        ratio = r["engine"] / r["ort1"]
        mark = "ok" if ratio <= GOAL else "OVER"
        line = (
            f"{name:<14}{r['engine'] * 1e3:10.1f}{r['ort1'] * 1e3:10.1f}{ratio:6.2f}x"
            f"{r['ort'] * 1e3:9.1f}{r['gemm'] * 1e3:9.1f}{r['gemm'] / r['ort1']:10.2f}x"
            f"{r['cpu'] / r['cpu1']:9.2f}x"
            f"  {'yes' if r['steady'] else 'NO':<6} {mark}"
        )
        if "relative" in r:
            line += f"  {r['relative']:.2e}"
        print(line, flush=True)


if __name__ == "__main__":
    main()
