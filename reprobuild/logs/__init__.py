"""Reading what TensorRT prints about its kernel choices.

Builder verbose logs (``parser``, ``reader``: which tactics were timed and chosen), engine
layer information (``layerinfo``: which kernels the finished engine runs) and the comparison
of two logs (``diff``). Deliberately empty: the CLI imports a submodule only when a command
needs it, and ``logs`` sits low in the layers (it imports only ``errors``).
"""
