"""A stand-in ``tensorrt`` module, for testing the backend's control flow without a GPU.

It is never installed as ``tensorrt``: tests build a module object with :func:`make_module`
and inject it with ``monkeypatch.setitem(sys.modules, "tensorrt", module)``, so nothing
outside the test sees it.

Every public name of a module built here exists in the real bindings of the matching
version (10.x variants: 10.13.3.9, 11.x variants: 11.4.0.106); ``test_trt_conformance.py``
checks that, so the backend cannot pass its logic tests by using an API TensorRT lacks.
Differences between versions follow the real ones: 10.x has ``BuilderFlag.FP16`` (weak
typing), CUBLAS/CUDNN tactic sources and ``EXPLICIT_BATCH``; 11.x has none of them, ignores
``STRONGLY_TYPED`` and renames the inspector's ``Bindings``; 11.1+ has
``IBuilderConfig.build_route``; before 10.8 there is no ``EDITABLE_TIMING_CACHE``. Enum
integer values other than ``EDITABLE_TIMING_CACHE`` (27 -> 26) and ``STRONGLY_TYPED``
(1 -> 0) are illustrative only.

``module._standin`` (private) holds test knobs, e.g. ``rekey_ops`` to force cache misses.
"""

import types as _types

from tests.trt_standin import _impl

__all__ = ["VARIANTS", "make_module"]

# Version strings tests use; the conformance test checks each variant's names.
VARIANTS = ("10.7.0.23", "10.8.0.43", "10.13.3.9", "11.0.0.114", "11.4.0.106")


def make_module(
    version: str = "10.13.3.9",
    *,
    device: str = "NVIDIA A100-SXM4-80GB",
    compute_capability: tuple[int, int] = (8, 0),
) -> _types.ModuleType:
    """A fresh stand-in ``tensorrt`` module for one TensorRT version and GPU."""
    module = _types.ModuleType("tensorrt", "Stand-in for the TensorRT Python bindings (tests).")
    return _impl._build_module(module, version, device, compute_capability)
