"""The execution order of an ONNX graph and the names each node reads (subgraphs included).

Why a module of its own: the engine (:mod:`.engine`) and its compiled program
(:mod:`.program`) both need which values a node consumes, including the outer-scope names
an If/Loop/Scan body reads, to order layers and to know when a value dies.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence

import onnx

from reprobuild.errors import UsageError


def toposort(nodes: Sequence[onnx.NodeProto], available: set[str]) -> list[int]:
    """Node indices in a valid execution order, keeping the file order when it is valid."""
    producers: dict[str, int] = {}
    for i, node in enumerate(nodes):
        for out in node.output:
            if out:
                producers[out] = i
    deps: list[set[int]] = []
    for node in nodes:
        needed = set()
        for name in consumed_names(node):
            if name and name not in available and name in producers:
                needed.add(producers[name])
        deps.append(needed)
    users: dict[int, list[int]] = {i: [] for i in range(len(nodes))}
    for i, d in enumerate(deps):
        for j in d:
            users[j].append(i)
    remaining = [len(d) for d in deps]
    ready = deque(i for i, r in enumerate(remaining) if r == 0)
    order: list[int] = []
    while ready:
        i = ready.popleft()
        order.append(i)
        for u in sorted(users[i]):
            remaining[u] -= 1
            if remaining[u] == 0:
                ready.append(u)
    if len(order) != len(nodes):
        raise UsageError("the ONNX graph has a cycle: it cannot be executed")
    return sorted(order) if _is_valid_order(nodes, available, sorted(order)) else order


def consumed_names(node: onnx.NodeProto) -> list[str]:
    """Inputs plus outer-scope names read by subgraphs (If/Loop/Scan bodies)."""
    names = list(node.input)
    for attr in node.attribute:
        graphs = [attr.g] if attr.type == onnx.AttributeProto.GRAPH else list(attr.graphs)
        for g in graphs:
            inner = {i.name for i in g.input} | {t.name for t in g.initializer}
            for sub in g.node:
                inner.update(o for o in sub.output if o)
            for sub in g.node:
                names.extend(n for n in consumed_names(sub) if n and n not in inner)
    return names


def _is_valid_order(nodes: Sequence[onnx.NodeProto], available: set[str], order: list[int]) -> bool:
    seen = set(available)
    producible = {o for n in nodes for o in n.output if o}
    for i in order:
        if any(n and n in producible and n not in seen for n in consumed_names(nodes[i])):
            return False
        seen.update(o for o in nodes[i].output if o)
    return True
