"""Coarsening: contract a fine operator graph to fewer operators before the solve
(``coarsen``), and map a plan on the coarse graph back to the fine one (``expand_plan``).

Fusion of cheap operators into their producers, then edge contraction of the lightest
pair down to ``target_ops`` (a run-cutting pass first on very large graphs); an edge is
contracted only when it is its ends' only path, and every coarse operator is a
contiguous run of the fine topological order. Guarantees: the result is a DAG; FLOPs,
parameters, activation and touched elements are conserved exactly; an expanded plan is
feasible on the fine graph whenever it is on the coarse one (same stages along every
fine edge, no more memory per device, same precisions), and its analytic period there
is >= the coarse one, so a solver's proven gap holds for the coarse problem only.

Steps and what is conserved: docs/guides/own-model.md, "How coarsening contracts".
"""
from __future__ import annotations

import heapq
import math
from dataclasses import dataclass, field

from distplan.core.deadline import check_time, graph_size
from distplan.core.errors import DistplanError
from distplan.core.plan import Plan
from distplan.workloads.colocate import map_groups
from distplan.workloads.graph import Graph, Operator, Tensor
from distplan.workloads.graph import graph_send_elems
from distplan.workloads.op_costs import tie_operator

#: Operator kinds fused into their producer in phase 1.
CHEAP_KINDS = frozenset({"elementwise", "activation", "add", "reshape"})
#: graphs of more operators are first contracted into runs of their topological order
#: (``_runs``), ``RUNS_PER_TARGET`` x the target: the pairwise phases search paths and
#: rewrite stretches of the order, quadratic on a star or a long chain
LARGE_OPS = 5_000
RUNS_PER_TARGET = 4
#: loops look at the run's deadline (core.deadline) every this many steps
CLOCK_EVERY = 2048


@dataclass(frozen=True)
class Coarsening:
    """A coarse graph and, per fine operator (topological index), its coarse operator."""

    fine: Graph
    coarse: Graph
    fine_to_coarse: tuple[int, ...]
    _members: tuple[tuple[int, ...], ...] = field(default=(), repr=False, compare=False)

    def __post_init__(self) -> None:
        groups: list[list[int]] = [[] for _ in self.coarse.ops]
        for v, c in enumerate(self.fine_to_coarse):
            groups[c].append(v)
        object.__setattr__(self, "_members", tuple(tuple(g) for g in groups))

    def members(self, c: int) -> tuple[int, ...]:
        """Fine operator indices (topological order) inside coarse operator ``c``."""
        return self._members[c]


class _Contractor:
    """Groups of fine operators with summed edges and a maintained topological order."""

    def __init__(self, g: Graph) -> None:
        n = len(g.ops)
        self.members: dict[int, list[int]] = {v: [v] for v in range(n)}
        self.succ: dict[int, dict[int, int]] = {v: {} for v in range(n)}
        self.pred: dict[int, dict[int, int]] = {v: {} for v in range(n)}
        for u, v, e in g.edges():
            self.succ[u][v] = self.succ[u].get(v, 0) + e
            self.pred[v][u] = self.pred[v].get(u, 0) + e
        self.order: list[int | None] = list(range(n))
        self.pos: dict[int, int] = {v: v for v in range(n)}
        tot = [math.fsum(op.fwd_flops + op.bwd_flops for op in g.ops),
               math.fsum(op.touched_elems for op in g.ops), float(sum(op.param_elems for op in g.ops))]
        self.weight: dict[int, float] = {
            v: sum(x / t for x, t in zip((op.fwd_flops + op.bwd_flops, op.touched_elems,
                                          float(op.param_elems)), tot) if t > 0)
            for v, op in enumerate(g.ops)}
        self.version: dict[int, int] = {v: 0 for v in range(n)}

    @property
    def size(self) -> int:
        return len(self.members)

    def between_descendants(self, u: int, v: int) -> set[int] | None:
        """For an edge u -> v: the descendants of u placed between u and v in the order,
        or None if one of them reaches v (another u -> v path: contraction would cycle)."""
        limit = self.pos[v]
        seen: set[int] = set()
        stack = [w for w in self.succ[u] if w != v and self.pos[w] < limit]
        while stack:
            w = stack.pop()
            if w in seen:
                continue
            if v in self.succ[w]:
                return None
            seen.add(w)
            stack.extend(x for x in self.succ[w] if x not in seen and self.pos[x] < limit)
        return seen

    def merge(self, u: int, v: int, moved: set[int]) -> None:
        """Contract v into u (u before v in the order; ``moved`` from between_descendants)."""
        self._absorb(u, v)
        a, b = self.pos[u], self.pos.pop(v)
        stretch = [w for w in self.order[a + 1:b] if w is not None]
        new = [w for w in stretch if w not in moved] + [u] + [w for w in stretch if w in moved]
        new += [None] * (b - a - len(new))  # tombstones keep later positions valid
        self.order[a:b] = new
        self.order[b] = None
        for i in range(a, b):
            if self.order[i] is not None:
                self.pos[self.order[i]] = i

    def merge_next(self, u: int, v: int) -> None:
        """Contract v into u where v is the next operator after u in the order (only
        tombstones between them): no other path joins them, so u keeps its place and v's
        becomes a tombstone; time in the degrees of u and v only."""
        self._absorb(u, v)
        self.order[self.pos.pop(v)] = None

    def _absorb(self, u: int, v: int) -> None:
        """v's edges, members and weight to u."""
        for x, e in self.pred.pop(v).items():
            del self.succ[x][v]
            if x != u:
                self.succ[x][u] = self.succ[x].get(u, 0) + e
                self.pred[u][x] = self.pred[u].get(x, 0) + e
        for y, e in self.succ.pop(v).items():
            del self.pred[y][v]
            self.succ[u][y] = self.succ[u].get(y, 0) + e
            self.pred[y][u] = self.pred[y].get(u, 0) + e
        self.members[u].extend(self.members.pop(v))
        self.weight[u] += self.weight.pop(v)
        self.version[u] += 1
        del self.version[v]

    def live_order(self) -> list[int]:
        return [w for w in self.order if w is not None]

    def try_merge(self, u: int, v: int) -> bool:
        moved = self.between_descendants(u, v)
        if moved is None:
            return False
        self.merge(u, v, moved)
        return True


def _fuse_cheap(c: _Contractor, g: Graph, size: str = "") -> None:
    for v, op in enumerate(g.ops):
        if v % CLOCK_EVERY == 0:
            check_time("fusing the graph's cheap operators", size)
        if op.kind not in CHEAP_KINDS or v not in c.members:
            continue
        if c.pred[v]:
            for u in sorted(c.pred[v], key=lambda x: (-c.pred[v][x], -c.pos[x])):
                if c.try_merge(u, v):
                    break
        else:
            for y in sorted(c.succ[v], key=lambda x: (-c.succ[v][x], c.pos[x])):
                if c.try_merge(v, y):
                    break


def _contract_to(c: _Contractor, target: int, size: str = "") -> None:
    heap: list[tuple[float, int, int, int, int, int]] = []

    def push_edges(x: int) -> None:
        for y, e in c.succ[x].items():
            heapq.heappush(heap, (c.weight[x] + c.weight[y], -e, x, y, c.version[x], c.version[y]))
        for y, e in c.pred[x].items():
            heapq.heappush(heap, (c.weight[x] + c.weight[y], -e, y, x, c.version[y], c.version[x]))

    for u in list(c.members):
        for v, e in c.succ[u].items():
            heap.append((c.weight[u] + c.weight[v], -e, u, v, c.version[u], c.version[v]))
    heapq.heapify(heap)
    while c.size > target:
        if c.size % 256 == 0:
            check_time("coarsening the graph", size)
        merged = False
        while heap:
            _, _, u, v, vu, vv = heapq.heappop(heap)
            if c.version.get(u) != vu or c.version.get(v) != vv:
                continue
            if c.try_merge(u, v):
                push_edges(u)
                merged = True
                break
        if not merged:  # no contractible edge left: disconnected parts; merge neighbours in order
            live = c.live_order()
            i = min(range(len(live) - 1), key=lambda k: c.weight[live[k]] + c.weight[live[k + 1]])
            c.merge(live[i], live[i + 1], set())
            push_edges(live[i])


def coarsen(graph: Graph, target_ops: int | None = None, fuse_cheap: bool = True) -> Coarsening:
    """Fuse cheap operators into their producers (``fuse_cheap``), then contract to at
    most ``target_ops`` operators (None: fusion only). See the module docstring for
    what is conserved."""
    if target_ops is not None and (not isinstance(target_ops, int) or isinstance(target_ops, bool)
                                   or target_ops < 1):
        raise DistplanError(f"coarsening target must be a positive number of operators, got {target_ops!r}")
    size = graph_size(len(graph.ops), len(graph.tensors))
    c = _Contractor(graph)
    check_time("coarsening the graph", size)
    if target_ops is not None and len(graph.ops) > LARGE_OPS and c.size > RUNS_PER_TARGET * target_ops:
        _runs(c, graph, RUNS_PER_TARGET * target_ops)   # linear time first; fusion and the greedy then on the runs
    elif fuse_cheap:
        _fuse_cheap(c, graph, size)
    if target_ops is not None and c.size > target_ops:
        _contract_to(c, target_ops, size)
    return _build(graph, _Intervals(graph, c))


def _runs(c: _Contractor, g: Graph, n_runs: int) -> None:
    """Contract the topological order into about ``n_runs`` runs of consecutive operators
    of about equal weight (``_Contractor.weight``), in time linear in the graph: two
    operators next to each other in a topological order have no path between them but
    their own edge, so each contraction keeps a DAG and needs no search. Graphs of more
    than ``LARGE_OPS`` operators start here (a 100,000-op star spent minutes in the
    searches of the pairwise phases); the runs then go through the balanced greedy."""
    share = math.fsum(c.weight.values()) / n_runs
    size = graph_size(len(g.ops), len(g.tensors))
    head, acc = None, 0.0
    for i, v in enumerate(c.live_order()):
        if i % CLOCK_EVERY == 0:
            check_time("coarsening the graph (runs of the order)", size)
        w = c.weight[v]
        if head is not None and acc + w <= share:
            c.merge_next(head, v)
            acc += w
        else:
            head, acc = v, w


class _Intervals:
    """The contractor's groups made contiguous in the fine topological order: groups whose
    index spans overlap are merged (a sweep by first member). A stage runs its fine
    operators in index order, and an inference stage's memory is its liveness peak in that
    order (costs.memory): with every coarse operator a contiguous run of it, what is alive
    at a fine operator is alive at its coarse one too, so a coarse plan never needs more
    memory on the fine graph. Runs of a topological order are always a DAG."""

    def __init__(self, g: Graph, c: _Contractor) -> None:
        spans = sorted((min(c.members[grp]), max(c.members[grp]), grp) for grp in c.live_order())
        self.members: dict[int, list[int]] = {}
        cur, end = None, -1
        for lo, hi, grp in spans:
            if cur is not None and lo <= end:
                self.members[cur].extend(c.members[grp])
                end = max(end, hi)
            else:
                cur, end = grp, hi
                self.members[cur] = list(c.members[grp])
        group_of = {v: grp for grp, mem in self.members.items() for v in mem}
        self.succ: dict[int, dict[int, int]] = {grp: {} for grp in self.members}
        for u, v, e in g.edges():
            a, b = group_of[u], group_of[v]
            if a != b:
                self.succ[a][b] = self.succ[a].get(b, 0) + e

    def live_order(self) -> list[int]:
        return sorted(self.members, key=lambda grp: min(self.members[grp]))


def _build(g: Graph, c: _Intervals) -> Coarsening:
    ops: list[Operator] = []
    names: dict[int, str] = {}
    live = c.live_order()
    group_of = {v: grp for grp in live for v in c.members[grp]}
    sends = graph_send_elems(g)
    leaves = [False] * len(g.ops)   # sends a tensor (of any bytes: costs.memory) to another group
    for u, w, e in g.edges():
        if group_of[u] != group_of[w]:
            leaves[u] = True
    for grp in live:
        fine = [g.ops[v] for v in sorted(c.members[grp])]
        names[grp] = fine[max(range(len(fine)), key=lambda i: (fine[i].kind not in CHEAP_KINDS,
                                                                 fine[i].fwd_flops, -i))].name
    for grp in live:
        mem = sorted(c.members[grp])
        fine = [g.ops[v] for v in mem]
        anchor = [op.name for op in fine].index(names[grp])
        tied: dict[str, int] = {}   # tied weights owned outside the group, by owner group
        for op in fine:
            if op.tied_to is not None and group_of[g.index(op.tied_to)] != grp:
                own = names[group_of[g.index(op.tied_to)]]
                tied[own] = tied.get(own, 0) + op.tied_elems
        ops.append(tie_operator(Operator(
            name=fine[anchor].name, kind=fine[anchor].kind,
            fwd_flops=math.fsum(op.fwd_flops for op in fine),
            bwd_flops=math.fsum(op.bwd_flops for op in fine),
            param_elems=sum(op.param_elems for op in fine),
            expert_param_elems=sum(op.expert_param_elems for op in fine),
            out_elems=sum(op.out_elems for op in fine),
            touched_elems=math.fsum(op.touched_elems for op in fine),
            # what members send out of the group (each member's whole sent bytes: the
            # fine plan holds exactly these for a later stage, never more)
            send_elems=min(sum(op.out_elems for op in fine), math.fsum(sends[v] for v in mem if leaves[v])),
            # a group keeps its members' tensor-parallel role only when they agree
            tp_role=fine[0].tp_role if len({op.tp_role for op in fine}) == 1 else None,
        ), tied))
    tensors = tuple(Tensor(names[u], names[v], e) for u in live for v, e in c.succ[u].items())
    held_by = {g.ops[v].name: names[grp] for grp in live for v in c.members[grp]}
    coarse = Graph(name=f"{g.name}/coarse{len(ops)}", ops=tuple(ops), tensors=tensors, mode=g.mode,
                   batch_size=g.batch_size, seq_len=g.seq_len, colocate=map_groups(g.colocate, held_by),
                   tp_divides=g.tp_divides)
    f2c = [0] * len(g.ops)
    for grp in live:
        ci = coarse.index(names[grp])
        for v in c.members[grp]:
            f2c[v] = ci
    return Coarsening(fine=g, coarse=coarse, fine_to_coarse=tuple(f2c))


def expand_plan(coarsening: Coarsening, coarse_plan: Plan) -> Plan:
    """The fine-graph plan in which every operator takes the stage and precision of its
    coarse operator; stages, microbatches and schedule are kept. An explicit device order
    runs a coarse task's members in topological order (forward) or reversed (backward)."""
    nc = len(coarsening.coarse.ops)
    if len(coarse_plan.op_stage) != nc or len(coarse_plan.op_precision) != nc:
        raise DistplanError(
            f"plan covers {len(coarse_plan.op_stage)} operators but coarse graph "
            f"{coarsening.coarse.name!r} has {nc}; expand the plan of that coarse graph"
        )
    f2c = coarsening.fine_to_coarse
    order = None
    if coarse_plan.device_order is not None:
        order = {}
        for dev, seq in coarse_plan.device_order.items():
            out: list[tuple[int, int, str]] = []
            for m, cv, ph in seq:
                mem = coarsening.members(cv)
                out.extend((m, v, ph) for v in (mem if ph == "F" else reversed(mem)))
            order[dev] = tuple(out)
    predicted = dict(coarse_plan.predicted)
    predicted["coarse_ops"] = nc
    return Plan(
        op_stage=tuple(coarse_plan.op_stage[f2c[v]] for v in range(len(f2c))),
        op_precision=tuple(coarse_plan.op_precision[f2c[v]] for v in range(len(f2c))),
        stages=coarse_plan.stages, microbatches=coarse_plan.microbatches, schedule=coarse_plan.schedule,
        device_order=order, predicted=predicted,
    )
