"""Run on a machine with an NVIDIA GPU (no TensorRT needed): exercises the CUDA-side code
this branch changed, reprobuild/backends/tensorrt/device.py (CUDA errors as one
environment error) and execute.py's host-side pieces that touch device memory (packed
4-bit tensors, raw byte copies out of device memory).

    python scripts/gpu_check.py          # exit 0: every check passed

Prints one line per check.
"""

from __future__ import annotations

import sys

import ml_dtypes
import numpy as np

from reprobuild.backends.tensorrt import device as device_mod
from reprobuild.backends.tensorrt.execute import pack, unpack
from reprobuild.errors import BackendUnavailable


def main() -> int:
    device, how = device_mod.find_device()
    print(f"device memory: {how}")
    if device is None:
        return 1
    failures = 0
    stream = device.stream_create()
    for nbytes in (0, 1, 4096, 64 << 20):
        host = np.random.default_rng(nbytes).integers(0, 256, nbytes, np.uint8)
        ptr = device.malloc(nbytes)
        device.to_device(ptr, host)
        back = np.empty(nbytes, np.uint8)
        device.to_host(back, ptr)
        device.stream_synchronize(stream)
        device.free(ptr)
        ok = bool((back == host).all())
        failures += not ok
        print(f"round trip {nbytes} B: {'ok' if ok else 'DIFFERENT'}")
    values = np.arange(-8, 8, dtype=np.float32).astype(ml_dtypes.int4)
    packed = pack(values)
    ptr = device.malloc(packed.nbytes)
    device.to_device(ptr, packed)
    raw = np.empty(packed.nbytes, np.uint8)
    device.to_host(raw, ptr)
    device.free(ptr)
    ok = bool((unpack(raw, np.dtype(ml_dtypes.int4), values.shape) == values).all())
    failures += not ok
    print(f"packed INT4 through device memory: {'ok' if ok else 'DIFFERENT'}")
    try:  # 2**60 bytes cannot be allocated: must be BackendUnavailable, not RuntimeError
        device.malloc(1 << 60)
    except BackendUnavailable as err:
        print(f"impossible cudaMalloc -> exit {err.exit_code}: {err}")
    except Exception as err:  # noqa: BLE001 - that is the failure this script looks for
        failures += 1
        print(f"impossible cudaMalloc raised {type(err).__name__}: {err} (WRONG)")
    else:
        failures += 1
        print("impossible cudaMalloc succeeded (WRONG)")
    device.stream_destroy(stream)
    print("all checks passed" if not failures else f"{failures} checks FAILED")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
