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

Behaviours (``make_module(behaviours=...)``): what a real TensorRT may plausibly do that
nothing public rules out. Each is named, so a test can run the whole workflow under it:

- ``hit-headers``: a key served from the cache still prints ``Autotuning op X(key: K)``,
  a one-row table and the selected-tactic line (only ``Writing ... to cache`` is missing).
- ``multi-key``: a Conv gets a second key for another format combination (NHWC: its own
  channels-last candidates and table, same op name) and runs the combination whose
  cached or measured time is lowest, so the times decide between a layer's keys (see
  ``_impl``'s docstring for where TensorRT is seen doing it); the network gets one
  reformat key that no log line names; the inspector shows a ``Reformat`` layer with its
  ``TacticValue``.
- ``keyless-cask``: Conv layers print the 10.x runner format (``Computing costs for``,
  ``Tactic Name: ... Tactic: 0x... Time:``, ``Chose Runner Type``) with no key at all.
- ``myelin-names``: Myelin engine layers rotate through one copy per profile
  (``fc1 [profile 0]_myl0_0``), sanitised names and fusions named after no op.
- ``strict-attach``: a cache loaded from bytes is refused by
  ``set_timing_cache(cache, ignore_mismatch=False)`` (a second GPU of the same SKU).
- ``inf-nan``: the slowest candidate times as NaN and every recorded entry holds an
  infinite time. The stand-in's ``update()`` refuses infinite times as it refuses negative
  ones: an assumption, the stricter case (NvInfer.h lists only negative and NaN times as
  invalid, so a real TensorRT may take ``inf``); reprobuild writes no infinite time.
- ``shuffled-keys``: ``queryKeys()`` returns the keys in a different order on every call.
- ``shared-kernel-names``: MatMul/Gemm candidates that differ only in pipeline stages share
  one kernel name under several tactic hashes (as in a real 10.16 log; see ``_impl``).
- ``cached-result-lines``: a key served from the cache prints trtexec's ``<layer> [..]
  got cached result: <Runner>, tactic 0x.., <t> ms`` line (10.16 trtexec; see ``_impl``).
- ``typed-io``: the inspector lists each layer's input and output tensors with the types
  of the ONNX graph (10.x ``Format/Datatype``, 11.x ``Format`` + ``Datatype``).
- ``varying-keys``: two recordings of the same model create different key sets (and
  times): a recording times a Conv's second format combination on alternate recordings, and
  a build from a cache follows the cache (see ``keysets``, which cites where TensorRT does it).
- ``replay-adds-combination``: a recording times only a Conv's first format combination, and
  a build from a cache that lacks the second's key times it too (a miss: with
  ``ERROR_ON_TIMING_CACHE_MISS`` the build fails); a build from a cache that holds both
  follows the cache (see ``keysets``).

- ``recording-bits``: an engine built from an empty cache (a recording) gives other output
  bits than an engine built from its serialized cache with the same tactics (a replay).
  Nothing public shows that they agree: NVIDIA's TensorRT-Model-Connect (public preview since
  11.4) compares replays with replays only, and the editable-cache sample
  (``samples/sampleEditableTimingCache``) compares tactics, never a recording's outputs.

- ``fixed-format``: with ``multi-key``, a Conv always runs its first format combination,
  whatever the cached times of its keys: the other answer to whether cached times choose
  between a layer's keys, which nothing public settles (the evidence for ``multi-key`` is
  indirect: ``IAlgorithm.getTimingMSec`` per format combination, and 10.16 trtexec rebuilds
  printing ``got cached result`` per combination).

- ``cask-edits-ignored`` / ``myelin-edits-ignored``: in a timing cache deserialized into a
  new builder config, a Conv (Cask) / MatMul-Gemm (Myelin) key whose tactic was changed with
  ``update()`` still runs the tactic the recording builder wrote there (the cache keeps the
  edit: only the engine inspector shows it). An edit in the builder's own cache object, never
  serialized, is honoured. Without them every edit is honoured (the default), as in NVIDIA's
  ``samples/sampleEditableTimingCache`` (README: "the cache is reused, so TensorRT doesn't do
  profiling. Rather, it uses the tactics recorded in the cache"), which shows it for one
  Myelin MatMul (``matMul1_myl0_0``, ``LayerType: gemm``) edited in the cache object of the
  build that wrote it, nothing else. Why the other answer is plausible: NvInfer.h's
  ``ITimingCache`` warns that rebuilding "using the same timing cache will always yield a
  correct engine but the selected tactics and formats may vary between generated engine
  instances, if weak typing is used" (a cached tactic is not a guarantee of the tactic run),
  and TensorRT-Model-Connect, NVIDIA's own replay flow, never edits a tactic
  (``update(key, query(key))``), so nothing public shows an edited Cask tactic, or an edit
  in a deserialized cache, honoured. ``doctor --probe`` asks it (question ``edits``).

Test knobs (``module._standin``): ``fail_create`` (constructors that raise ``TypeError``
"factory function returned nullptr", as the real bindings do), ``rekey_ops`` (a key that
changes every build: ``ERROR_ON_TIMING_CACHE_MISS`` really fails on it, and without the flag
it is a new key).

Always on: JIT-compiled Myelin kernels are kept with the timing cache object and reused
by later builds unless ``BuilderFlag.DISABLE_COMPILATION_CACHE`` is set. ``execute_async_v3``
reads and writes only stand-in device memory (``host_device``, which tests choose as the
backend's device); any other address fails the run with the error TensorRT logs for
``cudaErrorIllegalAddress`` and is never read, so a real CUDA runtime on the machine running
the tests cannot reach the stand-in.
"""

import types as _types

from tests.trt_standin import _impl

__all__ = ["BEHAVIOURS", "EDITS_IGNORED", "VARIANTS", "make_module"]

BEHAVIOURS = (
    "hit-headers",
    "multi-key",
    "keyless-cask",
    "myelin-names",
    "strict-attach",
    "inf-nan",
    "shuffled-keys",
    "shared-kernel-names",
    "cached-result-lines",
    "typed-io",
    "varying-keys",
    "replay-adds-combination",
    "recording-bits",
    "fixed-format",
    "cask-edits-ignored",
    "myelin-edits-ignored",
)
# Behaviours under which a pin of that layer kind is not honoured: the whole flow then ends
# in (true) drift, so tests that expect the flow to work leave them out.
EDITS_IGNORED = ("cask-edits-ignored", "myelin-edits-ignored")

# Version strings tests use; the conformance test checks each variant's names.
VARIANTS = ("10.7.0.23", "10.8.0.43", "10.13.3.9", "11.0.0.114", "11.4.0.106")


def make_module(
    version: str = "10.13.3.9",
    *,
    device: str = "NVIDIA A100-SXM4-80GB",
    compute_capability: tuple[int, int] = (8, 0),
    behaviours: tuple[str, ...] | frozenset[str] = (),
) -> _types.ModuleType:
    """A fresh stand-in ``tensorrt`` module for one TensorRT version and GPU."""
    unknown = set(behaviours) - set(BEHAVIOURS)
    if unknown:
        raise ValueError(f"unknown stand-in behaviours {sorted(unknown)}; known: {BEHAVIOURS}")
    module = _types.ModuleType("tensorrt", "Stand-in for the TensorRT Python bindings (tests).")
    module = _impl._build_module(module, version, device, compute_capability)
    module._standin.behaviours = set(behaviours)
    return module
