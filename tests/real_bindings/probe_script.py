"""Run in a subprocess with the real bindings on ``PYTHONPATH`` and the stub libraries on
``LD_LIBRARY_PATH``; prints one JSON object of what the real pybind11 layer did. Kept out
of the test process: the bindings load once per process and the two versions share the
import name ``tensorrt_bindings``."""

from __future__ import annotations

import json
import sys


def main() -> None:
    import tensorrt_bindings as trt

    sys.modules["tensorrt"] = trt  # as a real install's ``tensorrt`` package does
    from reprobuild.backends.tensorrt.cache import TrtTimingCache
    from reprobuild.backends.tensorrt.execute import np_dtype
    from reprobuild.backends.tensorrt.install import _version, trt_create
    from reprobuild.backends.tensorrt.logger import LogRouter, trt_make_logger
    from reprobuild.errors import BackendUnavailable

    out: dict = {"version": _version(trt)}
    key = trt.TimingCacheKey.parse("0x" + "AB" * 16)
    out["key_str"] = str(key)
    try:
        trt.TimingCacheKey.parse("0x12")
        out["short_key"] = "accepted"
    except Exception as err:  # noqa: BLE001 - recording what the real one raises
        out["short_key"] = type(err).__name__
    value = trt.TimingCacheValue(0x665DED9ABBF88, 0.011264)
    out["value"] = [int(value.tacticHash), float(value.timingMSec)]
    try:
        trt.TimingCacheValue(tacticHash=1, timingMSec=1.0)
        out["value_keywords"] = "accepted"
    except TypeError:
        out["value_keywords"] = "TypeError"
    flags = trt.BuilderFlag
    out["flags"] = {
        name: int(getattr(flags, name))
        for name in (
            "EDITABLE_TIMING_CACHE",
            "ERROR_ON_TIMING_CACHE_MISS",
            "FP16",
            "DISTRIBUTIVE_INDEPENDENCE",
        )  # fmt: skip
        if hasattr(flags, name)
    }
    out["strongly_typed"] = int(trt.NetworkDefinitionCreationFlag.STRONGLY_TYPED)
    out["datatypes"] = {
        str(m).rsplit(".", 1)[-1]: np_dtype(trt, m).name
        for m in (getattr(trt.DataType, n) for n in ("FLOAT", "HALF", "BF16", "FP8", "INT4"))
    }
    router = LogRouter()
    lines: list[str] = []
    router.start(lines.append)
    logger = trt_make_logger(trt, router)
    logger.log(trt.ILogger.Severity.ERROR, "stub error")
    logger.log(trt.ILogger.Severity.VERBOSE, "stub verbose")
    router.stop()
    out["logger"] = {"lines": lines, "errors": router.errors_since(0)}
    out["create"] = {}
    for cls, what in ((trt.Builder, "a builder"), (trt.Runtime, "a runtime")):
        try:
            cls(logger)
            raw = "created"
        except Exception as err:  # noqa: BLE001 - recording what the real one raises
            raw = f"{type(err).__name__}: {err}"
        try:
            trt_create(cls, what, logger)
            ours = "created"
        except BackendUnavailable as err:
            ours = f"exit {err.exit_code}: {err}"
        out["create"][what] = {"raw": raw, "reprobuild": ours}
    out["cache_wrapper_key"] = TrtTimingCache(trt, None, None, None)._trt_key("0x" + "CD" * 16)
    out["cache_wrapper_key"] = str(out["cache_wrapper_key"])
    print(json.dumps(out))


if __name__ == "__main__":
    main()
