"""``doctor --probe``'s "are keys stable across processes" question, through a real process.

The probe runs ``python -m reprobuild.workflow.probe_keys MODEL`` and compares that
process's recorded keys with its own. Here the other process imports a ``tensorrt`` package
written to a temporary folder that installs the stand-in (and the host-memory device), so
the subprocess path runs exactly as on a GPU machine: once with the default stand-in (the
same keys) and once with ``varying-keys`` in the other process (other keys).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from reprobuild.workflow.probe import probe
from tests.conftest import EXAMPLES, ROOT, child_env
from tests.test_trt_variants import install_standin

_PACKAGE = '''"""A stand-in ``tensorrt`` for the probe's other process (tests only)."""
import sys

from reprobuild.backends.tensorrt import cuda_probe
from reprobuild.backends.tensorrt import device as device_mod
from tests.test_trt_variants import A100
from tests.trt_standin import make_module
from tests.trt_standin.host_device import host_device

module = make_module("10.13.3.9", behaviours={behaviours!r})
module.__file__ = __file__
cuda_probe.probe_cuda = lambda: A100
_device = host_device()
device_mod.find_device = lambda: (_device, _device.how)
sys.modules["tensorrt"] = module
'''


def _other_process_standin(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, behaviours: tuple[str, ...]
) -> Path:
    package = tmp_path / "site" / "tensorrt"
    package.mkdir(parents=True)
    init = package / "__init__.py"
    init.write_text(_PACKAGE.format(behaviours=behaviours))
    monkeypatch.setenv("PYTHONPATH", child_env([package.parent, ROOT])["PYTHONPATH"])
    return init


@pytest.mark.parametrize(
    ("other", "result", "detail", "observed"),
    [
        ((), "pass", "cnn: same keys", ["default"]),
        (("varying-keys",), "fail", "cnn: DIFFERENT keys", ["varying-keys"]),
    ],
)
def test_keys_across_processes_are_compared_in_a_real_subprocess(
    other: tuple[str, ...],
    result: str,
    detail: str,
    observed: list[str],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    trt = install_standin(monkeypatch)  # this process: the default stand-in
    trt.__file__ = str(_other_process_standin(tmp_path, monkeypatch, other))
    monkeypatch.chdir(tmp_path)
    report = probe(tmp_path / "p.tar.gz", models=(EXAMPLES / "cnn.onnx",))
    by_q = {a.question: a for a in report.answers}
    answer = by_q["stable-keys"]
    assert (answer.result, answer.detail, answer.observed) == (result, detail, observed)
    if result == "fail":
        assert "keep caches/ beside the lock" in answer.action
    else:
        assert answer.action == "reuses recording caches across runs (caches/)"


def test_another_recording_in_this_process_with_other_keys_is_an_answer(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """No other process (a stand-in cannot be reached from one), but the probe's plain
    build is a second recording: under ``varying-keys`` its keys differ, and that fails the
    question with the evidence."""
    install_standin(monkeypatch, ("varying-keys",))
    monkeypatch.chdir(tmp_path)
    report = probe(tmp_path / "p.tar.gz", models=(EXAMPLES / "cnn.onnx",))
    answer = {a.question: a for a in report.answers}["stable-keys"]
    assert answer.result == "fail" and answer.observed == ["varying-keys"]
    assert answer.detail == "cnn: another recording in this process made DIFFERENT keys"
    assert report.ok  # the cycle itself works from the recording cache
