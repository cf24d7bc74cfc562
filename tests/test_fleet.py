"""One lock for a fleet: targets, recorded times and digests, merge, fleet, --re-record.

The "machines" are OpenBLAS kernel families on this one CPU (``OPENBLAS_CORETYPE``, read
when numpy loads, so each runs in its own process): each family sums GEMMs in another
order and gives other bits, as another CPU or GPU model would. Which families exist here
is asked, not assumed (:func:`kernel_families`), so the test runs on any x86-64 runner.
Timings are injected (``--ref-timing seed:N``) so every recording of one target chooses the
same tactics whatever the machine's load.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from reprobuild.errors import EXIT_DIFFERENT, EXIT_ENV, EXIT_USAGE
from reprobuild.lock.yamlio import load_lock, save_lock
from tests.conftest import EXAMPLES, child_env, run_cli

CANDIDATE_FAMILIES = ("Haswell", "Sandybridge", "Nehalem", "Penryn", "Prescott")
KNOB = ("--ref-timing", "seed:3")
REF = ("--backend", "reference")


@functools.lru_cache(maxsize=1)
def kernel_families() -> list[str]:
    """``OPENBLAS_CORETYPE`` values that run here and select distinct kernel families, the
    default family first (as threadpoolctl reports each)."""
    code = "import numpy, threadpoolctl; print(threadpoolctl.threadpool_info()[0]['architecture'])"
    seen: dict[str, str] = {}
    for coretype in ("", *CANDIDATE_FAMILIES):
        env = child_env(drop=("OPENBLAS_CORETYPE",))
        if coretype:
            env["OPENBLAS_CORETYPE"] = coretype
        proc = subprocess.run(
            [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False
        )
        arch = proc.stdout.strip()
        if proc.returncode == 0 and arch and arch not in seen.values():
            seen[coretype] = arch
    return list(seen)


def _run(cwd: Path, coretype: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {"OPENBLAS_CORETYPE": coretype} if coretype else {}
    if not coretype:
        env = {"OPENBLAS_CORETYPE": ""}  # the default family even where the CI sets one
    return run_cli(*args, cwd=cwd, env=env)


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, list[str]]:
    """A lock recorded under each of two kernel families, merged (the two first families)."""
    families = kernel_families()
    if len(families) < 3:
        pytest.skip(f"this CPU offers {len(families)} OpenBLAS kernel families; 3 are needed")
    work = tmp_path_factory.mktemp("fleet")
    shutil.copy(EXAMPLES / "cnn.onnx", work / "cnn.onnx")
    for i, family in enumerate(families[:2]):
        p = _run(work, family, "build", "cnn.onnx", "--lock", f"m{i}.lock", "-q", *REF, *KNOB,
                 "--out", f"m{i}.engine", "--cache-dir", f"caches{i}")  # fmt: skip
        assert p.returncode == 0, p.stderr
    p = run_cli("merge", "m0.lock", "m1.lock", "--out", "fleet.lock", cwd=work)
    assert p.returncode == 0 and "2 targets" in p.stdout, p.stderr
    return work, families


def test_two_kernel_families_merge_into_one_lock_of_two_targets(fleet) -> None:
    work, families = fleet
    lock = load_lock(work / "fleet.lock")
    targets = lock.targets()
    assert len(targets) == 2
    kernels = {t.environment.identity_dict()["blas_kernels"] for t in targets}
    assert len(kernels) == 2
    for t in targets:
        assert t.layers and all(e.time_ms is not None for e in t.layers)  # times recorded
        (digest,) = t.outputs
        assert digest.inputs == "seeded:0" and len(digest.sha256) == 64
    # other families, other bits: the two targets' recorded digests differ
    assert targets[0].outputs[0].sha256 != targets[1].outputs[0].sha256


def test_each_family_builds_and_verifies_its_own_target(fleet) -> None:
    """A fresh checkout: no caches/, so each build records its keys again; the lock's
    tactics and times decide, and verify compares the bits with the recorded ones."""
    work, families = fleet
    lock = load_lock(work / "fleet.lock")
    before = (work / "fleet.lock").read_bytes()
    for family in families[:2]:
        shutil.rmtree(work / "caches", ignore_errors=True)
        p = _run(work, family, "build", "cnn.onnx", "--lock", "fleet.lock", "--frozen", "-q", *REF)
        assert p.returncode == 0, p.stderr
        p = _run(work, family, "verify", "--lock", "fleet.lock", "-n", "1", "--json", *REF)
        assert p.returncode == 0, p.stderr
        doc = json.loads(p.stdout)
        target = next(t for t in lock.targets() if t.name == doc["target"])
        assert target.environment.identity_dict()["blas_kernels"] == _arch(family)
        assert doc["matches_recorded"] is True and doc["reproducible"] is True
        assert doc["outputs_sha256"] == target.outputs[0].sha256
        (work / f"verify.{family or 'default'}.json").write_text(p.stdout)
    assert (work / "fleet.lock").read_bytes() == before  # verify and --frozen never write


def test_a_third_family_is_refused_naming_both_targets(fleet) -> None:
    work, families = fleet
    names = load_lock(work / "fleet.lock").target_names()
    for args in (
        ("build", "cnn.onnx", "--lock", "fleet.lock", "--frozen", "-q", *REF),
        ("verify", "--lock", "fleet.lock", "-n", "1", "-q", *REF),
    ):
        p = _run(work, families[2], *args)
        assert p.returncode == EXIT_ENV, p.stderr
        assert all(n in p.stderr for n in names) and "no target for this machine" in p.stderr


def test_a_third_family_records_its_own_target_beside_the_others(fleet, tmp_path: Path) -> None:
    work, families = fleet
    shutil.copy(work / "cnn.onnx", tmp_path / "cnn.onnx")
    shutil.copy(work / "fleet.lock", tmp_path / "t.lock")
    before = {t.name: t for t in load_lock(tmp_path / "t.lock").targets()}
    p = _run(tmp_path, families[2], "build", "cnn.onnx", "--lock", "t.lock", "-q", *REF, *KNOB)
    assert p.returncode == 0, p.stderr
    assert "recording it beside" in p.stderr
    after = {t.name: t for t in load_lock(tmp_path / "t.lock").targets()}
    assert len(after) == 3 and set(before) < set(after)
    for name, t in before.items():  # the other targets are untouched
        assert after[name] == t


def test_other_bits_than_recorded_are_not_reproducible(fleet, tmp_path: Path) -> None:
    """A machine of the target whose engine gives other bits (here: the recorded digest
    edited) fails verify with exit 1, naming the target and both digests."""
    work, families = fleet
    shutil.copy(work / "cnn.onnx", tmp_path / "cnn.onnx")
    lock = load_lock(work / "fleet.lock")
    mine = next(
        t
        for t in lock.targets()
        if t.environment.identity_dict()["blas_kernels"] == _arch(families[0])
    )
    recorded = mine.outputs[0].sha256
    text = (work / "fleet.lock").read_text().replace(recorded, "e" * 64)
    (tmp_path / "t.lock").write_text(text)
    p = _run(tmp_path, families[0], "verify", "--lock", "t.lock", "-n", "1", *REF)
    assert p.returncode == EXIT_DIFFERENT, p.stderr
    assert f"OTHER BITS than recorded for target {mine.name}" in p.stdout
    assert "NOT REPRODUCIBLE" in p.stdout and "recorded eeeeeeeeeeeeeeee" in p.stdout


def test_advisory_edit_warns_identity_edit_is_refused_at_its_line(fleet, tmp_path: Path) -> None:
    """An advisory field is shown, never refused on; an identity field is what the target's
    label is made of, so a hand-edited one is refused (exit 2) at its line by every command
    that reads the lock, with the lock left as it was."""
    work, families = fleet
    shutil.copy(work / "cnn.onnx", tmp_path / "cnn.onnx")
    text = (work / "fleet.lock").read_text()
    cpu = next(line for line in text.splitlines() if line.strip().startswith("cpu:"))
    (tmp_path / "a.lock").write_text(text.replace(cpu, '      cpu: "Some Other CPU"'))
    p = _run(tmp_path, families[0], "build", "cnn.onnx", "--lock", "a.lock", "--frozen", *REF)
    assert p.returncode == 0, p.stderr
    assert "advisory cpu: lock 'Some Other CPU'" in p.stderr
    arch = _arch(families[0])
    edited = text.replace(f"blas_kernels: {arch}", "blas_kernels: Other", 1)
    (tmp_path / "i.lock").write_text(edited)
    lines = edited.splitlines()
    edit_at = lines.index("      blas_kernels: Other")
    line = next(i for i in range(edit_at, 0, -1) if lines[i - 1] == "    identity:")
    for args in (
        ("build", "cnn.onnx", "--lock", "i.lock", "--frozen", *REF),
        ("build", "cnn.onnx", "--lock", "i.lock", *REF),
        ("show", "--lock", "i.lock", "--targets"),
        ("merge", "i.lock", str(work / "m0.lock"), "--out", "merged.lock"),
    ):
        p = _run(tmp_path, families[0], *args)
        assert p.returncode == EXIT_USAGE, (args, p.stderr)
        assert p.stderr.startswith(f"error: i.lock:{line + 1}:7: targets["), p.stderr
        assert "gives the target label" in p.stderr and "restore the identity" in p.stderr
    assert (tmp_path / "i.lock").read_text() == edited
    assert not (tmp_path / "merged.lock").exists()


def test_fleet_names_the_odd_machine(fleet, tmp_path: Path) -> None:
    work, families = fleet
    reports = sorted(work.glob("verify.*.json"))
    if len(reports) < 2:
        pytest.skip("needs the verify reports of test_each_family_builds_and_verifies...")
    p = run_cli("fleet", *map(str, reports), cwd=work)
    assert p.returncode == 0 and "fleet agrees" in p.stdout, p.stdout + p.stderr
    doc = json.loads(reports[0].read_text())
    for i in range(3):  # three cards of one target; card 2 gives other bits
        card = dict(doc, machine={"host": f"gpu{i}"})
        if i == 2:
            card["outputs_sha256"] = "f" * 64
        (tmp_path / f"gpu{i}.json").write_text(json.dumps(card))
    p = run_cli("fleet", *(str(tmp_path / f"gpu{i}.json") for i in range(3)), "--json")
    assert p.returncode == EXIT_DIFFERENT, p.stderr
    out = json.loads(p.stdout)
    assert out["agree"] is False
    assert [m["host"] for m in out["targets"][0]["odd"]] == ["gpu2"]
    (tmp_path / "bad.json").write_text("{}")
    p = run_cli("fleet", str(tmp_path / "bad.json"))
    assert p.returncode == EXIT_USAGE and "not a `reprobuild verify --json` report" in p.stderr
    os.mkfifo(tmp_path / "pipe.json")  # a FIFO or a folder is refused before any read
    for odd in (tmp_path / "pipe.json", tmp_path):
        p = run_cli("fleet", str(odd))
        assert p.returncode == EXIT_USAGE and "not a regular file" in p.stderr, p.stderr


def test_merge_refuses_another_model_and_conflicting_sections(fleet, tmp_path: Path) -> None:
    work, families = fleet
    shutil.copy(EXAMPLES / "mlp.onnx", tmp_path / "mlp.onnx")
    p = _run(tmp_path, families[0], "build", "mlp.onnx", "--lock", "mlp.lock", "-q", *REF, *KNOB)
    assert p.returncode == 0, p.stderr
    p = run_cli("merge", str(work / "m0.lock"), str(tmp_path / "mlp.lock"), "--out",
                str(tmp_path / "x.lock"))  # fmt: skip
    assert p.returncode == EXIT_USAGE and "another model" in p.stderr
    # the same target recorded twice with other tactics: two different sections
    other = load_lock(work / "m0.lock")
    # a key with another candidate (which keys have one depends on the kernel family)
    entry = next(e for e in other.layers if len(e.candidates) > 1)
    entry.tactic = next(c.tactic for c in entry.candidates if c.tactic != entry.tactic)
    save_lock(other, tmp_path / "other.lock")
    p = run_cli("merge", str(work / "m0.lock"), str(tmp_path / "other.lock"), "--out",
                str(tmp_path / "x.lock"))  # fmt: skip
    assert p.returncode == EXIT_USAGE and "differs from the one in" in p.stderr
    assert not (tmp_path / "x.lock").exists()
    # the same section twice is one target
    p = run_cli("merge", str(work / "m0.lock"), str(work / "m0.lock"), "--out",
                str(tmp_path / "x.lock"))  # fmt: skip
    assert p.returncode == 0 and "1 target" in p.stdout


def test_show_targets_and_target_selection(fleet) -> None:
    work, families = fleet
    names = load_lock(work / "fleet.lock").target_names()
    p = run_cli("show", "--targets", "--lock", "fleet.lock", "--json", cwd=work)
    assert p.returncode == 0, p.stderr
    rows = json.loads(p.stdout)["targets"]
    assert [r["target"] for r in rows] == names and all(r["outputs"] for r in rows)
    for name in names:
        p = run_cli("show", "--lock", "fleet.lock", "--target", name, "--json", cwd=work)
        assert p.returncode == 0 and json.loads(p.stdout)["target"] == name
    p = run_cli("show", "--lock", "fleet.lock", "--target", "nosuch", cwd=work)
    assert p.returncode == EXIT_USAGE and "no target 'nosuch'" in p.stderr
    # without --target, the machine's own target (the default family here)
    p = _run(work, families[0], "show", "--lock", "fleet.lock", "--json")
    assert p.returncode == 0, p.stderr
    assert json.loads(p.stdout)["target"].startswith(f"reference-{_arch(families[0])}-")


def test_pin_edits_one_target_only(fleet, tmp_path: Path) -> None:
    work, families = fleet
    shutil.copy(work / "fleet.lock", tmp_path / "t.lock")
    before = {t.name: t for t in load_lock(tmp_path / "t.lock").targets()}
    name = sorted(before)[1]
    entry = next(e for e in before[name].layers if len(e.candidates) > 1)
    other = next(c for c in entry.candidates if c.tactic != entry.tactic)
    p = run_cli("pin", f"key={entry.key}", f"tactic=0x{other.tactic:x}", "--lock",
                str(tmp_path / "t.lock"), "--target", name)  # fmt: skip
    assert p.returncode == 0, p.stderr
    after = {t.name: t for t in load_lock(tmp_path / "t.lock").targets()}
    pinned = next(e for e in after[name].layers if e.key == entry.key)
    assert pinned.tactic == other.tactic and pinned.pinned
    assert not after[name].outputs  # the recorded bits were the old tactics'; cleared
    untouched = sorted(before)[0]
    assert after[untouched] == before[untouched]


@functools.lru_cache(maxsize=8)
def _arch(coretype: str) -> str:
    code = "import numpy, threadpoolctl; print(threadpoolctl.threadpool_info()[0]['architecture'])"
    env = child_env(drop=("OPENBLAS_CORETYPE",))
    if coretype:
        env["OPENBLAS_CORETYPE"] = coretype
    return subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    ).stdout.strip()


def test_a_schema_1_tensorrt_lock_builds_the_same_engine(monkeypatch, tmp_path: Path) -> None:
    """A lock written before targets existed (one flat environment, no times, no digests)
    loads as one target, matches this machine on the fields it records, builds the engine
    it locks, and is rewritten as schema 2 only when it changes (--frozen: never)."""
    import yaml

    import reprobuild
    from tests.test_trt_variants import install_standin

    install_standin(monkeypatch)
    monkeypatch.chdir(tmp_path)
    shutil.copy(EXAMPLES / "cnn.onnx", "cnn.onnx")
    kw = {"backend": "tensorrt", "cache_dir": tmp_path / "caches"}
    first = reprobuild.build("cnn.onnx", lock="new.lock", out="a.engine", **kw)
    new = yaml.safe_load(Path("new.lock").read_text())
    (target,) = new["targets"]
    identity, advisory = target["identity"], target["advisory"]
    old = {
        "schema": 1,
        "model": new["model"],
        "environment": {
            "backend": "tensorrt",
            "tensorrt_version": identity["tensorrt_version"],
            "gpu": identity["gpu"],
            "compute_capability": identity["compute_capability"],
            "cuda_version": advisory.get("cuda_runtime"),
            "driver_version": advisory.get("driver_version"),
        },
        "settings": new["settings"],  # (no precision section: the model is built as is)
        # schema 1 recorded no times and no tie bands
        "layers": [
            {k: v for k, v in e.items() if k not in ("time", "band", "ties")}
            for e in target["layers"]
        ],
    }
    Path("old.lock").write_text(yaml.safe_dump(old, sort_keys=False))
    before = Path("old.lock").read_bytes()
    from reprobuild.backends.tensorrt.backend import TensorRTBackend
    from reprobuild.workflow.existing import expected_bits

    def bits(engine: str) -> str:  # the engine's outputs on the seeded inputs
        return expected_bits(TensorRTBackend(), Path(engine).read_bytes(), Path("cnn.onnx")).sha256

    frozen = reprobuild.build("cnn.onnx", lock="old.lock", out="b.engine", frozen=True, **kw)
    assert frozen.tactic_map == first.tactic_map and not frozen.recorded
    assert bits("b.engine") == bits("a.engine") == new["targets"][0]["outputs"][0]["sha256"]
    assert Path("old.lock").read_bytes() == before  # --frozen never rewrites
    again = reprobuild.build("cnn.onnx", lock="old.lock", out="c.engine", **kw)
    assert again.tactic_map == first.tactic_map and bits("c.engine") == bits("a.engine")
    rewritten = load_lock("old.lock")  # it gained the target's expected bits: schema 2 now
    assert again.lock_written and rewritten.schema == 2 and rewritten.outputs
