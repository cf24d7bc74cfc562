"""Empty stand-ins for TensorRT's shared libraries, compiled at test time (never committed).

The real ``tensorrt_bindings/tensorrt.so`` of the pip bindings wheels links against
``libnvinfer.so.N``, ``libnvonnxparser.so.N`` and ``libnvinfer_plugin.so.N`` and looks up
these factory symbols (``nm -D --undefined-only tensorrt.so`` on 10.13.3.9 and 11.4.0.106).
Every factory returns null, so the pybind11 layer runs as on a broken install: names,
enums, keys and values work; ``Builder``/``Runtime`` raise ``TypeError``.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

SOURCE = """
#include <stddef.h>
void* createInferBuilder_INTERNAL(void* logger, int version) { return NULL; }
void* createInferRefitter_INTERNAL(void* engine, void* logger, int version) { return NULL; }
void* createInferRuntime_INTERNAL(void* logger, int version) { return NULL; }
void* getBuilderPluginRegistry(int capability) { return NULL; }
void* getPluginRegistry(void) { return NULL; }
int getInferLibVersion(void) { return 0; }
void* createNvOnnxParser_INTERNAL(void* network, void* logger, int version) { return NULL; }
void* createNvOnnxParserRefitter_INTERNAL(void* r, void* logger, int version) { return NULL; }
int getNvOnnxParserVersion(void) { return 0; }
int initLibNvInferPlugins(void* logger, const char* ns) { return 0; }
"""
LIBRARIES = ("nvinfer", "nvonnxparser", "nvinfer_plugin")


def compiler() -> str | None:
    return shutil.which("cc") or shutil.which("gcc")


def build_stubs(folder: Path, major: int) -> Path:
    """``lib<name>.so.<major>`` for each library in ``folder``; returns ``folder``."""
    cc = compiler()
    if cc is None:
        raise RuntimeError("no C compiler (cc) on PATH")
    folder.mkdir(parents=True, exist_ok=True)
    src = folder / "stub.c"
    src.write_text(SOURCE)
    for name in LIBRARIES:
        so = f"lib{name}.so.{major}"
        subprocess.run(
            [cc, "-shared", "-fPIC", "-o", str(folder / so), f"-Wl,-soname,{so}", str(src)],
            check=True,
            capture_output=True,
            timeout=120,
        )
    return folder
