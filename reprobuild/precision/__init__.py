"""Strongly typed mixed precision on the CPU: decide a plan by rules, then apply it verbatim.

TensorRT 11 takes every layer's precision from the ONNX graph, so "build in FP16" now means
"rewrite the graph": Cast nodes at precision boundaries and FP16/BF16 tensor types. Deciding
*which* nodes may run in low precision needs measurements (output magnitudes), and those
depend on calibration inputs; a reproducible build must therefore never re-decide. Hence two
separate steps: :func:`rules.derive_plan` (rules + ONNX Runtime measurements -> a
``PrecisionPlan`` stored in the lock) and :func:`apply.apply_plan` (a pure graph rewrite
that follows the plan and nothing else).

One job per module, each importing only those above it:

- :mod:`.ops`: element types and the op sets the rules treat specially (no imports);
- :mod:`.options`: checking the user's options before any model work;
- :mod:`.report`: plan diffs and the ``show --precision`` table (no numpy/onnx);
- :mod:`.analysis`: node keys, inferred types and shapes, reduction depths;
- :mod:`.calibration`: seeded, ``.npz`` and Polygraphy JSON inputs (never unpickled);
- :mod:`.measure`: the ONNX Runtime session helper, running a model, the FP16 error figure;
- :mod:`.opset`: converting a model to the opset a plan needs (INT8: 13; BF16 Conv: 22);
- :mod:`.reasons`: what decided a node, in the words the plan records beside its rule;
- :mod:`.rules`: deriving a plan (the rules are documented there) and matching it to a graph;
- :mod:`.apply`: the graph rewrite (Cast insertion).

Importing this package loads nothing heavy: import from the module that owns a name.
"""
