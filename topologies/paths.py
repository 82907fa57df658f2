"""Device paths: the order in which pipeline stages visit devices.

Stage k of the MILP runs on ``path[k]``; a path never repeats a device. For a mesh
(``routing == "xy"``) consecutive devices of the snake families are neighbours, so each
stage boundary uses one physical link and no two boundaries share a link. Other
topologies get their natural order, node-major order, and for mixed fleets a
fast-kinds-first, an interleaved and a slow-kinds-first order (a host CPU first).
"""
from __future__ import annotations

import math

from distplan.topologies.topology import Topology


def _mesh_paths(topo: Topology) -> list[tuple[str, tuple[int, ...]]]:
    rows, cols = topo.mesh_shape
    at = {d.pos: i for i, d in enumerate(topo.devices)}
    row_snake = [at[(r, c if r % 2 == 0 else cols - 1 - c)] for r in range(rows) for c in range(cols)
                 if (r, c if r % 2 == 0 else cols - 1 - c) in at]
    col_snake = [at[(r if c % 2 == 0 else rows - 1 - r, c)] for c in range(cols) for r in range(rows)
                 if (r if c % 2 == 0 else rows - 1 - r, c) in at]
    # spiral from the corner inwards
    spiral, top, bot, left, right = [], 0, rows - 1, 0, cols - 1
    while top <= bot and left <= right:
        spiral += [(top, c) for c in range(left, right + 1)]
        spiral += [(r, right) for r in range(top + 1, bot + 1)]
        if top < bot:
            spiral += [(bot, c) for c in range(right - 1, left - 1, -1)]
        if left < right:
            spiral += [(r, left) for r in range(bot - 1, top, -1)]
        top, bot, left, right = top + 1, bot - 1, left + 1, right - 1
    spiral_idx = [at[p] for p in spiral if p in at]
    out = [("row-snake", tuple(row_snake)), ("col-snake", tuple(col_snake)), ("spiral", tuple(spiral_idx))]
    return [(n, p) for n, p in out if len(p) == topo.n_devices]


def _fleet_paths(topo: Topology) -> list[tuple[str, tuple[int, ...]]]:
    D = topo.n_devices
    out = [("natural", tuple(range(D))),
           ("node-major", tuple(sorted(range(D), key=lambda d: (topo.devices[d].node, d))))]
    kinds = sorted({d.kind for d in topo.devices},
                   key=lambda k: (-max(topo.kinds[k].peak_flops_per_s.values()), k))
    if len(kinds) > 1:
        by_kind = {k: [d for d in range(D) if topo.devices[d].kind == k] for k in kinds}
        out.append(("fast-first", tuple(d for k in kinds for d in by_kind[k])))
        inter, i = [], 0
        while len(inter) < D:
            for k in kinds:
                if i < len(by_kind[k]):
                    inter.append(by_kind[k][i])
            i += 1
        out.append(("interleaved", tuple(inter)))
        # the slow kinds first: a host CPU stage ahead of the accelerators (input work)
        out.append(("slow-first", tuple(d for k in reversed(kinds) for d in by_kind[k])))
    return out


def device_paths(topo: Topology) -> list[tuple[str, tuple[int, ...]]]:
    """Distinct named device paths (each a permutation of all devices), best guesses first."""
    cands = _mesh_paths(topo) if topo.routing == "xy" else []
    cands += _fleet_paths(topo)
    seen, out = set(), []
    for name, p in cands:
        if p not in seen and sorted(p) == list(range(topo.n_devices)):
            seen.add(p)
            out.append((name, p))
    return out


# --------------------------------------------------------------------------- lanes
def divisors(n: int) -> list[int]:
    """Positive divisors of ``n``, ascending."""
    return [d for d in range(1, n + 1) if n % d == 0]


Lanes = tuple[tuple[int, ...], ...]


#: a replicated layout whose stage boundaries cross more than this many links each on average
#: (lanes dealt round-robin along a long chain, ring or mesh: routes of hundreds of hops) is
#: ordered after every other, without computing the rest of its routes: on a 4,096-device chain
#: those took ~45 s before the planner's time limit could start counting (ring1024: 3.5 s,
#: mcm32x32: 2.1 s, now 0.05 s). Every preset's layouts come out in the same order as when
#: all were counted: such layouts share the most links there too.
MAX_HOPS_PER_BOUNDARY = 8


def _lane_links(topo: Topology, lanes: Lanes, limit: int | None = None) -> list[int] | None:
    """Directed links used by the stage boundaries of all lanes, with repeats; None once
    there are more than ``limit``."""
    out: list[int] = []
    for lane in lanes:
        for a, b in zip(lane, lane[1:]):
            out += topo.route(a, b)
            if limit is not None and len(out) > limit:
                return None
    return out


def lane_layouts(topo: Topology, replicas: int) -> list[tuple[str, Lanes]]:
    """Replicated-pipeline layouts: ``replicas`` disjoint lanes of D / replicas devices each.

    Lane i is a device path; stage k runs on (lane_0[k], ..., lane_{r-1}[k]) and microbatch
    m stays in lane m % r. For r = 1 these are exactly :func:`device_paths` (same names).
    For r > 1 every path family is cut into r consecutive chunks ("<family>/<r>x<K>": on a
    snake the chunks are rows or half-meshes, whose neighbouring devices keep each boundary
    on one link and the lanes link-disjoint), and also dealt round-robin
    ("<family>/<r>x<K>-strided": stage k = r consecutive devices of the path). Layouts whose
    boundaries share fewer links come first (those whose boundaries average more than
    ``MAX_HOPS_PER_BOUNDARY`` links last, in family order); duplicates (same set of lanes)
    are dropped.
    """
    D = topo.n_devices
    if replicas < 1 or D % replicas:
        raise ValueError(f"replicas {replicas} must divide the device count {D}")
    if replicas == 1:
        return [(n, (p,)) for n, p in device_paths(topo)]
    K = D // replicas
    cands = []
    for name, p in device_paths(topo):
        cands.append((f"{name}/{replicas}x{K}", tuple(tuple(p[i * K:(i + 1) * K]) for i in range(replicas))))
        if K > 1:
            cands.append((f"{name}/{replicas}x{K}-strided", tuple(tuple(p[i::replicas]) for i in range(replicas))))
    limit = MAX_HOPS_PER_BOUNDARY * (D - replicas)
    seen, out = set(), []
    for name, lanes in cands:
        key = tuple(sorted(lanes))
        if key in seen:
            continue
        seen.add(key)
        used = _lane_links(topo, lanes, limit)
        if used is None:   # long routes: after every layout that was counted
            out.append((math.inf, math.inf, len(out), name, lanes))
            continue
        shared = len(used) - len(set(used))
        out.append((shared, len(used), len(out), name, lanes))
    out.sort()
    return [(name, lanes) for *_, name, lanes in out]
