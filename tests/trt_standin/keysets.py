"""``varying-keys``: two recordings of the same model create different sets of keys.

Which format combinations of a layer TensorRT times follows the choices it made before
(the formats the neighbouring layers settled on, a fusion taken or not), and those follow
measured times, which carry run-to-run noise. So a fresh recording can time a combination
another recording never timed, and miss one it did: the key sets differ, and so do the
times. Where TensorRT is seen doing this:

- NVIDIA's TensorRT-Model-Connect, "fix(bark): stabilize FP16 builds with verified timing
  cache" (https://github.com/NVIDIA/TensorRT-Model-Connect/pull/449): "Fresh Bark FP16 builds
  can select different TensorRT tactics on the same GB300 stack", and it rejects a build
  that changes the in-memory cache, "covering timing-cache misses that TensorRT 11.0 did not
  stop via ERROR_ON_TIMING_CACHE_MISS" (a pinned build that times a key the recording did
  not make); its follow-up (https://github.com/NVIDIA/TensorRT-Model-Connect/pull/451)
  keeps "New, removed, or changed tactic entries still fail closed";
- a verbose log times one layer once per ``Autotuning format combination`` (tests/fixtures/
  trt-logs/trt1016_cookbook_trtexec_verbose_excerpt.log), each combination its own key with
  the editable cache (see ``_impl``'s ``multi-key`` notes);
- "Deterministic Engine Building is not deterministic when using dynamic shapes in
  TensorRT 8.6.1" (https://github.com/NVIDIA/TensorRT/issues/3316).

The stand-in's rule, deterministic so a test can rely on it: the n-th recording (a build
whose cache starts empty) times a Conv's second (NHWC) combination when ``n + ordinal`` is
even (``ordinal``: the Conv's place among the network's Convs), so consecutive recordings
never agree. A build from a cache that already holds keys of the layer follows the cache
(it times the combinations whose keys are there), as a builder led by cached times would.
``module._standin.recordings`` counts recordings (a test may set it).

``replay-adds-combination`` is the case Model-Connect's pull request 449 names: a build from
a recorded cache times a key the recording did not make. The recording (an empty cache)
times only a Conv's first combination; a build from a cache that lacks the second's key
times it as well, once: from then on the cache holds both, and builds follow it.
"""

NHWC = "fmt:NHWC"


def timed_combos(tuner, index: int, node: dict, ordinal: int, recording: int) -> tuple:
    """The format combinations this build times for Conv ``node`` (see the module doc)."""
    present = [c for c in ("", NHWC) if tuner.key(index, node, c) in tuner.cache._entries]
    if present:
        return tuple(present)
    return ("", NHWC) if (recording + ordinal) % 2 == 0 else ("",)


def replay_combos(combos: tuple, recording: bool) -> tuple:
    """``replay-adds-combination``: a recording times ``combos`` (as the other behaviours
    decide); a build from a cache times both of a Conv's combinations (see the module
    doc)."""
    return combos if recording else ("", NHWC)
