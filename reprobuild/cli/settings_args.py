"""``build``'s builder-setting options (trtexec-style sizes and shapes, the tie band, kernel
rules) turned into one ``BuildSettings``, or None where none is given (the lock's are used).
Kept apart from ``build_cmds`` so each module keeps one job, as ``precision_args`` does."""

from __future__ import annotations

from collections.abc import Sequence

from reprobuild.errors import UsageError
from reprobuild.types import DEFAULT_TIE_BAND, MAX_TIE_RECORDS, BuildSettings


def _size(text: str) -> int:
    """trtexec-style sizes: plain numbers are MiB; K/M/G suffixes allowed."""
    units = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30}
    t = text.strip().upper().removesuffix("IB").removesuffix("B")
    mult = units.get(t[-1:], None)
    num = t[:-1] if mult else t
    try:
        value = float(num)
    except ValueError:
        raise UsageError(
            f"--workspace {text!r}: expected a size like 1024 (MiB), 512M or 2G"
        ) from None
    if value < 0:
        raise UsageError(f"--workspace {text!r}: must not be negative")
    return int(value * (mult or (1 << 20)))


def _shapes(option: str, specs: list[str]) -> dict[str, tuple[int, ...]]:
    """``name:1x3x224x224`` (several separated by commas or repeated), as trtexec takes them."""
    out: dict[str, tuple[int, ...]] = {}
    for spec in specs:
        for part in filter(None, spec.split(",")):
            name, sep, dims = part.rpartition(":")
            try:
                shape = tuple(int(d) for d in dims.lower().split("x"))
            except ValueError:
                shape = ()
            if not sep or not name or not shape or min(shape) < 0:
                raise UsageError(f"{option} {part!r}: expected NAME:DxDxD, e.g. input:1x3x224x224")
            name = name.strip("'\"")
            if out.get(name, shape) != shape:  # trtexec keeps the last; say which one counts
                raise UsageError(
                    f"{option} gives input {name!r} twice ({_dims(out[name])} and "
                    f"{_dims(shape)}); give each input once"
                )
            out[name] = shape
    return out


def _dims(shape: tuple[int, ...]) -> str:
    return "x".join(map(str, shape))


def build_settings(
    opt_level: int | None,
    workspace: str | None,
    shapes: list[str],
    min_shapes: list[str],
    opt_shapes: list[str],
    max_shapes: list[str],
    tactic_sources: str | None,
    no_tf32: bool,
    max_tactics: int | None,
    avg_timing: int | None,
    tie_band: float | None = None,
    records: int | None = None,
    deny: Sequence[str] = (),
    distributive_independence: bool = False,
) -> BuildSettings | None:
    from reprobuild.lock.rules import parse_option

    given = [opt_level, workspace, tactic_sources, max_tactics, avg_timing, tie_band, records]
    if (
        all(v is None for v in given)
        and not (shapes or min_shapes or opt_shapes or max_shapes or no_tf32 or deny)
        and not distributive_independence
    ):
        return None  # use the lock's settings (or the defaults when recording)
    if opt_level is not None and not 0 <= opt_level <= 5:
        raise UsageError(f"--opt-level {opt_level}: must be 0 to 5 (TensorRT's range; default 3)")
    if tie_band is not None and not 0.0 <= tie_band <= 1.0:
        raise UsageError(
            f"--tie-band {tie_band}: must be a fraction from 0 to 1 (default {DEFAULT_TIE_BAND:g})"
        )
    if records is not None and not 1 <= records <= MAX_TIE_RECORDS:
        raise UsageError(f"--records {records}: must be 1 to {MAX_TIE_RECORDS} (default 1)")
    static = _shapes("--shapes", shapes)
    mins, opts, maxs = (
        _shapes(o, v)
        for o, v in (
            ("--min-shapes", min_shapes),
            ("--opt-shapes", opt_shapes),
            ("--max-shapes", max_shapes),
        )
    )
    names = set(static) | set(mins) | set(opts) | set(maxs)
    profiles = []
    for name in sorted(names):
        if name in static:
            if name in mins or name in opts or name in maxs:
                raise UsageError(
                    f"input {name!r}: --shapes fixes its shape and --min-shapes/--opt-shapes/"
                    "--max-shapes give it a profile; use one or the other"
                )
            profiles.append((name, static[name], static[name], static[name]))
            continue
        if not (name in mins and name in opts and name in maxs):
            raise UsageError(
                f"input {name!r}: give all of --min-shapes, --opt-shapes and --max-shapes"
            )
        profiles.append((name, mins[name], opts[name], maxs[name]))
    sources = None
    if tactic_sources is not None:
        sources = tuple(sorted(s.strip().upper() for s in tactic_sources.split(",") if s.strip()))
    return BuildSettings(
        optimization_level=3 if opt_level is None else opt_level,
        workspace=None if workspace is None else _size(workspace),
        tactic_sources=sources,
        tf32=not no_tf32,
        max_num_tactics=max_tactics,
        avg_timing_iterations=avg_timing,
        input_shapes=tuple(profiles),
        tie_band=DEFAULT_TIE_BAND if tie_band is None else tie_band,
        tie_records=1 if records is None else records,
        deny=tuple(sorted({parse_option(d) for d in deny})),
        distributive_independence=distributive_independence,
    )
