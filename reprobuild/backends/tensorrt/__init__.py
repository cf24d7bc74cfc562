"""The ``tensorrt`` backend: editable-timing-cache builds with TensorRT 10.8 to 11.x.

``backend`` is the entry point; ``cache`` wraps ``ITimingCache``, ``logger`` captures the
builder log, ``cuda_probe`` finds GPUs and the CUDA runtime without TensorRT. Nothing here
imports TensorRT at import time.
"""
