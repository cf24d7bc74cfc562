"""The lock commands read their own arguments (``cli/fastargs``) when they are plain, and
leave the rest to typer. Held here to typer's results: the same stdout, stderr, exit code
and lock bytes for every argument list the fast reader takes, and typer's own help and
errors (the fast reader declines) for the rest."""

from __future__ import annotations

import importlib
import inspect
import re
import shutil
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from reprobuild.cli import fastargs
from reprobuild.lock.yamlio import save_lock

from .conftest import FIXTURES, CliResult, sample_lock

LOCKS = FIXTURES / "locks"


def _setup(tmp: Path) -> None:
    """Locks under fixed names in the working directory (the default lock is there too)."""
    save_lock(sample_lock(4), tmp / "tactics.lock")
    other = sample_lock(5)
    other.layers[1].tactic = other.layers[1].candidates[2].tactic
    other.layers[1].pinned = True
    other.environment = replace(other.environment, gpu="another cpu")
    save_lock(other, tmp / "b.lock")
    ansi = sample_lock(2)
    ansi.layers[0].layer = "\x1b[31mred\x1b[0m"
    save_lock(ansi, tmp / "ansi.lock")
    shutil.copy(LOCKS / "recorded_fp16_middle.lock", tmp / "fp16.lock")
    shutil.copy(LOCKS / "names.lock", tmp / "names.lock")
    (tmp / "bad.lock").write_text("schema: 1\nlayers: [\n")


TAKEN = [
    ["show"],
    ["show", "--lock", "b.lock"],
    ["show", "-l", "./b.lock"],
    ["show", "--lock=.//b.lock", "--json"],
    ["show", "--json", "-l", "ansi.lock"],
    ["show", "-l", "ansi.lock"],
    ["show", "-l", "names.lock"],
    ["show", "--precision", "-l", "fp16.lock"],
    ["show", "--precision", "--json", "-l", "fp16.lock"],
    ["show", "--precision"],
    ["show", "-l", "missing.lock"],
    ["show", "--json", "-l", "missing.lock"],
    ["show", "-l", "bad.lock"],
    ["show", "-l", "."],
    ["diff", "tactics.lock", "b.lock"],
    ["diff", "tactics.lock", "tactics.lock"],
    ["diff", "--json", "tactics.lock", "b.lock"],
    ["diff", "b.lock", "missing.lock", "--json"],
    ["diff", "names.lock", "ansi.lock"],
    ["pin", "layer=layer1", "tactic=0x1012", "layer=layer2", "tactic=kern_1"],
    ["pin", "layer=layer0", "tactic=0xdead", "--force", "--json", "-l", "b.lock"],
    ["pin", "--lock", "b.lock", "layer=layer0", "tactic=0xdead"],
    ["pin", "layer=layr1", "tactic=0x1010"],
    ["pin", "layer0", "tactic=1"],
    ["pin", "key=0x12", "tactic=0x1", "--json"],
    ["pin", "layer=layer0", "tactic=0x1000", "-l", "missing.lock"],
    ["unpin", "layer=layer1", "--json", "-l", "b.lock"],
    ["unpin", "layer=layer1", "tactic=1"],
]

DECLINED = [
    [],
    ["--help"],
    ["--version"],
    ["show", "--help"],
    ["show", "-h"],
    ["show", "extra"],
    ["show", "--lock"],
    ["show", "--lock", "a", "--lock", "b"],
    ["show", "--json", "--json"],
    ["show", "--lok", "a"],
    ["show", "-lb.lock"],
    ["show", "--lock="],
    ["show", "--lock", "-x"],
    ["show", "--force"],
    ["pin"],
    ["pin", "--json"],
    ["pin", "layer=a", "--", "tactic=1"],
    ["pin", "layer=a", ""],
    ["unpin", "layer=a", "--force"],
    ["diff", "a.lock"],
    ["diff", "a.lock", "b.lock", "c.lock"],
    ["diff", "a.lock", "b.lock", "--lock", "x"],
    ["diff", "-", "b.lock"],
    ["frobnicate"],
    ["log", "x.log"],
]


def _run(cli, tmp: Path, args: list[str], monkeypatch, fast: bool) -> tuple[CliResult, dict]:
    _setup(tmp)
    monkeypatch.chdir(tmp)
    if not fast:
        monkeypatch.setattr(fastargs, "parse", lambda args: None)
    result = cli(*args)
    monkeypatch.undo()
    files = {p.name: p.read_bytes() for p in sorted(tmp.iterdir())}
    return result, files


@pytest.mark.parametrize("args", TAKEN, ids=[" ".join(a) for a in TAKEN])
def test_fast_reader_gives_typers_bytes(cli, tmp_path: Path, monkeypatch, args) -> None:
    assert fastargs.parse(args) is not None, "this argument list is for the fast reader"
    (tmp_path / "fast").mkdir()
    (tmp_path / "typer").mkdir()
    fast, fast_files = _run(cli, tmp_path / "fast", args, monkeypatch, fast=True)
    slow, slow_files = _run(cli, tmp_path / "typer", args, monkeypatch, fast=False)
    assert (fast.code, fast.out, fast.err) == (slow.code, slow.out, slow.err)
    assert fast_files == slow_files
    assert fast.out or fast.err


@pytest.mark.parametrize("args", DECLINED, ids=[" ".join(a) or "(none)" for a in DECLINED])
def test_fast_reader_leaves_the_rest_to_typer(args) -> None:
    assert fastargs.parse(args) is None


def test_declined_lists_get_typers_help_and_errors(cli, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    r = cli("show", "--help")
    assert r.code == 0 and "Show the locked layers" in r.out and "--precision" in r.out
    r = cli("show", "--lok", "a")
    assert r.code == 2 and r.err.startswith("error: No such option: --lok")
    assert r.err.count("\n") == 1
    r = cli("diff", "a.lock")
    assert r.code == 2 and "Missing argument 'b'" in r.err


def test_lock_commands_do_not_import_typer(tmp_path: Path) -> None:
    """The point of the fast reader: typer and pydantic stay unimported."""
    _setup(tmp_path)
    for args in (
        ["show"],
        ["diff", "tactics.lock", "b.lock"],
        ["pin", "layer=layer0", "tactic=0x1001"],
        ["show", "-l", "missing.lock", "--json"],
    ):
        proc = subprocess.run(
            [sys.executable, "-X", "importtime", "-m", "reprobuild", *args],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            timeout=120,
        )
        assert proc.returncode in (0, 1, 2), proc.stderr[-2000:]
        imported = {
            line.split("|")[-1].strip().split(".")[0]
            for line in proc.stderr.splitlines()
            if line.startswith("import time:")
        }
        assert not imported & {"typer", "click", "pydantic", "rich"}, (args, imported)


def test_a_closed_pipe_ends_quietly_with_exit_1(tmp_path: Path) -> None:
    """`reprobuild show | head`: the reader leaves early; typer's answer is exit 1 and no
    message, and the fast path gives the same (not an internal error). A repeated option
    (the fast reader declines it, typer takes the last) runs the same through typer."""
    from reprobuild.lock.model import LayerEntry

    lock = sample_lock(1)
    lock.layers = [LayerEntry(f"0x{i:032x}", f"layer{i}", 1, "k", False, []) for i in range(20_000)]
    save_lock(lock, tmp_path / "big.lock")
    typer_args = ["show", "-l", "big.lock", "-l", "big.lock"]
    assert fastargs.parse(typer_args) is None
    for args in (["show", "-l", "big.lock"], typer_args):
        proc = subprocess.Popen(
            [sys.executable, "-m", "reprobuild", *args],
            cwd=tmp_path,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        assert proc.stdout is not None and proc.stderr is not None
        proc.stdout.readline()
        proc.stdout.close()
        err = proc.stderr.read().decode()
        assert (proc.wait(timeout=120), err) == (1, "")


# --- build -----------------------------------------------------------------------------

BUILD_TAKEN = [
    ["build", "m.onnx"],
    ["build", "m.onnx", "--lock", "t.lock", "--backend", "reference"],
    ["build", "-l", "./t.lock", "m.onnx", "-o", "x.engine", "--frozen", "-q"],
    ["build", "m.onnx", "--lock=t.lock", "--json", "--report=r.json", "--cache-dir", "c"],
    ["build", "m.onnx", "--opt-level", "0", "--max-tactics", "12", "--avg-timing", "3"],
    ["build", "m.onnx", "--builder-optimization-level", "5", "--workspace", "2G"],
    ["build", "m.onnx", "--shapes", "x:1x4", "--shapes=y:2x3,z:1", "--no-tf32"],
    ["build", "m.onnx", "--min-shapes", "x:1", "--opt-shapes", "x:2", "--max-shapes", "x:4"],
    ["build", "m.onnx", "--precision", "fp16", "--keep-fp32", "a.*", "--keep-fp32", "b"],
    ["build", "m.onnx", "--precision", "fp16", "--keep-fp32-op", "Softmax", "--max-output", "1.5"],
    ["build", "m.onnx", "--max-output", "512", "--max-reduction-depth", "7"],
    [
        "build",
        "m.onnx",
        "--precision",
        "int8",
        "--calibration",
        "c.npz",
        "--calib-method",
        "minmax",
    ],
    ["build", "m.onnx", "--calib-batch-size", "4", "--calib-samples", "10", "--float", "fp16"],
    ["build", "m.onnx", "--held-out", "h.npz", "--fp32-accumulate", "--allow-env-change"],
    ["build", "m.onnx", "--ref-timing", "layer0", "--threads", "0", "--tactic-sources", "CUBLAS"],
    ["build", "m.onnx", "--opt-level", "9"],
    ["build", "m.onnx", "--workspace", "lots"],
    ["build", "m.onnx", "--shapes", "x"],
    ["build", "m.onnx", "--calib-samples", "0", "--precision", "int8"],
    ["build", "m.onnx", "--keep-fp32", "a"],
    ["build", "m.onnx", "--float", "fp16"],
]

BUILD_DECLINED = [
    ["build"],
    ["build", "--help"],
    ["build", "m.onnx", "-h"],
    ["build", "a.onnx", "b.onnx"],
    ["build", "m.onnx", "--lock"],
    ["build", "m.onnx", "--lock", "a", "-l", "b"],
    ["build", "m.onnx", "--opt-level", "1", "--builder-optimization-level", "2"],
    ["build", "m.onnx", "--frozen", "--frozen"],
    ["build", "m.onnx", "--frozen=1"],
    ["build", "m.onnx", "-lt.lock"],
    ["build", "m.onnx", "-qo", "x"],
    ["build", "m.onnx", "--lock="],
    ["build", "m.onnx", "--lock", "-x"],
    ["build", "m.onnx", "--opt-level", "-1"],
    ["build", "m.onnx", "--opt-level", "007"],
    ["build", "m.onnx", "--opt-level", "1_0"],
    ["build", "m.onnx", "--opt-level", "three"],
    ["build", "m.onnx", "--max-output", "1e3"],
    ["build", "m.onnx", "--max-output", "inf"],
    ["build", "m.onnx", "--threads", " 1"],
    ["build", "m.onnx", "--lok", "a"],
    ["build", "m.onnx", "--"],
    ["build", "-"],
    ["build", ""],
    ["build", "m.onnx", "--version"],
]


def _build_call(cli, tmp: Path, args: list[str], monkeypatch, fast: bool):
    """What ``build_run.run`` is called with (None: not called), and the CLI's result."""
    from reprobuild.cli import build_run

    calls: list[dict] = []
    real = build_run.run

    def record(model, **kwargs):
        calls.append({"model": model, **kwargs})
        return real(model, **kwargs)

    monkeypatch.chdir(tmp)
    monkeypatch.setattr(build_run, "run", record)
    monkeypatch.setattr(importlib.import_module("reprobuild.workflow.build"), "build", _no_build)
    if not fast:
        monkeypatch.setattr(fastargs, "parse", lambda args: None)
    result = cli(*args)
    monkeypatch.undo()
    if not calls:
        return None, result
    sig = inspect.signature(real)
    bound = sig.bind(calls[0].pop("model"), **calls[0])
    bound.apply_defaults()
    lists = {dest for dest, kind in fastargs._BUILD.values() if kind == "list"}
    got = {k: list(v or ()) if k in lists else v for k, v in bound.arguments.items()}
    return got, result


def _no_build(*args, **kwargs):
    """Stands for the workflow: the arguments are what is held here, not a build."""
    from reprobuild.errors import UsageError

    raise UsageError(f"no build here: {sorted(kwargs)}")


@pytest.mark.parametrize("args", BUILD_TAKEN, ids=[" ".join(a) for a in BUILD_TAKEN])
def test_fast_reader_reads_build_as_typer_does(cli, tmp_path: Path, monkeypatch, args) -> None:
    assert fastargs.parse(args) is not None, "this argument list is for the fast reader"
    fast, fast_result = _build_call(cli, tmp_path, args, monkeypatch, fast=True)
    slow, slow_result = _build_call(cli, tmp_path, args, monkeypatch, fast=False)
    assert fast is not None and fast == slow
    assert (fast_result.code, fast_result.out, fast_result.err) == (
        slow_result.code,
        slow_result.out,
        slow_result.err,
    )
    err = fast_result.err  # one line: the stand-in build's refusal or the body's own
    assert fast_result.code == 2 and err.count("\n") == 1 and "error" in err


def test_fast_build_values_are_typers(cli, tmp_path: Path, monkeypatch) -> None:
    """Concrete values, not only equality with typer: defaults, paths, numbers, lists."""
    args = ["build", "m.onnx", "--shapes", "x:1", "--shapes", "y:2", "--max-output", "2.5"]
    got, _ = _build_call(cli, tmp_path, [*args, "--threads", "3"], monkeypatch, fast=True)
    assert got is not None
    assert got["model"] == Path("m.onnx") and got["lock"] == Path("tactics.lock")
    assert got["shapes"] == ["x:1", "y:2"] and got["max_output"] == 2.5
    assert got["threads"] == 3 and got["backend"] == "auto" and got["quiet"] is False
    assert got["cache_dir"] == Path("caches") and got["min_shapes"] == []


@pytest.mark.parametrize("args", BUILD_DECLINED, ids=[" ".join(a) or "-" for a in BUILD_DECLINED])
def test_fast_reader_leaves_other_builds_to_typer(args) -> None:
    assert fastargs.parse(args) is None


def test_fast_build_options_are_typers() -> None:
    """The fast reader's option table and ``build_run.run``'s defaults against the typer
    declaration: every option under the same names, every default the same."""
    import typer

    from reprobuild.cli import build_cmds, build_run

    declared: dict[str, tuple[str, ...]] = {}
    defaults = {}
    for name, param in inspect.signature(build_cmds.build).parameters.items():
        info = param.default
        assert isinstance(info, typer.models.ParameterInfo)
        defaults[name] = info.default
        if isinstance(info, typer.models.OptionInfo):
            declared[name] = tuple(sorted(info.param_decls))
    table: dict[str, tuple[str, ...]] = {}
    for option, (dest, _kind) in fastargs._BUILD.items():
        table[dest] = tuple(sorted((*table.get(dest, ()), option)))
    assert table == declared
    run_defaults = {
        n: p.default for n, p in inspect.signature(build_run.run).parameters.items() if n != "model"
    }
    typer_defaults = {n: d for n, d in defaults.items() if n != "model"}
    assert set(run_defaults) == set(typer_defaults)
    for name, default in typer_defaults.items():
        if isinstance(default, list):
            assert default == [] and run_defaults[name] is None, name
        elif name in ("lock", "cache_dir"):
            assert Path(default) == run_defaults[name], name
        else:
            assert default == run_defaults[name], name


def test_build_does_not_import_typer(tmp_path: Path) -> None:
    """A plain locked rebuild runs without typer and pydantic, with typer's output."""
    import reprobuild

    model = Path(reprobuild.__file__).parent / "examples" / "mlp.onnx"
    base = [sys.executable, "-m", "reprobuild", "build", str(model), "--backend", "reference"]
    runs = []
    for lock in ("--lock=t.lock", "-lt.lock", "--lock=t.lock"):  # record, typer, fast
        proc = subprocess.run(
            [*base[:1], "-X", "importtime", *base[1:], lock, "-q"],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            timeout=300,
        )
        assert proc.returncode == 0, proc.stderr[-2000:]
        imported = {
            line.split("|")[-1].strip().split(".")[0]
            for line in proc.stderr.splitlines()
            if line.startswith("import time:")
        }
        runs.append((imported, re.sub(r"[0-9.]+s\n", "Ts\n", proc.stdout)))
    (_, recorded), (via_typer, slow), (via_fast, fast) = runs
    assert recorded.startswith("recording build with backend reference: 2 layers")
    assert "typer" in via_typer and not via_fast & {"typer", "click", "pydantic"}, via_fast
    assert fast == slow and fast.startswith("locked build with backend reference: 2 layers")
