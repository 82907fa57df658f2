"""Tiny hand-built instances shared by the tests (exact numbers can be worked out by hand)."""
from __future__ import annotations

import pytest

from distplan.topologies.topology import Device, DeviceKind, Link, Topology
from distplan.workloads.graph import Graph, Operator, Tensor

CHIP = DeviceKind("chip", {"fp16": 1e12, "int8": 2e12}, mem_capacity_bytes=1e6,
                  mem_bw_bytes_per_s=1e11, efficiency=1.0)


def chain_graph(n: int = 4, mode: str = "inference") -> Graph:
    """o0 -> o1 -> ... ; op i has (i+1) GFLOP forward, 1000 params, 100 output elements."""
    ops = tuple(Operator(f"o{i}", "matmul", 1e9 * (i + 1), 2e9 * (i + 1), 1000, 100, 1e4) for i in range(n))
    return Graph("chain", ops, tuple(Tensor(f"o{i}", f"o{i + 1}", 100) for i in range(n - 1)), mode=mode)


def line_topology(n: int = 2, bw: float = 1e9, latency_s: float = 0.0) -> Topology:
    devs = tuple(Device(f"d{i}", "chip") for i in range(n))
    links = []
    for i in range(n - 1):
        links += [Link(f"d{i}", f"d{i + 1}", bw, latency_s), Link(f"d{i + 1}", f"d{i}", bw, latency_s)]
    return Topology(f"line{n}", {"chip": CHIP}, devs, tuple(links))


@pytest.fixture
def chain4() -> Graph:
    return chain_graph(4)


@pytest.fixture
def line2() -> Topology:
    return line_topology(2)


def write_unreadable(path, content) -> None:
    """Make ``path`` a file no reader accepts: "dir" (a folder), bytes, or text."""
    if content == "dir":
        path.mkdir()
    elif isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
