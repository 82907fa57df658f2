"""Colocation: groups of operators that must run on one pipeline stage (``Graph.colocate``).

A group names >= 2 operators; groups that share an operator are merged into one. Every
planner honours them: the checker refuses a plan that puts a group's members on
different stages, the MILP ties their stage indicators, the downset DPs enumerate only
downsets that hold a group whole (``units``) and the topological-order DPs never cut
inside a group's span (``blocked_cuts``). Fusing and coarsening map each member to the
operator that holds it (``map_groups``).

Functions here take a graph by duck typing (``ops``, ``colocate``, ``index``, ``edges``):
workloads.graph imports this module.
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from distplan.core.errors import DistplanError
from distplan.core.units import brief


def check_groups(groups: Any, index: Mapping[str, int], graph_name: str) -> tuple[tuple[str, ...], ...]:
    """``groups`` validated and normalised: each a sequence of >= 2 distinct operator names
    of the graph; groups sharing an operator merged; members and groups in topological
    order (``index``). A DistplanError names what is wrong."""
    where = f"graph {graph_name!r}: colocate"
    if not isinstance(groups, (tuple, list)):
        raise DistplanError(f"{where} must be a list of groups (lists of operator names), got {brief(groups)}")
    parent: dict[str, str] = {}

    def root(x: str) -> str:
        while parent[x] != x:
            parent[x] = parent[parent[x]]
            x = parent[x]
        return x

    for i, grp in enumerate(groups):
        if not isinstance(grp, (tuple, list)) or not all(isinstance(n, str) for n in grp):
            raise DistplanError(f"{where}[{i}] must be a list of operator names, got {brief(grp)}")
        if len(set(grp)) < 2:
            raise DistplanError(f"{where}[{i}] names {len(set(grp))} distinct operator(s); a group needs at "
                                "least 2")
        for n in grp:
            if n not in index:
                raise DistplanError(f"{where}[{i}] names operator {n!r}, which the graph does not have")
            parent.setdefault(n, n)
        for n in grp[1:]:
            a, b = root(grp[0]), root(n)
            if a != b:
                parent[b] = a
    merged: dict[str, list[str]] = {}
    for n in parent:
        merged.setdefault(root(n), []).append(n)
    out = [tuple(sorted(m, key=index.__getitem__)) for m in merged.values()]
    return tuple(sorted(out, key=lambda g: index[g[0]]))


def map_groups(groups: Iterable[Sequence[str]], new_name: Mapping[str, str | None]) -> tuple[tuple[str, ...], ...]:
    """Each member renamed to the operator that now holds it (``new_name``; None or absent:
    the operator is gone), duplicates dropped, and groups left with fewer than 2 operators
    (all inside one fused or coarse operator) dropped. The graph built from the result
    merges groups that now share an operator."""
    out = []
    for grp in groups:
        names = list(dict.fromkeys(n for n in (new_name.get(m) for m in grp) if n is not None))
        if len(names) >= 2:
            out.append(tuple(names))
    return tuple(out)


def index_groups(graph: Any) -> list[list[int]]:
    """The graph's colocate groups as operator indices (topological order)."""
    return [[graph.index(n) for n in grp] for grp in graph.colocate]


def units(graph: Any) -> list[list[int]]:
    """The operators partitioned into units that every plan keeps on one stage: the
    strongly connected components of the graph with each group's members linked both
    ways (a group, every op on a path between its members, and groups so entangled that
    no stage order separates them). Singletons for ungrouped ops; units in topological
    order. A downset holds a group whole exactly when it is a union of units."""
    V = len(graph.ops)
    if not graph.colocate:
        return [[v] for v in range(V)]
    succ: list[list[int]] = [[] for _ in range(V)]
    for u, v, _ in graph.edges():
        succ[u].append(v)
    for grp in index_groups(graph):
        for a, b in zip(grp, grp[1:]):
            succ[a].append(b)
            succ[b].append(a)
    comp = _scc(succ)
    by: dict[int, list[int]] = {}
    for v in range(V):   # ops in topological order: a unit's first member orders it
        by.setdefault(comp[v], []).append(v)
    return sorted(by.values(), key=lambda m: m[0])


def _scc(succ: list[list[int]]) -> list[int]:
    """Component id per node (iterative Tarjan)."""
    n = len(succ)
    index, low, comp = [-1] * n, [0] * n, [-1] * n
    stack: list[int] = []
    on = [False] * n
    counter = ncomp = 0
    for s in range(n):
        if index[s] >= 0:
            continue
        work = [(s, 0)]
        while work:
            v, i = work.pop()
            if i == 0:
                index[v] = low[v] = counter
                counter += 1
                stack.append(v)
                on[v] = True
            if i < len(succ[v]):
                work.append((v, i + 1))
                w = succ[v][i]
                if index[w] < 0:
                    work.append((w, 0))
                elif on[w]:
                    low[v] = min(low[v], index[w])
                continue
            if low[v] == index[v]:
                while True:
                    w = stack.pop()
                    on[w] = False
                    comp[w] = ncomp
                    if w == v:
                        break
                ncomp += 1
            if work:
                p = work[-1][0]
                low[p] = min(low[p], low[v])
    return comp


def blocked_cuts(graph: Any) -> list[bool]:
    """Per cut position i in 0..V (the first i ops of the topological order before the
    cut): True when the cut would split a group (some member before it, some at or
    after it). A DP over contiguous runs of the order skips these cuts."""
    V = len(graph.ops)
    out = [False] * (V + 1)
    for grp in index_groups(graph):
        for i in range(min(grp) + 1, max(grp) + 1):
            out[i] = True
    return out


def split_groups(graph: Any, op_stage: Sequence[int]) -> list[str]:
    """One line per group whose members ``op_stage`` puts on more than one stage."""
    out = []
    for grp in graph.colocate:
        stages = {n: op_stage[graph.index(n)] for n in grp}
        if len(set(stages.values())) > 1:
            where = ", ".join(f"{n!r} on stage {k}" for n, k in stages.items())
            out.append(f"colocated ops are split across stages ({where}); a colocate group runs on one stage")
    return out
