"""Topology presets: exact shapes, routes and figures; every preset routes every pair."""
from __future__ import annotations

import itertools

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from distplan.core.errors import DistplanError
from distplan.topologies.presets import DEFAULT_TOPOLOGY, get_topology, list_presets
from distplan.topologies.topology import Topology

PRESET_SAMPLES = ["mcm4x4", "mcm1x1", "mcm1x5", "mcm3x2", "ring2", "ring7", "dgx-a100",
                  "dgx-h100", "a100x8", "a100x16", "h100x24", "h200x16-os2", "b200x8", "hybrid-v100-t4"]


def path_nodes(t: Topology, a: int, b: int) -> list[str]:
    """Node names along route(a, b), checking the links are contiguous."""
    nodes = [t.devices[a].name]
    for i in t.route(a, b):
        link = t.links[i]
        assert link.src == nodes[-1]
        nodes.append(link.dst)
    assert nodes[-1] == t.devices[b].name
    return nodes


def test_list_presets_default_first_and_every_entry_described():
    presets = list_presets()
    assert presets[0][0] == DEFAULT_TOPOLOGY == "mcm4x4"
    names = [n for n, _ in presets]
    for n in ("mcm<R>x<C>", "ring<N>", "dgx-a100", "dgx-h100", "a100x<N>", "h100x<N>",
              "hybrid-v100-t4"):
        assert n in names
    assert all(isinstance(d, str) and d for _, d in presets)


@pytest.mark.parametrize("name", PRESET_SAMPLES)
def test_every_preset_validates_and_routes_every_pair(name):
    t = get_topology(name)
    assert t.name == name and t.description
    switches = set(t.switches)
    for a, b in itertools.product(range(t.n_devices), repeat=2):
        nodes = path_nodes(t, a, b)
        assert len(nodes) == len(t.route(a, b)) + 1
        if a == b:
            assert t.route(a, b) == ()
        if t.switches:  # switched presets never forward through another device
            assert all(n in switches for n in nodes[1:-1])
    for k in t.kinds.values():
        assert k.source and 0.6 <= k.efficiency <= 0.8 and k.launch_overhead_s > 0


def test_mcm4x4_shape_and_links():
    t = get_topology("mcm4x4")
    assert t.routing == "xy" and t.n_devices == 16 and t.mesh_shape == (4, 4)
    assert [d.pos for d in t.devices] == [(r, c) for r in range(4) for c in range(4)]
    assert len(t.links) == 2 * (4 * 3 + 3 * 4)
    pairs = {(l.src, l.dst) for l in t.links}
    for l in t.links:
        assert (l.dst, l.src) in pairs
        assert l.bw_bytes_per_s == 100e9 and l.latency_s == 20e-9
        (r, c), (r2, c2) = (t.devices[t.device_index(n)].pos for n in (l.src, l.dst))
        assert abs(r - r2) + abs(c - c2) == 1


def test_mcm_xy_route_exact_corner_to_corner():
    t = get_topology("mcm4x4")
    a, b = t.device_index("c0_0"), t.device_index("c3_3")
    assert path_nodes(t, a, b) == ["c0_0", "c0_1", "c0_2", "c0_3", "c1_3", "c2_3", "c3_3"]
    assert path_nodes(t, b, a) == ["c3_3", "c3_2", "c3_1", "c3_0", "c2_0", "c1_0", "c0_0"]
    assert t.route_latency_s(a, b) == pytest.approx(6 * 20e-9, rel=1e-12)
    assert t.route_bw_bytes_per_s(a, b) == 100e9


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 8), st.integers(1, 8), st.data())
def test_mcm_route_length_is_manhattan_distance_column_first(rows, cols, data):
    t = get_topology(f"mcm{rows}x{cols}")
    a = data.draw(st.integers(0, t.n_devices - 1))
    b = data.draw(st.integers(0, t.n_devices - 1))
    (r, c), (r2, c2) = t.devices[a].pos, t.devices[b].pos
    assert len(t.route(a, b)) == abs(r - r2) + abs(c - c2)
    pos = [t.devices[t.device_index(n)].pos for n in path_nodes(t, a, b)]
    turned = False  # column moves first, then row moves only
    for (p, q), (p2, q2) in zip(pos, pos[1:]):
        assert abs(p - p2) + abs(q - q2) == 1
        if p != p2:
            turned = True
        else:
            assert not turned
    assert pos[0] == (r, c) and pos[-1] == (r2, c2)


def test_chiplet_memory_fits_bert_and_gpt2_embedding_only_at_int8():
    t = get_topology("mcm4x4")
    chip = t.kinds["chiplet"]
    assert chip.mem_capacity_bytes == 64 * 2**20
    assert 16 * chip.mem_capacity_bytes >= 110e6 * 2          # BERT-base at fp16
    assert chip.mem_capacity_bytes >= 23.4e6 * 2              # BERT word embedding, fp16
    assert chip.mem_capacity_bytes >= 38.6e6 * 1              # GPT-2 word embedding, int8
    assert chip.mem_capacity_bytes < 38.6e6 * 2               # ... but not at fp16
    peak = chip.peak_flops_per_s
    assert peak["int8"] == peak["fp8"] == 2 * peak["fp16"] == 2 * peak["bf16"] == 4e12
    assert peak["fp32"] < peak["fp16"]


def test_gpu_precisions_follow_qsync_and_fp8_only_on_h100():
    kinds = {}
    for name in ("dgx-a100", "dgx-h100", "hybrid-v100-t4"):
        kinds.update(get_topology(name).kinds)
    assert set(kinds["v100"].peak_flops_per_s) == {"fp16", "fp32"}
    assert set(kinds["t4"].peak_flops_per_s) == {"int8", "fp16", "fp32"}
    assert set(kinds["a100"].peak_flops_per_s) == {"int8", "fp16", "bf16", "tf32", "fp32"}
    assert set(kinds["h100"].peak_flops_per_s) == {"fp8", "int8", "fp16", "bf16", "tf32", "fp32"}
    assert [k for k in kinds.values() if k.supports("fp8")] == [kinds["h100"]]
    assert kinds["a100"].peak_flops_per_s["fp16"] == 312e12
    assert kinds["h100"].peak_flops_per_s["fp8"] == 1979e12
    assert kinds["a100"].mem_bw_bytes_per_s == 2039e9 and kinds["h100"].mem_bw_bytes_per_s == 3350e9
    assert kinds["t4"].peak_flops_per_s["int8"] == 2 * kinds["t4"].peak_flops_per_s["fp16"]


@pytest.mark.parametrize("name,bw", [("dgx-a100", 300e9), ("dgx-h100", 450e9)])
def test_dgx_routes_are_two_hops_through_nvswitch(name, bw):
    t = get_topology(name)
    assert t.n_devices == 8 and t.switches == ("nvswitch",)
    assert all(bw == l.bw_bytes_per_s for l in t.links) and len(t.links) == 16
    for a, b in itertools.permutations(range(8), 2):
        assert path_nodes(t, a, b) == [f"gpu{a}", "nvswitch", f"gpu{b}"]
        assert t.route_bw_bytes_per_s(a, b) == bw
        assert t.route_latency_s(a, b) == pytest.approx(1e-6, rel=1e-12)


@pytest.mark.parametrize("gpu,rail_bw,nvl_bw", [("a100", 25e9, 300e9)])
def test_cluster_inter_node_routes_cross_infiniband(gpu, rail_bw, nvl_bw):
    """One InfiniBand port (rail) per GPU: between nodes a transfer leaves on the sender's
    port and enters on the receiver's; inside a node NVSwitch wins. (h100x<N> is a
    rail-optimised fat tree: tests/test_topo_fat_tree.py.)"""
    t = get_topology(f"{gpu}x24")
    assert t.n_devices == 24 and set(t.switches) == {"n0.nvswitch", "n1.nvswitch",
                                                     "n2.nvswitch", "ib"}
    assert [d.node for d in t.devices] == [i // 8 for i in range(24)]
    a, b, c = t.device_index("n0.gpu3"), t.device_index("n0.gpu5"), t.device_index("n2.gpu1")
    assert path_nodes(t, a, b) == ["n0.gpu3", "n0.nvswitch", "n0.gpu5"]
    assert t.route_bw_bytes_per_s(a, b) == nvl_bw
    assert path_nodes(t, a, c) == ["n0.gpu3", "ib", "n2.gpu1"]
    assert t.route_bw_bytes_per_s(a, c) == rail_bw
    assert t.route_latency_s(a, c) == pytest.approx(1e-6 * 2, rel=1e-12)
    used = [set(t.route(x, c)) for x in range(8)]   # the 8 GPUs of node 0 to one GPU
    assert all(len(u & w) == 1 for u, w in itertools.combinations(used, 2))  # only the receiver's port
    for x, y in itertools.permutations(range(24), 2):
        crosses = "ib" in path_nodes(t, x, y)
        assert crosses == (t.devices[x].node != t.devices[y].node)


def test_hybrid_fleet_two_hosts():
    t = get_topology("hybrid-v100-t4")
    assert [d.kind for d in t.devices] == ["v100"] * 4 + ["t4"] * 4
    assert [d.node for d in t.devices] == [0] * 4 + [1] * 4
    v, w, tt = t.device_index("h0.v1000"), t.device_index("h0.v1003"), t.device_index("h1.t42")
    assert path_nodes(t, v, w) == ["h0.v1000", "h0.pcie", "h0.v1003"]
    assert t.route_bw_bytes_per_s(v, w) == 15.75e9
    assert path_nodes(t, v, tt) == ["h0.v1000", "h0.pcie", "net", "h1.pcie", "h1.t42"]
    assert t.route_bw_bytes_per_s(v, tt) == 12.5e9


def test_ring_routes_take_the_short_way():
    t = get_topology("ring6")
    assert t.routing == "shortest" and len(t.links) == 12
    assert path_nodes(t, 0, 5) == ["r0", "r5"]
    assert path_nodes(t, 0, 2) == ["r0", "r1", "r2"]
    assert len(t.route(0, 3)) == 3
    for a, b in itertools.product(range(6), repeat=2):
        assert len(t.route(a, b)) == min((a - b) % 6, (b - a) % 6)
    two = get_topology("ring2")
    assert len(two.links) == 2 and two.route(0, 1) == (0,) and two.route(1, 0) == (1,)


def test_names_are_case_insensitive_and_rebuilt_equal():
    assert get_topology("MCM4x4") == get_topology("mcm4x4")
    assert get_topology(" dgx-H100 ") == get_topology("dgx-h100")


@pytest.mark.parametrize("name,fragment", [
    ("mcm5", "unknown topology 'mcm5'"),
    ("dgx-v100", "mcm<R>x<C>"),
    ("mcm0x4", "rows must be between 1"),
    ("mcm64x64", "more than 1024"),
    ("ring1", "at least 2 devices"),
    ("a100x12", "multiple of 8"),
    ("h100x0", "GPU count must be between 1"),
])
def test_bad_names_raise_helpful_errors(name, fragment):
    with pytest.raises(DistplanError, match=fragment.replace("<", ".").replace(">", ".")):
        get_topology(name)
