"""INT8 calibration sources: the same samples as an .npz, a folder of .npy/.npz files,
Polygraphy JSON or a Python dataset (torch2trt's int8_calib_dataset protocol) are the same
arrays with the same sha256, calibrate to the same lock scales, and pass ``--frozen``
against each other; every bad source is one line, exit 2.

The dataset's tensors are a tiny class with ``detach``/``cpu``/``numpy`` (what torch
tensors offer), so torch is not needed.
"""

from __future__ import annotations

import base64
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

from reprobuild.errors import UsageError
from reprobuild.lock import load_lock
from reprobuild.precision.calibdata import load_calib_data, samples_hash
from reprobuild.precision.calibsource import is_dataset_spec
from tests.models import digits
from tests.precision.helpers import build_digits

N = 48  # samples: three calibration batches of 16

TENSOR = '''
import numpy as np

class FakeTensor:
    """What the loader may call on a torch tensor: detach, cpu, numpy."""

    def __init__(self, a):
        self.a = a

    def detach(self):
        return FakeTensor(self.a)

    def cpu(self):
        return FakeTensor(self.a)

    def numpy(self):
        return self.a
'''

DATASET = (
    TENSOR
    + '''
class Digits:
    """Items in every accepted form: a list with a batch dim of 1, a bare tensor, a tuple of
    a numpy array."""

    def __init__(self, path, order=None):
        self.x = np.load(path, allow_pickle=False)["input"]
        self.order = list(range(len(self.x))) if order is None else order

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        s = self.x[self.order[i]]
        return [[FakeTensor(s[None])], FakeTensor(s), (s,)][i % 3]

print("dataset module imported")  # goes to stderr: stdout is for results
DS = Digits(PATH)
REVERSED = Digits(PATH, list(range(len(DS.x)))[::-1])
'''
)


def _samples() -> np.ndarray:
    return digits.held_out_split()[0][:N]


def _sources(tmp: Path) -> dict[str, str]:
    """The same N samples in every form; returns source name -> --calibration value."""
    from polygraphy.json import save_json  # Polygraphy's own writer

    x = _samples()
    np.savez(tmp / "c.npz", input=x)
    folder = tmp / "folder"
    folder.mkdir()
    # name order, not numeric order: 10.npz comes after 02.npz; one sample or a batch each
    np.save(folder / "00.npy", x[0])  # (1, 8, 8): one sample
    np.save(folder / "01.npy", x[1:20])  # (19, 1, 8, 8): a batch
    np.savez(folder / "02.npz", input=x[20])
    np.savez(folder / "10.npz", input=x[21:])
    (folder / ".DS_Store").write_bytes(b"\0junk")  # hidden files are skipped
    save_json([{"input": x[:16]}, {"input": x[16:40]}, {"input": x[40:]}], str(tmp / "c.json"))
    (tmp / "calibds.py").write_text(f"PATH = {str(tmp / 'c.npz')!r}\n" + DATASET)
    return {
        "npz": str(tmp / "c.npz"),
        "folder": str(folder),
        "json": str(tmp / "c.json"),
        "dataset": str(tmp / "calibds.py") + ":DS",
    }


@pytest.fixture
def cnn() -> onnx.ModelProto:
    return onnx.load(str(digits.model_path("cnn")))


def test_every_source_reads_the_same_samples(tmp_path: Path, cnn, capsys) -> None:
    sources = _sources(tmp_path)
    want = samples_hash({"input": _samples()})
    for name, spec in sources.items():
        data = load_calib_data(spec, cnn, None)
        assert data.count == N, name
        assert (
            data.arrays["input"].shape == (N, 1, 8, 8) and data.arrays["input"].dtype == np.float32
        )
        assert np.array_equal(data.arrays["input"], _samples()), name
        assert data.sha256 == want, name
    # --calib-samples reads the first ones of any source
    assert load_calib_data(sources["folder"], cnn, 5).sha256 == samples_hash(
        {"input": _samples()[:5]}
    )
    assert load_calib_data(sources["dataset"], cnn, 5).sha256 == samples_hash(
        {"input": _samples()[:5]}
    )
    reordered = load_calib_data(sources["dataset"].replace(":DS", ":REVERSED"), cnn, None)
    assert np.array_equal(reordered.arrays["input"], _samples()[::-1])
    assert reordered.sha256 != want
    out, err = capsys.readouterr()
    assert out == "" and "dataset module imported" in err
    assert not (tmp_path / "__pycache__").exists()


def test_module_spec_imports_from_the_current_directory(tmp_path: Path, cnn, monkeypatch) -> None:
    _sources(tmp_path)
    pkg = tmp_path / "mycalibpkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "data.py").write_text(f"PATH = {str(tmp_path / 'c.npz')!r}\n" + DATASET)
    monkeypatch.chdir(tmp_path)
    try:
        data = load_calib_data("mycalibpkg.data:DS", cnn, None)
    finally:
        for mod in ("mycalibpkg", "mycalibpkg.data"):
            sys.modules.pop(mod, None)
    assert data.sha256 == samples_hash({"input": _samples()})
    assert data.source == "mycalibpkg.data:DS"
    assert str(tmp_path) not in sys.path  # put back as it was


def test_a_dataset_that_changes_between_reads_changes_the_hash(tmp_path: Path, cnn) -> None:
    """Random augmentation in ``__getitem__``: each read is other samples, so --frozen (which
    compares this hash with the lock's) refuses it, as docs/int8.md says."""
    body = (
        "class Augmented:\n    def __len__(self): return 4\n"
        "    def __getitem__(self, i):\n"
        "        return [np.random.default_rng().random((1, 8, 8)).astype(np.float32)]\n"
        "DS = Augmented()\n"
    )
    spec = _dataset(tmp_path, body)
    first, second = load_calib_data(spec, cnn, None), load_calib_data(spec, cnn, None)
    assert first.count == second.count == 4 and first.sha256 != second.sha256


@pytest.mark.parametrize(
    ("spec", "is_spec"),
    [
        ("calibds.py:DS", True),
        ("sub/dir/calibds.py:DS", True),
        ("pkg.module:DATASET", True),
        ("calib.npz", False),
        ("folder", False),
        ("calibds.py:1", False),  # NAME must be an identifier
        ("a-b:DS", False),  # neither .py nor a module name
        (":DS", False),
        ("exists:DS", False),  # an existing path with a colon stays a path
    ],
)
def test_dataset_spec_or_path(tmp_path: Path, monkeypatch, spec: str, is_spec: bool) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "exists:DS").write_bytes(b"")
    assert is_dataset_spec(spec) is is_spec


def _build(cli, tmp: Path, calib: str, *extra: str, lock: str = "t", out: str = "a"):
    return build_digits(
        cli, tmp, "cnn", "--precision", "int8", "--calibration", calib,
        "--calib-batch-size", "16", *extra, lock=lock, out=out,
    )  # fmt: skip


def test_every_source_locks_the_same_scales(cli, tmp_path: Path) -> None:
    sources = _sources(tmp_path)
    quants = {}
    for name, spec in sources.items():
        r = _build(cli, tmp_path, spec, lock=name, out=name)
        assert r.code == 0, (name, r)
        plan = load_lock(tmp_path / f"{name}.lock").precision
        assert plan is not None and plan.quantization is not None
        quants[name] = plan.quantization
    want = samples_hash({"input": _samples()})
    assert {q.data_sha256 for q in quants.values()} == {want}
    assert {q.samples for q in quants.values()} == {N}
    scales = [[(a.tensor, a.scale.hex()) for a in q.activations] for q in quants.values()]
    assert len(scales[0]) == 3 and all(s == scales[0] for s in scales)
    assert all(q.weights == quants["npz"].weights for q in quants.values())


def test_frozen_accepts_the_same_data_in_another_form(cli, tmp_path: Path) -> None:
    sources = _sources(tmp_path)
    assert _build(cli, tmp_path, sources["npz"]).code == 0
    before = (tmp_path / "t.lock").read_bytes()
    for name in ("folder", "json", "dataset"):
        r = _build(cli, tmp_path, sources[name], "--frozen", out=name)
        assert r.code == 0, (name, r)
    r = _build(cli, tmp_path, sources["dataset"].replace(":DS", ":REVERSED"), "--frozen", out="r")
    assert r.code == 1, r
    # the dataset's own print comes first (stderr); reprobuild's refusal is one line
    assert r.err.splitlines()[0] == "dataset module imported"
    line = r.err.splitlines()[1]
    assert line.startswith("error: ") and len(r.err.splitlines()) == 2
    assert "calibds.py:REVERSED" in line and "another order" in line and "--frozen refuses" in line
    assert not (tmp_path / "r.engine").exists()
    assert (tmp_path / "t.lock").read_bytes() == before


# ------------------------------------------------------------------------------ refusals


def _two_input_model() -> onnx.ModelProto:
    """a + b, both (N, L) float32 with L dynamic: shapes can differ between files."""
    a = helper.make_tensor_value_info("a", TensorProto.FLOAT, ["N", "L"])
    b = helper.make_tensor_value_info("b", TensorProto.FLOAT, ["N", "L"])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", "L"])
    graph = helper.make_graph([helper.make_node("Add", ["a", "b"], ["y"])], "g", [a, b], [y])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _f32(*shape: int) -> np.ndarray:
    return np.zeros(shape, np.float32)


def _folder(tmp: Path, files: dict[str, object]) -> str:
    folder = tmp / "folder"
    folder.mkdir()
    for name, value in files.items():
        if isinstance(value, bytes):
            (folder / name).write_bytes(value)
        elif name.endswith(".npz"):
            np.savez(folder / name, **value)  # type: ignore[arg-type]
        elif name.endswith(".npy"):
            np.save(folder / name, value)
        else:
            (folder / name).mkdir()
    return str(folder)


def _dataset(tmp: Path, body: str, name: str = "DS") -> str:
    (tmp / "ds.py").write_text(TENSOR + body)
    return f"{tmp / 'ds.py'}:{name}"


ITEM = (
    "class D:\n    def __len__(self): return 4\n    def __getitem__(self, i): return {}\nDS = D()\n"
)

# (model: "cnn" or "two", how to make the source, what the one line must say)
REFUSALS = [
    ("cnn", lambda t: _folder(t, {}), "no .npy or .npz files in the calibration folder"),
    (
        "cnn",
        lambda t: _folder(t, {"a.npy": _f32(1, 8, 8), "b.txt": b"x"}),
        "b.txt: not a .npy or .npz file",
    ),
    (
        "cnn",
        lambda t: _folder(t, {"a.npy": _f32(1, 8, 8), "sub": None}),
        "sub: not a .npy or .npz file",
    ),
    (
        "cnn",
        lambda t: _folder(t, {"a.npy": _f32(1, 8, 8), "b.npy": np.zeros((1, 8, 8))}),
        "b.npy: array 'input' has dtype float64 but the model expects float32",
    ),
    (
        "cnn",
        lambda t: _folder(t, {"a.npy": _f32(8, 8)}),
        "a.npy: array 'input' has shape [8, 8]; expected (samples, 1, 8, 8)",
    ),
    (
        "two",
        lambda t: _folder(
            t, {"0.npz": {"a": _f32(2, 4), "b": _f32(2, 4)}, "1.npz": {"a": _f32(5), "b": _f32(5)}}
        ),
        "1.npz: samples of input 'a' have shape [5] but",
    ),
    ("two", lambda t: _folder(t, {"0.npz": {"a": _f32(4)}}), "0.npz: no array for model input 'b'"),
    (
        "two",
        lambda t: _folder(t, {"0.npy": _f32(4)}),
        "0.npy: a .npy holds one array but the model has 2 inputs",
    ),
    (
        "cnn",
        lambda t: _folder(t, {"a.npy": b"\x93NUMPY not really"}),
        "a.npy: not a readable .npy array",
    ),
    (
        "two",
        lambda t: _json(
            t, [{"a": _f32(2, 4), "b": _f32(2, 4)}, {"a": _f32(2, 4), "b": np.zeros((2, 4))}]
        ),
        "feed 1: array 'b' has dtype float64",
    ),
    ("cnn", lambda t: str(t / "missing.npz"), "missing.npz: no such calibration file"),
    ("cnn", lambda t: str(t / "missing.py") + ":DS", "no such dataset file"),
    (
        "cnn",
        lambda t: "no_such_calib_module:DS",
        "no module 'no_such_calib_module' on the Python path",
    ),
    (
        "cnn",
        lambda t: _dataset(t, "DS = 1\n", "NOPE"),
        "ds.py defines no 'NOPE'; define NOPE = YourDataset",
    ),
    (
        "cnn",
        lambda t: _dataset(t, "DS = 42\n"),
        "a int is not a dataset: it needs __len__ and __getitem__",
    ),
    ("cnn", lambda t: _dataset(t, "class DS:\n    pass\n"), "DS is a class, not a dataset object"),
    ("cnn", lambda t: _dataset(t, "DS = []\n"), "the dataset is empty (len 0)"),
    ("cnn", lambda t: _dataset(t, "1 / 0\n"), "ds.py raised ZeroDivisionError: division by zero"),
    (
        "cnn",
        lambda t: _dataset(t, "import no_such_dependency_xyz\n"),
        "raised ModuleNotFoundError: No module named 'no_such_dependency_xyz'",
    ),
    (
        "cnn",
        lambda t: _dataset(
            t,
            "class D:\n    def __len__(self): return 9\n    def __getitem__(self, i):\n"
            "        if i == 3: raise ValueError('bad\\nimage 3')\n"
            "        return np.zeros((1, 8, 8), np.float32)\nDS = D()\n",
        ),
        "dataset[3] raised ValueError: bad image 3; fix the dataset",
    ),
    (
        "cnn",
        lambda t: _dataset(t, ITEM),
        "item 0 is a dict; return one sample as a list of tensors",
    ),
    (
        "cnn",
        lambda t: _dataset(t, "DS = [[np.zeros((4, 1, 8, 8), np.float32)]]\n"),
        "item 0: input 'input' has shape [4, 1, 8, 8], a batch of 4",
    ),
    ("cnn", lambda t: _dataset(t, "DS = [['text']]\n"), "input 'input' is a str, not an array"),
    (
        "cnn",
        lambda t: _dataset(t, "DS = [FakeTensor([0.5])]\n"),
        "input 'input': .numpy() gave a list, not a numpy array",
    ),
    (
        "cnn",
        lambda t: _dataset(
            t,
            "class Bad:\n    def numpy(self): raise RuntimeError('on GPU')\nDS = [Bad()]\n",
        ),
        "item 0: 'input'.numpy() raised RuntimeError: on GPU",
    ),
    (
        "two",
        lambda t: _dataset(t, "DS = [FakeTensor(np.zeros(4, np.float32))]\n"),
        "item 0 holds 1 tensors but the model has 2 inputs",
    ),
    (
        "cnn",
        lambda t: _dataset(t, "DS = [np.zeros((1, 8, 8), np.int64)]\n"),
        "has dtype int64 but the model expects float32",
    ),
]


def _json(tmp: Path, feeds: list[dict[str, np.ndarray]]) -> str:
    from polygraphy.json import save_json

    save_json(feeds, str(tmp / "c.json"))
    return str(tmp / "c.json")


@pytest.mark.parametrize(("model", "make", "needle"), REFUSALS, ids=[r[2][:40] for r in REFUSALS])
def test_bad_source_is_one_line(tmp_path: Path, cnn, model: str, make, needle: str) -> None:
    spec = make(tmp_path)
    with pytest.raises(UsageError) as exc:
        load_calib_data(spec, cnn if model == "cnn" else _two_input_model(), None)
    msg = str(exc.value)
    assert exc.value.exit_code == 2 and "\n" not in msg and needle in msg, msg


def test_folder_is_bounded(tmp_path: Path, cnn, monkeypatch) -> None:
    spec = _folder(tmp_path, {f"{i}.npy": _f32(1, 8, 8) for i in range(3)})
    assert load_calib_data(spec, cnn, None).count == 3
    monkeypatch.setenv("REPROBUILD_MAX_CALIB_FILES", "2")
    with pytest.raises(
        UsageError, match="more than 2 .npy/.npz files; check that this is the right"
    ):
        load_calib_data(spec, cnn, None)
    monkeypatch.delenv("REPROBUILD_MAX_CALIB_FILES")
    monkeypatch.setenv("REPROBUILD_MAX_INPUTS_BYTES", "500")  # one file is 384 bytes
    with pytest.raises(UsageError, match=r"folder: 768 bytes is over the 500-byte limit"):
        load_calib_data(spec, cnn, None)


def test_folder_files_are_never_unpickled(tmp_path: Path, cnn) -> None:
    from tests.precision.test_calibration import _pickled_npy

    trip = tmp_path / "tripwire"
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "0.npy").write_bytes(_pickled_npy(trip))
    with pytest.raises(UsageError, match="0.npy: not a readable .npy array"):
        load_calib_data(str(folder), cnn, None)
    js = tmp_path / "p.json"
    js.write_text(f'[{{"input": {{"array": "{base64.b64encode(_pickled_npy(trip)).decode()}"}}}}]')
    with pytest.raises(UsageError, match="'input' cannot be decoded"):
        load_calib_data(str(js), cnn, None)
    assert not trip.exists()


@pytest.mark.parametrize(
    ("make", "needle"),
    [
        (lambda t: _folder(t, {}), "no .npy or .npz files"),
        (
            lambda t: _dataset(t, "class D(list):\n    def __len__(self): 1 / 0\nDS = D()\n"),
            "len(dataset) raised ZeroDivisionError",
        ),
        (lambda t: _dataset(t, "DS = 1\n", "NOPE"), "defines no 'NOPE'"),
        (lambda t: "no_such_calib_module:DS", "no module 'no_such_calib_module'"),
    ],
)
def test_cli_refuses_bad_sources_touching_nothing(cli, tmp_path: Path, make, needle: str) -> None:
    spec = make(tmp_path)
    before = sorted(tmp_path.rglob("*"))
    r = _build(cli, tmp_path, spec)
    assert r.code == 2, r
    assert r.err.startswith("error: ") and r.err.count("\n") == 1 and needle in r.err, r.err
    assert sorted(tmp_path.rglob("*")) == before  # no lock, engine, cache or __pycache__
