"""The one copy of reprobuild's array-file decoders: ``.npy``, ``.npz`` and Polygraphy's
``--save-inputs`` JSON, read from bytes already size-checked, and never unpickled.

Polygraphy's own reader (``polygraphy.json.load_json``) is not used: it decodes whatever
type a file's ``polygraphy_class`` marker names, and for ``torch.Tensor`` that is
``torch.load`` (a restricted unpickler) whenever torch is installed. The reader here accepts
only base64 ``np.save`` arrays, loaded with ``allow_pickle=False``, and keeps ``polygraphy``
out of the core dependencies. Every decoding problem becomes one ``UsageError`` line naming
``where`` (the file, or the file inside a folder).
"""

from __future__ import annotations

import base64
import io
import json
import math
import zipfile

import numpy as np

from reprobuild.errors import UsageError
from reprobuild.limits import check_tensor_bytes


def decode_npz(where: str, data: bytes) -> dict[str, np.ndarray]:
    """The arrays of a ``numpy.savez`` archive, by name."""
    try:
        with np.load(io.BytesIO(data), allow_pickle=False) as npz:
            # A compressed archive can unpack to far more than its size: check first.
            unpacked = sum(info.file_size for info in npz.zip.infolist())
            check_tensor_bytes(f"{where}: the arrays", unpacked)
            check_tensor_bytes(f"{where}: the arrays", _declared_bytes(npz.zip))
            return {k: np.asarray(npz[k]) for k in npz.files}
    except UsageError:
        raise
    except Exception as err:  # noqa: BLE001 - any decoding problem is bad input
        raise UsageError(
            f"{where}: not a readable .npz archive ({one_line(err)}); save it with numpy.savez"
        ) from None


def _declared_bytes(archive: zipfile.ZipFile) -> int:
    """What the arrays' ``.npy`` headers say they hold, read before any array data is
    decompressed: a header may declare far more than the archive's sizes suggest, and
    numpy allocates the declared shape before it reads."""
    from numpy.lib import format as npformat

    total = 0
    for info in archive.infolist():
        if not info.filename.endswith(".npy"):
            continue
        with archive.open(info) as fh:
            version = npformat.read_magic(fh)
            if version == (1, 0):
                shape, _, dtype = npformat.read_array_header_1_0(fh)
            else:
                shape, _, dtype = npformat.read_array_header_2_0(fh)
        if any(d < 0 for d in shape):
            raise ValueError(f"{info.filename} declares a negative dimension")
        total += math.prod(shape) * dtype.itemsize
    return total


def decode_npy(where: str, data: bytes) -> np.ndarray:
    """The array of a ``numpy.save`` file."""
    try:
        loaded = np.load(io.BytesIO(data), allow_pickle=False)
        if not isinstance(loaded, np.ndarray):
            raise ValueError("it is an .npz archive")
        return loaded
    except Exception as err:  # noqa: BLE001 - any decoding problem is bad input
        raise UsageError(
            f"{where}: not a readable .npy array ({one_line(err)}); save it with numpy.save"
        ) from None


def decode_polygraphy_json(
    where: str, data: bytes, limit: int | None = None
) -> list[dict[str, np.ndarray]]:
    """Polygraphy's saved inputs: a list of feed dicts (or one dict) whose arrays are base64
    ``np.save`` bytes; the first ``limit`` feeds (all when None) are decoded."""
    try:
        doc = json.loads(data.decode("utf-8"))
    except RecursionError:
        raise UsageError(
            f"{where}: JSON nested too deeply to be saved inputs; pass Polygraphy saved inputs"
        ) from None
    except (UnicodeDecodeError, ValueError) as err:
        raise UsageError(
            f"{where}: not valid JSON ({one_line(err)}); pass Polygraphy saved inputs"
        ) from None
    docs = doc if isinstance(doc, list) else [doc]
    if not docs:
        raise UsageError(f"{where}: the input list is empty; save at least one feed")
    feeds = []
    for feed in docs[:limit]:
        if not isinstance(feed, dict):
            raise UsageError(
                f"{where}: expected a list of {{input name: array}} feeds (Polygraphy "
                "--save-inputs format)"
            )
        feeds.append({str(name): _decode_entry(where, name, v) for name, v in feed.items()})
    return feeds


def _decode_entry(where: str, name: object, value: object) -> np.ndarray:
    """One ``{"array": base64 np.save bytes, "polygraphy_class": "ndarray"}`` entry."""
    if not isinstance(value, dict) or not isinstance(value.get("array"), str):
        raise UsageError(
            f"{where}: input {name!r} is not a Polygraphy-encoded array; re-save the "
            "inputs with `polygraphy run --save-inputs`"
        )
    try:
        raw = base64.b64decode(value["array"].encode(), validate=True)
        loaded = np.load(io.BytesIO(raw), allow_pickle=False)
        if not isinstance(loaded, np.ndarray):  # older Polygraphy: an NPZ archive
            with loaded as npz:
                loaded = np.asarray(npz[npz.files[0]])
    except Exception as err:  # noqa: BLE001 - any decoding problem is bad input
        raise UsageError(
            f"{where}: input {name!r} cannot be decoded ({one_line(err)}); re-save the inputs"
        ) from None
    return loaded


def one_line(err: BaseException) -> str:
    """An exception's text on one line (some carry newlines)."""
    return " ".join(str(err).split()) or type(err).__name__
