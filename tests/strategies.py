"""Hypothesis strategies: random DAG graphs and random connected topologies."""
from __future__ import annotations

from hypothesis import strategies as st

from distplan.core.precision import PRECISION_NAMES
from distplan.topologies.topology import Device, DeviceKind, Link, Topology
from distplan.workloads.graph import Graph, Operator, Tensor

finite = st.floats(min_value=0.0, max_value=1e13, allow_nan=False, allow_infinity=False)


@st.composite
def graphs(draw, max_ops: int = 8, mode: str | None = None) -> Graph:
    n = draw(st.integers(1, max_ops))
    ops = tuple(
        Operator(f"v{i}", draw(st.sampled_from(["matmul", "softmax", "add", "layernorm"])),
                 draw(finite), draw(finite), draw(st.integers(0, 10**6)), draw(st.integers(0, 10**6)),
                 draw(st.floats(0, 1e7)))
        for i in range(n)
    )
    tensors = []
    for j in range(1, n):
        for i in draw(st.sets(st.integers(0, j - 1), max_size=2)):
            tensors.append(Tensor(f"v{i}", f"v{j}", draw(st.integers(0, 10**6))))
    m = mode or draw(st.sampled_from(["inference", "training"]))
    return Graph("rand", ops, tuple(tensors), mode=m)


@st.composite
def device_kinds(draw, name: str = "k") -> DeviceKind:
    precs = draw(st.sets(st.sampled_from(PRECISION_NAMES), min_size=1))
    peaks = {p: draw(st.floats(1e9, 1e15)) for p in sorted(precs)}
    return DeviceKind(name, peaks, draw(st.floats(1e3, 1e11)), draw(st.floats(1e9, 1e13)),
                      draw(st.floats(0.05, 1.0)), draw(st.floats(0, 1e-5)))


@st.composite
def topologies(draw, max_devices: int = 4, min_devices: int = 1, kinds: dict[str, DeviceKind] | None = None,
               bw_range: tuple[float, float] = (1e6, 1e12), latency: bool = True, max_extra_links: int = 3,
               name: str = "rand") -> Topology:
    """A random connected topology: a bidirectional chain plus random extra links; device
    kinds drawn at random unless ``kinds`` fixes them."""
    n = draw(st.integers(min_devices, max_devices))
    if kinds is None:
        kinds = {f"k{i}": draw(device_kinds(f"k{i}")) for i in range(draw(st.integers(1, 2)))}
    devs = tuple(Device(f"d{i}", draw(st.sampled_from(sorted(kinds)))) for i in range(n))
    pairs = {(i, i + 1) for i in range(n - 1)}
    if n > 2:
        pairs |= draw(st.sets(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1))
                              .filter(lambda p: p[0] < p[1]), max_size=max_extra_links))
    links = []
    for a, b in sorted(pairs):
        bw = draw(st.floats(*bw_range))
        lat = draw(st.floats(0, 1e-5)) if latency else 0.0
        links += [Link(f"d{a}", f"d{b}", bw, lat), Link(f"d{b}", f"d{a}", bw, lat)]
    return Topology(name, kinds, devs, tuple(links))
