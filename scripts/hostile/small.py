"""The smaller cases: a dangling graph output, a 0-sized input, read-only and symlinked
locks, hand-edited INT8 scales, numeric overflow, ``.npz`` bombs, a cache linked to another
file, bad cap overrides."""

from __future__ import annotations

import os
import re
from collections.abc import Callable
from pathlib import Path

from hostile.core import BUILD, PIN, Probe, Setup, cache


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
    linked = cache(root)
    linked.unlink()
    linked.symlink_to(root / "secret.txt")


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


def probes() -> list[Probe]:
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
