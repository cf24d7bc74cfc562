"""``verify --runs`` and ``verify --batch-invariance``: each fails on a lock that uses the
reference kernel it stands for, names that layer and prints the ``deny`` line, and passes
on a lock pinned away from it. Timings are injected (``prefer:`` knobs), never measured."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from reprobuild.errors import UsageError
from reprobuild.workflow.verify import verify

from .conftest import EXAMPLES

ATOMIC = "ref_matmul_atomic4_f32"
ROWS = "ref_matmul_rowsplit_f32"


@pytest.fixture
def work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    shutil.copy(EXAMPLES / "mlp.onnx", tmp_path / "mlp.onnx")
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _lock_using(cli, kernel: str, lock: str = "t.lock") -> None:
    """mlp.onnx recorded with ``kernel`` on fc1 only (fc2 pinned to the BLAS kernel)."""
    substring = kernel.removeprefix("ref_matmul_").removesuffix("_f32")
    r = cli(
        "build", "mlp.onnx", "--lock", lock, "-o", "t.engine", "--backend", "reference",
        "--ref-timing", f"prefer:{substring}", "-q",
    )  # fmt: skip
    assert r.code == 0, r
    r = cli("pin", "--lock", lock, "layer=fc2", "tactic=ref_matmul_blas_f32")
    assert r.code == 0, r
    assert "fc1" in cli("show", "--lock", lock).out and kernel in cli("show", "--lock", lock).out


def _pin_away(cli, lock: str = "t.lock") -> None:
    r = cli("pin", "--lock", lock, "layer=fc1", "tactic=ref_matmul_blas_f32")
    assert r.code == 0, r


def _verify(cli, *args: str):
    return cli("verify", "mlp.onnx", "--lock", "t.lock", "--backend", "reference", "-q", *args)


def test_runs_fail_on_the_atomic_kernel_naming_its_layer_and_pass_pinned_away(work, cli) -> None:
    _lock_using(cli, ATOMIC)
    once = _verify(cli)  # each rebuilt engine run once: the rebuilds agree
    assert once.code == 0 and "REPRODUCIBLE" in once.out and "run to run" not in once.out
    r = _verify(cli, "--runs", "3")
    assert r.code == 1, r
    assert "NOT DETERMINISTIC RUN TO RUN" in r.out
    assert "build 1 run 2  output" in r.out  # the output and the bits that moved
    fixes = [line for line in r.out.splitlines() if line.startswith("fix: ")]
    assert fixes == [f"fix: reprobuild deny --lock t.lock kernel={ATOMIC} layer=fc1"]
    _pin_away(cli)
    r = _verify(cli, "--runs", "3")
    assert r.code == 0, r
    assert "run to run: each of 3 engines ran 3 times on the same inputs: the same bits" in r.out


def test_batch_invariance_fails_on_the_row_split_kernel_and_passes_pinned_away(work, cli) -> None:
    _lock_using(cli, ROWS)
    r = _verify(cli, "--runs", "3")  # run to run, it is deterministic
    assert r.code == 0, r
    r = _verify(cli, "--batch-invariance")
    assert r.code == 1, r
    assert "NOT BATCH INVARIANT: 8 samples of 8" in r.out
    assert "sample 3  output" in r.out
    fixes = [line for line in r.out.splitlines() if line.startswith("fix: ")]
    assert fixes == [f"fix: reprobuild deny --lock t.lock kernel={ROWS} layer=fc1"]
    _pin_away(cli)
    r = _verify(cli, "--batch-invariance", "--runs", "2")
    assert r.code == 0, r
    assert "each of 8 samples alone (batch 1) gives the same bits as inside the batch" in r.out


def test_the_json_names_moved_outputs_culprits_and_fixes(work, cli) -> None:
    _lock_using(cli, ATOMIC)
    r = _verify(cli, "--runs", "2", "--batch-invariance", "--json")
    assert r.code == 1, r
    d = json.loads(r.out)
    assert d["deterministic"] is False and d["reproducible"] is True
    runs = d["run_check"]
    assert runs["deterministic"] is False and runs["runs"] == 2 and runs["engines"] == 3
    assert {(m["build"], m["run"], m["output"]) for m in runs["moved"]} == {
        (b, 2, "output") for b in (1, 2, 3)
    }
    (culprit,) = runs["culprits"]["layers"]
    assert culprit["layer"] == "fc1" and culprit["kernel"] == ATOMIC and culprit["alone"]
    assert culprit["fix"] == f"reprobuild deny --lock t.lock kernel={ATOMIC} layer=fc1"
    # the batch's second run moved too, so no sample is blamed on the batch
    batch = d["batch_invariance"]
    assert batch["invariant"] is False and batch["batch"] == 8 and batch["moved"] == []
    assert [m["run"] for m in batch["unsteady"]] == [2]
    assert [c["layer"] for c in batch["culprits"]["layers"]] == ["fc1"]


def _small_model(path: Path, batch: int | str) -> None:
    g = np.random.default_rng(5)
    w = numpy_helper.from_array(g.standard_normal((32, 8)).astype(np.float32), "w")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "w"], ["y"], name="fc")],
        "small",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [batch, 32])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [batch, 8])],
        [w],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)


@pytest.mark.parametrize(
    ("batch", "said"),
    [
        (1, "NOT CHECKED: the model has no batch dimension to vary (input 'x' has a fixed "),
        ("N", "each of 4 samples alone (batch 1) gives the same bits as inside the batch of 4"),
    ],
)
def test_a_fixed_batch_of_one_is_said_plainly_and_a_dynamic_one_is_seeded(
    work, cli, batch, said
) -> None:
    _small_model(work / "small.onnx", batch)
    profile = [] if batch == 1 else ["--min-shapes", "x:1x32", "--opt-shapes", "x:4x32"]
    profile += [] if batch == 1 else ["--max-shapes", "x:8x32"]
    r = cli(
        "build", "small.onnx", "--lock", "s.lock", "-o", "s.engine", "--backend", "reference",
        *profile,
    )  # fmt: skip
    assert r.code == 0, r
    r = cli(
        "verify", "small.onnx", "--lock", "s.lock", "--backend", "reference", "-q",
        "--batch-invariance",
    )  # fmt: skip
    assert r.code == 0, r
    assert said in r.out


def test_runs_below_one_are_refused(work) -> None:
    with pytest.raises(UsageError, match="--runs must be at least 1"):
        verify("mlp.onnx", lock="t.lock", runs=0)


def test_a_batch_whose_second_run_moves_blames_no_sample() -> None:
    """An engine that changes its bits from run to run: the batch check says so rather
    than calling every sample batch-dependent."""
    from reprobuild.workflow.determinism import check_batch

    calls = []

    def unsteady(feeds):
        calls.append(1)
        return {"y": feeds["x"] * np.float32(1 + len(calls) * 1e-3)}

    feeds = {"x": np.arange(8, dtype=np.float32).reshape(4, 2) + 1}
    check = check_batch(unsteady, feeds)
    assert check.invariant is False and check.moved == [] and len(calls) == 2
    assert [(m.output, m.run) for m in check.unsteady] == [("y", 2)]
    steady = check_batch(lambda f: {"y": f["x"] * 2, "n": np.float32(1)}, feeds)
    assert steady.invariant is True and steady.sizes == [1, 4] and steady.not_compared == ["n"]


def test_the_culprit_search_never_switches_to_a_denied_candidate() -> None:
    from reprobuild.lock.model import LayerEntry, LockCandidate
    from reprobuild.types import BuildSettings, KernelRule
    from reprobuild.workflow.determinism import steadiest

    names = ["ref_gemm_atomic4_f32", "ref_gemm_blas_f32", "ref_gemm_splitk2_f32"]
    cands = [LockCandidate(0x10 + i, k) for i, k in enumerate(names)]
    entry = LayerEntry("0x1", "fc", 0x10, names[0], candidates=cands)
    assert steadiest(entry, BuildSettings()) == (0x11, "ref_gemm_blas_f32")
    ruled = BuildSettings(deny=(KernelRule("*blas*", "fc"),))
    assert steadiest(entry, ruled) == (0x12, "ref_gemm_splitk2_f32")
    everything = BuildSettings(deny=(KernelRule("ref_gemm_*", "*"),))
    assert steadiest(entry, everything) is None
