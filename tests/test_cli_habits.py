"""What a new user runs into first: trtexec habits, the wrong file, counted nouns, and
commands that should say what they did (or did not do)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from reprobuild.lock.yamlio import load_lock, save_lock
from tests.conftest import EXAMPLES, ROOT, sample_lock


def _built(cli, tmp_path: Path) -> tuple[Path, Path]:
    """cnn.onnx recorded with the reference backend: (lock, engine)."""
    model = tmp_path / "cnn.onnx"
    shutil.copy(EXAMPLES / "cnn.onnx", model)
    lock, engine = tmp_path / "t.lock", tmp_path / "cnn.engine"
    res = cli("build", str(model), "--lock", str(lock), "--out", str(engine), "--backend",
              "reference", "--cache-dir", str(tmp_path / "c"), "-q")  # fmt: skip
    assert res.code == 0, res
    return lock, engine


# ------------------------------------------------------------------------- the wrong file


def test_log_refuses_a_markdown_page_and_a_lock_by_name(cli, tmp_path: Path) -> None:
    page = tmp_path / "notes.md"
    shutil.copy(ROOT / "README.md", page)  # names tactics and TensorRT throughout
    lock = tmp_path / "t.lock"
    save_lock(sample_lock(), lock)
    for path, what in ((page, "is a Markdown document"), (lock, "is a reprobuild lockfile")):
        for args in (("log", str(path)), ("log", "diff", str(path), str(path))):
            res = cli(*args)
            assert res.code == 2, res
            assert res.out == ""
            assert res.err.startswith(f"error: {path}: {what}, not a builder log; ")
            assert len(res.err.strip().splitlines()) == 1


def test_a_real_log_starting_with_a_comment_is_still_read(cli) -> None:
    """Fixture logs start with '# source:' lines; only a lock's 'schema:' makes a lock."""
    log = ROOT / "tests/fixtures/trt-logs/trt108-111_sampleEditableTimingCache_readme_excerpt.log"
    assert log.read_text().startswith("# ")
    res = cli("log", str(log))
    assert res.code == 0, res
    assert "record(s)" in res.out


# ------------------------------------------------------------------------- trtexec habits


@pytest.mark.parametrize(
    ("args", "hint"),
    [
        (("build", "m.onnx", "--fp16"), "here it is --precision fp16"),
        (("build", "--onnx=m.onnx"), "here it is the model as the first argument"),
        (("build", "m.onnx", "--saveEngine", "m.engine"), "here it is --out ENGINE"),
        (("build", "m.onnx", "--minShapes", "x:1x3"), "here it is --min-shapes"),
    ],
)
def test_trtexec_flags_name_ours(cli, args: tuple[str, ...], hint: str) -> None:
    res = cli(*args)
    assert res.code == 2, res
    (line,) = res.err.strip().splitlines()
    assert hint in line and line.endswith("(see 'reprobuild build -h')")
    assert "Possible options" not in line  # click's spelling guess (--json) would mislead


def test_a_trtexec_flag_gets_no_hint_where_the_command_has_no_such_option(cli) -> None:
    res = cli("show", "--fp16")  # show has a --precision flag, but it builds nothing
    assert res.code == 2
    assert "here it is" not in res.err


def test_precision_is_case_insensitive(cli, tmp_path: Path) -> None:
    model = tmp_path / "mlp.onnx"
    shutil.copy(EXAMPLES / "mlp.onnx", model)
    lock = tmp_path / "t.lock"
    res = cli("build", str(model), "--precision", "FP16", "--lock", str(lock), "--backend",
              "reference", "--cache-dir", str(tmp_path / "c"), "--out", str(tmp_path / "m.engine"),
              "-q")  # fmt: skip
    assert res.code == 0, res
    assert load_lock(lock).precision.mode == "fp16"


# ------------------------------------------------------------------------- lock commands


def test_show_candidates_lists_every_candidate_and_marks_the_locked_one(
    cli, tmp_path: Path
) -> None:
    lock, _ = _built(cli, tmp_path)
    data = load_lock(lock)
    res = cli("show", "--lock", str(lock), "--candidates")
    assert res.code == 0, res
    rows = [line.split() for line in res.out.splitlines()[2:-1]]
    expected = [
        [e.layer, e.key, f"0x{c.tactic:x}", c.kernel]
        + ([f"{e.time_ms:.4g}", "yes"] if c.tactic == e.tactic else ["-", "no"])
        for e in data.layers
        for c in e.candidates
    ]
    assert rows == expected
    total = sum(len(e.candidates) for e in data.layers)
    assert res.out.splitlines()[-1] == f"{total} candidates of {len(data.layers)} layers"
    js = json.loads(cli("show", "--lock", str(lock), "--candidates", "--json").out)
    assert [len(la["candidates"]) for la in js["layers"]] == [
        len(e.candidates) for e in data.layers
    ]


def test_unpin_of_a_layer_that_is_not_pinned_says_so(cli, tmp_path: Path) -> None:
    lock = tmp_path / "t.lock"
    save_lock(sample_lock(2), lock)
    res = cli("unpin", "layer=layer0", "--lock", str(lock))
    assert res.code == 0, res
    assert res.out.strip() == f"layer0 [{load_lock(lock).layers[0].key}] was not pinned; " + (
        "nothing to unpin"
    )
    assert cli("pin", "layer=layer0", "tactic=0x1001", "--lock", str(lock)).code == 0
    res = cli("unpin", "layer=layer0", "--lock", str(lock))
    assert res.out.startswith("unpinned layer0 ")
    js = json.loads(cli("unpin", "layer=layer0", "--lock", str(lock), "--json").out)
    assert js["unpinned"][0]["was_pinned"] is False


def test_one_layer_is_one_layer(cli, tmp_path: Path) -> None:
    lock = tmp_path / "t.lock"
    save_lock(sample_lock(1), lock)
    res = cli("show", "--lock", str(lock))
    assert res.out.splitlines()[-1] == "1 layer, 0 pinned"
    res = cli("show", "--lock", str(lock), "--targets")
    assert ": 1 layer, 0 pinned, 0 recorded digests" in res.out


# ------------------------------------------------------------------------- layers --lock


def test_layers_checks_an_fp32_lock_s_kernels_and_tactics(cli, tmp_path: Path) -> None:
    lock, engine = _built(cli, tmp_path)
    res = cli("layers", str(engine), "--lock", str(lock))
    assert res.code == 0, res
    assert "kernels and tactics: runs the locked tactics: 0 layers on another" in res.out
    assert "precision plan" not in res.out  # an FP32 lock has none, and that is no error

    # The lock now says another recorded candidate; the engine was not rebuilt.
    data = load_lock(lock)
    names = [e.layer for e in data.layers]  # a layer of one key: the engine runs that key
    entry = next(e for e in data.layers if len(e.candidates) > 1 and names.count(e.layer) == 1)
    other = next(c for c in entry.candidates if c.tactic != entry.tactic)
    assert (
        cli("pin", f"key={entry.key}", f"tactic=0x{other.tactic:x}", "--lock", str(lock)).code == 0
    )
    res = cli("layers", str(engine), "--lock", str(lock))
    assert res.code == 1, res
    assert f"layer {entry.layer!r}: engine layer" in res.out
    assert f"the lock says 0x{other.tactic:x} ({other.kernel!r})" in res.out
    js = json.loads(cli("layers", str(engine), "--lock", str(lock), "--json").out)
    assert js["kernel_check"]["follows"] is False and len(js["kernel_check"]["problems"]) == 1


# ------------------------------------------------------------------------- verify


def test_verify_says_where_its_report_went(cli, tmp_path: Path, monkeypatch) -> None:
    lock, _ = _built(cli, tmp_path)
    monkeypatch.chdir(tmp_path)
    report = tmp_path / "v.json"
    res = cli("verify", "--lock", str(lock), "--rebuilds", "2", "--no-control", "--backend",
              "reference", "--cache-dir", str(tmp_path / "c"), "--report", str(report),
              "-q")  # fmt: skip
    assert res.code == 0, res
    assert res.out.splitlines()[-1] == f"report: {report}"
    assert json.loads(report.read_text())["reproducible"] is True


# ------------------------------------------------------------------------- a hand-edited lock


def test_a_lock_entry_deleted_by_hand_blames_the_lock_not_the_cache(cli, tmp_path: Path) -> None:
    lock, engine = _built(cli, tmp_path)
    data = load_lock(lock)
    data.layers = data.layers[1:]
    save_lock(data, lock)
    base = ("build", str(tmp_path / "cnn.onnx"), "--lock", str(lock), "--out", str(engine),
            "--backend", "reference", "--cache-dir", str(tmp_path / "c"), "-q")  # fmt: skip
    res = cli(*base, "--frozen")
    assert res.code == 1, res
    assert res.err.strip().splitlines()[-1] == (
        f"error: {lock}: stale: 1 layer missing from the lock, 0 no longer built; "
        "--frozen refuses to change it (run without --frozen)"
    )
    res = cli(*base)
    assert res.code == 0, res
    assert "foreign or stale" not in res.err
    assert "has 1 key the lock lacks (an entry deleted from the lock" in res.err
    assert "(written: added 1 layer, removed 0)" in res.out
    assert len(load_lock(lock).layers) == len(data.layers) + 1


# ------------------------------------------------------------------------- shapes


def _dynamic_model(path: Path) -> Path:
    import numpy as np
    import onnx
    from onnx import TensorProto, helper

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 8])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])
    w = helper.make_tensor("w", TensorProto.FLOAT, [8, 4], np.ones(32, np.float32))
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "w"], ["y"])], "g", [x], [y], [w])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    return path


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        ((), "MODEL: input 'x' has a dynamic shape (Nx8; dynamic: N): give it with --shapes "
             "x:1x8, or a profile with --min-shapes, --opt-shapes and --max-shapes"),
        (("--shapes", "x:1x8", "--shapes", "x:2x8"),
         "--shapes gives input 'x' twice (1x8 and 2x8); give each input once"),
        (("--min-shapes", "x:1x8,x:2x8", "--opt-shapes", "x:2x8", "--max-shapes", "x:4x8"),
         "--min-shapes gives input 'x' twice (1x8 and 2x8); give each input once"),
        (("--shapes", "x:1x8", "--min-shapes", "x:1x8", "--opt-shapes", "x:2x8",
          "--max-shapes", "x:4x8"),
         "input 'x': --shapes fixes its shape and --min-shapes/--opt-shapes/--max-shapes give "
         "it a profile; use one or the other"),
    ],
)  # fmt: skip
def test_shapes_are_asked_for_by_flag_and_contradictions_refused(
    cli, tmp_path: Path, flags: tuple[str, ...], message: str
) -> None:
    model = _dynamic_model(tmp_path / "dyn.onnx")
    lock = tmp_path / "t.lock"
    out = ("-q", "--out", str(tmp_path / "d.engine"), "--cache-dir", str(tmp_path / "c"))
    res = cli("build", str(model), "--lock", str(lock), "--backend", "reference", *out, *flags)
    assert res.code == 2, res
    assert res.err.strip().splitlines() == [f"error: {message.replace('MODEL', str(model))}"]
    assert not lock.exists()


# ------------------------------------------------------------------------- INT8 sample counts


def test_a_sample_count_from_the_lock_is_not_blamed_on_a_flag(cli, tmp_path: Path) -> None:
    import numpy as np

    from tests.models import digits
    from tests.precision.helpers import build_digits

    x = digits.held_out_split()[0]
    np.savez(tmp_path / "c.npz", input=x[:64])
    np.savez(tmp_path / "short.npz", input=x[:16])
    int8 = ("--precision", "int8", "--calib-batch-size", "16", "--calib-samples", "32")
    res = build_digits(cli, tmp_path, "cnn", *int8, "--calibration", str(tmp_path / "c.npz"))
    assert res.code == 0, res
    assert load_lock(tmp_path / "t.lock").precision.quantization.samples == 32
    # A frozen build checks its data against the lock's: 32 is the lock's, never typed here.
    short = (
        "--precision",
        "int8",
        "--calib-batch-size",
        "16",
        "--calibration",
        str(tmp_path / "short.npz"),
    )
    res = build_digits(cli, tmp_path, "cnn", "--frozen", *short, out="b")
    assert res.code == 2, res
    assert res.err.strip().splitlines() == [
        f"error: {tmp_path / 'short.npz'}: holds 16 samples, but the lock's INT8 plan was "
        "calibrated on the first 32; pass the calibration data the lock was recorded with"
    ]
    assert "--calib-samples" not in res.err


def test_int8_calibration_is_announced_and_bad_samples_are_one_line(cli, tmp_path: Path) -> None:
    import numpy as np

    from tests.models import digits
    from tests.precision.helpers import build_digits

    x = digits.held_out_split()[0][:64]
    np.savez(tmp_path / "c.npz", input=x)
    int8 = ("--precision", "int8", "--calib-batch-size", "16", "--calibration")
    res = cli("build", str(digits.model_path("cnn")), "--backend", "reference", "--lock",
              str(tmp_path / "p.lock"), "--out", str(tmp_path / "p.engine"), "--cache-dir",
              str(tmp_path / "caches"), *int8, str(tmp_path / "c.npz"))  # fmt: skip
    assert res.code == 0, res
    assert (
        "calibrating INT8 scales with ONNX Runtime (entropy): 64 samples from c.npz, "
        "4 batches of 16"
    ) in res.err

    bad = x.copy()
    bad[3] = np.nan
    np.savez(tmp_path / "nan.npz", input=bad)
    res = build_digits(cli, tmp_path, "cnn", *int8, str(tmp_path / "nan.npz"), lock="n")
    assert res.code == 2, res
    assert res.err.strip().splitlines() == [
        f"error: {tmp_path / 'nan.npz'}: array 'input' holds NaN or infinite values in 1 of 64 "
        "samples (first: sample 3); give finite samples"
    ]
    # finite samples whose activations overflow: ONNX Runtime's numpy warnings stay muted
    np.savez(tmp_path / "huge.npz", input=np.full_like(x, 3e38))
    res = build_digits(cli, tmp_path, "cnn", *int8, str(tmp_path / "huge.npz"), lock="h")
    assert res.code == 2, res
    (line,) = res.err.strip().splitlines()
    assert "an activation overflows to infinity or NaN on these samples" in line
    assert "RuntimeWarning" not in res.err


def test_a_lock_in_a_new_folder_is_made_there_as_outputs_are(cli, tmp_path: Path) -> None:
    """A lock path whose folder does not exist yet gets that folder, as ``-o`` paths do;
    a refused build leaves no folder behind."""
    model = tmp_path / "mlp.onnx"
    shutil.copy(EXAMPLES / "mlp.onnx", model)
    args = ("build", str(model), "--lock", str(tmp_path / "a" / "b" / "t.lock"))
    res = cli(*args, "-o", str(tmp_path / "x.engine"), "--opt-level", "0")
    assert res.code == 2 and not (tmp_path / "a").exists(), res
    assert cli(*args, "-o", str(tmp_path / "x.engine")).code == 0
    assert (tmp_path / "a" / "b" / "t.lock").is_file()
    assert (tmp_path / "a" / "b" / "caches").is_dir()  # the recording cache, beside the lock
