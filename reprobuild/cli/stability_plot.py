"""The stability plot: one row per layer (timing-cache key), each candidate's cost across the
recordings as a bar from its fastest to its slowest recording, against the tie band.

Drawn with matplotlib, an optional extra (``pip install 'reprobuild[plot]'``): without it,
``--plot`` is refused with one line before any recording starts.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from reprobuild.errors import UsageError

_FORMATS = (".png", ".svg")


def check_plot_path(path: Path, model: Path) -> None:
    """Refuse, before any work, a plot file of another type, a missing matplotlib, a
    symlink (matplotlib writes through it, over whatever it points at) or the model."""
    if path.suffix.lower() not in _FORMATS:
        raise UsageError(f"--plot {path}: name a .png or .svg file")
    if importlib.util.find_spec("matplotlib") is None:
        raise UsageError(
            f"--plot {path}: matplotlib is not installed; pip install 'reprobuild[plot]' "
            "(or drop --plot)"
        )
    from reprobuild.transaction import check_distinct, check_output_path

    if path.is_symlink():
        raise UsageError(f"--plot {path}: is a symlink, which the plot would be written through; "
                         "give the path of a regular file")  # fmt: skip
    check_output_path(path, "plot")
    check_distinct([(path, "plot")], [(model, "model")])


def write_plot(report: Any, path: Path) -> None:
    """Candidates' cost relative to the key's median best (%), per recording spread, with
    the band shaded; the rule's choice in the first recording is drawn in colour."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    keys = [k for k in report.keys if k.best_ms and len(k.costs) > 1]
    height = max(2.5, 0.32 * len(keys) + 1.2)
    fig, ax = plt.subplots(figsize=(9, height))
    for row, k in enumerate(keys):
        y = len(keys) - 1 - row
        rel = 100.0 * (k.band_rel or 0.0)
        ax.barh(y, rel, left=0, height=0.8, color="#d9e8f5", edgecolor="none", zorder=1)
        for tactic, costs in k.costs.items():
            lo, hi = (100.0 * (min(costs) / k.best_ms - 1), 100.0 * (max(costs) / k.best_ms - 1))
            chosen = tactic == k.chosen[0]
            colour = "#c0392b" if chosen else "#555555"
            ax.plot([lo, hi], [y, y], color=colour, linewidth=3 if chosen else 1.5, zorder=2)
            ax.plot([lo], [y], marker="|", color=colour, zorder=3)
        if k.at_risk:
            ax.text(1.0, y, " at risk", transform=ax.get_yaxis_transform(), va="center",
                    fontsize=7, color="#c0392b")  # fmt: skip
    ax.set_yticks(range(len(keys)))
    ax.set_yticklabels([k.layer for k in reversed(keys)], fontsize=7)
    ax.set_xlim(-5, max(30.0, 100.0 * 2.5 * report.settings.tie_band))
    ax.set_xlabel("cost above the layer's best (%): bar = spread over the recordings")
    s = report.settings
    ax.set_title(
        f"{Path(report.model).name}: {report.records} recordings, tie band {s.tie_band:g} "
        f"(shaded), rule {s.tie_rule}; red = kept",
        fontsize=9,
    )
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path)
    plt.close(fig)
