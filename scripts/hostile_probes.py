#!/usr/bin/env python3
"""Hostile probes through the real CLI, one child process each: the closing figures of the
"nothing lost, nothing hung" work (probes run, clean refusals, slowest refusal, largest
peak memory).

A report, not a test (the suite in ``tests/faults/`` is the test): it reuses the suite's
cases (non-regular inputs, plain bad input, outputs that are inputs) and adds the smaller
ones (a dangling graph output, a 0-sized input, read-only and symlinked locks, hand-edited
INT8 scales, numeric overflow, ``.npz`` bombs, a cache linked to another file, bad cap
overrides; outputs on device nodes it makes itself, as root, else FIFOs). Each probe runs
in a fresh copy of one recorded project, as a user's shell would run it, and is judged:

- clean refusal: a documented failure code (1, 2 or 3), no traceback, the last stderr line
  ``error: ...``, every file that was there before unchanged and no temporary file left;
- accepted: exit 0 where that is the documented right behaviour (e.g. a pin through a
  symlinked lock), with no traceback and no raw Python warning;
- anything else is listed as unclean.

Peak memory is each child's ``ru_maxrss`` (``os.wait4``); the largest is also checked
against ``resource.getrusage(RUSAGE_CHILDREN)`` at the end. Timings are wall-clock seconds on
whatever machine runs it: figures for a note, never asserted.

    python scripts/hostile_probes.py            # all probes, a summary at the end
    python scripts/hostile_probes.py -v         # one line per probe as well
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


Setup = Callable[[Path], None]
TIMEOUT = 120.0


@dataclass
class Probe:
    name: str
    args: tuple[str, ...]
    setup: Setup = lambda _p: None
    env: dict[str, str] = field(default_factory=dict)
    accept: bool = False  # exit 0 is the documented right behaviour
    check: Callable[[Path], str | None] = lambda _p: None  # after the run: what went wrong


@dataclass
class Outcome:
    probe: Probe
    code: int
    seconds: float
    peak_mib: float
    verdict: str  # "refused", "accepted" or "unclean: why"


LAUNCHER = r"""
import json, os, subprocess, sys, tempfile, time
for line in sys.stdin:
    job = json.loads(line)
    with tempfile.TemporaryFile() as out:
        t0 = time.perf_counter()
        proc = subprocess.Popen(job["argv"], cwd=job["cwd"], env=job["env"],
                                stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT)
        while True:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            if time.perf_counter() - t0 > job["timeout"]:
                proc.kill()
                pid, status, usage = os.wait4(proc.pid, 0)
                break
            time.sleep(0.01)
        seconds = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        text = out.read().decode("utf-8", "replace")
    print(json.dumps([proc.returncode, text, seconds, usage.ru_maxrss / 1024]), flush=True)
"""
"""Runs each probe and reports its ``ru_maxrss`` (``os.wait4``). It is started before this
script imports anything large: on Linux a child's peak RSS starts at its parent's RSS at the
fork (kept across ``exec``), so children of this script (numpy, onnx loaded for the set-ups)
would all report at least its size."""


class Launcher:
    def __init__(self) -> None:
        self.proc = subprocess.Popen([sys.executable, "-c", LAUNCHER], stdin=subprocess.PIPE,
                                     stdout=subprocess.PIPE, text=True)  # fmt: skip

    def run(self, args: list[str], cwd: Path, env: dict[str, str]) -> tuple[int, str, float, float]:
        """(exit code, stdout and stderr, seconds, peak MiB) of one ``python -m reprobuild``."""
        import json

        assert self.proc.stdin is not None and self.proc.stdout is not None
        job = {"argv": [sys.executable, "-m", "reprobuild", *args], "cwd": str(cwd),
               "env": {**os.environ, **env}, "timeout": TIMEOUT}  # fmt: skip
        self.proc.stdin.write(json.dumps(job) + "\n")
        self.proc.stdin.flush()
        code, text, seconds, peak = json.loads(self.proc.stdout.readline())
        return code, text, seconds, peak

    def close(self) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.close()
        self.proc.wait()


def judge(p: Probe, code: int, err: str, before: dict[str, bytes], root: Path) -> str:
    if "Traceback" in err:
        return "unclean: a traceback"
    if "Warning:" in err:
        return "unclean: a raw Python warning"
    if "hunter2" in err:
        return "unclean: echoed the bytes of a file it was linked to"
    if code == 0:
        return "accepted" if p.accept else "unclean: exit 0 for hostile input"
    if code < 0 or code == 4 or code not in (1, 2, 3):
        return f"unclean: exit {code}"
    lines = [ln for ln in err.splitlines() if ln.strip()]
    if not lines or not lines[-1].startswith("error: "):
        return "unclean: no one-line error"
    from tests.faults.helpers import snapshot

    after = snapshot(root)
    changed = [k for k, v in before.items() if after.get(k) != v]
    if changed:
        return f"unclean: changed {changed}"
    if [k for k in after if k.endswith((".tmp", ".bak"))]:
        return "unclean: temporary files left"
    return "refused"


# --------------------------------------------------------------------------- the probes


def _suite_probes() -> list[Probe]:
    """The suite's own cases, as child processes."""
    from tests.faults import test_inputs, test_outputs, test_refusals

    probes = []
    for case, (args, replaces) in sorted(test_inputs.CASES.items()):
        for kind in test_inputs.HOSTILE:

            def setup(root: Path, args=args, replaces=replaces, kind=kind) -> None:
                if replaces == "cache":
                    target = _cache(root)
                elif replaces:
                    target = root / replaces
                else:
                    target = root / next(a for a in args if a.startswith("X"))
                test_inputs.make(target, kind)

            # a bad cache is re-recorded with a warning: exit 0 is right there
            probes.append(Probe(f"{case}/{kind}", args, setup, accept=replaces == "cache"))
    for case, args in sorted(test_refusals.CASES.items()):
        extra = ("--backend", "reference") if args[0] == "build" else ()
        probes.append(Probe(case, (*args, *extra), test_refusals._files, accept=True))

    def links(root: Path) -> None:
        (root / "link.engine").symlink_to("t.lock")
        os.link(root / "mlp.onnx", root / "hard.engine")

    for case, args in sorted(test_outputs.CASES.items()):
        probes.append(Probe(case, args, links))
    return probes


def _cache(root: Path) -> Path:
    """The recording cache of ``t.lock`` (the FP32 build of mlp.onnx itself; the FP16 and
    INT8 builds' caches are keyed by their converted models)."""
    import hashlib

    sha = hashlib.sha256((root / "mlp.onnx").read_bytes()).hexdigest()[:16]
    (cache,) = (root / "caches").glob(f"*-{sha}.cache")
    return cache


def _model(edit: Callable[[object], None], name: str) -> Setup:
    def setup(root: Path) -> None:
        import onnx

        model = onnx.load(str(root / "mlp.onnx"))
        edit(model)
        onnx.save(model, str(root / name))

    return setup


def _dangling(model) -> None:
    from onnx import TensorProto, helper

    model.graph.output.append(helper.make_tensor_value_info("ghost", TensorProto.FLOAT, [8, 10]))


def _zero_dim(model) -> None:
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_value = 0


def _read_only(root: Path) -> None:
    os.chmod(root / "t.lock", 0o444)


def _linked_lock(root: Path) -> None:
    (root / "shared").mkdir()
    os.replace(root / "t.lock", root / "shared" / "real.lock")
    (root / "t.lock").symlink_to("shared/real.lock")


def _secret_cache(root: Path) -> None:
    (root / "secret.txt").write_text("password=hunter2 " * 40)
    cache = _cache(root)
    cache.unlink()
    cache.symlink_to(root / "secret.txt")


def _huge_inputs(root: Path) -> None:
    import numpy as np

    x = np.random.default_rng(0).standard_normal((4, 1024)).astype(np.float32)
    x[0, :10] = 3e38
    np.savez(root / "huge.npz", input=x)


def _npz_bomb(root: Path) -> None:
    import io
    import zipfile

    from numpy.lib import format as npformat

    head = io.BytesIO()
    npformat.write_array_header_1_0(
        head, {"descr": "<f8", "fortran_order": False, "shape": (10**6, 10**6)}
    )
    with zipfile.ZipFile(root / "bomb.npz", "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("input.npy", npformat.MAGIC_PREFIX + b"\x01\x00" + head.getvalue()[8:])


def _scale(value: str) -> Setup:
    def setup(root: Path) -> None:
        text = (root / "i8.lock").read_text()
        (root / "h.lock").write_text(re.sub(r'scale: "[^"]*"', f'scale: "{value}"', text, count=1))

    return setup


PIN = ("pin", "--lock", "t.lock", "layer=fc1", "tactic=ref_matmul_tree8_f32")
BUILD = ("build", "mlp.onnx", "--lock", "t.lock", "--backend", "reference", "-q")


def _small_probes() -> list[Probe]:
    probes = [
        Probe(
            "dangling-output",
            ("build", "bad.onnx", "--lock", "n.lock", "--backend", "reference", "-q"),
            _model(_dangling, "bad.onnx"),
        ),  # fmt: skip
        Probe(
            "zero-dim-input",
            ("build", "bad.onnx", "--lock", "n.lock", "--backend", "reference", "-q"),
            _model(_zero_dim, "bad.onnx"),
        ),  # fmt: skip
        Probe("pin-read-only-lock", PIN, _read_only),
        Probe("unpin-read-only-lock", ("unpin", "--lock", "t.lock", "layer=fc1"), _read_only),
        Probe("pin-symlinked-lock", PIN, _linked_lock, accept=True),
        Probe("build-through-symlinked-lock", BUILD, _linked_lock, accept=True),
        Probe("cache-linked-to-a-secret", BUILD, _secret_cache, accept=True),
        Probe(
            "fp16-overflowing-inputs",
            ("verify", "--lock", "f.lock", "--inputs", "huge.npz", "-n", "1", "-q"),
            _huge_inputs,
            accept=True,
        ),  # fmt: skip
        Probe(
            "npz-header-bomb",
            ("verify", "--lock", "t.lock", "--inputs", "bomb.npz", "-n", "1"),
            _npz_bomb,
        ),  # fmt: skip
        Probe("lck-is-a-folder", PIN, lambda r: (r / "t.lock.lck").mkdir()),
        Probe("failed-pin", ("pin", "--lock", "t.lock", "layer=nope", "tactic=0x1")),
        Probe(
            "build-out-in-new-folders-fails",
            (*BUILD, "--out", "sub/dir/x.engine", "--opt-level", "0"),
        ),  # fmt: skip
    ]
    for value in ("abc", "\u00b2\u00b3", "-5", "1e9", "0x10"):
        probes.append(Probe(f"cap-override-{value}", ("show", "--lock", "t.lock"),
                            env={"REPROBUILD_MAX_LOCK_BYTES": value}))  # fmt: skip
    for value in ("0x1p-140", "0x0.0p+0", "-0x1p-3", "nan", "inf", "0x1p+200", "0x1p+2000",
                  "0x1.0000000000001p-6"):  # fmt: skip
        probes.append(Probe(f"int8-scale-{value}", ("show", "--lock", "h.lock"), _scale(value)))
    return probes


def _node(root: Path) -> None:
    """A device node of the script's own (root only; else a FIFO), never the system's."""
    import stat

    if os.geteuid() == 0:
        os.mknod(root / "n", stat.S_IFCHR | 0o600, os.makedev(1, 3))
    else:
        os.mkfifo(root / "n")


def _still_special(root: Path) -> str | None:
    import stat

    mode = os.lstat(root / "n").st_mode
    if stat.S_ISLNK(mode) or stat.S_ISCHR(mode) or stat.S_ISFIFO(mode):
        return None
    return "unclean: the device node became a regular file"


def _devnull_link(root: Path) -> None:
    (root / "n").symlink_to("/dev/null")


def _edit_lock(old: str, new: str) -> Setup:
    def edit(root: Path) -> None:
        lock = root / "t.lock"
        text = lock.read_text()
        found = re.search(old, text)
        if found is None:
            raise SystemExit(f"probe setup: {old!r} not in t.lock")
        lock.write_text(text[: found.start()] + found.expand(new) + text[found.end() :])

    return edit


def _report(root: Path) -> None:
    import json

    (root / "r.json").write_text(json.dumps({"target": "reference-x-abc123",
        "inputs_label": "seeded:0", "tactic_map_sha256": "a" * 64,
        "outputs_sha256": "b" * 64}))  # fmt: skip


def _schema_1(root: Path) -> None:
    shutil.copy(ROOT / "tests" / "fixtures" / "locks" / "recorded_cnn.lock", root / "old.lock")
    shutil.copy(ROOT / "reprobuild" / "examples" / "cnn.onnx", root / "cnn.onnx")


def _output_probes() -> list[Probe]:
    """Outputs that are devices, inputs or caches; values the loader would refuse; bounds."""
    log = str(ROOT / "tests" / "fixtures" / "logparse" / "ref_editable.log")
    dev = {"check": _still_special}
    digest = r"outputs:\n(\s+- )(\{[^}]*\})"
    probes = [
        Probe("report-on-device-node", (*BUILD, "--report", "n"), _node, **dev),
        Probe("out-on-device-node", (*BUILD, "--out", "n"), _node, **dev),
        Probe("log-on-device-node", (*BUILD, "--log", "n"), _node, **dev),
        Probe(
            "verify-report-on-device-node",
            ("verify", "--lock", "t.lock", "-n", "1", "--report", "n"),
            _node,
            **dev,
        ),  # fmt: skip
        Probe("merge-out-on-device-node", ("merge", "t.lock", "--out", "n"), _node, **dev),
        Probe("report-link-to-dev-null", (*BUILD, "--report", "n"), _devnull_link, **dev),
        Probe("merge-out-is-model", ("merge", "t.lock", "--out", "mlp.onnx")),
        Probe("merge-out-in-caches", ("merge", "t.lock", "--out", "caches/m.lock")),
        Probe("report-in-caches", (*BUILD, "--report", "caches/r.json")),
        Probe(
            "plot-link-to-lock",
            ("stability", "mlp.onnx", "--plot", "p.svg", "-q"),
            lambda r: (r / "p.svg").symlink_to("t.lock"),
        ),  # fmt: skip
        Probe(
            "seed-over-the-loader",
            (
                "verify",
                "--lock",
                "t.lock",
                "-n",
                "1",
                "--seed",
                "1000000000000000000",
                "--record-digests",
            ),
        ),  # fmt: skip
        Probe(
            "lock-time-overflow",
            ("show", "--lock", "t.lock"),
            _edit_lock(r"time: \S+", 'time: "0x1p+99999999"'),
        ),  # fmt: skip
        Probe(
            "two-digests-one-inputs",
            ("show", "--lock", "t.lock"),
            _edit_lock(digest, r"outputs:\n\1\2\n\1\2"),
        ),  # fmt: skip
        Probe("log-processes-yes", ("log", log), env={"REPROBUILD_LOG_PROCESSES": "yes"}),
        Probe("fleet-one-report-twice", ("fleet", "r.json", "./r.json"), _report),
        Probe("stability-records-over-50", ("stability", "mlp.onnx", "--records", "51")),
        Probe("merge-schema-1-section", ("merge", "old.lock", "--out", "m.lock"), _schema_1),
    ]
    return probes


def make_project(root: Path) -> None:
    """mlp.onnx with an FP32 lock (t.lock), an FP16 lock (f.lock) and an INT8 lock."""
    import numpy as np

    shutil.copy(ROOT / "reprobuild" / "examples" / "mlp.onnx", root / "mlp.onnx")
    np.savez(
        root / "cal.npz",
        input=np.random.default_rng(0).standard_normal((8, 1024)).astype("float32"),
    )
    for args in (
        ("--lock", "t.lock"),
        ("--lock", "f.lock", "--precision", "fp16", "--out", "f.engine"),
        ("--lock", "i8.lock", "--precision", "int8", "--calibration", "cal.npz",
         "--calib-method", "minmax", "--out", "i8.engine"),
    ):  # fmt: skip
        p = subprocess.run([sys.executable, "-m", "reprobuild", "build", "mlp.onnx", *args,
                            "--backend", "reference", "-q"], cwd=root, capture_output=True,
                           text=True)  # fmt: skip
        if p.returncode != 0:
            sys.exit(f"could not record the project: {p.stderr.strip()}")
    (root / "cal.npz").unlink()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("-v", "--verbose", action="store_true", help="one line per probe")
    parser.add_argument(
        "-k", default="", help="only probes whose name contains one of these (comma-separated)"
    )
    opts = parser.parse_args()
    launcher = Launcher()  # first, while this process is small
    from tests.faults.helpers import snapshot

    probes = [
        p
        for p in _suite_probes() + _small_probes() + _output_probes()
        if any(k in p.name for k in opts.k.split(","))
    ]
    outcomes: list[Outcome] = []
    with tempfile.TemporaryDirectory(prefix="hostile-") as tmp:
        pristine = Path(tmp) / "pristine"
        pristine.mkdir()
        make_project(pristine)
        crashes = Path(tmp) / "crashes"
        for p in probes:
            root = Path(tmp) / "p"
            if root.exists():
                for q in root.rglob("*"):  # read-only files and folders must go too
                    if not q.is_symlink():
                        q.chmod(0o700 if q.is_dir() else 0o600)
                shutil.rmtree(root)
            shutil.copytree(pristine, root, symlinks=True)
            p.setup(root)
            before = snapshot(root)
            env = {"REPROBUILD_CRASH_DIR": str(crashes), **p.env}
            code, err, seconds, peak = launcher.run(list(p.args), root, env)
            verdict = p.check(root) or judge(p, code, err, before, root)
            outcomes.append(Outcome(p, code, seconds, peak, verdict))
            if opts.verbose:
                print(f"{verdict:9.60} exit {code:3}  {seconds:6.2f}s  {peak:7.1f} MiB  {p.name}")
    launcher.close()
    report(outcomes)


def report(outcomes: list[Outcome]) -> None:
    refused = [o for o in outcomes if o.verdict == "refused"]
    accepted = [o for o in outcomes if o.verdict == "accepted"]
    unclean = [o for o in outcomes if o.verdict.startswith("unclean")]
    slowest = max(refused, key=lambda o: o.seconds, default=None)
    largest = max(outcomes, key=lambda o: o.peak_mib, default=None)
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(f"probes run: {len(outcomes)}")
    print(f"clean refusals: {len(refused)} (one line, documented exit code, no traceback, "
          "files untouched)")  # fmt: skip
    print(f"accepted as documented (exit 0): {len(accepted)}")
    print(f"unclean: {len(unclean)}")
    for o in unclean:
        print(f"  {o.probe.name}: {o.verdict} (exit {o.code})")
    if slowest is not None:
        print(f"slowest refusal: {slowest.seconds:.2f} s ({slowest.probe.name})")
    if largest is not None:
        print(f"largest peak memory: {largest.peak_mib:.0f} MiB ({largest.probe.name}); "
              f"getrusage(RUSAGE_CHILDREN) max over every child, project set-up included: "
              f"{children:.0f} MiB")  # fmt: skip


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.default_int_handler)
    main()
