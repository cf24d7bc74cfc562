"""pin / unpin / show / diff as a user runs them: outputs, exit codes, files untouched."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from reprobuild.lock.yamlio import load_lock, save_lock

from ..conftest import run_cli, sample_lock


def test_pin_by_hash_and_by_kernel(cli, lock_path: Path) -> None:
    r = cli(
        "pin",
        "layer=layer1",
        "tactic=0x1012",
        "layer=layer2",
        "tactic=kern_1",
        "--lock",
        str(lock_path),
    )
    assert r.code == 0, r
    assert "pinned layer1" in r.out and "-> 0x1012 kern_2 (was 0x1010)" in r.out
    lock = load_lock(lock_path)
    by_name = {e.layer: e for e in lock.layers}
    assert (by_name["layer1"].tactic, by_name["layer1"].kernel, by_name["layer1"].pinned) == (
        0x1012,
        "kern_2",
        True,
    )
    assert (by_name["layer2"].tactic, by_name["layer2"].pinned) == (0x1021, True)
    assert by_name["layer0"].pinned is False


def test_pin_compares_hashes_as_integers(cli, lock_path: Path) -> None:
    r = cli("pin", "layer=layer0", "tactic=0x0000000000001002", "--lock", str(lock_path))
    assert r.code == 0, r
    assert load_lock(lock_path).layers[0].tactic == 0x1002


def test_pin_rejects_non_candidate_unless_forced(cli, lock_path: Path) -> None:
    before = lock_path.read_bytes()
    r = cli("pin", "layer=layer0", "tactic=0xdead", "--lock", str(lock_path))
    assert r.code == 2
    assert "not one of its 3 recorded candidates" in r.err and "--force" in r.err
    assert r.err.count("\n") == 1
    assert lock_path.read_bytes() == before
    r = cli("pin", "layer=layer0", "tactic=0xdead", "--force", "--lock", str(lock_path))
    assert r.code == 0, r
    entry = load_lock(lock_path).layers[0]
    assert (entry.tactic, entry.kernel, entry.pinned) == (0xDEAD, None, True)


def test_misspelt_layer_suggests(cli, lock_path: Path) -> None:
    before = lock_path.read_bytes()
    r = cli("pin", "layer=layr1", "tactic=0x1010", "--lock", str(lock_path))
    assert r.code == 2
    assert "no layer named 'layr1'; did you mean 'layer1'" in r.err
    r = cli("pin", "layer=layer1", "tactic=kern_9", "--lock", str(lock_path))
    assert r.code == 2 and "did you mean 'kern_" in r.err
    assert lock_path.read_bytes() == before


def test_ambiguous_layer_lists_keys_and_accepts_key(cli, tmp_path: Path) -> None:
    path = tmp_path / "t.lock"
    save_lock(sample_lock(3, dup_name=True), path)
    r = cli("pin", "layer=conv", "tactic=kern_1", "--lock", str(path))  # under both keys
    assert r.code == 2
    assert "ambiguous (2 layers: 0x" + "0" * 32 in r.err and "key=0x..." in r.err
    assert "tactic kern_1 is a candidate of 2 of them" in r.err
    key1 = "0x" + "0" * 31 + "1"
    r = cli("pin", f"key={key1}", "tactic=0x1011", "--lock", str(path))
    assert r.code == 0, r
    lock = load_lock(path)
    assert lock.by_key()[key1].tactic == 0x1011
    assert lock.by_key()["0x" + "0" * 32].pinned is False


def test_a_layer_name_and_a_kernel_of_one_of_its_keys_selects_that_key(cli, tmp_path) -> None:
    lock = sample_lock(3, dup_name=True)
    lock.layers[1].candidates[2].kernel = "only_here"  # the second key's alone
    path = tmp_path / "t.lock"
    save_lock(lock, path)
    r = cli("pin", "layer=conv", "tactic=only_here", "--lock", str(path))
    assert r.code == 0, r
    assert cli("pin", "layer=conv", "tactic=0x1001", "--lock", str(path)).code == 0  # by hash
    by_key = load_lock(path).by_key()
    assert by_key["0x" + "0" * 31 + "1"].tactic == 0x1012
    assert by_key["0x" + "0" * 32].tactic == 0x1001
    r = cli("pin", "layer=conv", "tactic=nowhere", "--lock", str(path))
    assert r.code == 2 and "is ambiguous" in r.err, r


def test_bad_arguments_exit_2(cli, lock_path: Path) -> None:
    for args, needle in [
        (["layer0", "tactic=1"], "cannot read argument 'layer0'"),
        (["layer=layer0"], "has no tactic=..."),
        (["tactic=0x1", "layer=layer0"], "must follow a layer=NAME"),
        (["key=0x12", "tactic=0x1"], "malformed key '0x12'"),
    ]:
        r = cli("pin", *args, "--lock", str(lock_path))
        assert r.code == 2, (args, r)
        assert needle in r.err, (args, r.err)
    r = cli("pin", "layer=layer0", "tactic=0x1000", "--lock", str(lock_path.parent / "nope.lock"))
    assert r.code == 2 and "no such lockfile" in r.err


def test_unpin(cli, lock_path: Path) -> None:
    assert cli("pin", "layer=layer0", "tactic=0x1001", "--lock", str(lock_path)).code == 0
    r = cli("unpin", "layer=layer0", "--lock", str(lock_path), "--json")
    assert r.code == 0, r
    data = json.loads(r.out)
    assert data["unpinned"][0]["layer"] == "layer0"
    entry = load_lock(lock_path).layers[0]
    assert (entry.pinned, entry.tactic) == (False, 0x1001)
    assert cli("unpin", "layer=layer0", "tactic=1", "--lock", str(lock_path)).code == 2


def test_show_table_and_json(cli, lock_path: Path) -> None:
    cli("pin", "layer=layer2", "tactic=0x1022", "--lock", str(lock_path))
    r = cli("show", "--lock", str(lock_path))
    assert r.code == 0
    lines = r.out.splitlines()
    header = next(line for line in lines if line.startswith("layer"))
    assert header.split() == ["layer", "key", "tactic", "kernel", "pinned"]
    row = next(line for line in lines if line.startswith("layer2 "))
    assert row.split()[2:] == ["0x1022", "kern_2", "yes"]
    assert lines[-1] == "3 layers, 1 pinned"
    data = json.loads(cli("show", "--json", "--lock", str(lock_path)).out)
    assert [r["layer"] for r in data["layers"]] == ["layer0", "layer1", "layer2"]
    assert data["layers"][2] == {
        "layer": "layer2",
        "key": "0x" + "0" * 31 + "2",
        "tactic": "0x1022",
        "kernel": "kern_2",
        "pinned": True,
        "candidates": 3,
    }


def test_show_precision_without_plan(cli, lock_path: Path) -> None:
    r = cli("show", "--precision", "--lock", str(lock_path))
    assert r.code == 0 and "no precision plan" in r.out


def test_diff(cli, tmp_path: Path) -> None:
    a, b = tmp_path / "a.lock", tmp_path / "b.lock"
    save_lock(sample_lock(4), a)
    lock = sample_lock(4)
    lock.layers[1].tactic = lock.layers[1].candidates[2].tactic
    lock.layers[1].kernel = lock.layers[1].candidates[2].kernel
    del lock.layers[3]
    lock.layers.append(sample_lock(6).layers[5])
    save_lock(lock, b)
    r = cli("diff", str(a), str(a))
    assert (r.code, r.out.strip()) == (0, "locks are equivalent")
    r = cli("diff", str(a), str(b))
    assert r.code == 1
    assert "1 added, 1 removed, 1 changed" in r.out
    assert any(
        line.startswith("~  layer1")
        and "0x1010 kern_0" in line
        and "0x1012 kern_2" in line
        and line.startswith("~  layer1  0x" + "0" * 31 + "1")
        for line in r.out.splitlines()
    )
    data = json.loads(cli("diff", str(a), str(b), "--json").out)
    assert [e["layer"] for e in data["added"]] == ["layer5"]
    assert [e["layer"] for e in data["removed"]] == ["layer3"]
    assert data["changed"][0]["tactic_a"] == "0x1010" and data["changed"][0]["tactic_b"] == "0x1012"


def test_diff_across_environments_matches_by_name(cli, tmp_path: Path) -> None:
    a, b = tmp_path / "a.lock", tmp_path / "b.lock"
    save_lock(sample_lock(2), a)
    other = sample_lock(2)
    for i, e in enumerate(other.layers):
        e.key = f"0x{i + 100:032x}"  # new GPU: every key differs
    other.layers[0].tactic = 0x1001
    save_lock(other, b)
    data = json.loads(cli("diff", str(a), str(b), "--json").out)
    assert data["added"] == [] and data["removed"] == []
    assert [c["layer"] for c in data["changed"]] == ["layer0"]


def test_concurrent_pins_lose_no_update(tmp_path: Path) -> None:
    """Two processes pin different layers at once, many times: every pin survives."""
    path = tmp_path / "tactics.lock"
    save_lock(sample_lock(40), path)
    script = (
        "import sys\n"
        "from reprobuild.lock.edit import edit_lock\n"
        "path, start = sys.argv[1], int(sys.argv[2])\n"
        "for i in range(start, 40, 2):\n"
        "    edit_lock(path, [f'layer=layer{i}', f'tactic=0x{0x1000 + 16 * i + 2:x}'])\n"
    )
    procs = [subprocess.Popen([sys.executable, "-c", script, str(path), str(s)]) for s in (0, 1)]
    assert [p.wait(timeout=300) for p in procs] == [0, 0]
    lock = load_lock(path)
    assert all(e.pinned and e.kernel == "kern_2" for e in lock.layers), [
        e.layer for e in lock.layers if not e.pinned
    ]


_IMPORTED = (
    "import json, sys\n"
    "from reprobuild.cli.main import main\n"
    "try:\n"
    "    main(sys.argv[1:])\n"
    "finally:\n"
    "    print(json.dumps(sorted(sys.modules)), file=sys.stderr)\n"
)


def imported_by(*args: str, cwd: Path, code: int = 0) -> set[str]:
    """Every module a command imports (its whole ``sys.modules`` at exit), run in a fresh
    interpreter; modules imported through ``importlib`` count too."""
    proc = subprocess.run(
        [sys.executable, "-c", _IMPORTED, *args],
        capture_output=True,
        text=True,
        cwd=cwd,
        timeout=120,
    )
    assert proc.returncode == code, proc.stderr[-2000:]
    return set(json.loads(proc.stderr.splitlines()[-1]))


def _top(modules: set[str]) -> set[str]:
    return {m.split(".")[0] for m in modules}


def _commands(modules: set[str]) -> set[str]:
    return {m.rpartition(".")[2] for m in modules if m.endswith("_cmds")}


HEAVY = {"numpy", "onnx", "onnxruntime", "tensorrt"}


def test_light_commands_do_not_import_heavy_modules(lock_path: Path) -> None:
    """The lock commands import no numpy, onnx or tensorrt, and only their own command
    module (PyYAML is the one lock reader: reading a lock imports it)."""
    other = lock_path.parent / "other.lock"
    save_lock(sample_lock(5), other)
    for args, code, avoided in (
        (["show"], 0, set()),
        (["show", "--json"], 0, set()),
        (["diff", "tactics.lock", "other.lock"], 1, set()),
        (["pin", "layer=layer0", "tactic=0x1001"], 0, set()),
        (["unpin", "layer=layer0"], 0, set()),
        (["show", "-l", "missing.lock"], 2, set()),
    ):
        modules = imported_by(*args, cwd=lock_path.parent, code=code)
        assert not _top(modules) & (HEAVY | avoided), (args, _top(modules) & (HEAVY | avoided))
        assert _commands(modules) == {"lock_cmds"}, args


def test_help_imports_no_heavy_module(tmp_path: Path) -> None:
    """``--help`` lists every command (each module's own help line), none of which pulls in
    numpy or onnx; a command's ``--help`` imports only its own module; ``--version`` and a
    mistyped command import no command module."""
    for args, commands in (
        (
            ["--help"],
            {"build", "verify", "lock", "fleet", "log", "layers", "trt", "stability", "rule"},
        ),
        (["build", "--help"], {"build"}),
        (["show", "--help"], {"lock"}),
        (["log", "--help"], {"log"}),
        (["--version"], set()),
        (["biuld"], set()),
    ):
        modules = imported_by(*args, cwd=tmp_path, code=2 if args == ["biuld"] else 0)
        assert not _top(modules) & HEAVY, (args, _top(modules) & HEAVY)
        assert _commands(modules) == {f"{c}_cmds" for c in commands}, args


def test_console_script_exit_codes(lock_path: Path) -> None:
    proc = run_cli("show", "--lock", str(lock_path.parent / "missing.lock"))
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: ") and proc.stderr.count("\n") == 1
    assert run_cli("frobnicate").returncode == 2


def test_help_and_usage_errors(cli, tmp_path: Path, monkeypatch) -> None:
    """A command's help, and typer's usage errors as one line with exit 2 (a misspelt
    option or command is answered with what was probably meant)."""
    monkeypatch.chdir(tmp_path)
    r = cli("show", "--help")
    assert r.code == 0 and "Show the locked layers" in r.out and "--precision" in r.out
    assert cli("show", "-h").out == r.out
    r = cli("show", "--lok", "a")
    assert r.code == 2 and r.out == ""
    assert (
        r.err
        == "error: No such option: --lok (Possible options: --lock) (see 'reprobuild show -h')\n"
    )
    r = cli("diff", "a.lock")
    assert r.code == 2 and "Missing argument 'b'" in r.err and r.err.count("\n") == 1
    r = cli("shwo")
    assert r.code == 2
    assert r.err == "error: No such command 'shwo'. Did you mean 'show'? (see 'reprobuild -h')\n"


def test_a_closed_pipe_ends_quietly_with_exit_141(tmp_path: Path) -> None:
    """`reprobuild show | head`: the reader leaves early; the answer is exit 141 (128 +
    SIGPIPE, as a shell reports it; 1 would mean "a difference") and no message."""
    from reprobuild.lock.model import LayerEntry

    lock = sample_lock(1)
    lock.layers = [LayerEntry(f"0x{i:032x}", f"layer{i}", 1, "k", False, []) for i in range(20_000)]
    save_lock(lock, tmp_path / "big.lock")
    proc = subprocess.Popen(
        [sys.executable, "-m", "reprobuild", "show", "-l", "big.lock"],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert proc.stdout is not None and proc.stderr is not None
    proc.stdout.readline()
    proc.stdout.close()
    err = proc.stderr.read().decode()
    assert (proc.wait(timeout=120), err) == (141, "")
