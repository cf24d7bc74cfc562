"""Calibration sources beyond one file: a folder of ``.npy``/``.npz`` arrays, and a Python
dataset following torch2trt's ``int8_calib_dataset`` protocol.

Both end as ``calibdata``'s arrays (one per model input, samples along the first axis),
held to ``calibcheck``'s rules, so the same samples hash the same whatever form they came
in. In a folder, files are read in name order; an array whose rank is the model input's
rank minus one is one sample, an array of the input's rank a batch of samples. A dataset is
any object with ``__len__`` and ``__getitem__(i)`` returning one sample: a list/tuple of
tensors in model-input order (a bare tensor for a single-input model), each a numpy array
or an object with ``.numpy()`` (``.detach().cpu()`` first when it has them, as a torch
tensor needs), with or without a leading batch dimension of 1. torch is never imported
here: the user's code brings it.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.util
import os
import sys
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import numpy as np
import onnx

from reprobuild.errors import UsageError
from reprobuild.limits import check_count, check_size, check_tensor_bytes
from reprobuild.precision.analysis import real_inputs
from reprobuild.precision.calibcheck import (
    FORMATS,
    check_same_shape,
    check_samples,
    concat_parts,
    read_input_file,
)
from reprobuild.precision.safeload import decode_npy, decode_npz, one_line

T = TypeVar("T")
PROTOCOL = "torch2trt's int8_calib_dataset protocol: len(ds), ds[i] -> list of input tensors"


def is_dataset_spec(spec: str) -> bool:
    """``LEFT:NAME`` names a Python dataset when NAME is an identifier, LEFT ends with ``.py``
    or is a dotted module name, and no file or folder is called ``spec`` itself (an existing
    path with a colon in it stays a path). The last colon splits, so ``C:\\d\\ds.py:DS``
    works."""
    left, sep, name = spec.rpartition(":")
    if not sep or not name.isidentifier() or os.path.exists(spec):
        return False
    return left.endswith(".py") or all(part.isidentifier() for part in left.split("."))


def read_folder(folder: str, model: onnx.ModelProto, samples: int | None) -> dict[str, np.ndarray]:
    """The files' samples concatenated in name order; reading stops once ``samples`` are in."""
    inputs = real_inputs(model)
    ranks = {vi.name: len(vi.type.tensor_type.shape.dim) for vi in inputs}
    parts: list[tuple[str, dict[str, np.ndarray]]] = []
    count = disk = memory = 0
    for name in _array_files(folder):
        if samples is not None and count >= samples:
            break
        path = os.path.join(folder, name)
        data = read_input_file(path)
        disk += len(data)
        check_size(folder, disk, "inputs")
        arrays = {k: _one_sample_as_batch(v, ranks.get(k)) for k, v in _decode(path, data, inputs)}
        count += check_samples(path, arrays, model)
        if parts:
            check_same_shape(parts[0][0], parts[0][1], path, arrays)
        memory += sum(a.nbytes for a in arrays.values())
        check_tensor_bytes(f"{folder}: the samples", memory)
        parts.append((path, arrays))
    return concat_parts(folder, parts)


def _array_files(folder: str) -> list[str]:
    """The folder's ``.npy``/``.npz`` names, sorted; hidden files are skipped, anything else
    is refused (a stray file more likely means the wrong folder than one to ignore)."""
    names: list[str] = []
    try:
        with os.scandir(folder) as entries:
            for entry in entries:
                if entry.name.startswith("."):
                    continue
                if not entry.is_file() or not entry.name.lower().endswith((".npy", ".npz")):
                    raise UsageError(
                        f"{os.path.join(folder, entry.name)}: not a .npy or .npz file; keep "
                        "only calibration arrays in the calibration folder"
                    )
                names.append(entry.name)
                check_count(folder, len(names), "calib_files", ".npy/.npz files")
    except OSError as err:
        raise UsageError(f"{folder}: cannot list the calibration folder ({err.strerror})") from None
    if not names:
        raise UsageError(
            f"{folder}: no .npy or .npz files in the calibration folder; save samples there "
            "with numpy.save (single-input models) or numpy.savez (one array per input)"
        )
    return sorted(names)


def _decode(
    path: str, data: bytes, inputs: list[onnx.ValueInfoProto]
) -> Iterator[tuple[str, np.ndarray]]:
    """A folder file's arrays by input name: ``.npz`` by its names, ``.npy`` the only input."""
    if path.lower().endswith(".npz"):
        yield from decode_npz(path, data).items()
        return
    if len(inputs) != 1:
        raise UsageError(
            f"{path}: a .npy holds one array but the model has {len(inputs)} inputs "
            f"({', '.join(vi.name for vi in inputs)}); save .npz files with one array per input"
        )
    yield inputs[0].name, decode_npy(path, data)


def _one_sample_as_batch(arr: np.ndarray, rank: int | None) -> np.ndarray:
    """An array one rank short of the input is one sample: give it the batch axis."""
    return arr[np.newaxis] if rank and arr.ndim == rank - 1 else arr


def read_dataset(spec: str, model: onnx.ModelProto, samples: int | None) -> dict[str, np.ndarray]:
    """The first ``samples`` items (all when None) of the dataset ``spec`` names."""
    left, _, name = spec.rpartition(":")
    home = os.path.dirname(os.path.abspath(left)) if left.endswith(".py") else os.getcwd()
    with _user_code(home):
        dataset = _resolve(spec, left, name)
        total = _call(spec, "len(dataset)", lambda: len(dataset))
        n = total if samples is None else min(total, samples)
        if n <= 0:
            raise UsageError(f"{spec}: the dataset is empty (len {total}); give it samples")
        inputs = real_inputs(model)
        parts: list[tuple[str, dict[str, np.ndarray]]] = []
        for i in range(n):
            where = f"{spec}: item {i}"
            item = _call(spec, f"dataset[{i}]", lambda i=i: dataset[i])
            arrays = _sample(spec, where, item, inputs)
            check_samples(where, arrays, model)
            if parts:
                check_same_shape(parts[0][0], parts[0][1], where, arrays)
            else:  # every item has this shape: the whole set's size is known now
                check_tensor_bytes(
                    f"{spec}: the samples", n * sum(a.nbytes for a in arrays.values())
                )
            parts.append((where, arrays))
    return concat_parts(spec, parts)


@contextlib.contextmanager
def _user_code(home: str) -> Iterator[None]:
    """The user's code runs as ``python file.py`` / ``python -m`` would run it (its folder, or
    the current one, first on ``sys.path``), printing to stderr: stdout is for results. No
    ``__pycache__`` is written next to it: reading calibration data writes no file."""
    added = home not in sys.path
    if added:
        sys.path.insert(0, home)
    no_bytecode, sys.dont_write_bytecode = sys.dont_write_bytecode, True
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        sys.dont_write_bytecode = no_bytecode
        if added:
            with contextlib.suppress(ValueError):
                sys.path.remove(home)


def _call(spec: str, what: str, fn: Callable[[], T]) -> T:
    """Run the user's code; whatever it raises becomes one line naming the spec."""
    try:
        return fn()
    except (UsageError, KeyboardInterrupt):  # Ctrl-C, SIGTERM: the run stops (130, 143)
        raise
    except BaseException as err:  # noqa: BLE001 - any failure of user code, GeneratorExit too
        raise _user_error(spec, what, err) from None


def _user_error(spec: str, what: str, err: BaseException) -> UsageError:
    return UsageError(
        f"{spec}: {what} raised {type(err).__name__}: {one_line(err)}; fix the dataset ({PROTOCOL})"
    )


def _resolve(spec: str, left: str, name: str) -> Any:
    """Import the file or module and return its ``name``, checked against the protocol."""
    if left.endswith(".py"):
        if not os.path.isfile(left):
            raise UsageError(f"{spec}: no such dataset file {left!r}; {FORMATS}")
        module = _call(spec, f"importing {left}", lambda: _import_file(left))
    else:
        module = _import_module(spec, left)
    missing = object()
    dataset = _call(spec, f"reading {name}", lambda: getattr(module, name, missing))
    if dataset is missing:
        raise UsageError(
            f"{spec}: {left} defines no {name!r}; define {name} = YourDataset(...) there, or "
            "name another object"
        )
    if isinstance(dataset, type):
        raise UsageError(
            f"{spec}: {name} is a class, not a dataset object; name an instance of it "
            f"(e.g. DATASET = {name}(...))"
        )
    kind = type(dataset)
    if not (hasattr(kind, "__len__") and hasattr(kind, "__getitem__")):
        raise UsageError(
            f"{spec}: a {kind.__name__} is not a dataset: it needs __len__ and __getitem__ "
            f"({PROTOCOL})"
        )
    return dataset


def _import_module(spec: str, left: str) -> Any:
    """``importlib.import_module``, a missing module told apart from a failing one."""
    try:
        return importlib.import_module(left)
    except ModuleNotFoundError as err:
        if err.name is not None and (left + ".").startswith(err.name + "."):
            raise UsageError(
                f"{spec}: no file of that name and no module {left!r} on the Python path or "
                f"in the current directory; {FORMATS}"
            ) from None
        raise _user_error(spec, f"importing {left}", err) from None
    except KeyboardInterrupt:
        raise
    except BaseException as err:  # noqa: BLE001 - any failure of user code
        raise _user_error(spec, f"importing {left}", err) from None


def _import_file(path: str) -> Any:
    """Execute ``path`` as a module registered under a name of its own (dataclasses and
    pickling look the module up in ``sys.modules``); run afresh on every call."""
    absolute = os.path.abspath(path)
    modname = "_reprobuild_calib_" + hashlib.sha256(absolute.encode()).hexdigest()[:12]
    spec = importlib.util.spec_from_file_location(modname, absolute)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {path} as Python")
    module = importlib.util.module_from_spec(spec)
    sys.modules[modname] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        sys.modules.pop(modname, None)
        raise
    return module


def _sample(
    spec: str, where: str, item: Any, inputs: list[onnx.ValueInfoProto]
) -> dict[str, np.ndarray]:
    """One dataset item as a batch of one sample per input."""
    names = ", ".join(vi.name for vi in inputs)
    if isinstance(item, (list, tuple)):
        values = list(item)
    elif isinstance(item, np.ndarray) or hasattr(item, "numpy"):
        values = [item]
    else:
        raise UsageError(
            f"{where} is a {type(item).__name__}; return one sample as a list of tensors in "
            f"model-input order ({names})"
        )
    if len(values) != len(inputs):
        raise UsageError(
            f"{where} holds {len(values)} tensors but the model has {len(inputs)} inputs "
            f"({names}); return one per input, in that order"
        )
    arrays = {}
    for vi, value in zip(inputs, values, strict=True):
        arr = _to_numpy(spec, where, vi.name, value)
        rank = len(vi.type.tensor_type.shape.dim)
        if rank and arr.ndim == rank and arr.shape[0] != 1:
            raise UsageError(
                f"{where}: input {vi.name!r} has shape {list(arr.shape)}, a batch of "
                f"{arr.shape[0]}; return one sample per item (batch dimension 1 or none)"
            )
        arrays[vi.name] = _one_sample_as_batch(arr, rank)
    return arrays


def _to_numpy(spec: str, where: str, name: str, value: Any) -> np.ndarray:
    """A numpy array as is; a tensor through ``.detach().cpu().numpy()`` (what it has)."""
    if isinstance(value, np.ndarray):
        return value
    if hasattr(value, "numpy"):

        def convert() -> Any:
            v = value.detach() if hasattr(value, "detach") else value
            v = v.cpu() if hasattr(v, "cpu") else v
            return v.numpy()

        arr = _call(spec, f"{where.removeprefix(spec + ': ')}: {name!r}.numpy()", convert)
        if not isinstance(arr, np.ndarray):
            raise UsageError(
                f"{where}: input {name!r}: .numpy() gave a {type(arr).__name__}, not a numpy "
                "array; return numpy arrays or tensors"
            )
        return arr
    raise UsageError(
        f"{where}: input {name!r} is a {type(value).__name__}, not an array; return numpy "
        "arrays or tensors with .numpy()"
    )
