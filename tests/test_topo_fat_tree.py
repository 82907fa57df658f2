"""The as-built GPU cluster presets: h100x/h200x/b200x<N> (8-GPU NVSwitch nodes, 8 rails a
node on a rail-optimised fat tree, optional oversubscription above the leaf) and
gb200-nvl72x<N> (72-GPU NVLink domains); the H200, B200 and GB200 kinds' figures."""
from __future__ import annotations

import itertools

import pytest

from distplan.core.errors import DistplanError
from distplan.topologies.presets import get_topology, list_presets


def path_nodes(t, a: int, b: int) -> list[str]:
    nodes = [t.devices[a].name]
    for i in t.route(a, b):
        assert t.links[i].src == nodes[-1]
        nodes.append(t.links[i].dst)
    return nodes


def test_h100x512_is_two_units_of_32_nodes_with_a_leaf_per_rail():
    t = get_topology("h100x512")
    assert t.n_devices == 512 and {d.node for d in t.devices} == set(range(64))
    leaves = [s for s in t.switches if ".rail" in s]
    assert leaves == [f"su{u}.rail{r}" for u in range(2) for r in range(8)] and "spine" in t.switches
    i = t.device_index
    # inside a node: NVSwitch, 450 GB/s
    assert path_nodes(t, i("n3.gpu1"), i("n3.gpu6")) == ["n3.gpu1", "n3.nvswitch", "n3.gpu6"]
    # same rail, same unit (nodes 0..31): the rail's leaf, 50 GB/s, 2 us
    a, b = i("n0.gpu5"), i("n31.gpu5")
    assert path_nodes(t, a, b) == ["n0.gpu5", "su0.rail5", "n31.gpu5"]
    assert t.route_bw_bytes_per_s(a, b) == 50e9 and t.route_latency_s(a, b) == pytest.approx(2e-6)
    # same rail, other unit: leaf, spine, leaf
    assert path_nodes(t, a, i("n32.gpu5")) == ["n0.gpu5", "su0.rail5", "spine", "su1.rail5", "n32.gpu5"]
    # another rail in the same unit: up the spine, never through another GPU
    assert path_nodes(t, i("n0.gpu0"), i("n1.gpu3")) == ["n0.gpu0", "su0.rail0", "spine", "su0.rail3", "n1.gpu3"]
    trunk = {l.bw_bytes_per_s for l in t.links if l.dst == "spine"}
    assert trunk == {32 * 50e9}
    kinds = {d.kind for d in t.devices}
    assert kinds == {"h100"}


@pytest.mark.parametrize("name", ["h100x64", "h100x64-os2", "gb200-nvl72x2"])
def test_switched_routes_never_forward_through_a_gpu(name):
    t = get_topology(name)
    sw = set(t.switches)
    for a, b in itertools.product(range(0, t.n_devices, 3), range(1, t.n_devices, 5)):
        assert all(n in sw for n in path_nodes(t, a, b)[1:-1])


def test_oversubscription_divides_the_leaf_trunk():
    for suffix, r in (("", 1), ("-os2", 2), ("-os4", 4), ("-os1.5", 1.5)):
        t = get_topology(f"h100x256{suffix}")
        assert {l.bw_bytes_per_s for l in t.links if "spine" in (l.src, l.dst)} == {32 * 50e9 / r}
        assert ("non-blocking" in t.description) == (r == 1)
    with pytest.raises(DistplanError, match="between 1 .non-blocking."):
        get_topology("h100x64-os0.5")


def test_kinds_carry_the_data_sheet_figures():
    h200 = get_topology("h200x8").kinds["h200"]
    assert h200.peak_flops_per_s["bf16"] == 989e12 and h200.peak_flops_per_s["fp8"] == 1979e12
    assert h200.mem_capacity_bytes == 141e9 and h200.mem_bw_bytes_per_s == 4.8e12
    b200 = get_topology("b200x8").kinds["b200"]
    assert b200.peak_flops_per_s["bf16"] == 2250e12 and b200.peak_flops_per_s["fp8"] == 4500e12
    assert b200.mem_capacity_bytes == 180e9 and b200.mem_bw_bytes_per_s == 8e12
    gb = get_topology("gb200-nvl72x1").kinds["gb200"]
    assert gb.peak_flops_per_s["bf16"] == 2500e12 and gb.peak_flops_per_s["fp8"] == 5000e12
    assert gb.mem_capacity_bytes == 186e9 and gb.mem_bw_bytes_per_s == 8e12
    for k in (h200, b200, gb):
        assert "data sheet" in k.source and k.supports("fp8")
    nvl = {l.bw_bytes_per_s for l in get_topology("b200x8").links if "nvswitch" in (l.src + l.dst)}
    assert nvl == {900e9}


def test_nvl72_racks_are_one_nvlink_domain_each():
    t = get_topology("gb200-nvl72x2")
    assert t.n_devices == 144 and [d.node for d in t.devices] == [i // 72 for i in range(144)]
    i = t.device_index
    assert path_nodes(t, i("n0.gpu0"), i("n0.gpu71")) == ["n0.gpu0", "n0.nvswitch", "n0.gpu71"]
    assert t.route_bw_bytes_per_s(i("n0.gpu0"), i("n0.gpu71")) == 900e9
    assert path_nodes(t, i("n0.gpu6"), i("n1.gpu14")) == ["n0.gpu6", "su0.rail6", "n1.gpu14"]   # 3 racks a unit
    four = get_topology("gb200-nvl72x4")
    j = four.device_index
    assert path_nodes(four, j("n0.gpu6"), j("n3.gpu6")) == ["n0.gpu6", "su0.rail6", "spine", "su1.rail6", "n3.gpu6"]


def test_large_clusters_build_and_names_are_checked():
    t = get_topology("h100x16384")
    assert t.n_devices == 16384 and len([s for s in t.switches if ".rail" in s]) == 64 * 8
    names = [n for n, _ in list_presets()]
    assert {"h100x<N>", "h200x<N>", "b200x<N>", "gb200-nvl72x<N>"} <= set(names)
    for bad, msg in (("h100x12", "multiple of 8"), ("b200x0", "between 1 and"),
                     ("h200x262144", "between 1 and 131,072"), ("gb200-nvl72x0", "rack count")):
        with pytest.raises(DistplanError, match=msg):
            get_topology(bad)
