"""An output is never anything but a regular file: a device, FIFO or socket (or a link to
one), the model, an input lock or a file in the timing-cache folder is refused in one line
before any work, and the path is left as it was.

Why: outputs are staged and renamed over their target, so ``--report /dev/null`` run as
root would turn that device into a regular file for every later process.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from .helpers import assert_clean, snapshot

BUILD = ("build", "mlp.onnx", "--lock", "t.lock", "--backend", "reference", "-q")
VERIFY = ("verify", "--lock", "t.lock", "-n", "1", "-q")


def _refused(cli, proj: Path, args: tuple[str, ...], words: str) -> None:
    before = snapshot(proj)
    r = cli(*args)
    assert r.code == 2 and words in r.err, r
    assert len([ln for ln in r.err.splitlines() if not ln.startswith("[")]) == 1, r
    assert_clean(r, proj, before)


@pytest.mark.parametrize("option", ["--report", "--out", "--log"])
def test_build_output_linked_to_a_device_is_refused(proj: Path, cli, option: str) -> None:
    (proj / "null").symlink_to("/dev/null")
    _refused(cli, proj, (*BUILD, option, "null"), "character device (through a link)")
    assert (proj / "null").is_symlink()
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)


def test_build_report_on_a_device_node_is_refused(proj: Path, cli) -> None:
    if os.geteuid() != 0:
        pytest.skip("making a device node needs root")
    os.mknod(proj / "n", stat.S_IFCHR | 0o600, os.makedev(1, 3))
    _refused(cli, proj, (*BUILD, "--report", "n"), "character device")
    assert stat.S_ISCHR(os.lstat(proj / "n").st_mode)


def test_verify_report_on_a_fifo_is_refused(proj: Path, cli) -> None:
    os.mkfifo(proj / "fifo")
    _refused(cli, proj, (*VERIFY, "--report", "fifo"), "it is a FIFO")
    assert stat.S_ISFIFO(os.lstat(proj / "fifo").st_mode)


def test_build_report_in_the_cache_folder_is_refused(proj: Path, cli) -> None:
    _refused(cli, proj, (*BUILD, "--report", "caches/r.json"), "timing-cache folder")


def test_verify_report_in_the_cache_folder_is_refused(proj: Path, cli) -> None:
    _refused(cli, proj, (*VERIFY, "--report", "caches/r.json"), "timing-cache folder")


@pytest.mark.parametrize(
    ("out", "words"),
    [("mlp.onnx", "would overwrite the model"), ("caches/m.lock", "timing-cache folder")],
)
def test_merge_out_over_the_model_or_cache_is_refused(proj: Path, cli, out, words) -> None:
    _refused(cli, proj, ("merge", "t.lock", "--out", out), words)


def test_merge_out_linked_to_a_device_is_refused(proj: Path, cli) -> None:
    (proj / "null").symlink_to("/dev/null")
    _refused(cli, proj, ("merge", "t.lock", "--out", "null"), "not a regular file")


def test_merge_out_may_be_its_input(proj: Path, cli) -> None:
    r = cli("merge", "t.lock", "--out", "t.lock")
    assert r.code == 0, r


@pytest.mark.parametrize("target", ["mlp.onnx", "t.lock"])
def test_stability_plot_through_a_link_is_refused(proj: Path, cli, target: str) -> None:
    pytest.importorskip("matplotlib")
    (proj / "p.svg").symlink_to(target)
    _refused(cli, proj, ("stability", "mlp.onnx", "--plot", "p.svg", "-q"), "is a symlink")


def test_stability_plot_over_the_model_is_refused(proj: Path, cli) -> None:
    pytest.importorskip("matplotlib")
    os.rename(proj / "mlp.onnx", proj / "m.svg")
    _refused(cli, proj, ("stability", "m.svg", "--plot", "m.svg", "-q"), "would overwrite")
