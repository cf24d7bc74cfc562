"""Shared test helpers: small locks built in code, and running the CLI as users do."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from reprobuild.backends.base import BuildSettings, Environment
from reprobuild.backends.reference.knob import TimingKnob
from reprobuild.lock.model import LayerEntry, Lock, LockCandidate, ModelInfo
from reprobuild.lock.yamlio import save_lock

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "reprobuild" / "examples"
FIXTURES = Path(__file__).resolve().parent / "fixtures"


INJECTED_SEED = -1
"""The seed of the costs that stand in for measured ones in unknobbed test builds."""


def pytest_configure(config: pytest.Config) -> None:
    # Hypothesis: the same examples on every run (no database, no random search that finds
    # a new case on one run in a hundred) and no deadline (a loaded machine is not a bug).
    from hypothesis import settings

    settings.register_profile("steady", derandomize=True, deadline=None, database=None)
    settings.load_profile("steady")


@pytest.fixture(autouse=True)
def _injected_reference_timings(request: pytest.FixtureRequest, monkeypatch) -> None:
    """In-process reference builds without a timing knob are timed by injected costs (seed
    ``INJECTED_SEED``), not by the clock, so no assertion depends on which kernel won a
    real race on a busy machine. Tests of the measured path itself are marked
    ``measured_timing`` and assert nothing about which candidate wins."""
    if request.node.get_closest_marker("measured_timing"):
        return
    original = TimingKnob.apply
    stand_in = TimingKnob("seed", seed=INJECTED_SEED)

    def apply(self: TimingKnob, key: str, names, costs) -> list[float]:
        return original(self if self.active else stand_in, key, names, costs)

    monkeypatch.setattr(TimingKnob, "apply", apply)


@pytest.fixture(autouse=True)
def _no_installed_tensorrt(request: pytest.FixtureRequest, monkeypatch) -> None:
    """In-process tests see no installed TensorRT (``import tensorrt`` fails, so ``auto``
    picks the reference backend), so each means the same where TensorRT and a GPU are
    present; tests of the TensorRT backend inject the stand-in, and tests marked
    ``tensorrt`` use the real one."""
    if not request.node.get_closest_marker("tensorrt"):
        monkeypatch.setitem(sys.modules, "tensorrt", None)


@pytest.fixture(autouse=True)
def _private_cache_home(monkeypatch, tmp_path_factory) -> None:
    """``$XDG_CACHE_HOME`` is a fresh folder per test (and its child processes): the probe's
    stored answers, which decide whether a TensorRT recording writes the tie rule's
    choices, never come from (or go to) the user's own ``~/.cache``."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path_factory.mktemp("xdg-cache")))


def trt_env(
    version: str | None = "10.13.3.9",
    gpu: str | None = "NVIDIA A100-SXM4-80GB",
    cc: str | None = "8.0",
    *,
    cuda_major: str | None = None,
    driver: str | None = None,
    runtime: str | None = None,
) -> Environment:
    """A TensorRT target as ``machine_environment`` makes one (identity: version, GPU,
    compute capability, CUDA major; advisory: driver, CUDA runtime)."""
    identity = {
        "tensorrt_version": version,
        "gpu": gpu,
        "compute_capability": cc,
        "cuda_major": cuda_major,
    }
    return Environment.make(
        "tensorrt", identity, {"driver_version": driver, "cuda_runtime": runtime}
    )


def sample_lock(n: int = 3, *, dup_name: bool = False) -> Lock:
    """A lock with ``n`` layers, each with three candidates; names repeat if ``dup_name``."""
    layers = []
    for i in range(n):
        cands = [LockCandidate(0x1000 + 16 * i + j, f"kern_{j}") for j in range(3)]
        name = "conv" if dup_name and i < 2 else f"layer{i}"
        layers.append(
            LayerEntry(
                key=f"0x{i:032x}",
                layer=name,
                tactic=cands[0].tactic,
                kernel=cands[0].kernel,
                pinned=False,
                candidates=cands,
            )
        )
    return Lock(
        model=ModelInfo(path="model.onnx", sha256="ab" * 32),
        environment=Environment.make("reference", {"blas_kernels": "Test"}, {"cpu": "test cpu"}),
        settings=BuildSettings(),
        layers=layers,
    )


@pytest.fixture
def lock_path(tmp_path: Path) -> Path:
    path = tmp_path / "tactics.lock"
    save_lock(sample_lock(), path)
    return path


def child_env(
    pythonpath: Sequence[str | Path] = (), drop: Sequence[str] = (), **values: str
) -> dict[str, str]:
    """The environment the suite was started in, for a child process: ``pythonpath`` goes in
    front of ``PYTHONPATH``, never instead of it (packages may come from there, e.g. a venv
    layered over another Python with wheels on ``PYTHONPATH``), ``drop`` names variables to
    leave out and ``values`` sets others."""
    env = {k: v for k, v in os.environ.items() if k not in drop}
    paths = [*map(str, pythonpath), *filter(None, env.get("PYTHONPATH", "").split(os.pathsep))]
    if paths:
        env["PYTHONPATH"] = os.pathsep.join(paths)
    return {**env, **values}


def run_cli(
    *args: str, cwd: Path | None = None, env: dict[str, str] | None = None, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    """Run ``python -m reprobuild`` in a subprocess, exactly as a user's shell would."""
    full_env = child_env(**(env or {}))
    return subprocess.run(
        [sys.executable, "-m", "reprobuild", *args],
        cwd=cwd,
        env=full_env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


class CliResult:
    def __init__(self, code: int, out: str, err: str) -> None:
        self.code, self.out, self.err = code, out, err

    def __repr__(self) -> str:
        return f"CliResult(code={self.code}, out={self.out[-2000:]!r}, err={self.err[-2000:]!r})"


@pytest.fixture
def cli(capsys):
    """Run the CLI in-process (fast) through the same ``main`` as the console script."""
    from reprobuild.cli.main import main

    def run(*args: str) -> CliResult:
        try:
            main(list(args))
            code = 0
        except SystemExit as exc:
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        captured = capsys.readouterr()
        return CliResult(code, captured.out, captured.err)

    return run
