"""Every ``--json`` output (and JSON report file) keeps the fields it had before the restructuring.

The goldens in ``tests/fixtures/json_fields/`` hold, per command, the set of key paths of its
JSON output as the code printed it before the restructuring ("every ``--json``
output keeps its fields"), with the JSON type of each value. Paths look like
``layers[].tactic`` (``[]``: any list element) and ``tactic_map{}`` (a map keyed by hex
tactic keys, whose key names are data, not fields).

This test runs the same commands on the current tree, as users do (``python -m reprobuild``
in a subprocess, in a scratch folder), and fails when a golden path is missing or its type
changed. New fields are allowed. Children of a list that is empty this time cannot be
observed and are not checked; a value that was ``null`` may become anything and vice versa
for scalars.

TensorRT commands (a ``--backend tensorrt`` build, ``export-cache``, ``doctor`` with a
TensorRT lock) run with the test stand-in ``tensorrt`` module injected into the subprocess.

Regenerate the goldens from the pre-restructuring code only (never from the tree under
test), see ``scripts/capture_json_fields.py``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent
GOLDEN_DIR = Path(__file__).resolve().parent / "fixtures" / "json_fields"
INPUTS = GOLDEN_DIR / "inputs"
REF = ("--backend", "reference")

# Runs the CLI exactly like ``python -m reprobuild`` after injecting the stand-in TensorRT
# (tests/trt_standin) and a fake A100 for the CUDA probe, as tests/test_tensorrt_backend.py
# does in-process. ``tests`` and ``reprobuild`` come from PYTHONPATH (the tree under test).
# Only this injection point knows module paths; everything else goes through the CLI.
TRT_DRIVER = """\
import runpy, sys
from tests.trt_standin import make_module
sys.modules["tensorrt"] = make_module("10.13.3.9")
from reprobuild.backends.tensorrt import cuda_probe
cuda_probe.probe_cuda = lambda: cuda_probe.CudaInfo(
    gpus=(cuda_probe.GpuInfo(0, "NVIDIA A100-SXM4-80GB", "8.0"),),
    driver_version="550.54.14", driver_api_version="12.4", runtime_version="12.4",
)
try:  # host memory for the stand-in's engine runs (a recording build runs its engine)
    from reprobuild.backends.tensorrt import device as _device
    from tests.trt_standin.host_device import host_device
    _dev = host_device()
    _device.find_device = lambda: (_dev, _dev.how)
except ImportError:  # an older tree, which never ran engines while building
    pass
sys.argv = ["reprobuild", *sys.argv[1:]]
runpy.run_module("reprobuild", run_name="__main__", alter_sys=True)
"""


# The lock of a machine of another BLAS kernel family, as that machine would record it (a
# hand-edited identity would be refused for not matching its label): written by the code
# under test, like every other input.
MOVE_LOCK = """\
from reprobuild.lock.yamlio import load_lock, save_lock
from reprobuild.types import Environment
lock = load_lock("a.lock")
env = lock.environment
identity = {**env.identity_dict(), "blas_kernels": "Elsewhere"}
lock.environment = Environment.make(env.backend, identity, env.advisory_dict())
save_lock(lock, "moved.lock")
"""


# ------------------------------------------------------------------------------ key paths

_MAP_KEY_RE = re.compile(r"0x[0-9a-fA-F]+|[0-9a-f]{16,64}")


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, (int, float)):
        return "number"
    if isinstance(value, str):
        return "str"
    if isinstance(value, list):
        return "array"
    return "object"


def key_paths(value: Any) -> dict[str, str]:
    """``{path: "type|type"}`` for every key path of a JSON document (root excluded)."""
    found: dict[str, set[str]] = {}

    def walk(v: Any, path: str) -> None:
        if path:
            found.setdefault(path, set()).add(_type_name(v))
        if isinstance(v, dict):
            dynamic = bool(v) and all(_MAP_KEY_RE.fullmatch(k) for k in v)
            for k, child in v.items():
                name = "{}" if dynamic else k
                walk(child, f"{path}{name}" if dynamic else (f"{path}.{name}" if path else name))
        elif isinstance(v, list):
            for child in v:
                walk(child, f"{path}[]")

    walk(value, "")
    return {p: "|".join(sorted(t)) for p, t in sorted(found.items())}


def _parent(path: str) -> str | None:
    """The enclosing path: ``a[].b`` -> ``a[]``, ``a[]`` -> ``a``, ``a{}`` -> ``a``."""
    if path.endswith("[]") or path.endswith("{}"):
        return path[:-2]
    cut = path.rfind(".")
    return path[:cut] if cut > 0 else None


def compare_paths(golden: dict[str, str], current: dict[str, str]) -> list[str]:
    """Problems: golden paths missing from ``current`` or whose type changed."""
    problems = []
    for path, gtype in golden.items():
        if path not in current:
            # Not observable when an enclosing list or map is empty this time: the nearest
            # enclosing path that exists is that container, and it has no elements.
            anc = _parent(path)
            while anc is not None and anc not in current:
                anc = _parent(anc)
            step = path[len(anc) : len(anc) + 2] if anc is not None else ""
            if step in ("[]", "{}") and anc + step not in current:
                continue
            problems.append(f"missing field {path!r} (was {gtype})")
            continue
        gset = set(gtype.split("|")) - {"null"}
        cset = set(current[path].split("|")) - {"null"}
        if gset and cset and not gset & cset:
            problems.append(f"field {path!r} changed type: was {gtype}, now {current[path]}")
        elif gset & {"object", "array"} and not cset and "null" not in gtype.split("|"):
            problems.append(f"field {path!r} is now null (was {gtype})")
    return problems


# ------------------------------------------------------------------------------ scenarios


@dataclass
class Output:
    name: str
    argv: list[str]
    code: int
    stdout: str
    stderr: str
    data: Any = None
    error: str | None = None
    source: str = "stdout"
    extra: dict[str, Any] = field(default_factory=dict)


def _copy(src: Path, dst: Path) -> None:
    """Copy a file an earlier command should have written; if it did not, the commands that
    need it fail on their own and report why."""
    if src.is_file():
        shutil.copy(src, dst)


def _replace_line(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{path}: {old!r} not found"
    path.write_text(text.replace(old, new))


# Input files written by an earlier step, so a failure can name the step it cascades from.
MADE_BY = {
    "a.lock": "build_record",
    "p.lock": "build_record",
    "moved.lock": "build_record",
    "b.lock": "build (REPROBUILD_REF_TIMING=reverse)",
    "h.lock": "build_fp16",
    "t.lock": "build_tensorrt",
    "d.lock": "build (--ref-timing prefer:atomic4)",
    "i1.lock": "build (--precision int8, c1.npz)",
    "i2.lock": "build (--precision int8, c2.npz)",
}


def run_scenarios(work: Path, root: Path) -> dict[str, Output]:
    """Run every JSON-printing command once in ``work``, importing reprobuild from ``root``.

    Returns ``{golden name: Output}``; report files appear as ``<command>.report``.
    """
    for name in ("mlp.onnx", "fp16_middle.onnx"):
        shutil.copy(root / "reprobuild" / "examples" / name, work / name)
    # Copies of tests/fixtures/trt-logs/trt1016_cookbook_trtexec_verbose_excerpt.log and
    # tests/fixtures/logparse/ref_editable.log, kept here so moving those does not matter.
    logs = {
        "trtexec.log": INPUTS / "trt1016_cookbook_trtexec_verbose_excerpt.log",
        "ref.log": INPUTS / "ref_editable.log",
    }
    for name, src in logs.items():
        shutil.copy(src, work / name)
    # A second reference log: one chosen tactic changed and one key renamed, so that
    # `log diff` has a changed record and a record only in each log.
    shutil.copy(work / "ref.log", work / "ref_b.log")
    _replace_line(
        work / "ref_b.log",
        "(tactic hash, cost(in ms)):0xb2, 0.060000",
        "(tactic hash, cost(in ms)):0xc3, 0.070000",
    )
    _replace_line(work / "ref_b.log", "0x" + "2" * 32, "0x" + "5" * 32)

    # ``root`` in front of PYTHONPATH, never instead of it: packages may come from there
    # (conftest's child_env does this; scripts/capture_json_fields.py loads this file alone).
    paths = [str(root), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    outputs: dict[str, Output] = {}

    def run(
        name: str | None,
        *args: str,
        knob: str | None = None,
        trt: bool = False,
        reports: dict[str, str] | None = None,
    ) -> Output:
        if knob:  # the reference backend's hidden timing knob
            args = (*args, "--ref-timing", knob)
        cmd = [sys.executable, "-c", TRT_DRIVER] if trt else [sys.executable, "-m", "reprobuild"]
        proc = subprocess.run(
            [*cmd, *args], cwd=work, env=env, capture_output=True, text=True, timeout=300
        )
        out = Output(name or "", list(args), proc.returncode, proc.stdout, proc.stderr)
        try:
            out.data = json.loads(proc.stdout)
        except ValueError as err:
            out.error = f"stdout is not JSON ({err})"
        missing = [a for a in args if a in MADE_BY and not (work / a).is_file()]
        if out.error is not None and missing:
            out.error += "; " + ", ".join(
                f"{f} was never written because `{MADE_BY[f]}` failed first" for f in missing
            )
        if name:
            outputs[name] = out
        for rname, rfile in (reports or {}).items():
            rpath = work / rfile
            rep = Output(rname, list(args), proc.returncode, "", proc.stderr, source=rfile)
            try:
                rep.data = json.loads(rpath.read_text())
            except (OSError, ValueError) as err:
                rep.error = f"report file {rfile} missing or not JSON ({err})"
            outputs[rname] = rep
        return out

    # build: recording, locked (same lock, warm cache), mixed precision.
    run(
        "build_record",
        *("build", "mlp.onnx", "--lock", "a.lock", "--out", "a.engine"),
        *(*REF, "--cache-dir", "caches", "--json"),
        reports={"build_record.report": "a.engine.report.json"},
    )
    run(
        "build_locked",
        *("build", "mlp.onnx", "--lock", "a.lock", "--out", "a2.engine"),
        *(*REF, "--cache-dir", "caches", "--json"),
        reports={"build_locked.report": "a2.engine.report.json"},
    )
    # A second lock whose tactics differ (the slowest candidates), for diff and bisect.
    run(
        None,
        *("build", "mlp.onnx", "--lock", "b.lock", "--out", "b.engine"),
        *(*REF, "--cache-dir", "caches_rev", "--json"),
        knob="reverse",
    )
    run(
        "build_fp16",
        *("build", "fp16_middle.onnx", "--precision", "fp16", "--lock", "h.lock"),
        *("--out", "h.engine", *REF, "--cache-dir", "caches", "--json"),
        reports={"build_fp16.report": "h.engine.report.json"},
    )

    # Lock commands.
    show = run("show", "show", "--lock", "a.lock", "--json")
    run("show_precision", "show", "--lock", "h.lock", "--precision", "--json")
    run("show_precision_none", "show", "--lock", "a.lock", "--precision", "--json")
    _copy(work / "a.lock", work / "p.lock")
    first = (show.data or {}).get("layers", [{}])[0] if isinstance(show.data, dict) else {}
    layer, tactic = first.get("layer", "fc1"), first.get("tactic", "0x0")
    run("pin", "pin", f"layer={layer}", f"tactic={tactic}", "--lock", "p.lock", "--json")
    run("unpin", "unpin", f"layer={layer}", "--lock", "p.lock", "--json")
    run("diff_same", "diff", "a.lock", "a.lock", "--json")
    run("diff_changed", "diff", "a.lock", "b.lock", "--json")
    run("diff_other_model", "diff", "a.lock", "h.lock", "--json")
    # INT8: two locks calibrated on other samples; their diff lists changed scales.
    rng = np.random.default_rng(0)
    for name in ("c1.npz", "c2.npz"):
        np.savez(work / name, input=rng.random((8, 1024), dtype=np.float32))
    for lock in ("i1", "i2"):
        run(
            None,
            *("build", "mlp.onnx", "--precision", "int8", "--calibration", f"c{lock[1]}.npz"),
            *("--calib-batch-size", "8", "--lock", f"{lock}.lock", "--out", f"{lock}.engine"),
            *(*REF, "--cache-dir", "caches", "--json"),
        )
    run("show_precision_int8", "show", "--lock", "i1.lock", "--precision", "--json")
    run("diff_precision", "diff", "i1.lock", "i2.lock", "--json")
    # stability: key agreement beside what ships (distinct engines and output digests).
    run("stability", "stability", "mlp.onnx", "--records", "2", *REF, "--json", knob="tie:1")

    # verify / bisect.
    run(
        "verify",
        *("verify", "--lock", "a.lock", "--rebuilds", "2", "--report", "verify.json"),
        *(*REF, "--cache-dir", "caches", "--json"),
        reports={"verify.report": "verify.json"},
    )
    # verify --runs / --batch-invariance on a lock whose layers use the run-to-run kernel:
    # both checks fail, with the outputs that moved and the culprits.
    run(
        None,
        *("build", "mlp.onnx", "--lock", "d.lock", "--out", "d.engine"),
        *(*REF, "--cache-dir", "caches", "--json"),
        knob="prefer:atomic4",
    )
    run(
        "verify_determinism",
        *("verify", "--lock", "d.lock", "--rebuilds", "1", "--runs", "2", "--batch-invariance"),
        *(*REF, "--cache-dir", "caches", "--no-control", "--json"),
    )
    run(
        "bisect",
        *("bisect", "--lock", "a.lock", "--against", "b.lock"),
        *(*REF, "--cache-dir", "caches", "--json"),
    )

    # Logs.
    run("log_trtexec", "log", "trtexec.log", "--json")
    run("log_reference", "log", "ref.log", "--json")
    run("log_diff_same", "log", "diff", "ref.log", "ref.log", "--json")
    run("log_diff_changed", "log", "diff", "ref.log", "ref_b.log", "--json")

    # doctor on this machine (no TensorRT here), with a matching and a foreign lock.
    run("doctor", "doctor", "--json")
    run("doctor_lock", "doctor", "--lock", "a.lock", "--json")
    if (work / "a.lock").is_file():  # another machine's lock: another identity, its label
        subprocess.run([sys.executable, "-c", MOVE_LOCK], cwd=work, env=env, check=True)
    run("doctor_lock_mismatch", "doctor", "--lock", "moved.lock", "--json")

    # TensorRT commands, with the stand-in TensorRT.
    run(
        "build_tensorrt",
        *("build", "mlp.onnx", "--lock", "t.lock", "--out", "t.engine"),
        *("--backend", "tensorrt", "--cache-dir", "caches_trt", "--json"),
        trt=True,
        reports={"build_tensorrt.report": "t.engine.report.json"},
    )
    run(
        "export_cache",
        *("export-cache", "--lock", "t.lock", "-o", "pinned.cache"),
        *("--cache-dir", "caches_trt", "--json"),
        trt=True,
    )
    run(
        "export_cache_record",
        *("export-cache", "--lock", "t.lock", "-o", "pinned2.cache"),
        *("--cache-dir", "caches_trt_empty", "--json"),
        trt=True,
    )
    run("doctor_tensorrt", "doctor", "--lock", "t.lock", "--json", trt=True)
    return outputs


def golden_document(out: Output) -> dict[str, Any]:
    return {
        "command": "reprobuild " + " ".join(out.argv),
        "source": out.source,
        "exit_code": out.code,
        "paths": key_paths(out.data),
    }


# ------------------------------------------------------------------------------ tests

GOLDENS = sorted(p.stem for p in GOLDEN_DIR.glob("*.json"))


@pytest.fixture(scope="module")
def outputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Output]:
    work = tmp_path_factory.mktemp("json_fields")
    return run_scenarios(work, ROOT)


def test_goldens_exist() -> None:
    assert len(GOLDENS) >= 20, f"goldens missing from {GOLDEN_DIR}"


@pytest.mark.parametrize("name", GOLDENS)
def test_json_fields_kept(outputs: dict[str, Output], name: str) -> None:
    golden = json.loads((GOLDEN_DIR / f"{name}.json").read_text())
    where = f"{name} (`{golden['command']}`, {golden['source']})"
    assert name in outputs, f"{where}: no scenario produces this output any more"
    out = outputs[name]
    assert out.error is None, (
        f"{where}: {out.error}; exit {out.code}\nstdout: {out.stdout[-1500:]}\n"
        f"stderr: {out.stderr[-1500:]}"
    )
    problems = compare_paths(golden["paths"], key_paths(out.data))
    assert not problems, (
        f"{where}:\n  " + "\n  ".join(problems) + f"\nstderr: {out.stderr[-1500:]}"
    )  # the command's warnings say why a section is missing (e.g. a precision error)


def test_compare_paths_catches_removed_renamed_and_retyped_fields() -> None:
    golden = key_paths({"a": {"b": 1}, "layers": [{"tactic": "0x1", "kernel": None}], "c": []})
    assert compare_paths(golden, golden) == []
    renamed = key_paths({"a": {"bb": 1}, "layers": [{"tactic": 1, "kernel": "k"}], "c": []})
    assert compare_paths(golden, renamed) == [
        "missing field 'a.b' (was number)",
        "field 'layers[].tactic' changed type: was str, now number",
    ]
    # Added fields are fine; an empty list hides its children but not itself.
    assert compare_paths(golden, key_paths({"a": {"b": 2, "x": 1}, "layers": [], "c": []})) == []
    assert compare_paths(golden, key_paths({"a": {"b": 2}, "c": []})) == [
        "missing field 'layers' (was array)",
        "missing field 'layers[]' (was object)",
        "missing field 'layers[].kernel' (was null)",
        "missing field 'layers[].tactic' (was str)",
    ]
    assert key_paths({"m": {"0xab": "0x1", "0xcd": "0x2"}}) == {"m": "object", "m{}": "str"}


def test_every_scenario_output_has_a_golden(outputs: dict[str, Output]) -> None:
    """A golden that never reached the repository (an ignore rule, a lost file) would
    silently drop its check: every output a scenario produces must have one."""
    assert sorted(set(outputs) - set(GOLDENS)) == []
