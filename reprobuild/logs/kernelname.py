"""What a kernel's name says about its arithmetic: the precision it accumulates in.

TensorRT's engine inspector has no accumulation field: an INT8 convolution shows INT8
tensors and ``"Weights": {"Type": "Int8"}``, and only the kernel's name tells that the
products are summed in INT32. Two naming schemes carry it:

- TensorRT's xmma kernels name their types in three groups, ``<in><out>_<weights><acc>_
  <epilogue>``: ``..._implicit_gemm_interleaved_i8i8_i8i32_f32_...`` (INT8 in and out, INT32
  accumulator, FP32 scaling) and ``..._i8f32_i8i32_f32_...`` (the same with an FP32 output),
  both in the INT8 ResNet engine of NVIDIA/TensorRT's trt-engine-explorer examples
  (``examples/pytorch/resnet/A100/qat-residual-qgap``); ``f16f16_f16f32_f32`` and
  ``f16f16_f16f16_f16`` in ``tests/fixtures/trt-logs`` (FP16 with FP32 or FP16 sums).
- the reference backend's kernels end in ``<type>acc`` (``ref_conv_int8_i32acc_...``,
  ``..._f16_f16acc``); its FP32 kernels (``ref_..._f32``) sum in FP32 and say nothing more.

Any other name (cuDNN's ``ampere_h16816cudnn_...``, Myelin's ``__myl_...``, pooling and
copy kernels) gives None: the table prints ``-`` rather than guess.
"""

from __future__ import annotations

import re

__all__ = ["accumulation_of"]

_TYPES = {"i8": "INT8", "i32": "INT32", "f16": "FP16", "bf16": "BF16", "f32": "FP32"}
_T = r"(?:i8|f16|bf16|f32|tf32|e4m3)"
_XMMA = re.compile(rf"_{_T}{_T}_{_T}(i32|f16|bf16|f32)_{_T}(?:_|$)")
_REF_ACC = re.compile(r"^ref_.*_(i32|f16|bf16|f32)acc(?:_|$)")
_REF_FP32 = re.compile(r"^ref_(?!.*acc).*_f32$")


def accumulation_of(kernel: str | None) -> str | None:
    """``INT32``/``FP32``/``FP16``/``BF16`` when the kernel's name says it, else None."""
    if not kernel:
        return None
    m = _XMMA.search(kernel) or _REF_ACC.search(kernel)
    if m:
        return _TYPES[m[1]]
    return "FP32" if _REF_FP32.search(kernel) else None
