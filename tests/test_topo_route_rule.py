"""Routes on "shortest" topologies follow the module's rule (fewest hops, then the highest
bottleneck bandwidth, then the fewest devices forwarded through, then node order) exactly as the networkx enumeration of every
shortest path did before the search stopped at the destination's depth (a search over
the whole graph took 1-5 ms per route on a100x1024, seconds per symmetry check)."""
from __future__ import annotations

import random

import networkx as nx
import pytest

from distplan.topologies.presets import get_topology
from distplan.topologies.topology import Device, Link, Topology


def reference_route(t: Topology, a: int, b: int) -> tuple[int, ...]:
    """The rule by networkx: every shortest path, the best key."""
    if a == b:
        return ()
    g = t.nx_graph
    order = {n: i for i, n in enumerate(g.nodes)}
    best = None
    for path in nx.all_shortest_paths(g, t.devices[a].name, t.devices[b].name):
        links = tuple(g.edges[u, v]["index"] for u, v in zip(path, path[1:]))
        relays = sum(1 for n in path[1:-1] if n not in t.switches)
        key = (-min(t.links[i].bw_bytes_per_s for i in links), relays, [order[n] for n in path])
        if best is None or key < best[0]:
            best = (key, links)
    return best[1]


@pytest.mark.parametrize("name", ["ring8", "dgx-a100", "hybrid-v100-t4", "a100x16", "h100x32", "a100x1024",
                                  "h100x512", "gb200-nvl72x2"])
def test_preset_routes_follow_the_rule(name):
    t = get_topology(name)
    rng = random.Random(0)
    n = t.n_devices
    pairs = [(a, b) for a in range(n) for b in range(n)] if n <= 32 else \
        [(rng.randrange(n), rng.randrange(n)) for _ in range(200)]
    assert [t.route(a, b) for a, b in pairs] == [reference_route(t, a, b) for a, b in pairs]


@pytest.mark.parametrize("seed", range(12))
def test_random_graph_routes_follow_the_rule(seed):
    """A 4x4 mesh routed by fewest hops (many ties), random bandwidths, random shortcuts
    through devices and switches."""
    mesh = get_topology("mcm4x4")
    rng = random.Random(seed)
    devs = tuple(Device(d.name, d.kind) for d in mesh.devices)
    names = [d.name for d in devs] + ["s0", "s1"]
    links = {(l.src, l.dst): Link(l.src, l.dst, rng.choice([1e9, 2e9, 4e9]), 1e-6) for l in mesh.links}
    for _ in range(rng.randrange(8)):
        a, b = rng.choice(names), rng.choice(names)
        if a != b:
            links[(a, b)] = Link(a, b, rng.choice([1e9, 3e9]), 0.0)
            links[(b, a)] = Link(b, a, rng.choice([1e9, 3e9]), 0.0)
    t = Topology(f"rnd{seed}", mesh.kinds, devs, tuple(links.values()), switches=("s0", "s1"), routing="shortest")
    pairs = [(a, b) for a in range(16) for b in range(16)]
    assert [t.route(a, b) for a, b in pairs] == [reference_route(t, a, b) for a, b in pairs]
