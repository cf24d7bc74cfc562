"""Tactic hashes, numbers and ONNX layer lists as TensorRT prints them.

Shared by the log parser and the layer-information reader, which must read the same value
the same way: a tactic printed in hex by one TensorRT version and in signed decimal by
another has to compare equal.
"""

from __future__ import annotations

import math
import re

from reprobuild.errors import LogParseError

U64 = 1 << 64
_ONNX_SEP = re.compile("[\x1e\x1f]")
_ONNX_PREFIX = "[ONNX Layer: "


def tactic_to_int(text: object) -> int | None:
    """A tactic as the unsigned 64-bit integer TensorRT stores, or None if unreadable.

    TensorRT has printed the same 64-bit value three ways: unpadded hex (editable-cache
    tables), ``0x%016x`` (8.4+), and signed decimal (7.x/8.0, e.g. ``-3263369460438823196``).
    Normalising negatives to two's complement makes all three compare equal as integers.
    """
    if isinstance(text, str):  # first: the log parser's case, once per tactic it reads
        t = text.strip()
        try:
            value = int(t, 16) if t[:2] in ("0x", "0X") else int(t, 10)
        except ValueError:
            return None
    elif isinstance(text, int) and not isinstance(text, bool):
        value = text
    else:
        return None
    if value < 0:
        if value < -(1 << 63):
            return None
        value += U64
    if value >= U64:
        return None
    return value


def parse_tactic(text: str) -> int:
    """A tactic hash as an int: ``0x..`` hex (any padding) or signed decimal (7.x/8.0).

    Negative decimals are the signed print of the same unsigned 64-bit value, so they are
    returned in two's complement: ``parse_tactic("-1") == 0xFFFFFFFFFFFFFFFF``.
    """
    value = tactic_to_int(text)
    if value is None:
        raise LogParseError(
            f"{text!r} is not a tactic: write it as 0x<hex> or a 64-bit decimal integer"
        )
    return value


def tactic_token(tok: str) -> int | None:
    """Hot-path twin of ``tactic_to_int`` for tokens already cut out of a line."""
    try:
        value = int(tok, 16) if tok[:2] in ("0x", "0X") else int(tok, 10)
    except ValueError:
        return None
    if value < 0:
        value = value + U64 if value >= -(1 << 63) else -1
    return value if 0 <= value < U64 else None


def to_float(text: str | None) -> float | None:
    """A printed time (``0.5``, ``0.5,``), or None when absent or unreadable."""
    if not text:
        return None
    try:
        return float(text.rstrip(",;"))
    except ValueError:
        return None


def json_float(value: float | None) -> float | None:
    """JSON has no inf/nan: a log that printed one gets null instead of invalid JSON."""
    return value if value is not None and math.isfinite(value) else None


def split_onnx_layers(metadata: str | None) -> tuple[str, ...]:
    """ONNX layer names from a ``[ONNX Layer: a]\\x1e[ONNX Layer: b]`` metadata string.

    Split on the separator bytes first: ONNX node names may themselves contain ``]``.
    """
    if not metadata:
        return ()
    names: list[str] = []
    for part in _ONNX_SEP.split(metadata):
        part = part.strip()
        if not part:
            continue
        if part.startswith(_ONNX_PREFIX) and part.endswith("]"):
            part = part[len(_ONNX_PREFIX) : -1]
        names.append(part)
    return tuple(names)
