"""Exact merging of a device's uncontended ZeRO-3 transfers (``sim.fsdp_nodes``).

A unit's all-gather or reduce-scatter into device d is a chain of r-1 ring steps from
d's ring predecessor, each one node per link of the route, every node waiting for the
one before it; all of d's chains run one after another on its one FSDP stream. Where
every link of the route serves d's chains and nothing else (no other device's ring, no
pipeline, tensor-parallel or gradient traffic, no collective after the pipeline), no
node of a chain ever waits for its link: the chain is one interval, as long as its
nodes' service times plus the latencies between them, and it runs as one node of that
length on the route's last link (whose latency delivers the data). A plan whose rings
cross NVLink ports only they use then runs from far fewer nodes.

The task graph is built with every chain merged (``sim.taskgraph``); the links' owners
in that program give the routes that are exclusive (``exclusive_routes``), and the
chains on the other routes are put back transfer by transfer (``expand_runs``). The figures are the
same up to floating-point rounding: a merged node's per-link busy seconds, bytes and
node count are put back from ``Program.spread`` (``server_work_s``,
``sim.simulate._measure``), and budgets count the nodes as unmerged (``unmerged_types``).
"""
from __future__ import annotations

import numpy as np

#: ``Program.spread`` value: (steps, per hop of the route (server, seconds, bytes) of one step)
Spread = tuple[int, tuple[tuple[int, float, float], ...]]


def chain_s(spread: Spread, latency_s) -> float:
    """A merged chain's service time: every step's hops back to back, each hop's latency
    before the next node (the last one's delivers the data, as the node's own server's)."""
    steps, hops = spread
    total = 0.0
    for k in range(steps):
        for h, (s, dur, _) in enumerate(hops):
            total += dur
            if k + 1 < steps or h + 1 < len(hops):
                total += latency_s(s)
    return total


def exclusive_routes(prog, runs: list[tuple[int, int, int, tuple[int, ...]]]) -> set[tuple[int, int]]:
    """The (predecessor, device) routes of ``runs`` ((device, predecessor, merged node,
    route's servers) in ``prog``, built with every chain merged) whose every link serves
    that device's chains alone (module docstring)."""
    D = prog.D
    owner: dict[int, int] = {}
    merged = {t for _, _, t, _ in runs}
    for t, s in enumerate(prog.server):
        if s >= D and t not in merged:
            owner[s] = -1
    for s in prog.x_server:
        owner[s] = -1
    for d, _, _, servers in runs:
        for s in servers:
            if owner.setdefault(s, d) != d:
                owner[s] = -1
    return {(a, d) for d, a, _, servers in runs if all(owner[s] == d for s in servers)}


def server_work_s(prog) -> np.ndarray:
    """Per server, the seconds of service its pattern's nodes ask, each merged node
    counted as the nodes it stands for (``Program.spread``)."""
    S = prog.D + prog.L
    work = np.bincount(np.asarray(prog.server, dtype=np.int64), weights=np.asarray(prog.dur, dtype=float),
                       minlength=S)[:S]
    for t, (steps, hops) in prog.spread.items():
        work[prog.server[t]] -= prog.dur[t]
        for s, dur, _ in hops:
            work[s] += steps * dur
    return work


def unmerged_types(prog) -> int:
    """The program's node types counted unmerged (budgets count these: a run's figures
    never depend on whether its chains were merged)."""
    return prog.T + sum(steps * len(hops) - 1 for steps, hops in prog.spread.values())


def expand_runs(prog, runs: list[tuple[int, int, int, tuple[int, ...]]], keep: set[tuple[int, int]]) -> None:
    """Replace, in ``prog`` (built with every chain merged, no schedule yet), each merged
    chain whose route is not in ``keep`` by its transfers, one node per hop and step,
    each waiting for the one before (as ``sim.taskgraph``'s ``chain`` builds them): ids
    stay a topological order; what waited for the chain waits for its last node, a
    buffer it allocated starts with its first."""
    split = {t: prog.spread[t] for d, a, t, _ in runs if (a, d) not in keep}
    if not split:
        return
    T = prog.T
    size = np.ones(T, dtype=np.int64)
    for t, (steps, hops) in split.items():
        size[t] = steps * len(hops)
    last = np.cumsum(size) - 1
    first = last - size + 1
    first_of, last_of = first.tolist(), last.tolist()
    for c in ("server", "dur", "kind", "pat", "op", "edge", "nbytes", "phase"):
        setattr(prog, c, np.repeat(np.asarray(getattr(prog, c)), size))   # a split node's fields, then its hops'
    preds = [None] * int(last[-1] + 1)
    for t, ps in enumerate(prog.preds):
        preds[first_of[t]] = [last_of[u] for u in ps]
    for t, (steps, hops) in split.items():
        lo, hi = first_of[t], last_of[t] + 1
        prog.server[lo:hi] = np.tile([h[0] for h in hops], steps)
        prog.dur[lo:hi] = np.tile([h[1] for h in hops], steps)
        prog.nbytes[lo:hi] = np.tile([h[2] for h in hops], steps)
        prog.edge[lo:hi] = -1
        for i in range(lo + 1, hi):
            preds[i] = [i - 1]
    for c in ("server", "dur", "kind", "pat", "op", "edge", "nbytes", "phase"):
        setattr(prog, c, getattr(prog, c).tolist())
    prog.preds = preds
    prog.spread = {first_of[t]: v for t, v in prog.spread.items() if t not in split}
    for b in prog.buffers:
        b.alloc = first_of[b.alloc]
        b.frees = tuple(last_of[x] for x in b.frees)
    prog.outputs = {k: (last_of[f], tuple(last_of[x] for x in cs)) for k, (f, cs) in prog.outputs.items()}
    prog.inputs = {k: tuple(x if x is None else last_of[x] for x in v) for k, v in prog.inputs.items()}
    prog.x_after = {i: (last_of[t], m) for i, (t, m) in prog.x_after.items()}


__all__ = ["Spread", "expand_runs", "chain_s", "exclusive_routes", "server_work_s", "unmerged_types"]
