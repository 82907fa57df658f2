"""Topology files as users write them, not as our own tests build them.

Each odd file either loads and means what the user meant (checked against the same
topology written plainly), or is refused with one line that names the file, the culprit
and the fix. A few end-to-end runs check solve.py's exit status 2 and its one 'error:'
line. The loader is called directly elsewhere (fast); the planner only on mlp-xs.
"""
from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

import distplan
from distplan.core.errors import DistplanError
from distplan.topologies import textformat
from distplan.topologies.io import load_topology, topology_from_dict
from distplan.topologies.paths import divisors, lane_layouts
from distplan.topologies.presets import get_topology

ROOT = Path(__file__).resolve().parent.parent

GPU = """\
  gpu:
    peak_TFLOPs: {fp32: 19.5, bf16: 312, fp16: 312, int8: 624}
    memory_GB: 80
    memory_GBps: 2039
"""


def star(n: int = 4, link: str = "GBps: 300, latency_us: 0.5", kinds: str = GPU,
         switches: str = "switches: [nvswitch]\n") -> str:
    """n GPUs each linked (both ways, the default) to one NVSwitch-like switch."""
    devs = "".join(f"  - {{name: gpu{i}, kind: gpu}}\n" for i in range(n))
    links = "".join(f"  - {{src: gpu{i}, dst: nvswitch, {link}}}\n" for i in range(n))
    return f"kinds:\n{kinds}{switches}devices:\n{devs}links:\n{links}"


def chain(n: int = 3, link: str = "GBps: 300", extra: str = "", names: list[str] | None = None,
          kinds: str = GPU) -> str:
    """n GPUs g0 - g1 - ... linked in a line (names as given, YAML-quoted)."""
    names = names or [f"g{i}" for i in range(n)]
    devs = "".join(f"  - {{name: {json.dumps(x)}, kind: gpu}}\n" for x in names)
    links = "".join(f"  - {{src: {json.dumps(a)}, dst: {json.dumps(b)}, {link}}}\n"
                    for a, b in zip(names, names[1:]))
    return f"kinds:\n{kinds}devices:\n{devs}links:\n{links}{extra}"


def write(tmp_path: Path, name: str, content: str | bytes) -> Path:
    p = tmp_path / name
    if isinstance(content, bytes):
        p.write_bytes(content)
    else:
        p.write_text(content, encoding="utf-8")
    return p


def refused(path: Path) -> str:
    """The loader's message for ``path``: one line, starting with the file's name."""
    with pytest.raises(DistplanError) as e:
        load_topology(path)
    msg = str(e.value)
    assert "\n" not in msg and msg.startswith(f"{path}: "), msg
    return msg[len(f"{path}: "):]


def same_network(a, b) -> bool:
    return (a.kinds, a.devices, a.links, a.switches) == (b.kinds, b.devices, b.links, b.switches)


# --- refused, with the culprit and the fix named ------------------------------------------
BAD = [
    # bandwidths and memory with units in the value: the number the key wants, bits not bytes
    ("bw '25 GB/s'", star(link='GBps: "25 GB/s"'), ["links[0].GBps must be a plain number of GB/s",
                                                     "write GBps: 25"]),
    ("bw 200Gbps", star(link="GBps: 200Gbps"), ["200 Gbps is 25 GB/s (bits: 8 to a byte)", "write GBps: 25"]),
    ("bw '100 Gb/s'", star(link="GBps: 100 Gb/s"), ["100 Gb/s is 12.5 GB/s", "write GBps: 12.5"]),
    ("bw '1.5 TB/s'", star(link="GBps: 1.5 TB/s"), ["1.5 TB/s is 1500 GB/s", "write GBps: 1500"]),
    ("bw '25 GB' (not a rate)", star(link="GBps: 25 GB"), ["got '25 GB', which is not a bandwidth"]),
    ("bw quoted number", star(link='GBps: "25"'), ["got the text '25'; remove the quotes"]),
    ("key Gbps (bits)", star(link="Gbps: 200"), ["unknown key 'Gbps' (the key is GBps, gigabytes per second",
                                                 "200 Gb/s is GBps: 25"]),
    ("key bandwidth", star(link="bandwidth: 25"), ["unknown key 'bandwidth' (did you mean GBps?)"]),
    ("key latency", star(link="GBps: 300, latency: 1"), ["did you mean latency_us or latency_ns?"]),
    ("latency '500 ns' in latency_us", star(link="GBps: 300, latency_us: 500 ns"), ["write latency_ns: 500"]),
    ("memory '80GiB'", star(kinds=GPU.replace("memory_GB: 80", "memory_GiB: 80GiB")),
     ["kinds.gpu.memory_GiB must be a plain number of GiB", "the unit is in the key: write memory_GiB: 80"]),
    ("memory '80 GB' in memory_GiB", star(kinds=GPU.replace("memory_GB: 80", "memory_GiB: 80 GB")),
     ["write memory_GB: 80 instead"]),
    ("key memory", star(kinds=GPU.replace("memory_GB: 80", "memory: 80GB")),
     ["unknown key 'memory' (did you mean memory_GiB, memory_MiB or memory_GB?)"]),
    ("key memory_gb", star(kinds=GPU.replace("memory_GB: 80", "memory_gb: 80")),
     ["did you mean 'memory_GB'? keys are case-sensitive"]),
    ("peak '312 TFLOPS'", star(kinds=GPU.replace("fp16: 312,", "fp16: 312 TFLOPS,")),
     ["kinds.gpu.peak_TFLOPs.fp16 must be a plain number of TFLOP/s", "write fp16: 312"]),
    # figures only a unit slip explains: bytes typed into a GB key
    ("bw in bytes/s", star(link="GBps: 25000000000"), ["not a real device's figure",
                                                       "if it is bytes/s, write GBps: 25"]),
    ("memory in bytes", star(kinds=GPU.replace("memory_GB: 80", "memory_GB: 80e9")),
     ["if it is bytes, write memory_GB: 80"]),
    ("peak in FLOP/s", star(kinds=GPU.replace("fp16: 312,", "fp16: 312e12,")),
     ["if it is FLOP/s, write fp16: 312"]),
    ("efficiency in percent", star(kinds=GPU + "    efficiency: 70\n"),
     ["efficiency must be in (0, 1]", "write efficiency: 0.7"]),
    ("efficiency '70%'", star(kinds=GPU + "    efficiency: 70%\n"), ["70 % is 0.7, so write efficiency: 0.7"]),
    ("precision FP16", star(kinds=GPU.replace("fp16:", "FP16:")),
     ["unknown precision 'FP16' (did you mean 'fp16'?)"]),
    ("precision float16", star(kinds=GPU.replace("fp16:", "float16:")), ["did you mean 'fp16'?"]),
    # the graph
    ("one-way chain", chain(4, link="GBps: 300, bidirectional: false"),
     ["cannot reach", "links[0] (g0->g1) has bidirectional: false and no route leads back"]),
    ("device with no links, first", star().replace("devices:\n", "devices:\n  - {name: lonely, kind: gpu}\n"),
     ["device 'lonely' has no links", "- {src: lonely, dst: gpu0, GBps: 25}"]),
    ("device with no links, last", star().replace("links:\n", "  - {name: lonely, kind: gpu}\nlinks:\n"),
     ["device 'lonely' has no links"]),
    ("two devices, no links", f"kinds:\n{GPU}devices:\n  - {{name: a, kind: gpu}}\n  - {{name: b, kind: gpu}}\n",
     ["devices 'a', 'b' have no links", "or remove them"]),
    ("two islands", chain(4).replace('  - {src: "g1", dst: "g2", GBps: 300}\n', ""),
     ["devices ['g2', 'g3'] cannot reach ['g0', 'g1'] and back; add links"]),
    ("link to an undefined device", chain(3, extra="  - {src: g2, dst: g9, GBps: 300}\n"),
     ["links[2] (g2->g9) names unknown node 'g9'", "switches: [g9]"]),
    ("link to a misspelt device", chain(3, extra="  - {src: g2, dst: G0, GBps: 300}\n"),
     ["names unknown node 'G0'; did you mean 'g0'?"]),
    ("switch not declared", star(switches=""), ["names unknown node 'nvswitch'",
                                                 "switches: [nvswitch] (it only forwards)"]),
    ("switch declared as a device", star(switches="").replace("devices:\n",
                                                              "devices:\n  - {name: nvswitch, kind: switch}\n"),
     ["device 'nvswitch' has kind 'switch'", "goes under switches: [nvswitch], not devices"]),
    ("duplicate device", chain(3, names=["g0", "g1", "g1"]),
     ["devices[2]: duplicate device name 'g1' (also devices[1])"]),
    ("duplicate link", chain(3, extra="  - {src: g1, dst: g2, GBps: 300}\n"),
     ["duplicate link g1->g2: links[2] repeats links[1]; remove one"]),
    ("both directions written, bidirectional default", chain(2, extra="  - {src: g1, dst: g0, GBps: 100}\n"),
     ["duplicate link g1->g0", "links[0] (g0->g1) is bidirectional (the default)",
      "give both bidirectional: false"]),
    ("self link", chain(2, extra="  - {src: g1, dst: g1, GBps: 100}\n"), ["src and dst are both 'g1'"]),
    ("zero bandwidth", chain(2, link="GBps: 0"), ["links[0] (g0->g1): GBps must be > 0, got 0"]),
    ("negative bandwidth", chain(2, link="GBps: -25"), ["GBps must be > 0, got -25"]),
    ("bandwidth of 400 digits", chain(2, link="GBps: " + "9" * 400), ["links[0].GBps is out of range"]),
    ("no devices", f"kinds:\n{GPU}devices: []\n", ["the topology has no devices"]),
    ("devices as a mapping", f"kinds:\n{GPU}devices:\n  a: {{kind: gpu}}\n",
     ["'devices' must be a list, got a mapping", "- {name: gpu0, kind: a100}"]),
    ("link as a list", chain(2, extra="  - [g0, g1, 25]\n"), ["links[1] must be a mapping, got list",
                                                              "{src: gpu0, dst: gpu1, GBps: 25}"]),
    # YAML reading of names and versions
    ("device named 0", chain(2).replace('name: "g0"', "name: 0").replace('src: "g0"', "src: '0'"),
     ['devices[0].name must be a non-empty string, got 0: put it in quotes, "0"']),
    ("device named no", chain(2).replace('"g0"', "no"), ["got False (YAML reads yes/no/on/off",
                                                          "put the name in quotes"]),
    ("version as text", 'version: "1"\n' + chain(2), ["version '1' is not supported; use 1 (a number, not a string)"]),
    ("routing Shortest", "routing: Shortest\n" + chain(2), ["routing 'Shortest' unknown"]),
    # the text itself
    ("tabs", star().replace("  gpu:\n    peak", "\tgpu:\n\t\tpeak"),
     ["not valid YAML: found character '\\t' that cannot start any token at line 2 column 1",
      "YAML indents with spaces, not tabs"]),
    ("two documents", chain(2) + "---\n" + chain(2),
     ["expected a single document in the stream, but found another document at line", "remove the '---' line"]),
    ("empty", "", ["the file is empty"]),
    ("blank lines", "\n  \n", ["the file is empty"]),
    ("only comments", "# TODO: fill in\n", ["the file holds no document (only comments)"]),
    ("duplicate key", chain(2).replace("memory_GB: 80\n", "memory_GB: 80\n    memory_GB: 81\n"),
     ["not valid YAML: duplicate key 'memory_GB' at line 5 column 5"]),
]


@pytest.mark.parametrize("text,fragments", [b[1:] for b in BAD], ids=[b[0] for b in BAD])
def test_odd_yaml_is_refused_in_one_line_naming_the_fix(tmp_path, text, fragments):
    msg = refused(write(tmp_path, "cluster.yaml", text))
    for f in fragments:
        assert f in msg, msg


JSON_DOC = {"kinds": {"gpu": {"peak_TFLOPs": {"fp16": 312}, "memory_GB": 80, "memory_GBps": 2039}},
            "devices": [{"name": "a", "kind": "gpu"}, {"name": "b", "kind": "gpu"}],
            "links": [{"src": "a", "dst": "b", "GBps": 300}]}
PLAIN_JSON = json.dumps(JSON_DOC, indent=2)


@pytest.mark.parametrize("text,fragments", [
    (PLAIN_JSON.replace('"GBps": 300\n    }', '"GBps": 300,\n    },'),
     ["not valid JSON: Expecting property name enclosed in double quotes at line", "remove the trailing comma"]),
    ("// my cluster\n" + PLAIN_JSON, ["JSON has no comments"]),
    (chain(2), ["not valid JSON: Expecting value at line 1 column 1; this looks like YAML: name the file .yaml"]),
    (PLAIN_JSON.replace('"a"', "'a'", 1), ["JSON strings take double quotes"]),
    ("", ["the file is empty"]),
], ids=["trailing comma", "comment", "YAML in a .json", "single quotes", "empty"])
def test_odd_json_is_refused_with_the_likely_cause(tmp_path, text, fragments):
    msg = refused(write(tmp_path, "cluster.json", text))
    for f in fragments:
        assert f in msg, msg


def test_files_that_are_not_topology_text(tmp_path):
    (tmp_path / "folder.yaml").mkdir()
    assert refused(tmp_path / "folder.yaml") == "is a folder, not a file"
    latin1 = write(tmp_path, "latin1.yaml", chain(2).replace('"g0"', "gpü0").encode("latin-1"))
    assert refused(latin1).startswith("not UTF-8 text (byte 0xfc at offset")
    assert refused(write(tmp_path, "bin.yaml", bytes(range(256)))).endswith("save the file as UTF-8")


@pytest.mark.parametrize("text", ["- " * 30000 + "x\n", "a: " + "[" * 3000 + "]" * 3000 + "\n",
                                  "".join(" " * i + "a:\n" for i in range(2500)) + " " * 2500 + "b: 1\n"],
                         ids=["compact sequences", "flow", "block"])
def test_deep_nesting_is_an_error_not_a_crash(tmp_path, text):
    """libyaml recurses without a guard (50,000 levels crash the process): text that may
    nest deeply goes to the Python parser."""
    assert not textformat._shallow(text)
    assert "nested too deeply" in refused(write(tmp_path, "deep.yaml", text))


def test_a_missing_file_named_like_a_preset_or_a_file_beside_it(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    assert refused(Path("dgx-a100.yaml")) == "no such file ('dgx-a100' is a preset: give --topology dgx-a100)"
    write(tmp_path, "my-cluster.yaml", chain(2))
    near = str(tmp_path / "my-cluster.yaml")
    assert refused(tmp_path / "my_cluster.yaml") == f"no such file (did you mean {near!r}?)"


@pytest.mark.parametrize("name,meant", [("dgx-a10", "dgx-a100"), ("dgx_a100", "dgx-a100"), ("mcm-4x4", "mcm4x4"),
                                        ("a100-x16", "a100x16"), ("hybrid-t4-v100", "hybrid-v100-t4"),
                                        ("ring_8", "ring8")])
def test_a_misspelt_preset_names_the_nearest(name, meant):
    with pytest.raises(DistplanError, match=f"unknown topology '{name}' \\(did you mean '{meant}'\\?\\)"):
        get_topology(name)
    get_topology(meant)


def test_a_unit_slip_is_refused_only_in_files_people_write():
    doc = json.loads(PLAIN_JSON)
    doc["links"][0]["GBps"] = 25_000_000_000
    with pytest.raises(DistplanError, match="if it is bytes/s, write GBps: 25; if bits/s, GBps: 3.125"):
        topology_from_dict(doc, plausible=True)
    # a plan file's embedded topology (written by save_topology from any Topology) is taken as written
    assert topology_from_dict(doc).links[0].bw_bytes_per_s == 2.5e19


# --- accepted, meaning what the user meant -----------------------------------------------
def test_encodings_and_line_endings_read_as_the_plain_file(tmp_path):
    plain = load_topology(write(tmp_path, "plain.yaml", star()))
    for name, data in [("bom.yaml", b"\xef\xbb\xbf" + star().encode()),
                       ("crlf.yaml", star().replace("\n", "\r\n").encode()),
                       ("cr.yaml", star().replace("\n", "\r").encode()),
                       ("utf16.yaml", star().encode("utf-16")),
                       ("utf16be.yaml", b"\xfe\xff" + star().encode("utf-16-be")),
                       ("upper.YAML", star().encode())]:
        assert same_network(load_topology(write(tmp_path, name, data)), plain), name
    one = json.loads(PLAIN_JSON)
    js = load_topology(write(tmp_path, "plain.json", PLAIN_JSON))
    bom_crlf = write(tmp_path, "bom.json", b"\xef\xbb\xbf" + PLAIN_JSON.replace("\n", "\r\n").encode())
    assert same_network(load_topology(bom_crlf), js) and len(js.links) == 2 * len(one["links"])


def test_number_spellings_mean_the_same_figures(tmp_path):
    plain = load_topology(write(tmp_path, "plain.yaml", star()))
    sci = star(link="GBps: 3e2, latency_us: 5e-1", kinds=GPU.replace("memory_GB: 80", "memory_GB: 8E1")
               .replace("memory_GBps: 2039", "memory_GBps: 2.039e+3").replace("fp16: 312", "fp16: 3.12e2"))
    assert same_network(load_topology(write(tmp_path, "sci.yaml", sci)), plain)
    spelled = star(link="GBps: 3_00, latency_ns: 500.0")
    assert same_network(load_topology(write(tmp_path, "spelled.yaml", spelled)), plain)
    doc = json.loads(PLAIN_JSON)
    sci_json = PLAIN_JSON.replace('"GBps": 300', '"GBps": 3e2').replace('"memory_GB": 80', '"memory_GB": 8.0E1')
    assert same_network(load_topology(write(tmp_path, "sci.json", sci_json)), topology_from_dict(doc))


def test_yaml_anchors_and_merge_keys(tmp_path):
    plain = load_topology(write(tmp_path, "plain.yaml", star()))
    merged = star().replace("  - {src: gpu0, dst: nvswitch, GBps: 300, latency_us: 0.5}\n",
                            "  - &nv {src: gpu0, dst: nvswitch, GBps: 300, latency_us: 0.5}\n")
    for i in range(1, 4):   # later links take the first's figures, and override src
        merged = merged.replace(f"  - {{src: gpu{i}, dst: nvswitch, GBps: 300, latency_us: 0.5}}\n",
                                f"  - {{<<: *nv, src: gpu{i}}}\n")
    assert "<<: *nv" in merged
    assert same_network(load_topology(write(tmp_path, "merged.yaml", merged)), plain)


def test_the_fast_and_the_python_yaml_parsers_agree(tmp_path):
    text = star(link="GBps: 3e2, latency_us: 0x1") + "description: 'a: b'\n"
    docs = [__import__("yaml").load(text, Loader=L) for L in (*textformat._FAST_LOADERS, textformat._Loader)]
    assert all(d == docs[-1] for d in docs)


def test_a_switch_star_routes_through_the_switch(tmp_path):
    t = load_topology(write(tmp_path, "star.yaml", star()))
    assert t.switches == ("nvswitch",) and t.n_devices == 4
    r = t.route(0, 3)
    assert [(t.links[i].src, t.links[i].dst) for i in r] == [("gpu0", "nvswitch"), ("nvswitch", "gpu3")]
    assert t.route_latency_s(0, 3) == pytest.approx(1e-6) and t.route_bw_bytes_per_s(0, 3) == 300e9


def test_the_switch_example_file_is_the_dgx_a100_network():
    t, d = load_topology(ROOT / "examples" / "topologies" / "gpu-node-switch.yaml"), get_topology("dgx-a100")
    assert same_network(t, d) and t.name == "gpu-node-switch"


def test_odd_shapes_that_load(tmp_path):
    # a one-way ring is connected: the way back goes round
    ring = load_topology(write(tmp_path, "ring.yaml", chain(
        4, link="GBps: 300, bidirectional: false", extra="  - {src: g3, dst: g0, GBps: 300, bidirectional: false}\n")))
    assert len(ring.links) == 4 and len(ring.route(1, 0)) == 3 and len(ring.route(0, 1)) == 1
    # one device: no links needed, 'links:' and 'switches:' may be empty
    for text in (f"kinds:\n{GPU}devices:\n  - {{name: solo, kind: gpu}}\n",
                 f"kinds:\n{GPU}switches:\ndevices:\n  - {{name: solo, kind: gpu}}\nlinks:\n"):
        solo = load_topology(write(tmp_path, "solo.yaml", text))
        assert solo.n_devices == 1 and solo.links == () and solo.switches == ()
    # names with spaces, punctuation and other scripts are names
    uni = load_topology(write(tmp_path, "uni.yaml", chain(3, names=["GPU 0", "加速器-1", "gpu:2 (spare)"])))
    assert [d.name for d in uni.devices] == ["GPU 0", "加速器-1", "gpu:2 (spare)"]
    # a kind no device uses, and a switch nothing links to, change nothing
    spare = load_topology(write(tmp_path, "spare.yaml", star(switches="switches: [nvswitch, spare]\n", kinds=GPU + (
        "  unused:\n    peak_TFLOPs: {fp16: 1}\n    memory_GB: 1\n    memory_GBps: 1\n"))))
    assert spare.switches == ("nvswitch", "spare") and set(spare.kinds) == {"gpu", "unused"}
    # latency left out is zero, said so in the README
    assert load_topology(write(tmp_path, "nolat.yaml", chain(2))).links[0].latency_s == 0.0


# --- planning on odd hardware: a plan that makes sense, or one clear line ----------------
def test_a_kind_without_int8_plans_at_fp16(tmp_path):
    p = distplan.problem("mlp-xs", str(write(tmp_path, "fp16.yaml", star(
        kinds=GPU.replace("{fp32: 19.5, bf16: 312, fp16: 312, int8: 624}", "{fp16: 312}")))))
    plan = distplan.solve(p, distplan.SolveOptions(time_limit_s=5, top_k=1)).best.plan
    assert set(plan.op_precision) == {"fp16"}


def test_mixed_kinds_one_running_none_of_the_precisions(tmp_path, recwarn):
    text = ("kinds:\n" + GPU + "  old:\n    peak_TFLOPs: {fp32: 15}\n    memory_GB: 32\n    memory_GBps: 900\n"
            "switches: [sw]\ndevices:\n  - {name: a0, kind: gpu}\n  - {name: a1, kind: gpu}\n"
            "  - {name: o0, kind: old}\n  - {name: o1, kind: old}\nlinks:\n"
            + "".join(f"  - {{src: {x}, dst: sw, GBps: 16}}\n" for x in ("a0", "a1", "o0", "o1")))
    path = str(write(tmp_path, "mixed.yaml", text))
    # inference (fp16, int8): the fp32-only devices stay idle; no numpy overflow warnings on the way
    p = distplan.problem("mlp-xs", path)
    plan = distplan.solve(p, distplan.SolveOptions(time_limit_s=5, top_k=1)).best.plan
    used = {d for s in plan.stages for d in s.devices if any(st == plan.stages.index(s) for st in plan.op_stage)}
    assert used and used <= {0, 1}
    assert not [w for w in recwarn if issubclass(w.category, RuntimeWarning)]
    # training in the fleet space (every device works): the kind and the way out are named
    t = distplan.problem("mlp-xs", path, mode="training")
    with pytest.raises(DistplanError, match="device kind 'old' runs none of the allowed precisions "
                                            r"\(bf16, fp16\).*allow one it runs \(fp32\) with --precisions"):
        distplan.solve(t, distplan.SolveOptions(time_limit_s=5, top_k=1, space="fleet"))


def test_a_4096_device_file_loads_and_lays_out_quickly(tmp_path):
    """A generated 4,096-device chain: parsed by libyaml when PyYAML has it, and the
    replicated layouts whose round-robin lanes run hundreds of hops are not all routed."""
    p = write(tmp_path, "chain4096.yaml", chain(4096))
    t0 = time.perf_counter()
    t = load_topology(p)
    loaded = time.perf_counter() - t0
    assert t.n_devices == 4096 and len(t.links) == 2 * 4095
    t0 = time.perf_counter()
    layouts = {r: lane_layouts(t, r) for r in divisors(4096)}
    laid = time.perf_counter() - t0
    assert loaded < (8 if textformat._FAST_LOADERS else 30) and laid < 15, (loaded, laid)
    # chunked lanes (one hop per boundary) before round-robin ones (r hops per boundary)
    assert [n for n, _ in layouts[512]] == ["natural/512x8", "natural/512x8-strided"]


# --- end to end: exit status 2 and one 'error:' line ---------------------------------------
def _solve(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(ROOT / "solve.py"), *argv], capture_output=True, text=True,
                          cwd=ROOT, timeout=120)


@pytest.mark.parametrize("name,text,needle", [
    ("gbits.yaml", star(link="GBps: 200Gbps"), "200 Gbps is 25 GB/s"),
    ("oneway.yaml", chain(3, link="GBps: 300, bidirectional: false"), "has bidirectional: false"),
    ("empty.json", "", "the file is empty"),
], ids=["Gbps in a GBps value", "one-way links", "empty JSON"])
def test_solve_py_prints_one_error_line_and_exits_2(tmp_path, name, text, needle):
    p = write(tmp_path, name, text)
    r = _solve("--topology", str(p), "--workload", "bert-base", "--mode", "training", "--time-limit", "5",
               "--plan-out", str(tmp_path / "plan.json"))
    lines = [l for l in r.stderr.splitlines() if l.strip()]
    assert r.returncode == 2 and len(lines) == 1, r.stderr
    assert lines[0].startswith(f"error: {p}: ") and needle in lines[0] and "Traceback" not in r.stderr


def test_solve_py_plans_on_a_switch_star_file(tmp_path):
    p = write(tmp_path, "star.yaml", star())
    r = _solve("--topology", str(p), "--workload", "mlp-xs", "--time-limit", "5", "--quiet",
               "--plan-out", str(tmp_path / "plan.json"))
    assert r.returncode == 0, r.stderr
    assert "on star: " in r.stdout and "4 devices" in r.stdout and (tmp_path / "plan.json").exists()
