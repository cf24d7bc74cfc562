"""Running a built engine through TensorRT's own execution API.

``IExecutionContext`` with ``set_input_shape`` / ``set_tensor_address`` /
``execute_async_v3`` is the same on 10.x and 11.x; device memory comes from
:mod:`.device`, so a pip-only install (``libcudart`` under ``site-packages/nvidia``) runs
without Polygraphy or a system CUDA toolkit.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import ModuleType
from typing import Any

from reprobuild.errors import EngineError, UsageError


def run_engine(trt: ModuleType, trt_engine: Any, inputs: Mapping[str, Any], device: Any) -> dict:
    """One synchronous inference: inputs copied in, ``execute_async_v3``, outputs copied out.

    Every buffer and the stream are released even when a step fails.
    """
    import numpy as np

    trt_context = trt_engine.create_execution_context()
    names = [str(trt_engine.get_tensor_name(i)) for i in range(int(trt_engine.num_io_tensors))]
    is_input = {n: trt_engine.get_tensor_mode(n) == trt.TensorIOMode.INPUT for n in names}
    missing = sorted(n for n in names if is_input[n] and n not in inputs)
    if missing:
        raise UsageError(f"the engine needs inputs {missing}; pass them (--inputs inputs.npz)")
    buffers: list[int] = []
    outputs: dict[str, Any] = {}
    stream = device.stream_create()
    try:
        for name in names:
            dtype = np.dtype(trt.nptype(trt_engine.get_tensor_dtype(name)))
            if is_input[name]:
                array = np.ascontiguousarray(inputs[name], dtype=dtype)
                if not bool(trt_context.set_input_shape(name, tuple(array.shape))):
                    raise UsageError(
                        f"input {name!r} has shape {tuple(array.shape)}, which the engine's "
                        "optimization profile does not allow; check the input shapes"
                    )
                buffers.append(device.malloc(int(array.nbytes)))
                device.to_device(buffers[-1], array)
                trt_context.set_tensor_address(name, buffers[-1])
        for name in names:
            if not is_input[name]:
                dtype = np.dtype(trt.nptype(trt_engine.get_tensor_dtype(name)))
                shape = tuple(int(trt_dim) for trt_dim in trt_context.get_tensor_shape(name))
                outputs[name] = np.empty(shape, dtype=dtype)
                buffers.append(device.malloc(int(outputs[name].nbytes)))
                trt_context.set_tensor_address(name, buffers[-1])
        if not bool(trt_context.execute_async_v3(stream)):
            raise EngineError("TensorRT failed to run the engine (execute_async_v3 returned False)")
        device.stream_synchronize(stream)
        pointers = dict(zip([n for n in names if is_input[n]], buffers, strict=False))
        out_ptrs = buffers[len(pointers) :]
        for name, ptr in zip([n for n in names if not is_input[n]], out_ptrs, strict=True):
            device.to_host(outputs[name], ptr)
    finally:
        for ptr in buffers:
            device.free(ptr)
        device.stream_destroy(stream)
        del trt_context
    return outputs


def run_polygraphy(trt_engine: Any, inputs: Mapping[str, Any], why: str) -> dict[str, Any]:
    """Polygraphy's ``TrtRunner`` (it finds ``libcudart`` only on system paths)."""
    import numpy as np

    try:
        from polygraphy.backend.trt import TrtRunner
    except ImportError:
        from reprobuild.errors import BackendUnavailable

        raise BackendUnavailable(f"cannot run engines: {why}") from None
    feed = {str(k): np.ascontiguousarray(v) for k, v in inputs.items()}
    with TrtRunner(trt_engine) as runner:
        outputs = runner.infer(feed_dict=feed)
        return {str(k): np.array(v, copy=True) for k, v in outputs.items()}
