"""Parts of the ``tensorrt`` backend: timing-cache wrapper, logger, CUDA probe, pin checks.

Nothing here imports TensorRT at import time; ``reprobuild.backends.tensorrt_backend`` is the
entry point.
"""
