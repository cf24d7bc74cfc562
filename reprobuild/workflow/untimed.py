"""Why a build locked nothing: the model's ops that the backend does not time.

A lock with no layers rebuilds "reproducibly" without holding any tactic, which looks like
success; ``build`` says so at once, naming the ops, so nobody ships such a lock believing it
pins something.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def empty_lock_warning(backend: Any, model_path: Path) -> str:
    """One line: the lock has no layers, and which of the model's ops went untimed."""
    import onnx

    proto = onnx.load(str(model_path), load_external_data=False)
    ops = sorted({n.op_type for n in proto.graph.node})
    timed = getattr(backend, "timed_ops", None)
    tail = "verify will say that nothing is locked"
    if timed is None:
        return (
            f"the lock records 0 layers: the {backend.name} backend timed no layer of this "
            f"model (its ops: {', '.join(ops) or 'none'}); {tail}"
        )
    untimed = [op for op in ops if op not in timed]
    return (
        f"the lock records 0 layers: the {backend.name} backend times only "
        f"{', '.join(timed)} layers, and this model's ops ({', '.join(untimed) or 'none'}) "
        f"are not among them; {tail}"
    )
