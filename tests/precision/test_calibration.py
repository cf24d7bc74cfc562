"""Calibration inputs: seeded, .npz and Polygraphy JSON files, and their errors."""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path

import numpy as np
import pytest

from reprobuild.errors import UsageError
from reprobuild.precision.calibration import load_calibration

# ---------------------------------------------------------------------------- calibration


def test_seeded_calibration_is_reproducible(rules) -> None:
    model, _, _ = rules
    a, da = load_calibration(None, model, seed=4)
    b, _ = load_calibration(None, model, seed=4)
    c, dc = load_calibration(None, model, seed=5)
    assert da == "seeded:4" and dc == "seeded:5"
    assert a.keys() == {"x", "y"} and a["x"].shape == (2, 8) and a["x"].dtype == np.float32
    assert all(np.array_equal(a[k], b[k]) for k in a)
    assert not np.array_equal(a["x"], c["x"])


def test_calibration_files(tmp_path: Path, rules) -> None:
    import hashlib

    from polygraphy.json import save_json

    model, feeds, _ = rules
    npz = tmp_path / "inputs.npz"
    np.savez(npz, **feeds)
    got, desc = load_calibration(str(npz), model)
    assert desc == f"sha256:{hashlib.sha256(npz.read_bytes()).hexdigest()} (inputs.npz)"
    assert all(np.array_equal(got[k], feeds[k]) for k in feeds)

    other = {k: v * 2 for k, v in feeds.items()}
    js = tmp_path / "inputs.json"
    save_json([other, feeds], str(js))  # Polygraphy's own writer; the first feed is used
    got, desc = load_calibration(str(js), model)
    assert desc.startswith("sha256:") and desc.endswith("(inputs.json)")
    assert all(np.array_equal(got[k], other[k]) for k in feeds)


@pytest.mark.parametrize(
    ("arrays", "name", "match"),
    [
        ({"x": np.zeros((2, 8), np.float32)}, "a.npz", "no data for model input 'y'"),
        (
            {"x": np.zeros((2, 8), np.float32), "y": np.zeros((2, 64), np.float32), "q": 1},
            "a.npz",
            "'q' is not an input of the model",
        ),
        (
            {"x": np.zeros((2, 8)), "y": np.zeros((2, 64), np.float32)},
            "a.npz",
            "'x' has dtype float64 but the model expects float32",
        ),
        (
            {"x": np.zeros((3, 8), np.float32), "y": np.zeros((2, 64), np.float32)},
            "a.npz",
            r"'x' has shape \[3, 8\] but the model expects \[2, 8\]",
        ),
        ({}, "a.txt", "unknown calibration format"),
        (None, "missing.npz", "no such calibration file"),
    ],
)
def test_calibration_errors(tmp_path: Path, rules, arrays, name: str, match: str) -> None:
    model, _, _ = rules
    path = tmp_path / name
    if arrays is not None:
        if name.endswith(".npz"):
            np.savez(path, **arrays)
        else:
            path.write_text(json.dumps(arrays))
    with pytest.raises(UsageError, match=match) as exc:
        load_calibration(str(path), model)
    assert exc.value.exit_code == 2 and "\n" not in str(exc.value)


class _Tripwire:
    """Unpickling this writes a file: proof that a loader unpickled something."""

    def __init__(self, path: str) -> None:
        self.path = path

    def __reduce__(self):
        return (Path.write_text, (Path(self.path), "unpickled"))


def _pickled_npy(path: Path) -> bytes:
    buf = io.BytesIO()
    np.save(buf, np.array([_Tripwire(str(path))], dtype=object), allow_pickle=True)
    return buf.getvalue()


def test_calibration_files_are_never_unpickled(tmp_path: Path, rules) -> None:
    model, feeds, _ = rules
    trip = tmp_path / "tripwire"
    npz = tmp_path / "pickled.npz"
    np.savez(npz, x=np.array([_Tripwire(str(trip))], dtype=object), y=feeds["y"])
    with pytest.raises(UsageError, match="not a readable .npz archive"):
        load_calibration(str(npz), model)
    pickled = base64.b64encode(_pickled_npy(trip)).decode()
    js = tmp_path / "pickled.json"
    js.write_text(json.dumps([{"x": {"array": pickled, "polygraphy_class": "ndarray"}}]))
    with pytest.raises(UsageError, match="'x' cannot be decoded"):
        load_calibration(str(js), model)
    # Polygraphy's own reader would hand a torch.Tensor entry to torch.load
    torch_entry = {"tensor": pickled, "polygraphy_class": "Tensor"}
    js.write_text(json.dumps([{"x": torch_entry}]))
    with pytest.raises(UsageError, match="'x' is not a Polygraphy-encoded array"):
        load_calibration(str(js), model)
    assert not trip.exists()
