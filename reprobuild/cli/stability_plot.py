"""The stability plot: one row per timing-cache key in network order, every key (those with
one candidate too), each candidate's cost above its key's best *in the same recording* as a
bar from its lowest to its highest over the recordings, against the tie band (measured the
same way, so a kept candidate inside the band draws inside the shading). The kept candidate
is red and named; a bar past the axis ends in an arrow (the row names the highest value);
the right margin says how many recordings ran the key (for a layer of several keys, the
others ran another) and whether it is at risk.

Drawn with matplotlib, an optional extra (``pip install 'reprobuild[plot]'``): without it,
``--plot`` is refused with one line before any recording starts.
"""

from __future__ import annotations

import importlib.util
import io
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


_KEPT, _OTHER, _BAND = "#c0392b", "#555555", "#d9e8f5"


def write_plot(report: Any, path: Path) -> None:
    """Draw ``report`` (a :class:`~reprobuild.workflow.stability.StabilityReport`)."""
    import matplotlib

    matplotlib.use("Agg")
    matplotlib.rcParams["svg.fonttype"] = "none"  # text as text: a third of the bytes
    import matplotlib.pyplot as plt

    keys = [k for k in report.keys if k.above_best]
    height = max(2.8, 0.32 * len(keys) + 1.9)
    fig, ax = plt.subplots(figsize=(9, height))
    right = max(30.0, 100.0 * 2.5 * report.settings.tie_band)
    for row, k in enumerate(keys):
        _draw_key(ax, len(keys) - 1 - row, k, right)
    ax.set_yticks(range(len(keys)))
    ax.set_yticklabels([_label(k) for k in reversed(keys)], fontsize=7)
    ax.set_ylim(-0.7, len(keys) - 0.3)
    ax.set_xlim(-5, right)
    ax.set_xlabel(
        "cost above the key's best in the same recording (%): bar = lowest to highest "
        "over the recordings"
    )
    s = report.settings
    ax.set_title(
        f"{Path(report.model).name}: {report.records} recordings, tie band {s.tie_band:g}, "
        f"rule {s.tie_rule}; {report.distinct_engines} distinct engine(s)",
        fontsize=9,
        pad=16,
    )
    _legend(ax)
    fig.tight_layout()
    drawn = io.BytesIO()
    fig.savefig(drawn, format=path.suffix.lower()[1:])
    plt.close(fig)
    from reprobuild.transaction import Outputs

    with Outputs() as out:  # whole or not at all, like every output; named on a late signal
        out.stage_bytes(path, drawn.getvalue(), "plot")
        out.commit()


def _label(k: Any) -> str:
    """The layer and the start of the key: a layer of several keys has one row each."""
    return f"{k.layer} {k.key[:8]}"


def _kept(k: Any) -> int | None:
    """The tactic most recordings kept."""
    known = [t for t in k.chosen if t is not None]
    return max(set(known), key=known.count) if known else None


def _draw_key(ax: Any, y: int, k: Any, right: float) -> None:
    ax.barh(y, 100.0 * (k.band_rel or 0.0), left=0, height=0.8, color=_BAND, zorder=1)
    kept = _kept(k)
    clipped = []
    for tactic, above in k.above_best.items():
        lo, hi = 100.0 * min(above), 100.0 * max(above)
        mine = tactic == kept
        colour = _KEPT if mine else _OTHER
        end = min(hi, right)
        ax.plot([lo, end], [y, y], color=colour, linewidth=3 if mine else 1.5, zorder=2)
        ax.plot([lo], [y], marker="|", color=colour, zorder=3)
        if hi > right:  # clipped: an arrow at the edge
            ax.plot([right], [y], marker=">", color=colour, markersize=4, zorder=3, clip_on=False)
            clipped.append(hi)
        if mine:
            ax.text(end, y - 0.15, f" {k.kernels.get(tactic) or hex(tactic)}", fontsize=5,
                    va="top", color=colour)  # fmt: skip
    if clipped:  # one label per row: the highest value past the axis
        ax.text(right, y + 0.3, f"up to {max(clipped):.0f}%", fontsize=5, ha="right")
    ran = [r for r in k.ran if r is not None]
    note = f" ran {sum(ran)}/{len(ran)}" + ("  at risk" if k.at_risk else "")
    ax.text(1.01, y, note, transform=ax.get_yaxis_transform(), va="center", fontsize=6,
            color=_KEPT if k.at_risk else "black")  # fmt: skip


def _legend(ax: Any) -> None:
    from matplotlib.lines import Line2D
    from matplotlib.patches import Patch

    handles = [
        Patch(color=_BAND, label="tie band"),
        Line2D([], [], color=_KEPT, linewidth=3, label="kept candidate (named)"),
        Line2D([], [], color=_OTHER, linewidth=1.5, label="other candidate"),
        Line2D([], [], color=_OTHER, marker=">", linestyle="", label="past the axis (max shown)"),
    ]
    ax.legend(handles=handles, fontsize=6, loc="lower center", bbox_to_anchor=(0.5, 1.0),
              ncol=4, frameon=False)  # fmt: skip
