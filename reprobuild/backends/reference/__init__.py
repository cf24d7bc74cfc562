"""The ``reference`` backend: a CPU builder that really autotunes, with an editable timing cache.

It builds an "engine" from an ONNX model by timing several numerically different kernels for
every MatMul, Gemm and Conv (split-K, tree and FP16-accumulation variants, see
:mod:`.kernels`) and keeping the fastest, so near-equal kernels make the choice depend on
machine noise, as on a GPU. Every other op runs through ``onnx.reference`` (or an equivalent
vectorized numpy path, :mod:`.ops`). The timing cache (:mod:`.timingcache`) follows
TensorRT's editable-cache semantics, the build log follows TensorRT 10.8+'s verbose format
with a ``[REF]`` tag (:mod:`.builder`), and the engine file (:mod:`.engine`) holds the model,
every layer's tactic and the environment.

Test and demo knob, ``ReferenceBackend(timing=...)`` (the CLI's hidden ``--ref-timing``;
never part of keys or fingerprints, so caches from perturbed builds stay interchangeable):

- unset or empty: real measurements decide;
- ``reverse``: costs are reflected (``max + min - cost``), so the slowest candidate wins;
- ``seed:<int>``: each cost is multiplied by ``1000 ** rank``, ``rank`` being the
  candidate's place when the layer's candidates are sorted by
  ``sha256(seed, key, kernel name)``; the choice is then a deterministic function of
  (seed, layer key), and different seeds pick different tactics;
- ``prefer:<substring>``: costs of kernels whose name contains the substring are divided by
  1e6, so such a kernel wins wherever the layer has one (the fastest of them if several).

Perturbed costs are what the log table prints and what the cache records.
"""

from __future__ import annotations

from reprobuild.backends.reference.backend import ReferenceBackend, machine_environment
from reprobuild.backends.reference.timingcache import ReferenceTimingCache

__all__ = ["ReferenceBackend", "ReferenceTimingCache", "machine_environment"]
