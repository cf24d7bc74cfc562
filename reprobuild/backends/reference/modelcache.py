"""The one folded model the reference backend keeps between a build and its engine's runs.

Why: ``verify`` builds a model, runs its engine, builds it again, and so on; each step used
to parse the model and fold its constants anew, so two or three copies of the weights were
alive at the peak. A build and every engine built from the same model bytes fold to the same
``PreparedModel`` (folding is deterministic and execution only reads it), so the last one is
kept, keyed by the sha256 of the model bytes the engine stores, and reused. One slot: a
process that switches models holds one folded model, never a growing set.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from reprobuild.backends.reference.prepared import PreparedModel

_slot: tuple[str, PreparedModel] | None = None


def get(model_sha256: str) -> PreparedModel | None:
    """The folded model for these model bytes, if it is the one kept."""
    if _slot is not None and _slot[0] == model_sha256:
        return _slot[1]
    return None


def put(model_sha256: str, prepared: PreparedModel) -> None:
    """Keep ``prepared`` (and drop the model kept before it)."""
    global _slot
    _slot = (model_sha256, prepared)


def clear() -> None:
    """Drop the kept model (tests, or a caller about to need the memory)."""
    global _slot
    _slot = None
