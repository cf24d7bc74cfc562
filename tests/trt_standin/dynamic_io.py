"""Shape-tensor inputs and outputs whose shape depends on the data (always on).

What TensorRT documents, and the stand-in does:

- A shape tensor (an INT32/INT64 network input whose *values* are a shape, e.g. the second
  input of a Reshape) is an input for shape inference: ``ICudaEngine.is_shape_inference_io``
  is True for it, and its address must point to **host** memory ("the address of a shape
  tensor input must be in host memory", ``IExecutionContext::setTensorAddress`` in
  NVIDIA/TensorRT ``include/NvInferRuntime.h``; Python API docs of ``ICudaEngine.
  is_shape_inference_io``). The stand-in fails ``execute_async_v3`` when it is given a device
  buffer, and reads the values from the host address to shape the outputs.
- An output whose shape depends on the data (``NonZero``) reports ``-1`` in
  ``IExecutionContext.get_tensor_shape`` until the engine has run; the application gives an
  ``IOutputAllocator`` with ``set_output_allocator``, and TensorRT calls
  ``reallocate_output_async`` (``reallocate_output`` before 10.x, deprecated) for the memory
  and ``notify_shape`` with the real shape ("Called by TensorRT when the shape of the output
  tensor is known": https://docs.nvidia.com/deeplearning/tensorrt/latest/_static/c-api/
  classnvinfer1_1_1v__1__0_1_1_i_output_allocator.html; "Dynamically Shaped Output" in the
  developer guide). The stand-in finds such outputs by evaluating the model on two inputs
  (zeros and ones): a dimension that differs is data-dependent.
"""

import ctypes as _ctypes


class IOutputAllocator:
    """Base class of application output allocators (subclasses call ``__init__`` and define
    ``reallocate_output_async`` (10.x; ``reallocate_output`` before) and ``notify_shape``:
    the real 10.13 base class finds them as overrides and defines neither as an attribute)."""

    def __init__(self):
        self._standin_initialized = True

    def notify_shape(self, tensor_name, shape):
        raise NotImplementedError


def shape_inputs(model_path):
    """Network inputs used as the shape of a Reshape (shape tensors)."""
    import onnx

    graph = onnx.load(model_path).graph
    names = {v.name for v in graph.input}
    return sorted({n.input[1] for n in graph.node if n.op_type == "Reshape"} & names)


def shape_outputs(model_path):
    """Network outputs computed by a ``Shape`` node: shape tensors, whose address must be in
    host memory too (``is_shape_inference_io`` is "true if the tensor is required as input
    for shape calculations or is output from shape calculations": ``ICudaEngine``, Python API
    docs; ``IExecutionContext::setTensorAddress`` in ``include/NvInferRuntime.h``)."""
    import onnx

    graph = onnx.load(model_path).graph
    made = {o for n in graph.node if n.op_type == "Shape" for o in n.output}
    return sorted(made & {v.name for v in graph.output})


def read_host(address, shape, dtype):
    """The values at a host address (a shape tensor's)."""
    import numpy as np

    count = int(np.prod(shape, dtype=np.int64))
    raw = (_ctypes.c_char * (count * dtype.itemsize)).from_address(address)
    return np.frombuffer(bytes(raw), dtype).reshape(shape).copy()


def write_host(address, values):
    """Write ``values`` to a host address (a shape tensor output's, which TensorRT writes
    to host memory)."""
    _ctypes.memmove(address, values.ctypes.data, values.nbytes)


_OUTPUT_SHAPES = {}
"""Answers of :func:`output_shapes` by the model file's bytes and the zero-filled feeds."""


def output_shapes(evaluate, feeds_with, model_path):
    """Each output's shape, ``-1`` where it depends on the data: ``feeds_with(fill)`` gives
    the feeds with every ordinary input filled with ``fill`` (shape tensors as set). The
    answer depends only on the model and those feeds, so it is kept per process: each one
    costs two whole evaluations of the model, and a probe runs the same engine many times."""
    import hashlib
    import pathlib

    zeros = feeds_with(0)
    key = (
        hashlib.sha256(pathlib.Path(model_path).read_bytes()).hexdigest(),
        *sorted(
            (n, v.shape, v.dtype.str, hashlib.sha256(v.tobytes()).hexdigest())
            for n, v in zeros.items()
        ),
    )
    if key not in _OUTPUT_SHAPES:
        low = {k: v.shape for k, v in evaluate(zeros).items()}
        high = {k: v.shape for k, v in evaluate(feeds_with(1)).items()}
        _OUTPUT_SHAPES[key] = {
            k: tuple(a if a == b else -1 for a, b in zip(low[k], high[k], strict=True)) for k in low
        }
    return _OUTPUT_SHAPES[key]


def deliver(allocator, name, out, stream):
    """Hand one data-dependent output to the application's allocator, as TensorRT does."""
    from tests.trt_standin.host_device import buffer

    ptr = int(allocator.reallocate_output_async(name, 0, max(1, out.nbytes), 256, stream))
    raw = buffer(ptr, out.nbytes) if ptr else None
    if raw is None:  # no memory, or memory that is not the stand-in's device memory
        return False
    allocator.notify_shape(name, tuple(out.shape))
    raw[: out.nbytes] = out.reshape(-1).view("uint8")
    return True
