"""Where a build reads and writes, settled before any work.

An hour-long build must not fail at its last step on a typo, and no output may replace an
input (``--report tactics.lock``, ``--out`` the model): every output path is checked for
writability and compared with every input and every other output first.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from reprobuild.transaction import check_distinct, check_output_path
from reprobuild.workflow.context import check_model_file


def build_paths(
    model: str | os.PathLike[str],
    lock: str | os.PathLike[str],
    out: str | os.PathLike[str] | None,
    report: str | os.PathLike[str] | None,
    cache_dir: str | os.PathLike[str],
    frozen: bool,
    precision: Any,
    held_out: str | os.PathLike[str] | None,
    log: str | os.PathLike[str] | None = None,
) -> tuple[Path, Path, Path, Path, Path | None]:
    """(model, lock, engine, report, builder log) paths, each output checked;
    ``UsageError`` otherwise."""
    from reprobuild.workflow.layers import layers_path

    model_path = check_model_file(model)
    lock_path = Path(lock)
    engine_path = Path(out) if out is not None else Path(f"{model_path.stem}.engine")
    report_path = Path(report) if report is not None else Path(f"{engine_path}.report.json")
    if not frozen:
        check_output_path(lock_path, "lock")
    check_output_path(engine_path, "engine")
    check_output_path(layers_path(engine_path), "engine layer information")
    check_output_path(report_path, "build report")
    check_output_path(Path(cache_dir) / "x", "recording timing cache")
    log_path = None if log is None else check_output_path(log, "builder log")
    calibration = getattr(precision, "calibration", None)
    check_distinct(
        [
            (None if frozen else lock_path, "lock"),
            (engine_path, "engine"),
            (layers_path(engine_path), "engine layer information"),
            (report_path, "build report"),
            (log_path, "builder log"),
        ],
        [
            (model_path, "model"),
            (lock_path if frozen else None, "lock"),
            (calibration, "calibration data"),
            (held_out, "held-apart samples"),
        ],
        cache_dir,
    )
    return model_path, lock_path, engine_path, report_path, log_path
