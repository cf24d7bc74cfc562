"""Test models whose outputs depend on their inputs and on the tactics that build them.

The onnx package's light model-zoo models have constant stand-in weights, so their final
outputs are flat and no tactic change reaches them; a reproducibility check on them cannot
fail. :mod:`.zoo` gives the same architectures seeded, well-scaled weights, and
:mod:`.digits` holds a small MLP and CNN trained on scikit-learn's bundled digits, with a
held-apart test split, so accuracy can be asserted as well as bits.
"""
