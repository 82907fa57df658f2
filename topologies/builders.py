"""Generic topology shapes: a 2-D mesh, a ring, switched nodes, and clusters of them.

Builders take device kinds and link figures as arguments and know nothing about
particular products; ``topologies.presets`` binds them to published figures.
Every physical link is added as two directed links, forward then reverse.
"""
from __future__ import annotations

from distplan.topologies.topology import Device, DeviceKind, Link, Topology


def duplex(a: str, b: str, bw_bytes_per_s: float, latency_s: float) -> list[Link]:
    """Two directed links a->b and b->a with the same bandwidth and latency."""
    return [Link(a, b, bw_bytes_per_s, latency_s), Link(b, a, bw_bytes_per_s, latency_s)]


def mesh_device_name(row: int, col: int) -> str:
    return f"c{row}_{col}"


def mesh(name: str, rows: int, cols: int, kind: DeviceKind, bw_bytes_per_s: float,
         latency_s: float, description: str = "") -> Topology:
    """``rows x cols`` devices ``c<r>_<c>`` (row-major order) with XY routing and a duplex
    link between each pair of horizontal or vertical neighbours."""
    devices = [Device(mesh_device_name(r, c), kind.name, pos=(r, c))
               for r in range(rows) for c in range(cols)]
    links: list[Link] = []
    for r in range(rows):
        for c in range(cols):
            here = mesh_device_name(r, c)
            if c + 1 < cols:
                links += duplex(here, mesh_device_name(r, c + 1), bw_bytes_per_s, latency_s)
            if r + 1 < rows:
                links += duplex(here, mesh_device_name(r + 1, c), bw_bytes_per_s, latency_s)
    return Topology(name, {kind.name: kind}, tuple(devices), tuple(links), routing="xy",
                    description=description)


def ring(name: str, n: int, kind: DeviceKind, bw_bytes_per_s: float, latency_s: float,
         description: str = "") -> Topology:
    """``n`` devices ``r<i>`` with a duplex link from each to the next (two devices share
    one duplex link); fewest-hops routing."""
    devices = [Device(f"r{i}", kind.name) for i in range(n)]
    links: list[Link] = []
    pairs = [(i, (i + 1) % n) for i in range(n)] if n > 2 else [(0, 1)] if n == 2 else []
    for i, j in pairs:
        links += duplex(f"r{i}", f"r{j}", bw_bytes_per_s, latency_s)
    return Topology(name, {kind.name: kind}, tuple(devices), tuple(links), routing="shortest",
                    description=description)


def switched_cluster(name: str, n_nodes: int, per_node: int, kind: DeviceKind,
                     dev_bw_bytes_per_s: float, dev_latency_s: float,
                     fabric_bw_bytes_per_s: float | None = None, fabric_latency_s: float = 0.0,
                     description: str = "") -> Topology:
    """``n_nodes`` nodes of ``per_node`` devices, each device linked to its node's switch.

    One node and ``fabric_bw_bytes_per_s=None``: devices ``gpu<j>`` on switch
    ``nvswitch``. Otherwise devices ``n<i>.gpu<j>`` (``node=i``) on switch
    ``n<i>.nvswitch``, and each node switch linked to one fabric switch ``ib``.
    """
    kinds = {kind.name: kind}
    if fabric_bw_bytes_per_s is None:
        if n_nodes != 1:
            raise ValueError("several nodes need a fabric")
        devices = [Device(f"gpu{j}", kind.name) for j in range(per_node)]
        links = [l for d in devices for l in duplex(d.name, "nvswitch", dev_bw_bytes_per_s,
                                                     dev_latency_s)]
        return Topology(name, kinds, tuple(devices), tuple(links), ("nvswitch",),
                        routing="shortest", description=description)
    return _two_level(name, [(kind, per_node)] * n_nodes, lambda i, k, j: f"n{i}.gpu{j}",
                      lambda i: f"n{i}.nvswitch", "ib", dev_bw_bytes_per_s, dev_latency_s,
                      fabric_bw_bytes_per_s, fabric_latency_s, description)


def rail_cluster(name: str, n_nodes: int, per_node: int, kind: DeviceKind,
                 dev_bw_bytes_per_s: float, dev_latency_s: float,
                 rail_bw_bytes_per_s: float, rail_latency_s: float, description: str = "") -> Topology:
    """``n_nodes`` nodes of ``per_node`` devices ``n<i>.gpu<j>`` (``node=i``): inside a node
    every device is linked to the node's switch ``n<i>.nvswitch``; every device also has
    its own network port (a rail) linked to one non-blocking fabric switch ``ib``. Inside
    a node the switch route wins (same hop count, higher bandwidth); between nodes a
    transfer leaves on the sender's port and enters on the receiver's, so GPUs of one
    node do not share a network link (as on DGX nodes, one HCA per GPU)."""
    kinds = {kind.name: kind}
    devices, links, switches = [], [], []
    for i in range(n_nodes):
        sw = f"n{i}.nvswitch"
        switches.append(sw)
        for j in range(per_node):
            d = Device(f"n{i}.gpu{j}", kind.name, node=i)
            devices.append(d)
            links += duplex(d.name, sw, dev_bw_bytes_per_s, dev_latency_s)
            links += duplex(d.name, "ib", rail_bw_bytes_per_s, rail_latency_s)
    switches.append("ib")
    return Topology(name, kinds, tuple(devices), tuple(links), tuple(switches),
                    routing="shortest", description=description)


def rail_fat_tree(name: str, n_domains: int, per_domain: int, kind: DeviceKind,
                  dev_bw_bytes_per_s: float, dev_latency_s: float, rails: int,
                  rail_bw_bytes_per_s: float, rail_latency_s: float, leaf_down_ports: int,
                  oversubscription: float = 1.0, description: str = "") -> Topology:
    """A rail-optimised fat tree: ``n_domains`` scale-up domains (an 8-GPU node, an NVL72
    rack) of ``per_domain`` devices ``n<i>.gpu<j>`` (``node=i``) on the domain's switch
    ``n<i>.nvswitch``; every device also has its own network port on rail ``j % rails``.

    The domains are cut into scalable units of ``leaf_down_ports // (per_domain // rails)``
    domains (at least one); each unit has one leaf switch per rail, ``su<u>.rail<r>``, that
    the unit's ports of that rail plug into. Every leaf has one trunk to the spine layer,
    one non-blocking switch ``spine``, of the leaf's full unit of ports x
    ``rail_bw_bytes_per_s`` / ``oversubscription`` (1: non-blocking; 2: 2:1 above the
    leaf). Routes: inside a domain its switch (2 hops); same rail, same unit: the leaf (2
    hops); otherwise leaf, spine, leaf (4 hops; a different rail too, as a rail-optimised
    fabric connects rails above the leaf). Switches are listed leaves, spine, then domain
    switches, so a cross-rail route goes up the spine rather than through another GPU.
    """
    if per_domain % rails:
        raise ValueError(f"{per_domain} devices a domain do not split into {rails} rails")
    per_rail = per_domain // rails
    unit = max(1, leaf_down_ports // per_rail)
    n_units = -(-n_domains // unit)
    trunk = unit * per_rail * rail_bw_bytes_per_s / oversubscription
    kinds = {kind.name: kind}
    devices, links = [], []
    leaves = [f"su{u}.rail{r}" for u in range(n_units) for r in range(rails)]
    domain_switches = [f"n{i}.nvswitch" for i in range(n_domains)]
    for i in range(n_domains):
        sw, u = domain_switches[i], i // unit
        for j in range(per_domain):
            d = Device(f"n{i}.gpu{j}", kind.name, node=i)
            devices.append(d)
            links += duplex(d.name, sw, dev_bw_bytes_per_s, dev_latency_s)
            links += duplex(d.name, f"su{u}.rail{j % rails}", rail_bw_bytes_per_s, rail_latency_s)
    for leaf in leaves:
        links += duplex(leaf, "spine", trunk, rail_latency_s)
    return Topology(name, kinds, tuple(devices), tuple(links), tuple(leaves + ["spine"] + domain_switches),
                    routing="shortest", description=description)


def _two_level(name: str, groups: list[tuple[DeviceKind, int]], device_name, group_switch, top: str,
               leaf_bw_bytes_per_s: float, leaf_latency_s: float, top_bw_bytes_per_s: float,
               top_latency_s: float, description: str) -> Topology:
    """Group ``i`` holds ``count`` devices ``device_name(i, kind, j)`` (``node=i``) on switch
    ``group_switch(i)``; every group switch is linked to the switch ``top``."""
    kinds: dict[str, DeviceKind] = {}
    devices, links, switches = [], [], []
    for i, (kind, count) in enumerate(groups):
        kinds[kind.name] = kind
        sw = group_switch(i)
        switches.append(sw)
        for j in range(count):
            d = Device(device_name(i, kind, j), kind.name, node=i)
            devices.append(d)
            links += duplex(d.name, sw, leaf_bw_bytes_per_s, leaf_latency_s)
        links += duplex(sw, top, top_bw_bytes_per_s, top_latency_s)
    switches.append(top)
    return Topology(name, kinds, tuple(devices), tuple(links), tuple(switches),
                    routing="shortest", description=description)


def hosts_on_network(name: str, hosts: list[tuple[DeviceKind, int]], host_bw_bytes_per_s: float,
                     host_latency_s: float, net_bw_bytes_per_s: float, net_latency_s: float,
                     description: str = "") -> Topology:
    """Hosts ``h<i>`` each holding ``count`` devices ``h<i>.<kind><j>`` (``node=i``) on a
    host switch ``h<i>.pcie``; every host switch is linked to the network switch ``net``."""
    return _two_level(name, hosts, lambda i, k, j: f"h{i}.{k.name}{j}", lambda i: f"h{i}.pcie", "net",
                      host_bw_bytes_per_s, host_latency_s, net_bw_bytes_per_s, net_latency_s, description)


def fully_connected(name: str, n: int, kind: DeviceKind, bw_bytes_per_s: float, latency_s: float,
                    description: str = "") -> Topology:
    """``n`` devices ``a<i>`` with a duplex link between every pair (every route one hop)."""
    devices = [Device(f"a{i}", kind.name) for i in range(n)]
    links: list[Link] = []
    for i in range(n):
        for j in range(i + 1, n):
            links += duplex(f"a{i}", f"a{j}", bw_bytes_per_s, latency_s)
    return Topology(name, {kind.name: kind}, tuple(devices), tuple(links), routing="shortest",
                    description=description)
