"""The lock commands read their own arguments (``cli/fastargs``) when they are plain, and
leave the rest to typer. Held here to typer's results: the same stdout, stderr, exit code
and lock bytes for every argument list the fast reader takes, and typer's own help and
errors (the fast reader declines) for the rest."""

from __future__ import annotations

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
