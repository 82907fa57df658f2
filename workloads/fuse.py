"""Kernel fusion: an imported fine graph costed as a compiler would run it.

``fuse_graph`` contracts one-operator-per-framework-node graphs to the kernels XLA,
TorchInductor, TensorRT or onnxruntime would launch, so the cost model and the simulator
both see one launch and one memory round trip per kernel. In order: input-only tensors
are recomputed by each reader (``workloads/rematerialize.py``); views, bias epilogues,
layout moves next to a matrix product and scalings by a constant join their product;
chains of element-wise kinds between heavy ops become one kernel (a normalisation whose
input is read elsewhere starts its own). Guarantees: forward and backward FLOPs and
parameters are exact sums of the members; ``touched_elems`` counts each outside tensor
once plus what leaves; ``out_elems`` only what leaves; tied weights and agreeing
``tp_role`` carry over; the result is a DAG and, apart from the recomputed copies, the
operator count never grows. Rules, step by step:
docs/IMPORT.md (the kernel fusion table).
"""
from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Collection

from distplan.core.deadline import check_time, graph_size
from distplan.workloads.coarsen import _Contractor
from distplan.workloads.colocate import map_groups
from distplan.workloads.graph import Graph, Operator, Tensor
from distplan.workloads.op_costs import FUSIBLE_KINDS, GEMM_KINDS, tie_operator
from distplan.workloads.rematerialize import clone_input_only


def is_view(op: Operator) -> bool:
    """An operator that only re-labels its input's storage: no FLOPs, no traffic, no output."""
    return op.kind == "reshape" and op.fwd_flops == 0 and op.touched_elems == 0 and op.out_elems == 0


def _is_move(op: Operator) -> bool:
    return op.kind == "reshape" and op.fwd_flops == 0 and not is_view(op)


def fuse_graph(graph: Graph, scalings: Collection[str] = (), members: dict[str, list[str]] | None = None) -> Graph:
    """The graph with views, bias epilogues, layout moves, constant scalings and
    element-wise chains fused (see the module docstring); the same graph when nothing
    fuses. ``scalings``: names of operators that multiply their one activation input by
    a constant scalar (the importer knows; the Graph does not say). ``members``, when
    given, is filled with each fused operator's name -> the names of the operators of
    ``graph`` it holds (step 0's copies are named ``<op>~<reader>``)."""
    given = {op.name for op in graph.ops}
    graph = clone_input_only(graph)
    copies = {v for v, op in enumerate(graph.ops) if op.name not in given}
    c = _Contractor(graph)
    ops = graph.ops
    owner = {v: v for v in range(len(ops))}

    def find(v: int) -> int:
        while owner[v] != v:
            owner[v] = owner[owner[v]]
            v = owner[v]
        return v

    size = graph_size(len(ops), len(graph.tensors))
    tries = [0]

    def join(u: int, v: int) -> bool:
        """Contract the groups of u and v (in topological order) if that keeps a DAG."""
        tries[0] += 1
        if tries[0] % 1024 == 0:
            check_time("fusing the graph into kernels", size)
        a, b = find(u), find(v)
        if a == b:
            return True
        if c.pos[a] > c.pos[b]:
            a, b = b, a
        if b not in c.succ[a] or not c.try_merge(a, b):
            return False
        owner[b] = a
        return True

    absorbed: set[int] = set()   # moves that became views of a matrix product
    gemm = {v for v, op in enumerate(ops) if op.kind in GEMM_KINDS}
    has_gemm = lambda v: any(m in gemm for m in c.members[find(v)])  # noqa: E731
    preds, succs = graph.preds(), graph.succs()
    # 1. views
    for v, op in enumerate(ops):
        if not is_view(op):
            continue
        if len(set(preds[v])) == 1:
            join(preds[v][0], v)
        elif not preds[v] and succs[v]:
            join(v, min(succs[v], key=lambda y: c.pos[find(y)]))
    # 2. bias epilogues
    for v, op in enumerate(ops):
        ps = set(preds[v])
        if op.kind == "add" and (op.param_elems or op.tied_elems) and len(ps) == 1:
            (u,) = ps
            if has_gemm(u) and _only_consumer(c, find(u), find(v)):
                join(u, v)
    # 3. layout moves next to a matrix product (again after step 4, whose scalings may
    #    have put a product right behind a move)
    def absorb_moves() -> None:
        """Until none joins: a chain of moves (transpose, view, transpose) joins one by one."""
        while True:
            before = len(absorbed)
            for v, op in enumerate(ops):
                if (not _is_move(op) or v in absorbed or find(v) != v
                        or any(not is_view(ops[m]) for m in c.members[v] if m != v)):
                    continue
                ps, ss = list(c.pred[v]), list(c.succ[v])
                if len(ps) == 1 and has_gemm(ps[0]) and _only_consumer(c, ps[0], v) and join(ps[0], v):
                    absorbed.add(v)
                elif len(ss) == 1 and len(ps) <= 1 and has_gemm(ss[0]) and join(v, ss[0]):
                    absorbed.add(v)
            if len(absorbed) == before:
                return

    absorb_moves()
    # 4. scalings by a constant: the alpha of the matrix product next to them
    present = {op.name for op in graph.ops}
    for name in scalings:
        if name not in present:   # an input-only op rematerialize copied into its readers and dropped
            continue
        v = graph.index(name)
        if find(v) != v or len(c.pred[v]) > 1 or any(not is_view(ops[m]) for m in c.members[v] if m != v):
            continue
        ss, ps = list(c.succ[v]), list(c.pred[v])
        if len(ss) == 1 and has_gemm(ss[0]) and join(v, ss[0]):
            continue
        if len(ps) == 1 and has_gemm(ps[0]) and _only_consumer(c, ps[0], v):
            join(ps[0], v)
    absorb_moves()
    # 5. element-wise chains
    fusible = lambda g: all(ops[m].kind in FUSIBLE_KINDS for m in c.members[g])  # noqa: E731
    lookup = lambda g: all(ops[m].kind == "embedding" or is_view(ops[m]) for m in c.members[g])  # noqa: E731
    for u, w, _ in graph.edges():
        a, b = find(u), find(w)
        if a == b or (ops[w].kind == "layernorm" and len(c.succ[a]) > 1):
            continue
        if (fusible(a) and fusible(b)) or (lookup(a) and lookup(b)):
            join(a, b)
    if members is not None:
        live = c.live_order()
        members.update({ops[_anchor(ops, c.members[k], copies)].name: [ops[v].name for v in sorted(c.members[k])]
                        for k in live})
    if c.size == len(ops):
        return graph
    return _build(graph, c, absorbed, copies)


def _only_consumer(c: _Contractor, g: int, v: int) -> bool:
    return set(c.succ[g]) == {v}


def _build(g: Graph, c: _Contractor, absorbed: set[int], copies: set[int]) -> Graph:
    ops = g.ops
    live = c.live_order()
    grp = {v: k for k in live for v in c.members[k]}
    viewlike = [is_view(op) or v in absorbed for v, op in enumerate(ops)]
    preds: list[list[tuple[int, int]]] = [[] for _ in ops]
    succs: list[list[tuple[int, int]]] = [[] for _ in ops]
    for u, w, e in g.edges():
        preds[w].append((u, e))
        succs[u].append((w, e))

    root = list(range(len(ops)))   # a view-like op's data is its (only) producer's
    for v in range(len(ops)):      # topological order: producers first
        if viewlike[v] and len({u for u, _ in preds[v]}) == 1:
            root[v] = root[preds[v][0][0]]

    def leaves(v: int) -> bool:
        """v's output is read outside its group, or is a graph output (through views)."""
        if not succs[v]:
            return True
        return any(grp[w] != grp[v] or (viewlike[w] and leaves(w)) for w, _ in succs[v])

    def written(v: int) -> int:
        return 0 if viewlike[v] else ops[v].out_elems

    def size(r: int, es: list[int]) -> int:
        """Elements of producer r's data read through edges ``es`` (each tensor once)."""
        return min(sum(es), max([written(r), *es]))

    names = {k: _anchor(ops, c.members[k], copies) for k in live}
    new_ops: list[Operator] = []
    for k in live:
        mem = sorted(c.members[k])
        if len(mem) == 1:
            op = ops[mem[0]]
            new_ops.append(_retie(op, grp, names, g))
            continue
        touched = math.fsum(0.0 if viewlike[v] else ops[v].touched_elems for v in mem)
        outside: dict[int, list[int]] = defaultdict(list)
        for v in (v for v in mem if not viewlike[v]):
            for u, e in preds[v]:
                touched -= e                          # every read of a tensor is re-counted below:
                if grp[root[u]] != k:                 # once if its data comes from outside, else never
                    outside[root[u]].append(e)
            if not leaves(v):
                touched -= ops[v].out_elems           # an intermediate: never written
        touched += sum(size(r, es) for r, es in outside.items())
        out = sum(written(v) for v in mem if leaves(v))
        anchor = ops[names[k]]
        tied: dict[str, int] = {}
        for v in mem:
            t = ops[v].tied_to
            if t is not None and grp[g.index(t)] != k:
                own = ops[names[grp[g.index(t)]]].name
                tied[own] = tied.get(own, 0) + ops[v].tied_elems
        roles = {ops[v].tp_role for v in mem} - {None}
        new_ops.append(tie_operator(Operator(
            name=anchor.name, kind=anchor.kind,
            fwd_flops=math.fsum(ops[v].fwd_flops for v in mem),
            bwd_flops=math.fsum(ops[v].bwd_flops for v in mem),
            param_elems=sum(ops[v].param_elems for v in mem),
            expert_param_elems=sum(ops[v].expert_param_elems for v in mem), out_elems=int(out),
            touched_elems=float(max(touched, 0.0)),
            tp_role=roles.pop() if len(roles) == 1 else None), tied))
    flows: dict[tuple[int, int], dict[int, list[int]]] = defaultdict(lambda: defaultdict(list))
    for u, w, e in g.edges():
        if grp[u] != grp[w]:
            flows[(grp[u], grp[w])][root[u]].append(e)
    tensors = tuple(Tensor(ops[names[a]].name, ops[names[b]].name, int(sum(size(r, es) for r, es in by.items())))
                    for (a, b), by in flows.items())
    held_by = {ops[v].name: ops[names[grp[v]]].name for v in range(len(ops))}
    return Graph(name=g.name, ops=tuple(new_ops), tensors=tensors, mode=g.mode, batch_size=g.batch_size,
                 seq_len=g.seq_len, import_warnings=g.import_warnings, colocate=map_groups(g.colocate, held_by),
                 tp_divides=g.tp_divides)


def _anchor(ops: tuple[Operator, ...], mem: list[int], copies: set[int]) -> int:
    """The member a fused operator is named after: not a step-0 copy, a non-fusible one
    first, then by kind (softmax, norm, activation, element-wise, add), then the most
    parameters (the token table of summed lookups), then the most FLOPs."""
    return max(sorted(mem), key=lambda v: (v not in copies, ops[v].kind not in FUSIBLE_KINDS,
                                            _RANK.get(ops[v].kind, 0),
                                            not is_view(ops[v]), ops[v].param_elems, ops[v].fwd_flops, -v))


#: which fusible member names a fused kernel (its kind drives the precision sensitivity)
_RANK = {"softmax": 5, "layernorm": 4, "activation": 3, "elementwise": 2, "add": 1}


def _retie(op: Operator, grp: dict[int, int], names: dict[int, int], g: Graph) -> Operator:
    """A single-member operator whose tied owner may now be part of another fused operator."""
    if op.tied_to is None:
        return op
    own = g.ops[names[grp[g.index(op.tied_to)]]].name
    if own == op.tied_to:
        return op
    import dataclasses  # noqa: PLC0415

    return dataclasses.replace(op, tied_to=own)
