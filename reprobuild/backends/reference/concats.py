"""Concat layers whose inputs are written into the output's buffer instead of copied there.

Why: a Concat copies every input into a new tensor. Two patterns let the engine skip most
of those copies (values are copies either way: the bits are the same):

- DenseNet appends each layer's new channels to everything before them, so each Concat
  copied the growing prefix again. A Concat whose first input is an earlier Concat's
  output, which dies at it and which nothing else sees, writes only its other inputs
  after that prefix and returns the longer prefix: a view of the same buffer, which holds
  twice the channels it first needed and is copied into one twice as large when full.
- SqueezeNet's and Inception's Concats join the outputs of elementwise chains (Conv ->
  Relu, BatchNormalization -> Relu): such a chain writes its output straight into its
  channels of the Concat's buffer (:class:`.chain.ChainStep`'s ``into``), and the Concat
  returns the buffer.

Batch 1 only for the first (a channel prefix of a larger batch is not contiguous); the
program (:mod:`.program`) decides statically which layers may do either, and every run
checks that the inputs really are the views handed out, else copies as before.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from reprobuild.backends.reference.convstep import same_memory
from reprobuild.backends.reference.elementwise import concat, float_arrays
from reprobuild.backends.reference.prepared import PreparedModel

Layout = tuple[int, int, int]
"""(first channel, channels, channels of the Concat) of one input in its Concat's buffer."""


class ConcatBuffers:
    """The buffers of one run's Concats (one program's; cleared before and after a run)."""

    def __init__(self) -> None:
        self._grown: dict[str, tuple[np.ndarray, np.ndarray]] = {}  # name -> (buffer, view)
        self._slots: dict[str, np.ndarray] = {}  # Concat name -> its buffer, being filled

    def clear(self) -> None:
        self._grown.clear()
        self._slots.clear()

    # -- growing prefixes (DenseNet) ------------------------------------------------------
    def grow(
        self, inputs: Sequence[Any], attrs: Mapping[str, Any], extends: str, name: str
    ) -> np.ndarray | None:
        """The Concat of ``inputs`` named ``name``; ``extends``: the name of its first
        input when the program lets it grow that input's buffer in place, else ""."""
        if not _batch_one(inputs, attrs):
            return concat(inputs, attrs)
        first = self._grown.pop(extends, None) if extends else None
        if first is None or first[1] is not inputs[0]:
            buf, used = _grown_buffer(inputs, None), 0
            more = inputs
        else:
            buf, used, more = first[0], inputs[0].shape[1], inputs[1:]
        total = used + sum(a.shape[1] for a in more)
        if total > buf.shape[1]:
            buf = _grown_buffer(inputs, inputs[0])
        np.concatenate(more, axis=1, out=buf[:, used:total])
        view = buf[:, :total]
        self._grown[name] = (buf, view)
        return view

    # -- inputs written in place (SqueezeNet, Inception) ----------------------------------
    def slot(
        self, name: str, layout: Layout, axis: int, shape: tuple[int, ...]
    ) -> np.ndarray | None:
        """Where the chain making one input of the Concat ``name`` writes its output (of
        ``shape``), or None: its channels of the Concat's buffer, which the first of the
        Concat's inputs to be made allocates."""
        start, channels, total = layout
        if len(shape) < 2 or axis % len(shape) != 1 or shape[1] != channels:
            return None
        buf = self._slots.get(name)
        if buf is None or buf.shape[0] != shape[0] or buf.shape[2:] != shape[2:]:
            buf = self._slots[name] = np.empty((shape[0], total, *shape[2:]), np.float32)
        return buf[:, start : start + channels]

    def join(
        self, name: str, inputs: Sequence[Any], attrs: Mapping[str, Any], layouts: list[Layout]
    ) -> np.ndarray | None:
        """The Concat ``name``: its buffer when every input was written into it, else a
        copy of the inputs (a chain that fell back to running layer by layer)."""
        buf = self._slots.pop(name, None)
        if buf is not None and all(
            type(a) is np.ndarray and same_memory(a, buf[:, s : s + c])
            for a, (s, c, _) in zip(inputs, layouts, strict=True)
        ):
            return buf
        return concat(inputs, attrs)


def _batch_one(inputs: Sequence[Any], attrs: Mapping[str, Any]) -> bool:
    """Float arrays of one dtype, batch 1, joined along axis 1."""
    if float_arrays(inputs) is None or inputs[0].ndim < 2 or inputs[0].shape[0] != 1:
        return False
    return int(attrs.get("axis", 1)) % inputs[0].ndim == 1


def _grown_buffer(inputs: Sequence[np.ndarray], prefix: np.ndarray | None) -> np.ndarray:
    """A buffer for twice the channels of ``inputs``, holding ``prefix`` (when given)."""
    total = sum(a.shape[1] for a in inputs)
    x = inputs[0]
    buf = np.empty((1, 2 * total, *x.shape[2:]), x.dtype)
    if prefix is not None:
        buf[:, : prefix.shape[1]] = prefix
    return buf


# -- which layers (decided when the program is compiled) ----------------------------------
def growth(prepared: PreparedModel, ownable: set[str]) -> dict[int, str]:
    """The Concat layers (by position) whose outputs live in growing buffers: the name of
    the earlier Concat output each extends in place (it dies at the layer and nothing else
    sees it: ``ownable``), or "" for one that starts a buffer."""
    made_by = {
        o: position
        for position, layer in enumerate(prepared.layers)
        if layer.op == "Concat" and not layer.domain
        for o in layer.node.output
        if o
    }
    found: dict[int, str] = {}
    if prepared.opsets.get("", 1) < 4:
        return found
    for position, layer in enumerate(prepared.layers):
        names = list(layer.node.input)
        if layer.op != "Concat" or layer.domain or not names or names[0] not in made_by:
            continue
        first = names[0]
        dies = prepared.last_use.get(first) == position and names.count(first) == 1
        if dies and first in ownable:
            found[position] = first
            found.setdefault(made_by[first], "")
    return found


def slots(
    prepared: PreparedModel, chains: Mapping[str, int], taken: set[int]
) -> dict[int, list[Layout]]:
    """The Concat layers (by position, not in ``taken``) whose every input is the output of
    a chain (``chains``: output name -> its channels), dying at the Concat and read by it
    once, with each input's place in the Concat's buffer."""
    found: dict[int, list[Layout]] = {}
    if prepared.opsets.get("", 1) < 4:
        return found
    for position, layer in enumerate(prepared.layers):
        names = list(layer.node.input)
        if layer.op != "Concat" or layer.domain or position in taken or not names:
            continue
        if len(set(names)) != len(names) or not all(
            n in chains and prepared.last_use.get(n) == position and n not in prepared.output_names
            for n in names
        ):
            continue
        total, layouts = sum(chains[n] for n in names), []
        for n in names:
            start = sum(lay[1] for lay in layouts)
            layouts.append((start, chains[n], total))
        found[position] = layouts
    return found
