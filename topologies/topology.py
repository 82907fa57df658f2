"""The hardware: device kinds, devices, switches, directed links and routes.

A Topology is a directed multigraph-free network whose nodes are compute devices
(which run operators) and switches (which only forward). Every link is directed;
presets add both directions. Routes are dimension-order XY on meshes
(``routing="xy"``, devices carry ``pos=(row, col)``) and fewest-hops paths, ties broken
by higher bottleneck bandwidth, then by fewer devices forwarded through (a switch forwards,
a GPU relays only where no switch route is as short: a rail-optimised fabric's cross-rail
route goes up the spine, not through another node's GPU), then by node order, elsewhere
(``routing="shortest"``).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cached_property

import networkx as nx

from distplan.core.errors import DistplanError
from distplan.core.precision import PRECISIONS

ROUTINGS = ("xy", "shortest")
#: the least peak x efficiency, memory, memory bandwidth and link bandwidth accepted (per
#: second, or bytes): below it a figure is a typo, and task times overflow to inf
MIN_RATE = 1e-6
#: the longest link latency or launch overhead accepted (seconds): an hour is past any
#: real link (a geostationary hop is 0.6 s); beyond it a figure is a unit slip, and the
#: simulator's clock (seconds in a float) loses the microsecond tasks beside it
MAX_DELAY_S = 3600.0


#: the most tasks a device kind may run at once (DeviceKind.concurrency): the simulator
#: keeps one slot per task and scans them per task (1e9 allocated 8 GB and hung)
MAX_CONCURRENCY = 1024


@dataclass(frozen=True)
class DeviceKind:
    """A device model: dense peak FLOP/s per supported precision, memory, efficiency.

    ``efficiency`` is the achievable fraction of peak on large matmuls;
    ``precision_efficiency`` overrides it per precision (the presets' fp8 GEMMs reach a
    lower fraction of their peak than bf16 ones: ``efficiency_at``);
    ``launch_overhead_s`` is added to every operator task; ``concurrency`` is how many
    tasks the device runs at once (1 for every preset). Host: ``host_link_bytes_per_s``
    the host<->device link per direction (PCIe, NVLink-C2C; 0: none, no offloading), and
    ``host_mem_bw_bytes_per_s`` the host memory bandwidth one device's share of the host
    CPU streams Adam at (``costs.offload``).
    """

    name: str
    peak_flops_per_s: dict[str, float]
    mem_capacity_bytes: float
    mem_bw_bytes_per_s: float
    efficiency: float = 0.7
    launch_overhead_s: float = 0.0
    concurrency: int = 1
    source: str = ""
    precision_efficiency: dict[str, float] = field(default_factory=dict)
    host_link_bytes_per_s: float = 0.0
    host_mem_bw_bytes_per_s: float = 0.0

    def supports(self, prec: str) -> bool:
        return prec in self.peak_flops_per_s

    def efficiency_at(self, prec: str) -> float:
        """The achievable fraction of ``prec``'s peak: its own figure, else ``efficiency``."""
        return self.precision_efficiency.get(prec, self.efficiency)


@dataclass(frozen=True)
class Device:
    """A compute device of kind ``kind``; ``pos`` is (row, col) on meshes; ``node`` groups servers."""

    name: str
    kind: str
    pos: tuple[int, int] | None = None
    node: int = 0


@dataclass(frozen=True)
class Link:
    """A directed link between two nodes (device or switch names)."""

    src: str
    dst: str
    bw_bytes_per_s: float
    latency_s: float = 0.0


@dataclass(frozen=True)
class Topology:
    """Devices, switches and links; validated on construction; routes cached."""

    name: str
    kinds: dict[str, DeviceKind]
    devices: tuple[Device, ...]
    links: tuple[Link, ...]
    switches: tuple[str, ...] = ()
    routing: str = "shortest"
    description: str = ""
    _cache: dict = field(default_factory=dict, repr=False, compare=False, hash=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "devices", tuple(self.devices))
        object.__setattr__(self, "links", tuple(self.links))
        object.__setattr__(self, "switches", tuple(self.switches))
        _validate(self)

    # --- lookups -------------------------------------------------------------
    @property
    def n_devices(self) -> int:
        return len(self.devices)

    def device_index(self, name: str) -> int:
        for i, d in enumerate(self.devices):
            if d.name == name:
                return i
        raise DistplanError(f"topology {self.name!r} has no device {name!r}")

    def kind_of(self, device: int) -> DeviceKind:
        return self.kinds[self.devices[device].kind]

    @cached_property
    def link_index(self) -> dict[tuple[str, str], int]:
        return {(l.src, l.dst): i for i, l in enumerate(self.links)}

    @cached_property
    def nx_graph(self) -> nx.DiGraph:
        g = nx.DiGraph()
        g.add_nodes_from(d.name for d in self.devices)
        g.add_nodes_from(self.switches)
        for i, l in enumerate(self.links):
            g.add_edge(l.src, l.dst, index=i, bw=l.bw_bytes_per_s)
        return g

    @cached_property
    def mesh_shape(self) -> tuple[int, int] | None:
        if self.routing != "xy":
            return None
        rows = max(d.pos[0] for d in self.devices) + 1
        cols = max(d.pos[1] for d in self.devices) + 1
        return rows, cols

    def route(self, a: int, b: int) -> tuple[int, ...]:
        """Link indices from device ``a`` to device ``b`` (empty when a == b)."""
        key = (a, b)
        if key not in self._cache:
            self._cache[key] = self._compute_route(a, b)
        return self._cache[key]

    def route_latency_s(self, a: int, b: int) -> float:
        return math.fsum(self.links[i].latency_s for i in self.route(a, b))

    def route_bw_bytes_per_s(self, a: int, b: int) -> float:
        """Bottleneck bandwidth of the route (inf for a == b)."""
        r = self.route(a, b)
        return min((self.links[i].bw_bytes_per_s for i in r), default=math.inf)

    @cached_property
    def _out_edges(self) -> tuple[list[dict[int, int]], dict[str, int], list[float]]:
        """Per node (in ``nx_graph``'s node order) its out-edges {neighbour: link index},
        each node name's position in that order, and each link's bandwidth."""
        g = self.nx_graph
        order = {n: i for i, n in enumerate(g.nodes)}
        out: list[dict[int, int]] = [{} for _ in order]
        for u, v, i in g.edges(data="index"):
            out[order[u]][order[v]] = i
        return out, order, [l.bw_bytes_per_s for l in self.links]

    @cached_property
    def _in_edges(self) -> list[dict[int, int]]:
        """Per node (``_out_edges``' order) its in-edges {neighbour: link index}."""
        out, _, _ = self._out_edges
        into: list[dict[int, int]] = [{} for _ in out]
        for u, nbrs in enumerate(out):
            for v, i in nbrs.items():
                into[v][u] = i
        return into

    def _compute_route(self, a: int, b: int) -> tuple[int, ...]:
        if a == b:
            return ()
        if self.routing == "xy":
            return self._xy_route(a, b)
        return _fewest_hops_route(self, self.devices[a].name, self.devices[b].name)

    def _xy_route(self, a: int, b: int) -> tuple[int, ...]:
        by_pos = {d.pos: d.name for d in self.devices}
        (r, c), (r2, c2) = self.devices[a].pos, self.devices[b].pos
        path = [(r, c)]
        while c != c2:
            c += 1 if c2 > c else -1
            path.append((r, c))
        while r != r2:
            r += 1 if r2 > r else -1
            path.append((r, c))
        out = []
        for p, q in zip(path, path[1:]):
            key = (by_pos[p], by_pos[q])
            if key not in self.link_index:
                raise DistplanError(
                    f"topology {self.name!r}: XY route {self.devices[a].name}->{self.devices[b].name} "
                    f"needs missing link {key[0]}->{key[1]}"
                )
            out.append(self.link_index[key])
        return tuple(out)


def _validate(t: Topology) -> None:
    where = f"topology {t.name!r}"
    if t.routing not in ROUTINGS:
        raise DistplanError(f"{where}: routing {t.routing!r} unknown; use one of {ROUTINGS}")
    if not t.devices:
        raise DistplanError(f"{where} has no devices")
    for k in t.kinds.values():
        if not k.peak_flops_per_s:
            raise DistplanError(f"{where}: device kind {k.name!r} supports no precision")
        for p, v in k.peak_flops_per_s.items():
            if p not in PRECISIONS:
                raise DistplanError(f"{where}: device kind {k.name!r}: unknown precision {p!r}")
            if not (v > 0 and math.isfinite(v)):
                raise DistplanError(f"{where}: device kind {k.name!r}: peak for {p} must be > 0")
        for attr in ("mem_capacity_bytes", "mem_bw_bytes_per_s"):
            v = getattr(k, attr)
            if not (isinstance(v, (int, float)) and v > 0 and math.isfinite(v)):
                raise DistplanError(f"{where}: device kind {k.name!r}: {attr} must be > 0, got {v!r}")
        if not (0 < k.efficiency <= 1):
            raise DistplanError(f"{where}: device kind {k.name!r}: efficiency must be in (0, 1]")
        _check_delay(k.launch_overhead_s, f"{where}: device kind {k.name!r}: launch_overhead_s")
        # rates far below one unit per second are typos, and make task times overflow to inf
        for p, v in k.peak_flops_per_s.items():
            if v * k.efficiency < MIN_RATE:
                raise DistplanError(f"{where}: device kind {k.name!r}: peak for {p} x efficiency is "
                                    f"{v * k.efficiency:.3g} FLOP/s; at least {MIN_RATE:g}")
        for attr, unit in (("mem_capacity_bytes", "bytes"), ("mem_bw_bytes_per_s", "byte/s")):
            if getattr(k, attr) < MIN_RATE:
                raise DistplanError(f"{where}: device kind {k.name!r}: {attr} is {getattr(k, attr):.3g}; "
                                    f"at least {MIN_RATE:g} {unit}")
        if not (isinstance(k.concurrency, int) and not isinstance(k.concurrency, bool) and k.concurrency >= 1):
            raise DistplanError(f"{where}: device kind {k.name!r}: concurrency must be an integer >= 1")
        if k.concurrency > MAX_CONCURRENCY:   # the simulator keeps a slot per concurrent task
            raise DistplanError(f"{where}: device kind {k.name!r}: concurrency {k.concurrency:,} is more tasks at "
                                f"once than the simulator models (at most {MAX_CONCURRENCY:,}); a device runs "
                                "1 (every preset) to a few")
    names: set[str] = set()
    for d in t.devices:
        if d.name in names:
            raise DistplanError(f"{where}: duplicate device name {d.name!r}")
        names.add(d.name)
        if d.kind not in t.kinds:
            raise DistplanError(
                f"{where}: device {d.name!r} has unknown kind {d.kind!r}; known kinds: {sorted(t.kinds)}"
            )
        if t.routing == "xy" and d.pos is None:
            raise DistplanError(f"{where}: XY routing needs pos=(row, col) on device {d.name!r}")
    if t.routing == "xy":
        at: dict[tuple, str] = {}
        for d in t.devices:
            pos = tuple(d.pos)
            if pos in at:
                raise DistplanError(f"{where}: devices {at[pos]!r} and {d.name!r} share mesh position {list(pos)}; "
                                    "XY routing needs one device per position")
            at[pos] = d.name
        _validate_mesh(where, at)
    for s in t.switches:
        if s in names:
            raise DistplanError(f"{where}: duplicate node name {s!r}")
        names.add(s)
    seen: set[tuple[str, str]] = set()
    for l in t.links:
        for end in (l.src, l.dst):
            if end not in names:
                raise DistplanError(f"{where}: link {l.src}->{l.dst} names unknown node {end!r}")
        if l.src == l.dst:
            raise DistplanError(f"{where}: link {l.src}->{l.dst} connects {l.src!r} to itself; "
                                "a link joins two different nodes")
        if (l.src, l.dst) in seen:
            raise DistplanError(f"{where}: duplicate link {l.src}->{l.dst}")
        seen.add((l.src, l.dst))
        if not (isinstance(l.bw_bytes_per_s, (int, float)) and l.bw_bytes_per_s > 0
                and math.isfinite(l.bw_bytes_per_s)):
            raise DistplanError(
                f"{where}: link {l.src}->{l.dst} bandwidth must be > 0, got {l.bw_bytes_per_s!r}"
            )
        if l.bw_bytes_per_s < MIN_RATE:
            raise DistplanError(f"{where}: link {l.src}->{l.dst} bandwidth is {l.bw_bytes_per_s:.3g} byte/s; "
                                f"at least {MIN_RATE:g}")
        _check_delay(l.latency_s, f"{where}: link {l.src}->{l.dst} latency")
    if t.routing == "xy":
        have = {(l.src, l.dst) for l in t.links}
        for d in t.devices:
            r, c = d.pos
            for q in ((r, c + 1), (r + 1, c)):
                if q in at:
                    for a, b in ((d.name, at[q]), (at[q], d.name)):
                        if (a, b) not in have:
                            raise DistplanError(f"{where}: XY routing needs a link each way between mesh "
                                                f"neighbours; there is no link {a}->{b}")
    g = nx.DiGraph()
    g.add_nodes_from(names)
    g.add_edges_from((l.src, l.dst) for l in t.links)
    if len(t.devices) > 1:
        comp = next(c for c in nx.strongly_connected_components(g) if t.devices[0].name in c)
        cut = [d.name for d in t.devices if d.name not in comp]
        if cut:
            raise DistplanError(
                f"{where}: devices {cut[:4]} cannot reach {t.devices[0].name!r} and back; "
                "add links so every device pair is connected"
            )


def _fewest_hops_route(t: Topology, src: str, dst: str) -> tuple[int, ...]:
    """The links of the fewest-hops path src -> dst with the highest bottleneck bandwidth,
    then the fewest devices forwarded through, ties by node order (the module docstring's
    rule). A breadth-first search from both ends, each step widening the side whose
    frontier has fewer edges, until they meet (a switch's thousand neighbours are never
    expanded: on h100x16384 a route across units took ~1 ms searching from one end), then
    every shortest path, as ``networkx.all_shortest_paths`` enumerates them: each passes
    through exactly one node where the two searches met, so it is a shortest path to that
    node followed by a shortest path from it."""
    out, order, bw = t._out_edges
    into = t._in_edges
    s, d = order[src], order[dst]
    n_dev = len(t.devices)   # nx_graph lists the devices first: a node index below it is a device
    # preds[v]: (previous node, link) on shortest s -> v paths; succs[v]: (next node, link) toward d
    preds: dict[int, list[tuple[int, int]]] = {s: []}
    succs: dict[int, list[tuple[int, int]]] = {d: []}
    fwd, bwd = [s], [d]
    meet: list[int] = []
    while not meet:
        if sum(len(out[u]) for u in fwd) <= sum(len(into[v]) for v in bwd):
            fwd = _widen(fwd, out, preds)
            ends = set(bwd)
            meet = [v for v in fwd if v in ends]
        else:
            bwd = _widen(bwd, into, succs)
            ends = set(fwd)
            meet = [v for v in bwd if v in ends]
        if not fwd or not bwd:
            raise nx.NetworkXNoPath(f"no path from {src} to {dst}")
    best: tuple | None = None
    for m in meet:
        for head_nodes, head_links in _paths(m, s, preds, True):
            for tail_nodes, tail_links in _paths(m, d, succs, False):
                nodes, links = head_nodes + tail_nodes[1:], head_links + tail_links
                key = (-min(bw[i] for i in links), sum(1 for x in nodes[1:-1] if x < n_dev), list(nodes))
                if best is None or key < best[0]:
                    best = (key, links)
    assert best is not None
    return best[1]


def _widen(frontier: list[int], edges: list[dict[int, int]], seen: dict[int, list[tuple[int, int]]]) -> list[int]:
    """One breadth-first level past ``frontier`` along ``edges``: the new nodes, each with
    every (frontier node, link) that reaches it recorded in ``seen``."""
    nxt: list[int] = []
    level: set[int] = set()
    for u in frontier:
        for v, li in edges[u].items():
            if v in level:
                seen[v].append((u, li))
            elif v not in seen:
                seen[v] = [(u, li)]
                level.add(v)
                nxt.append(v)
    return nxt


def _paths(m: int, end: int, steps: dict[int, list[tuple[int, int]]], backwards: bool):
    """Every shortest path between ``end`` and ``m`` along ``steps`` as (nodes, links) in
    travel order: end -> m for the source side (``backwards``), m -> end for the other."""
    stack: list[tuple[int, tuple[int, ...], tuple[int, ...]]] = [(m, (m,), ())]
    while stack:
        v, nodes, links = stack.pop()
        if v == end:
            yield nodes, links
            continue
        for u, li in steps[v]:
            if backwards:
                stack.append((u, (u, *nodes), (li, *links)))
            else:
                stack.append((u, (*nodes, u), (*links, li)))


def _validate_mesh(where: str, at: dict[tuple, str]) -> None:
    """XY routes run along a row, then along a column, through every position between:
    the devices must fill a whole rectangle of positions (else some route has a hole)."""
    rows = sorted({p[0] for p in at})
    cols = sorted({p[1] for p in at})
    for r in range(rows[0], rows[-1] + 1):
        for c in range(cols[0], cols[-1] + 1):
            if (r, c) not in at:
                raise DistplanError(f"{where}: XY routing needs a device at every mesh position of rows "
                                    f"{rows[0]}..{rows[-1]} x columns {cols[0]}..{cols[-1]}; none at {[r, c]}")


def _check_delay(value: object, what: str) -> None:
    """A latency or launch overhead: a number of seconds from 0 to ``MAX_DELAY_S``."""
    ok = isinstance(value, (int, float)) and not isinstance(value, bool)
    if not (ok and 0 <= value <= MAX_DELAY_S):
        raise DistplanError(f"{what} must be >= 0 and at most {MAX_DELAY_S:g} s (an hour; a real link or "
                            f"launch takes micro- to milliseconds), got {value!r} s")
