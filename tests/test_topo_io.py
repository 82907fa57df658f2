"""Topology files: unit conversion, exact round trips, and one clear error per bad input."""
from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from distplan.core.errors import DistplanError
from distplan.core.precision import PRECISION_NAMES
from distplan.testing.strategies import topologies as random_topologies
from distplan.topologies.io import load_topology, save_topology, topology_from_dict, topology_to_dict
from distplan.topologies.presets import get_topology
from distplan.topologies.topology import Device, DeviceKind, Link, Topology
from distplan.core.units import GIB, GIGA, MIB, MICRO, NANO, TERA, from_si, number_text, to_si

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "topologies" / "small-mesh.yaml"
PRESETS = ["mcm4x4", "mcm2x3", "ring5", "dgx-a100", "dgx-h100", "a100x16", "h100x8",
           "hybrid-v100-t4"]

SMALL = """\
name: tiny
routing: shortest
kinds:
  k:
    peak_TFLOPs: {fp16: 2, int8: 4}
    memory_GiB: 1
    memory_GBps: 1e3
    efficiency: 0.5
    launch_overhead_us: 1.5
devices:
  - {name: a, kind: k}
  - {name: b, kind: k, node: 1}
switches: [s]
links:
  - {src: a, dst: s, GBps: 12.5, latency_us: 2}
  - {src: s, dst: b, GBps: 100, latency_ns: 20}
"""


def write(tmp_path: Path, text: str, name: str = "t.yaml") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


def test_example_file_is_the_mcm2x2_preset_with_its_own_name():
    t = load_topology(EXAMPLE)
    m = get_topology("mcm2x2")
    assert t.name == "small-mesh" and t.routing == "xy"
    assert t.devices == m.devices and t.links == m.links
    mine, theirs = t.kinds["chiplet"], m.kinds["chiplet"]
    assert mine.peak_flops_per_s == theirs.peak_flops_per_s
    assert (mine.mem_capacity_bytes, mine.mem_bw_bytes_per_s, mine.efficiency,
            mine.launch_overhead_s) == (theirs.mem_capacity_bytes, theirs.mem_bw_bytes_per_s,
                                        theirs.efficiency, theirs.launch_overhead_s)
    assert t.route(0, 3) == m.route(0, 3)


def test_human_units_convert_to_si_exactly(tmp_path):
    t = load_topology(write(tmp_path, SMALL))
    k = t.kinds["k"]
    assert k.peak_flops_per_s == {"fp16": 2e12, "int8": 4e12}
    assert k.mem_capacity_bytes == 2**30 and k.mem_bw_bytes_per_s == 1e12
    assert k.efficiency == 0.5 and k.launch_overhead_s == 1.5e-6 and k.concurrency == 1
    assert t.links == (Link("a", "s", 12.5e9, 2e-6), Link("s", "a", 12.5e9, 2e-6),
                       Link("s", "b", 100e9, 20e-9), Link("b", "s", 100e9, 20e-9))
    assert [d.node for d in t.devices] == [0, 1]
    assert t.route(0, 1) == (0, 2)


def test_yaml_and_json_of_the_same_document_agree(tmp_path):
    y = load_topology(write(tmp_path, SMALL))
    doc = topology_to_dict(y)
    p = tmp_path / "t.json"
    save_topology(y, p)
    assert json.loads(p.read_text())["kinds"]["k"]["memory_GiB"] == 1
    assert load_topology(p) == y == topology_from_dict(doc)


@pytest.mark.parametrize("name", PRESETS)
@pytest.mark.parametrize("suffix", [".yaml", ".json"])
def test_every_preset_round_trips(tmp_path, name, suffix):
    t = get_topology(name)
    p = tmp_path / f"t{suffix}"
    save_topology(t, p)
    u = load_topology(p)
    assert u == t
    assert [u.route(0, b) for b in range(u.n_devices)] == [t.route(0, b) for b in range(t.n_devices)]


UNITS = [GIGA, TERA, GIB, MIB, MICRO, NANO, Decimal(1)]


@settings(max_examples=300, deadline=None)
@given(st.floats(min_value=0, max_value=1e300, allow_nan=False), st.sampled_from(UNITS))
def test_unit_conversion_round_trips_every_float(x, unit):
    text = number_text(from_si(x, unit))
    json.loads(text)  # valid JSON number
    assert to_si(Decimal(text), unit, "x") == x


NAMES = st.sampled_from(["a", "yes", "null", "1e9", "0x10", "n0.gpu1", "x: y", "-", "é", "~",
                         "1.5", "[x]"])


@st.composite
def rich_topologies(draw) -> Topology:
    """Random kinds, devices with pos/node, switches, one-way and two-way links."""
    n = draw(st.integers(1, 5))
    names = draw(st.lists(NAMES, min_size=n + 2, max_size=n + 2, unique=True))
    dev_names, sw_names = names[:n], names[n:n + draw(st.integers(0, 2))]
    kinds = {}
    for i in range(draw(st.integers(1, 2))):
        precs = draw(st.sets(st.sampled_from(PRECISION_NAMES), min_size=1))
        kinds[f"k{i}"] = DeviceKind(
            f"k{i}", {p: draw(st.floats(1e6, 1e18)) for p in sorted(precs)},
            draw(st.floats(1.0, 1e13)), draw(st.floats(1.0, 1e14)),
            draw(st.floats(1e-3, 1.0)), draw(st.floats(0, 1e-3)),
            draw(st.integers(1, 4)), draw(st.sampled_from(["", "src: x", "a 'quoted' \"one\""])))
    devices = tuple(Device(nm, draw(st.sampled_from(sorted(kinds))),
                           pos=draw(st.none() | st.tuples(st.integers(0, 9), st.integers(0, 9))),
                           node=draw(st.integers(0, 3))) for nm in dev_names)
    nodes = dev_names + sw_names
    ring = [(nodes[i], nodes[(i + 1) % len(nodes)]) for i in range(len(nodes))] \
        if len(nodes) > 1 else []
    extra = draw(st.lists(st.tuples(st.sampled_from(nodes), st.sampled_from(nodes)), max_size=4))
    links, seen = [], set()
    for a, b in ring + extra:  # a directed cycle through every node keeps it connected
        if a == b or (a, b) in seen:
            continue
        bw, lat = draw(st.floats(1e-3, 1e15)), draw(st.floats(0, 1.0))
        links.append(Link(a, b, bw, lat))
        seen.add((a, b))
        if (b, a) not in seen and draw(st.booleans()):
            links.append(Link(b, a, bw, lat))
            seen.add((b, a))
    return Topology(draw(NAMES), kinds, devices, tuple(links), tuple(sw_names),
                    description=draw(st.sampled_from(["", "d", "multi\nline: yes"])))


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.one_of(rich_topologies(), random_topologies(max_devices=5)),
       st.sampled_from([".yaml", ".json"]))
def test_random_topologies_round_trip_exactly(tmp_path, t, suffix):
    p = tmp_path / f"rt{suffix}"
    save_topology(t, p)
    assert load_topology(p) == t


# --- errors ----------------------------------------------------------------------------
def edit(old: str, new: str) -> str:
    assert old in SMALL
    return SMALL.replace(old, new)


BAD_YAML = [
    ("unknown top key", SMALL + "colour: red\n", "top level: unknown key 'colour'; allowed keys: version"),
    ("unknown kind key", edit("    efficiency: 0.5\n", "    eficiency: 0.5\n"),
     "kinds.k: unknown key 'eficiency'"),
    ("unknown device key", edit("{name: a, kind: k}", "{name: a, kind: k, rank: 0}"),
     r"devices\[0\]: unknown key 'rank'"),
    ("unknown link key", edit("GBps: 12.5,", "GBps: 12.5, hops: 1,"),
     r"links\[0\]: unknown key 'hops'"),
    ("unknown device kind", edit("{name: b, kind: k,", "{name: b, kind: gpu,"),
     "device 'b' has unknown kind 'gpu'; known kinds: \\['k'\\]"),
    ("disconnected", edit("  - {src: s, dst: b, GBps: 100, latency_ns: 20}\n", ""),
     "device 'b' has no links"),
    ("one-way link disconnects", edit("latency_ns: 20}", "latency_ns: 20, bidirectional: false}"),
     "cannot reach"),
    ("zero bandwidth", edit("GBps: 12.5", "GBps: 0"), r"links\[0\] \(a->s\): GBps must be > 0"),
    ("negative bandwidth", edit("GBps: 100", "GBps: -5"), r"links\[1\] \(s->b\): GBps must be > 0"),
    ("infinite bandwidth", edit("GBps: 100", "GBps: .inf"), r"links\[1\].GBps must be a finite"),
    ("string number", edit("memory_GBps: 1e3", "memory_GBps: fast"),
     "kinds.k.memory_GBps must be a plain number of GB/s, got 'fast'"),
    ("bool number", edit("memory_GiB: 1", "memory_GiB: true"), "memory_GiB must be a number"),
    ("two memory keys", edit("memory_GiB: 1\n", "memory_GiB: 1\n    memory_GB: 1\n"),
     "give only one of memory_GiB, memory_GB"),
    ("no memory key", edit("    memory_GiB: 1\n", ""), "missing key; give one of memory_GiB"),
    ("two latency keys", edit("latency_us: 2", "latency_us: 2, latency_ns: 3"),
     "give only one of latency_us, latency_ns"),
    ("negative latency", edit("latency_us: 2", "latency_us: -2"), "latency must be >= 0"),
    ("unknown precision", edit("int8: 4}", "int4: 4}"), "unknown precision 'int4'"),
    ("zero peak", edit("fp16: 2,", "fp16: 0,"), "peak for fp16 must be > 0"),
    ("efficiency above 1", edit("efficiency: 0.5", "efficiency: 1.5"), "efficiency must be in"),
    ("missing kinds", SMALL.split("kinds:")[0] + "devices: []\n", "missing key 'kinds'"),
    ("no devices", edit("  - {name: a, kind: k}\n  - {name: b, kind: k, node: 1}\n", "  []\n")
     .replace("links:\n  - {src: a, dst: s, GBps: 12.5, latency_us: 2}\n"
              "  - {src: s, dst: b, GBps: 100, latency_ns: 20}\n", "links: []\n"), "has no devices"),
    ("link to nowhere", edit("dst: b,", "dst: c,"), "names unknown node 'c'"),
    ("duplicate key", edit("    efficiency: 0.5\n", "    efficiency: 0.5\n    efficiency: 0.6\n"),
     "not valid YAML: duplicate key 'efficiency' at line"),
    ("malformed yaml", edit("{name: a, kind: k}", "{name: a, kind: k"), "not valid YAML: .* at line"),
    ("not a mapping", "- just\n- a list\n", "top level must be a mapping, got list"),
    ("devices not a list", SMALL.split("devices:")[0] + "devices: 3\n", "'devices' must be a list, got int"),
    ("bad pos", edit("{name: a, kind: k}", "{name: a, kind: k, pos: [1]}"),
     r"devices\[0\].pos must be \[row, col\]"),
    ("negative pos", edit("{name: a, kind: k}", "{name: a, kind: k, pos: [0, -1]}"),
     r"devices\[0\].pos col must be an integer >= 0"),
    ("xy without pos", edit("routing: shortest", "routing: xy"), "XY routing needs pos"),
    ("bad routing", edit("routing: shortest", "routing: magic"), "routing 'magic' unknown"),
    ("bidirectional not bool", edit("latency_us: 2}", "latency_us: 2, bidirectional: 1}"),
     r"links\[0\].bidirectional must be true or false"),
    ("version 2", "version: 2\n" + SMALL, "version 2 is not supported"),
    ("duplicate device", edit("{name: b, kind: k, node: 1}", "{name: a, kind: k, node: 1}"),
     "duplicate device name 'a'"),
    ("duplicate link", SMALL + "  - {src: s, dst: a, GBps: 1}\n", "duplicate link s->a"),
    ("numeric name", edit("{name: a, kind: k}", "{name: 7, kind: k}"),
     r"devices\[0\].name must be a non-empty string, got 7"),
]


@pytest.mark.parametrize("label,text,fragment", BAD_YAML, ids=[b[0] for b in BAD_YAML])
def test_bad_yaml_inputs_raise_errors_naming_the_file(tmp_path, label, text, fragment):
    p = write(tmp_path, text, "bad.yaml")
    with pytest.raises(DistplanError, match=fragment) as e:
        load_topology(p)
    assert str(e.value).startswith(f"{p}: ")


@pytest.mark.parametrize("text,fragment", [
    ('{"kinds": {}, "devices": [', "not valid JSON: .* at line 1"),
    ('{"name": "a", "name": "b"}', "not valid JSON: duplicate key 'name'"),
    ('{"kinds": {}, "devices": []}', "'kinds' must be a non-empty mapping"),
])
def test_bad_json_inputs(tmp_path, text, fragment):
    p = write(tmp_path, text, "bad.json")
    with pytest.raises(DistplanError, match=fragment) as e:
        load_topology(p)
    assert str(e.value).startswith(f"{p}: ")


def test_missing_file_and_unknown_suffix(tmp_path):
    with pytest.raises(DistplanError, match="nope.yaml: no such file"):
        load_topology(tmp_path / "nope.yaml")
    with pytest.raises(DistplanError, match="unknown file type '.toml'"):
        load_topology(write(tmp_path, "x = 1", "t.toml"))
    with pytest.raises(DistplanError, match="unknown file type '.txt'"):
        save_topology(get_topology("ring2"), tmp_path / "t.txt")


def test_json_numbers_keep_what_the_user_wrote(tmp_path):
    doc = {"kinds": {"k": {"peak_TFLOPs": {"fp16": 0.27}, "memory_GB": 0.3,
                           "memory_GBps": 0.7, "launch_overhead_us": 0.11}},
           "devices": [{"name": "a", "kind": "k"}]}
    t = load_topology(write(tmp_path, json.dumps(doc), "one.json"))
    k = t.kinds["k"]
    # the decimal the user wrote times the unit, rounded once: not 0.27 * 1e12 in floats
    assert 0.27 * 1e12 != 2.7e11 and 0.11 * 1e-6 != 1.1e-7
    assert k.peak_flops_per_s["fp16"] == 2.7e11 and k.launch_overhead_s == 1.1e-7
    assert k.mem_capacity_bytes == 3e8
    assert k.mem_bw_bytes_per_s == 7e8 and t.name == "one" and t.links == ()


def test_xy_routing_refuses_two_devices_at_one_position():
    k = DeviceKind("c", {"fp16": 1e12}, 1e9, 1e11)
    devs = (Device("a", "c", pos=(0, 0)), Device("b", "c", pos=(0, 0)))
    links = (Link("a", "b", 1e9), Link("b", "a", 1e9))
    with pytest.raises(DistplanError, match=r"'a' and 'b' share mesh position \[0, 0\]"):
        Topology("t", {"c": k}, devs, links, routing="xy")


def test_a_self_link_is_named_as_such():
    k = DeviceKind("c", {"fp16": 1e12}, 1e9, 1e11)
    with pytest.raises(DistplanError, match="connects 'a' to itself"):
        Topology("t", {"c": k}, (Device("a", "c"),), (Link("a", "a", 1e9),))


# --- issue 26: a latency or launch overhead past any real one -----------------------------
@pytest.mark.parametrize("old,new,fragment", [
    ("latency_ns: 20", "latency_ns: 1e30", r"link s->b latency must be >= 0 and at most 3600 s"),
    ("latency_ns: 20", "latency_ns: 1.7e308", r"link s->b latency must be >= 0 and at most 3600 s"),
    ("latency_us: 2", "latency_us: 3600000001", r"link a->s latency must be >= 0 and at most 3600 s"),
    ("launch_overhead_us: 1.5", "launch_overhead_us: 1e300", r"launch_overhead_s must be >= 0 and at most 3600"),
])
def test_a_delay_past_an_hour_is_refused(tmp_path, old, new, fragment):
    """latency_ns 1e30 (1e21 s) was accepted: the simulator's float clock then lost
    every microsecond task beside it."""
    with pytest.raises(DistplanError, match=fragment):
        load_topology(write(tmp_path, edit(old, new)))


@settings(max_examples=30, deadline=None)
@given(st.floats(min_value=0, max_value=3600), st.floats(min_value=3600, exclude_min=True, allow_infinity=False))
def test_delays_up_to_an_hour_are_kept_and_past_it_refused(ok_s, bad_s):
    kind = DeviceKind("k", {"fp16": 1e12}, 2**30, 1e11, launch_overhead_s=ok_s)
    devices = (Device("a", "k"), Device("b", "k"))
    t = Topology("t", {"k": kind}, devices, (Link("a", "b", 1e9, ok_s), Link("b", "a", 1e9, ok_s)))
    assert t.links[0].latency_s == ok_s
    with pytest.raises(DistplanError, match="latency must be >= 0 and at most 3600"):
        Topology("t", {"k": kind}, devices, (Link("a", "b", 1e9, bad_s), Link("b", "a", 1e9, 0.0)))
    with pytest.raises(DistplanError, match="launch_overhead_s must be >= 0 and at most 3600"):
        Topology("t", {"k": DeviceKind("k", {"fp16": 1e12}, 2**30, 1e11, launch_overhead_s=bad_s)}, devices,
                 (Link("a", "b", 1e9, 0.0), Link("b", "a", 1e9, 0.0)))
