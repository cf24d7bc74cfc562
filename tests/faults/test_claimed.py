"""Cases an earlier pass claimed fixed, checked here so they stay fixed: a ``.npz`` bomb is
refused from its headers before any array is decompressed, and a cache that is a link to
some other file never echoes that file's bytes. (``REPROBUILD_MAX_*=abc`` or superscript
digits: ``test_inputs.test_bad_cap_overrides_are_refused``; ``.lck`` files after failed
pins: ``test_writers.test_failed_pin_leaves_no_lck``.) A log named on the command line
still shows its first line when it is not a log: the user chose that file, and seeing its
start is how a wrong path is noticed.
"""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import numpy as np
import pytest

from .helpers import assert_clean, snapshot


def _declared_bomb(path: Path) -> None:
    """An archive whose one array's header declares 10^6 x 10^6 float64 (8 TB), with a
    few bytes of data: numpy allocates the declared shape before it reads."""
    from numpy.lib import format as npformat

    head = io.BytesIO()
    npformat.write_array_header_1_0(
        head, {"descr": "<f8", "fortran_order": False, "shape": (10**6, 10**6)}
    )
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("input.npy", npformat.MAGIC_PREFIX + b"\x01\x00" + head.getvalue()[8:]
                   + b"\0" * 64)  # fmt: skip


def _deflate_bomb(path: Path) -> None:
    """An honest archive that inflates about 1000-fold: 32 MiB of zeros in ~32 KB."""
    np.savez_compressed(path, input=np.zeros((8 << 20,), np.float32))


@pytest.mark.parametrize("maker", [_declared_bomb, _deflate_bomb], ids=["header", "deflate"])
@pytest.mark.parametrize("command", ["verify", "calibration"])
def test_npz_bomb_is_refused_before_decompression(
    proj: Path, cli, monkeypatch, maker, command: str
) -> None:
    import numpy.lib.format as npformat

    import reprobuild.limits as limits

    maker(proj / "bomb.npz")
    assert (proj / "bomb.npz").stat().st_size < 100_000
    monkeypatch.setattr(limits, "available_memory", lambda: 16 << 20)  # a build gets 8 MiB

    def read_array(*_a, **_k):
        raise AssertionError("an array was decompressed before its size was checked")

    monkeypatch.setattr(npformat, "read_array", read_array)
    before = snapshot(proj)
    if command == "verify":
        r = cli("verify", "--lock", "t.lock", "--inputs", "bomb.npz", "-n", "1")
    else:
        r = cli("build", "mlp.onnx", "--lock", "n.lock", "--precision", "int8", "--calibration",
                "bomb.npz", "--backend", "reference", "-q")  # fmt: skip
    assert r.code == 2, r
    line = r.err.splitlines()[-1]
    assert "bomb.npz" in line and "GiB, over the" in line, r
    assert_clean(r, proj, before)


def test_cache_linked_to_another_file_does_not_echo_it(proj: Path, cli) -> None:
    secret = "password=hunter2 " * 40  # longer than a cache's header: not "truncated"
    (proj / "secret.txt").write_text(secret)
    (cache,) = (proj / "caches").glob("*.cache")
    cache.unlink()
    cache.symlink_to(proj / "secret.txt")
    for args in (
        ("build", "mlp.onnx", "--lock", "t.lock", "--backend", "reference", "-q"),
        ("show", "--lock", "secret.txt"),
    ):
        r = cli(*args)
        assert "hunter2" not in r.out + r.err and "passwor" not in r.out + r.err, (args, r)
        assert "Traceback" not in r.err, r
    assert (proj / "secret.txt").read_text() == secret
    assert cache.is_file() and not cache.is_symlink()  # re-recorded as a cache of its own
