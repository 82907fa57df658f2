"""Input-only tensors recomputed where they are read, not sent.

An exporter computes an attention mask (or position ids, a causal triangle) once, from
the graph's inputs alone, and hands the one tensor to every layer; on a pipeline it would
cross and be held at every stage boundary, although runtimes rebuild it where it is read.
``clone_input_only`` gives every element-wise reader of such a tensor its own copy of the
cheap sub-graph that makes it (the *cone*, at most ``max_cone_ops`` operators), so fusion
(``workloads/fuse.py``) folds each copy into its reader's kernel; the first reader keeps
the original, a matrix product keeps reading the one tensor. The copies add their FLOPs
once per reader: recomputation is what a runtime pays.

What counts as input-only: docs/IMPORT.md (kernel fusion, input-only tensors).
"""
from __future__ import annotations

import dataclasses

from distplan.workloads.op_costs import FUSIBLE_KINDS
from distplan.workloads.graph import Graph, Operator, Tensor, unique_name


def input_only(graph: Graph) -> set[int]:
    """Indices of the operators computed from graph inputs alone by cheap, weightless ops."""
    preds = graph.preds()
    out: set[int] = set()
    pinned = {n for grp in graph.colocate for n in grp}   # a colocated op is never copied to another stage
    for v, op in enumerate(graph.ops):   # topological order: readers after what they read
        if (op.param_elems == 0 and op.tied_to is None and op.tied_elems == 0 and op.kind in FUSIBLE_KINDS
                and op.name not in pinned and all(u in out for u in preds[v])):
            out.add(v)
    return out


def clone_input_only(graph: Graph, max_cone_ops: int = 32) -> Graph:
    """``graph`` with every input-only tensor read by several operators recomputed by a
    copy of its cone for each reader after the first (see the module docstring); the same
    graph when there is none.

    The readers of an input-only tensor are the operators outside the input-only set it
    reaches through input-only operators, not only its direct consumers: the legacy
    exporter expands one boolean mask and gives each layer its own ``Where`` to turn it
    into the additive mask, so the tensor several layers read is the ``Expand`` behind
    twelve single-reader ``Where`` ops. A reader that copies a cone copies all of it,
    its own ``Where`` included; an original left with no reader is dropped (it ran for
    nothing)."""
    cheap = input_only(graph)
    if not cheap:
        return graph
    ops, preds, succs = graph.ops, graph.preds(), graph.succs()
    reach: dict[int, set[int]] = {}                 # cheap op -> the readers it reaches via cheap ops
    for v in sorted(cheap, reverse=True):           # successors first
        r: set[int] = set()
        for w in succs[v]:
            r |= reach[w] if w in cheap else {w}
        reach[v] = r
    first = {v: min(r) for v, r in reach.items() if r}   # the reader that keeps the original

    def cone(sinks: list[int]) -> list[int]:
        seen: set[int] = set()
        stack = list(sinks)
        while stack:
            v = stack.pop()
            if v not in seen:
                seen.add(v)
                stack.extend(preds[v])
        return sorted(seen)

    def shared_with_others(v: int, w: int) -> bool:
        return any(len(reach[x]) > 1 and first[x] != w for x in cone([v]))

    edges = graph.edges()   # (src, dst, elems), in the order of graph.tensors
    edge_elems = {(u, v): e for u, v, e in edges}
    new_ops: list[Operator] = list(ops)
    moved: dict[tuple[int, int], str] = {}          # original edge -> the copy's name that now feeds it
    extra: list[Tensor] = []
    names = {op.name for op in ops}
    for w in range(len(ops)):
        if ops[w].kind not in FUSIBLE_KINDS or w in cheap:
            continue   # a copy must fuse into its reader's kernel, not run as one more
        sinks = [v for v in dict.fromkeys(preds[w]) if v in cheap and shared_with_others(v, w)]
        if not sinks:
            continue
        members = cone(sinks)
        if len(members) > max_cone_ops:
            continue
        copy: dict[int, str] = {}
        for v in members:
            name = unique_name(f"{ops[v].name}~{ops[w].name}", names)
            copy[v] = name
            new_ops.append(dataclasses.replace(ops[v], name=name))
        for v in members:
            for u in dict.fromkeys(preds[v]):
                extra.append(Tensor(copy[u], copy[v], edge_elems[(u, v)]))
        for v in sinks:
            moved[(v, w)] = copy[v]
    if not moved:
        return graph
    kept = [(t, u, v) for t, (u, v, _) in zip(graph.tensors, edges) if (u, v) not in moved]
    # originals whose every reader now reads a copy ran for nothing: drop them (and what
    # only they read)
    readers = dict.fromkeys(cheap, 0)
    for _, u, _ in kept:
        if u in readers:
            readers[u] += 1
    dead: set[int] = set()
    stack = [v for v in cheap if succs[v] and readers[v] == 0]
    while stack:
        v = stack.pop()
        dead.add(v)
        for u in preds[v]:   # one per tensor, as counted
            readers[u] -= 1
            if readers[u] == 0:
                stack.append(u)
    tensors = [t for t, u, v in kept if u not in dead and v not in dead]
    tensors += [Tensor(name, ops[w].name, edge_elems[(v, w)]) for (v, w), name in moved.items()]
    dead_names = {ops[v].name for v in dead}
    fields = {f.name: getattr(graph, f.name) for f in dataclasses.fields(graph)
              if f.init and not f.name.startswith("_") and f.name not in ("ops", "tensors")}
    return Graph(ops=tuple(op for op in new_ops if op.name not in dead_names), tensors=tuple(tensors + extra),
                 **fields)
