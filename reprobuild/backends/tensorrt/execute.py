"""Running a built engine through TensorRT's own execution API.

``IExecutionContext`` with ``set_input_shape`` / ``set_tensor_address`` /
``execute_async_v3`` is the same on 10.x and 11.x; device memory comes from
:mod:`.device`, so a pip-only install (``libcudart`` under ``site-packages/nvidia``) runs
without Polygraphy or a system CUDA toolkit.

What a plain ``trt.nptype`` loop misses, handled here:
- BF16, FP8, E8M0, INT4 and FP4 tensors: ``trt.nptype`` has no NumPy type for them;
  ``ml_dtypes`` has (INT4/FP4 travel packed two to a byte, low nibble first);
- shape tensors (``is_shape_inference_io``), inputs and outputs: TensorRT reads and writes
  them in host memory;
- outputs whose shape depends on the data (a ``-1`` after the inputs are set): an
  ``IOutputAllocator`` gets the memory when TensorRT knows the size;
- any failure while running is one error naming the engine step, never a traceback.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import ModuleType
from typing import Any

from reprobuild.errors import EngineError, ReprobuildError, UsageError

_PACKED = ("INT4", "FP4")  # two elements per byte


def np_dtype(trt: ModuleType, trt_dtype: Any) -> Any:
    """The NumPy dtype of a TensorRT ``DataType`` (``ml_dtypes`` for the narrow types)."""
    import ml_dtypes
    import numpy as np

    name = str(trt_dtype).rsplit(".", 1)[-1].upper()
    narrow = {
        "BF16": ml_dtypes.bfloat16,
        "FP8": ml_dtypes.float8_e4m3fn,
        "E8M0": getattr(ml_dtypes, "float8_e8m0fnu", None),
        "INT4": ml_dtypes.int4,
        "FP4": getattr(ml_dtypes, "float4_e2m1fn", None),
    }
    if name in narrow:
        if narrow[name] is None:
            raise UsageError(f"{name} tensors need a newer ml_dtypes: pip install -U ml_dtypes")
        return np.dtype(narrow[name])
    try:
        return np.dtype(trt.nptype(trt_dtype))
    except (TypeError, KeyError, ValueError) as err:
        raise UsageError(f"reprobuild cannot run engines with {name} tensors ({err})") from None


def pack(array: Any) -> Any:
    """INT4/FP4 elements packed two to a byte, low nibble first, as TensorRT holds them."""
    import numpy as np

    nibbles = array.reshape(-1).view(np.uint8) & 0x0F
    if nibbles.size % 2:
        nibbles = np.concatenate([nibbles, np.zeros(1, np.uint8)])
    return np.ascontiguousarray(nibbles[0::2] | (nibbles[1::2] << 4))


def unpack(packed: Any, dtype: Any, shape: tuple[int, ...]) -> Any:
    """The inverse of :func:`pack` (sign of INT4 restored through its dtype)."""
    import numpy as np

    count = int(np.prod(shape, dtype=np.int64))
    nibbles = np.empty(packed.size * 2, np.uint8)
    nibbles[0::2], nibbles[1::2] = packed & 0x0F, packed >> 4
    return nibbles[:count].view(dtype).reshape(shape).copy()


def _nbytes(dtype: Any, shape: tuple[int, ...], packed: bool) -> int:
    import numpy as np

    count = int(np.prod(shape, dtype=np.int64))
    return (count + 1) // 2 if packed else count * dtype.itemsize


def _trt_make_allocator(
    trt: ModuleType,
    device: Any,
    buffers: list[int],
    shapes: dict[str, tuple[int, ...]],
    pointers: dict[str, tuple[int, int]],
) -> Any:
    """An ``IOutputAllocator`` for outputs whose shape depends on the data; it fills
    ``shapes`` and ``pointers`` (plain dicts the caller reads after the run)."""

    class _Allocator(trt.IOutputAllocator):
        def __init__(self) -> None:
            trt.IOutputAllocator.__init__(self)  # pybind11: the base must be initialised

        def reallocate_output(self, tensor_name: str, memory: int, size: int, alignment: int):
            have = pointers.get(str(tensor_name))
            if have is not None and have[1] >= int(size):
                return have[0]
            ptr = device.malloc(int(size))
            buffers.append(ptr)
            pointers[str(tensor_name)] = (ptr, int(size))
            return ptr

        def reallocate_output_async(self, tensor_name, memory, size, alignment, stream):
            return self.reallocate_output(tensor_name, memory, size, alignment)

        def notify_shape(self, tensor_name: str, shape: Any) -> None:
            shapes[str(tensor_name)] = tuple(int(d) for d in shape)

    return _Allocator()


def run_engine(trt: ModuleType, trt_engine: Any, inputs: Mapping[str, Any], device: Any) -> dict:
    """One synchronous inference: inputs copied in, ``execute_async_v3``, outputs copied out.

    Every buffer and the stream are released even when a step fails; a failure that is not
    already a reprobuild error (a CUDA error raised by TensorRT's bindings) is an
    ``EngineError`` naming it.
    """
    try:
        return _run(trt, trt_engine, inputs, device)
    except ReprobuildError:
        raise
    except Exception as err:  # noqa: BLE001 - from TensorRT or CUDA: one line, not a crash
        raise EngineError(
            f"TensorRT failed to run the engine ({type(err).__name__}: {err}); check the GPU "
            "with `reprobuild doctor`, and rebuild the engine on this machine"
        ) from None


def _run(trt: ModuleType, trt_engine: Any, inputs: Mapping[str, Any], device: Any) -> dict:
    import numpy as np

    trt_context = trt_engine.create_execution_context()
    names = [str(trt_engine.get_tensor_name(i)) for i in range(int(trt_engine.num_io_tensors))]
    is_input = {n: trt_engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT for n in names}
    missing = sorted(n for n in names if is_input[n] and n not in inputs)
    if missing:
        raise UsageError(f"the engine needs inputs {missing}; pass them (--inputs inputs.npz)")
    trt_shape_io = getattr(trt_engine, "is_shape_inference_io", None)
    buffers: list[int] = []
    host: list[Any] = []  # shape-tensor inputs: TensorRT reads them from this memory
    host_out: dict[str, Any] = {}  # shape-tensor outputs: TensorRT writes them here
    outputs: dict[str, tuple[Any, tuple[int, ...], int | None]] = {}
    trt_allocator = None
    shapes: dict[str, tuple[int, ...]] = {}
    pointers: dict[str, tuple[int, int]] = {}
    stream = device.stream_create()
    try:
        for name in names:
            if not is_input[name]:
                continue
            dtype = np_dtype(trt, trt_engine.get_tensor_dtype(name))
            packed = dtype.name in ("int4", "float4_e2m1fn")
            array = np.ascontiguousarray(inputs[name], dtype=dtype)
            if not bool(trt_context.set_input_shape(name, tuple(array.shape))):
                raise UsageError(
                    f"input {name!r} has shape {tuple(array.shape)}, which the engine's "
                    "optimization profile does not allow; check the input shapes"
                )
            if trt_shape_io is not None and bool(trt_shape_io(name)):
                host.append(array)
                trt_context.set_tensor_address(name, int(array.ctypes.data))
                continue
            data = pack(array) if packed else array
            buffers.append(device.malloc(int(data.nbytes)))
            device.to_device(buffers[-1], data)
            trt_context.set_tensor_address(name, buffers[-1])
        for name in names:
            if is_input[name]:
                continue
            dtype = np_dtype(trt, trt_engine.get_tensor_dtype(name))
            shape = tuple(int(trt_dim) for trt_dim in trt_context.get_tensor_shape(name))
            if any(d < 0 for d in shape):  # known only once the engine has run
                if trt_allocator is None:
                    trt_allocator = _trt_make_allocator(trt, device, buffers, shapes, pointers)
                trt_context.set_output_allocator(name, trt_allocator)
                outputs[name] = (dtype, shape, None)
                continue
            if trt_shape_io is not None and bool(trt_shape_io(name)):
                host_out[name] = np.empty(shape, dtype)  # a shape tensor: host memory
                trt_context.set_tensor_address(name, int(host_out[name].ctypes.data))
                continue
            packed = dtype.name in ("int4", "float4_e2m1fn")
            buffers.append(device.malloc(_nbytes(dtype, shape, packed)))
            trt_context.set_tensor_address(name, buffers[-1])
            outputs[name] = (dtype, shape, buffers[-1])
        if not bool(trt_context.execute_async_v3(stream)):
            raise EngineError("TensorRT failed to run the engine (execute_async_v3 returned False)")
        device.stream_synchronize(stream)
        result = {name: array.copy() for name, array in host_out.items()}
        for name, (dtype, shape, ptr) in outputs.items():
            if ptr is None:
                shape = shapes[name]
                ptr = pointers[name][0] if name in pointers else 0
            packed = dtype.name in ("int4", "float4_e2m1fn")
            raw = np.empty(_nbytes(dtype, shape, packed), np.uint8)
            if raw.nbytes:
                device.to_host(raw, ptr)
            result[name] = (
                unpack(raw, dtype, shape) if packed else raw.view(dtype).reshape(shape).copy()
            )
    finally:
        for ptr in buffers:
            device.free(ptr)
        device.stream_destroy(stream)
        del trt_context, host, host_out
    return result


def run_polygraphy(trt_engine: Any, inputs: Mapping[str, Any], why: str) -> dict[str, Any]:
    """Polygraphy's ``TrtRunner`` (it finds ``libcudart`` only on system paths)."""
    import numpy as np

    from reprobuild.errors import BackendUnavailable

    try:
        from polygraphy.backend.trt import TrtRunner
    except Exception as err:  # noqa: BLE001 - ImportError, or a broken install failing inside
        raise BackendUnavailable(f"cannot run engines: {why} (Polygraphy: {err})") from None
    feed = {str(k): np.ascontiguousarray(v) for k, v in inputs.items()}
    try:
        with TrtRunner(trt_engine) as runner:
            outputs = runner.infer(feed_dict=feed)
            return {str(k): np.array(v, copy=True) for k, v in outputs.items()}
    except ReprobuildError:
        raise
    except Exception as err:  # noqa: BLE001 - Polygraphy reports CUDA failures many ways
        raise BackendUnavailable(
            f"cannot run engines: {why}; Polygraphy's TrtRunner failed too "
            f"({type(err).__name__}: {err})"
        ) from None
