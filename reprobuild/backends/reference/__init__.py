"""The ``reference`` backend: a CPU builder that really autotunes, with an editable timing cache.

It builds an "engine" from an ONNX model by timing several numerically different kernels for
every MatMul, Gemm and Conv (split-K, tree and FP16-accumulation variants, see
:mod:`.kernels`; a float Conv has one timing-cache key per format combination,
:mod:`.formats`) and keeping the fastest, so near-equal kernels make the choice depend on
machine noise, as on a GPU. Every other op runs through ``onnx.reference`` (or an equivalent
vectorized numpy path, :mod:`.ops`). The timing cache (:mod:`.timingcache`) follows
TensorRT's editable-cache semantics, the build log follows TensorRT 10.8+'s verbose format
with a ``[REF]`` tag (:mod:`.builder`), and the engine file (:mod:`.engine`) holds the model,
every layer's tactic and the environment.

Test and demo knob, ``ReferenceBackend(timing=...)`` (the CLI's hidden ``--ref-timing``;
never part of keys or fingerprints, so caches from knobbed builds stay interchangeable). An
active knob replaces the measured costs by injected ones that depend only on the layer's
key and the kernel names, so the choice never depends on machine load (:mod:`.knob`):

- unset or empty: real measurements decide;
- ``seed:<int>``: each candidate costs ``f * 1000 ** rank``, ``rank`` being its place when
  the key's candidates are sorted by ``sha256(seed, key, kernel name)`` and ``f`` a factor
  in [1, 2) drawn from ``sha256(key)`` alone, which decides between a layer's keys (one per
  format combination, :mod:`.formats`) the same way under every knob; different seeds pick
  different tactics;
- ``reverse``: seed 0's order reversed;
- ``prefer:<substring>``: seed 0's order with the kernels whose name contains the
  substring moved to the front (and the others one rank further back), so such a kernel
  wins wherever the layer has one, whichever key it belongs to.

Injected costs are what the log table prints and what the cache records.
"""

from __future__ import annotations

from reprobuild.backends.reference.backend import ReferenceBackend, machine_environment
from reprobuild.backends.reference.timingcache import ReferenceTimingCache

__all__ = ["ReferenceBackend", "ReferenceTimingCache", "machine_environment"]
