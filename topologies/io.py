"""Topology files: ``load_topology(path)`` and ``save_topology(t, path)`` (YAML or JSON).

Keys carry human units (``peak_TFLOPs``, ``memory_GiB``, ``GBps``, ``latency_us``...),
converted to SI once, here; every key is checked (an unknown key is an error naming it
and the allowed ones). Values are plain numbers in the key's unit: text with a unit is
refused with the number the key wants, and in a file so are figures only a unit slip
explains (``IMPLAUSIBLE``). ``bidirectional`` (default true) adds the reverse link
right after the forward one; writing that reverse too is a duplicate. The graph is
checked in the file's terms (``links[3]``, a device without links, a one-way link with
no way back). Guarantees: every error names the file and is one line;
``load(save(t)) == t`` exactly, link order included.

Layout and examples: docs/guides/topology-files.md.
"""
from __future__ import annotations

import math
import re
from decimal import Decimal
from difflib import get_close_matches
from pathlib import Path

import networkx as nx

from distplan.core.errors import DistplanError
from distplan.core.precision import PRECISIONS
from distplan.topologies.textformat import Flow, read_document, write_document
from distplan.topologies.topology import Device, DeviceKind, Link, Topology
from distplan.core.units import (GIB, GIGA, MIB, MICRO, NANO, ONE, TERA, as_decimal, brief, number_text,
                                 shortest, to_si)

FORMAT_VERSION = 1
TOP_KEYS = ("version", "name", "description", "routing", "kinds", "switches", "devices", "links")
KIND_KEYS = ("peak_TFLOPs", "memory_GiB", "memory_MiB", "memory_GB", "memory_GBps",
             "efficiency", "precision_efficiency", "launch_overhead_us", "concurrency", "source",
             "host_link_GBps", "host_memory_GBps")
DEVICE_KEYS = ("name", "kind", "pos", "node")
LINK_KEYS = ("src", "dst", "GBps", "latency_us", "latency_ns", "bidirectional")
MEMORY_UNITS: list[tuple[str, Decimal]] = [("memory_GiB", GIB), ("memory_MiB", MIB),
                                           ("memory_GB", GIGA)]
LATENCY_UNITS: list[tuple[str, Decimal]] = [("latency_us", MICRO), ("latency_ns", NANO)]


# --- loading -------------------------------------------------------------------------
#: the dimension of each key with a unit, and that unit in SI (bytes, seconds, FLOP/s)
KEY_UNITS: dict[str, tuple[str, Decimal]] = {
    "GBps": ("bandwidth", GIGA), "memory_GBps": ("bandwidth", GIGA),
    "host_link_GBps": ("bandwidth", GIGA), "host_memory_GBps": ("bandwidth", GIGA),
    "memory_GiB": ("memory", GIB), "memory_MiB": ("memory", MIB), "memory_GB": ("memory", GIGA),
    "latency_us": ("time", MICRO), "latency_ns": ("time", NANO), "launch_overhead_us": ("time", MICRO),
    "peak_TFLOPs": ("compute", TERA), "efficiency": ("fraction", ONE),
}
#: unit spellings a user may put in a value ("25 GB/s"), exact case: 'Gb' is bits, 'GB' bytes
_BYTE_PREFIX = {"k": 10**3, "K": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15}
_BIN_PREFIX = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40}
VALUE_UNITS: dict[str, tuple[str, Decimal]] = {"%": ("fraction", Decimal("0.01"))}
for _p, _f in {**_BYTE_PREFIX, **_BIN_PREFIX}.items():
    VALUE_UNITS[f"{_p}B"] = ("memory", Decimal(_f))
    for _s in ("B/s", "Bps", "Byte/s", "byte/s"):
        VALUE_UNITS[f"{_p}{_s}"] = ("bandwidth", Decimal(_f))
for _p, _f in _BYTE_PREFIX.items():
    for _s in ("b/s", "bps", "bit/s", "bits/s"):
        VALUE_UNITS[f"{_p}{_s}"] = ("bandwidth", Decimal(_f) / 8)
    for _s in ("FLOPs", "FLOP/s", "FLOPS", "flops", "OPS", "OP/s", "ops"):
        VALUE_UNITS[f"{_p}{_s}"] = ("compute", Decimal(_f))
for _u, _f in (("s", "1"), ("ms", "1e-3"), ("us", "1e-6"), ("µs", "1e-6"), ("μs", "1e-6"),
               ("ns", "1e-9")):
    VALUE_UNITS[_u] = ("time", Decimal(_f))
_VALUE_RE = re.compile(r"^\s*([-+]?(?:[0-9][0-9_]*(?:\.[0-9_]*)?|\.[0-9_]+)(?:[eE][-+]?[0-9]+)?)"
                       r"\s*([^\s0-9].*?)?\s*$")
#: a figure at or above these (SI) is a unit slip, bytes or FLOP/s typed into a GB or TFLOP/s
#: key, not hardware: a 10 PB/s link, a 10 PB or 10 EFLOP/s device (times are not checked: a
#: latency in ns typed into latency_us still looks like a latency)
IMPLAUSIBLE = {"bandwidth": 1e16, "memory": 1e16, "compute": 1e19}
#: what users call a key -> the key this format uses
KEY_ALIASES = {
    "bandwidth": "GBps", "bw": "GBps", "bandwidth_GBps": "GBps", "gb/s": "GBps",
    "latency": "latency_us or latency_ns", "latency_ms": "latency_us (1 ms = 1000 us)",
    "latency_s": "latency_us (1 s = 1000000 us)", "from": "src", "source": "src", "to": "dst",
    "target": "dst", "destination": "dst", "type": "kind", "id": "name", "position": "pos",
    "host": "node", "server": "node", "memory": "memory_GiB, memory_MiB or memory_GB",
    "mem": "memory_GiB, memory_MiB or memory_GB", "memory_bandwidth": "memory_GBps",
    "peak": "peak_TFLOPs", "tflops": "peak_TFLOPs", "launch_overhead": "launch_overhead_us",
    "device_kinds": "kinds", "device": "devices", "link": "links", "edges": "links",
    "connections": "links", "switch": "switches", "nodes": "devices (and switches)",
}
PRECISION_ALIASES = {"float32": "fp32", "single": "fp32", "float16": "fp16", "half": "fp16",
                     "bfloat16": "bf16", "float8": "fp8", "e4m3": "fp8", "e5m2": "fp8"}
LINK_EXAMPLE = "- {src: gpu0, dst: gpu1, GBps: 25}"
DEVICE_EXAMPLE = "- {name: gpu0, kind: a100}"


def load_topology(path: str | Path) -> Topology:
    """Read a topology from a ``.yaml``/``.yml``/``.json`` file; errors name the file."""
    path = Path(path)
    try:
        doc = read_document(path)
    except DistplanError as e:
        raise DistplanError(f"{e}{_missing_file_hint(path)}") from None
    try:
        return topology_from_dict(doc, default_name=path.stem, plausible=True)
    except DistplanError as e:
        raise DistplanError(f"{path}: {e}") from None


def _missing_file_hint(path: Path) -> str:
    """For a file that is not there: the preset it names, or a file of a like name beside it."""
    try:
        if path.exists():
            return ""
        from distplan.topologies.presets import get_topology
        try:
            get_topology(path.stem)
            return f" ({path.stem!r} is a preset: give --topology {path.stem})"
        except DistplanError:
            pass
        folder = path.parent if str(path.parent) else Path(".")
        near = get_close_matches(path.name, [f.name for f in folder.iterdir()
                                             if f.suffix.lower() in (".yaml", ".yml", ".json")], 1, 0.75)
        return f" (did you mean {str(folder / near[0])!r}?)" if near else ""
    except OSError:
        return ""


def topology_from_dict(doc: object, default_name: str = "topology", plausible: bool = False) -> Topology:
    """Build a Topology from a parsed document (numbers as int, float or Decimal).
    ``plausible``: also refuse figures that can only be a unit slip (see ``IMPLAUSIBLE``),
    as a file a person wrote gets; a plan file's embedded topology is taken as written."""
    top = _mapping(doc, "top level", TOP_KEYS, required=("kinds", "devices"))
    if "version" in top and (isinstance(top["version"], bool) or top["version"] != FORMAT_VERSION):
        v = top["version"]
        raise DistplanError(f"version {brief(v)} is not supported; use {FORMAT_VERSION}"
                            + (" (a number, not a string)" if isinstance(v, str) and v.strip() == "1" else ""))
    name = _text(top.get("name", default_name), "name")
    kinds_doc = top["kinds"]
    if not isinstance(kinds_doc, dict) or not kinds_doc:
        raise DistplanError("'kinds' must be a non-empty mapping of kind name -> figures, e.g. "
                            "kinds: {a100: {peak_TFLOPs: {fp16: 312}, memory_GB: 80, memory_GBps: 2039}}")
    check = _Figures(plausible)
    kinds = {_text(k, "a kind name"): _kind(k, v, check) for k, v in kinds_doc.items()}
    devices = [_device(i, d) for i, d in enumerate(_list(top["devices"], "devices", DEVICE_EXAMPLE))]
    first: dict[str, int] = {}
    for i, d in enumerate(devices):
        if d.name in first:
            raise DistplanError(f"devices[{i}]: duplicate device name {d.name!r} (also devices[{first[d.name]}]); "
                                "give every device its own name")
        first[d.name] = i
    switches = [_text(s, f"switches[{i}]")
                for i, s in enumerate(_list(top.get("switches"), "switches", "[sw0]", optional=True))]
    links: list[Link] = []
    origin: dict[tuple[str, str], tuple[int, bool]] = {}   # (src, dst) -> (links[i], written or implied)
    for i, item in enumerate(_list(top.get("links"), "links", LINK_EXAMPLE, optional=True)):
        for j, link in enumerate(_links(i, item, check)):
            key = (link.src, link.dst)
            if key in origin:
                raise DistplanError(_repeated_link(i, j == 0, key, *origin[key]))
            origin[key] = (i, j == 0)
            links.append(link)
    _check_graph(kinds, devices, switches, links, top.get("links") or [])
    return Topology(name, kinds, tuple(devices), tuple(links), tuple(switches),
                    routing=_text(top.get("routing", "shortest"), "routing"),
                    description=_text(top.get("description", ""), "description", True))


def _repeated_link(i: int, written: bool, key: tuple[str, str], first: int, first_written: bool) -> str:
    """The message for a directed link given twice: written twice, or written once and
    implied once by a ``bidirectional`` link (the default)."""
    dup = f"duplicate link {key[0]}->{key[1]}"
    if written and first_written:
        return f"{dup}: links[{i}] repeats links[{first}]; remove one"
    if written:   # links[first] is b->a, bidirectional, and so already runs a->b
        return (f"{dup}: links[{first}] ({key[1]}->{key[0]}) is bidirectional (the default), so it already "
                f"runs {key[0]}->{key[1]}; remove links[{i}], or give both bidirectional: false "
                "for different figures each way")
    return (f"{dup}: links[{i}] ({key[1]}->{key[0]}) is bidirectional (the default), but links[{first}] "
            f"already runs {key[0]}->{key[1]}; give links[{i}] bidirectional: false, or remove links[{first}]")


def _check_graph(kinds: dict[str, DeviceKind], devices: list[Device], switches: list[str],
                 links: list[Link], link_docs: list) -> None:
    """What ``Topology`` would refuse about the graph, said in the file's terms: a link to
    a node declared nowhere, a switch declared as a device, a device without links, and
    devices cut off (by one-way links, say)."""
    if not devices:
        raise DistplanError(f"'devices' is empty: the topology has no devices; list them, one a line: "
                            f"{DEVICE_EXAMPLE}")
    dev_names = [d.name for d in devices]
    nodes = set(dev_names) | set(switches)
    for d in devices:
        if d.kind not in kinds and "switch" in d.kind.lower() + d.name.lower():
            raise DistplanError(f"device {d.name!r} has kind {d.kind!r}, which 'kinds' does not define; "
                                f"a node that only forwards goes under switches: [{d.name}], not devices")
    for i, l in enumerate(links):
        for end in (l.src, l.dst):
            if end not in nodes:
                near = [n for n in sorted(nodes) if n.lower() == end.lower()] or get_close_matches(
                    end, sorted(nodes), 1, 0.75)
                idx = next(k for k, x in enumerate(link_docs) if isinstance(x, dict)
                           and end in (x.get("src"), x.get("dst")))
                raise DistplanError(
                    f"links[{idx}] ({l.src}->{l.dst}) names unknown node {end!r}"
                    + (f"; did you mean {near[0]!r}?" if near else
                       f"; declare it under devices (it computes) or switches: [{end}] (it only forwards)"))
    if len(devices) < 2:
        return
    linked = {x for l in links for x in (l.src, l.dst)}
    bare = [n for n in dev_names if n not in linked]
    if bare:
        other = next((n for n in dev_names if n not in bare), None) or next(n for n in dev_names if n != bare[0])
        many = len(bare) > 1
        raise DistplanError(f"device{'s' if many else ''} {', '.join(map(repr, bare[:4]))}"
                            f"{' ...' if len(bare) > 4 else ''} ha{'ve' if many else 's'} no links; "
                            f"link {'each' if many else 'it'} to the others (e.g. "
                            f"- {{src: {bare[0]}, dst: {other}, GBps: 25}}) or remove {'them' if many else 'it'}")
    g = nx.DiGraph()
    g.add_nodes_from(nodes)
    g.add_edges_from((l.src, l.dst) for l in links)
    comps = list(nx.strongly_connected_components(g))
    if len(comps) == 1:
        return
    at = {n: i for i, n in enumerate(dev_names)}   # the most devices, ties to the earliest device
    home = max(comps, key=lambda c: (sum(n in at for n in c), -min((at[n] for n in c if n in at), default=len(at))))
    cut = [n for n in dev_names if n not in home]
    if not cut:
        return   # only switches are cut off: they carry no route between devices
    reached = [n for n in dev_names if n in home][:2]
    reach = f"devices {cut[:4]}{' ...' if len(cut) > 4 else ''} cannot reach {reached} and back"
    pair = {(l.src, l.dst) for l in links}
    one_way = [(i, x) for i, x in enumerate(link_docs) if isinstance(x, dict) and x.get("bidirectional") is False
               and (x.get("dst"), x.get("src")) not in pair
               and ((x.get("src") in home) != (x.get("dst") in home))]
    if one_way:
        i, x = one_way[0]
        raise DistplanError(f"{reach}: links[{i}] ({x['src']}->{x['dst']}) has bidirectional: false and no "
                            "route leads back; drop bidirectional: false, or add links the other way")
    raise DistplanError(f"{reach}; add links so every device pair is connected")


class _Figures:
    """Numbers with units: the value in SI, refusing text with units (with the number the
    key wants) and, when ``plausible``, figures only a unit slip explains."""

    def __init__(self, plausible: bool) -> None:
        self.plausible = plausible

    def __call__(self, value: object, key: str, where: str) -> float:
        dim, unit = KEY_UNITS[key]
        if isinstance(value, str):
            raise DistplanError(_text_number(value, key, where))
        x = to_si(value, unit, where)
        if not math.isfinite(x):
            raise DistplanError(f"{where} is out of range, got {brief(value)}")
        if self.plausible and dim in IMPLAUSIBLE and x >= IMPLAUSIBLE[dim]:
            d = as_decimal(value, where)
            base = {"bandwidth": "bytes/s", "memory": "bytes", "compute": "FLOP/s"}[dim]
            shown = where.rsplit(".", 1)[-1]
            bits = f"; if bits/s, {shown}: {number_text(d / unit / 8)}" if dim == "bandwidth" else ""
            raise DistplanError(f"{where} is {brief(value)} {_unit_name(key)}, not a real device's figure; "
                                f"if it is {base}, write {shown}: {number_text(d / unit)}{bits}")
        return x


def _unit_name(key: str) -> str:
    k = key.split(".")[0]
    return {"GBps": "GB/s", "memory_GBps": "GB/s", "memory_GiB": "GiB", "memory_MiB": "MiB",
            "memory_GB": "GB", "latency_us": "us", "latency_ns": "ns", "launch_overhead_us": "us",
            "peak_TFLOPs": "TFLOP/s", "efficiency": ""}[k]


def _text_number(text: str, key: str, where: str) -> str:
    """The message for a number written as text, e.g. '200Gbps' in a GBps key: what the
    key wants and, where the unit is known, the number to write."""
    dim, unit = KEY_UNITS[key]
    shown = where.rsplit(".", 1)[-1]   # the key as written: 'fp16' under peak_TFLOPs
    want = f"{where} must be a plain number" + (f" of {_unit_name(key)}" if _unit_name(key) else "")
    m = _VALUE_RE.match(text)
    if not m:
        return f"{want}, got {brief(text)}"
    number, written = Decimal(m[1].replace("_", "")), (m[2] or "").strip()
    if not written:
        return f"{want}, got the text {brief(text)}; remove the quotes"
    if VALUE_UNITS.get(written, (None, None))[1] == unit and written.replace("/s", "ps") == _unit_name(key).replace(
            "/s", "ps") or written == _unit_name(key):
        return f"{want}, got {brief(text)}; the unit is in the key: write {shown}: {number_text(number)}"
    if written not in VALUE_UNITS:
        return f"{want}, got {brief(text)} (the unit is in the key: {key})"
    vdim, vunit = VALUE_UNITS[written]
    if vdim != dim:
        return f"{want}, got {brief(text)}, which is not a {dim}"
    si = number * vunit
    same_dim = [k for k, (d, _) in KEY_UNITS.items() if d == dim and k.startswith(key.split("_")[0])]
    exact = [k for k in same_dim if KEY_UNITS[k][1] == vunit]   # e.g. '80 GB' in memory_GiB: memory_GB
    if exact and exact[0] != key and key in [k for k, _ in MEMORY_UNITS + LATENCY_UNITS]:
        return f"{want}, got {brief(text)}; write {exact[0]}: {number_text(number)} instead"
    bits = " (bits: 8 to a byte)" if vdim == "bandwidth" and "b" in written.replace("byte", "") else ""
    is_ = f"{number_text(si / unit)} {_unit_name(key)}".strip()
    return f"{want}, got {brief(text)}; {number_text(number)} {written} is {is_}{bits}, so write {shown}: " \
           f"{number_text(si / unit)}"


def _suggest(key: object, allowed: tuple[str, ...]) -> str:
    """' (did you mean ...)' for an unknown key, or ''."""
    if not isinstance(key, str):
        return ""
    low = key.lower()
    if low.replace("_", "") in ("gbps", "gbits", "gbit/s", "gb/s") and "GBps" in allowed or \
            low.endswith("_gbps") and key[-4:] != "GBps" and key[:-4] + "GBps" in allowed:
        right = key[:-4] + "GBps" if low.endswith("_gbps") else "GBps"
        return f" (the key is {right}, gigabytes per second; 8 bits to a byte: 200 Gb/s is {right}: 25)"
    same = [a for a in allowed if a.lower() == low]
    if same:
        return f" (did you mean {same[0]!r}? keys are case-sensitive)"
    if low in {k.lower() for k in KEY_ALIASES}:
        alias = next(v for k, v in KEY_ALIASES.items() if k.lower() == low)
        if any(a in alias for a in allowed):
            return f" (did you mean {alias}?)"
    near = get_close_matches(key, allowed, 1, 0.75)
    return f" (did you mean {near[0]!r}?)" if near else ""


def _mapping(x: object, where: str, allowed: tuple[str, ...],
             required: tuple[str, ...] = (), example: str = "") -> dict:
    if not isinstance(x, dict):
        got = "nothing" if x is None else type(x).__name__
        raise DistplanError(f"{where} must be a mapping, got {got}"
                            + (f"; write {example}" if example else ""))
    unknown = [k for k in x if k not in allowed]
    if unknown:
        raise DistplanError(f"{where}: unknown key {unknown[0]!r}{_suggest(unknown[0], allowed)}; allowed keys: "
                            f"{', '.join(allowed)}")
    missing = [k for k in required if k not in x]
    if missing:
        raise DistplanError(f"{where}: missing key {missing[0]!r}")
    return x


def _list(x: object, where: str, example: str = "", optional: bool = False) -> list:
    if x is None and optional:   # 'links:' with nothing after it: none
        return []
    if not isinstance(x, list):
        got = "nothing" if x is None else "a mapping" if isinstance(x, dict) else type(x).__name__
        raise DistplanError(f"'{where}' must be a list, got {got}"
                            + (f"; write one entry a line, e.g. {example}" if example else ""))
    return x


def _text(x: object, where: str, allow_empty: bool = False) -> str:
    if not isinstance(x, str) or not (x or allow_empty):
        hint = ""
        if isinstance(x, bool):
            hint = " (YAML reads yes/no/on/off/true/false as true or false): put the name in quotes"
        elif isinstance(x, (int, float, Decimal)):
            hint = f": put it in quotes, \"{brief(x)}\""
        raise DistplanError(f"{where} must be a{'' if allow_empty else ' non-empty'} string, "
                            f"got {brief(x)}{hint}")
    return x


def _int(x: object, where: str, low: int) -> int:
    if isinstance(x, bool) or not isinstance(x, int) or x < low:
        raise DistplanError(f"{where} must be an integer >= {low}, got {brief(x)}")
    return x


def _one_of(d: dict, options: list[tuple[str, Decimal]], where: str,
            required: bool) -> tuple[str, Decimal] | None:
    given = [(k, u) for k, u in options if k in d]
    if len(given) > 1:
        raise DistplanError(f"{where}: give only one of {', '.join(k for k, _ in given)}")
    if not given and required:
        raise DistplanError(f"{where}: missing key; give one of "
                            f"{', '.join(k for k, _ in options)}")
    return given[0] if given else None


def _precision(p: object, where: str) -> str:
    if isinstance(p, str) and p in PRECISIONS:
        return p
    low = str(p).lower()
    near = low if low in PRECISIONS else PRECISION_ALIASES.get(low)
    raise DistplanError(f"{where}: unknown precision {p!r}" + (f" (did you mean {near!r}?)" if near else "")
                        + f"; precisions: {', '.join(PRECISIONS)}")


def _kind(name: str, x: object, check: _Figures) -> DeviceKind:
    where = f"kinds.{name}"
    d = _mapping(x, where, KIND_KEYS, required=("peak_TFLOPs", "memory_GBps"),
                 example="{peak_TFLOPs: {fp16: 312}, memory_GB: 80, memory_GBps: 2039}")
    peaks = d["peak_TFLOPs"]
    if not isinstance(peaks, dict) or not peaks:
        raise DistplanError(f"{where}.peak_TFLOPs must map precision names to TFLOP/s, "
                            "e.g. {fp16: 312, int8: 624}")
    mem_key, mem_unit = _one_of(d, MEMORY_UNITS, where, required=True)
    eff = d.get("efficiency", 0.7)
    if isinstance(eff, (int, Decimal)) and not isinstance(eff, bool) and 10 <= eff <= 100:   # a percentage
        raise DistplanError(f"{where}.efficiency must be in (0, 1] (a fraction of peak), got {brief(eff)}; "
                            f"for {brief(eff)} % write efficiency: {number_text(Decimal(eff) / 100)}")
    return DeviceKind(
        name=name,
        peak_flops_per_s={_precision(p, f"{where}.peak_TFLOPs"):
                          check(v, "peak_TFLOPs", f"{where}.peak_TFLOPs.{p}") for p, v in peaks.items()},
        mem_capacity_bytes=check(d[mem_key], mem_key, f"{where}.{mem_key}"),
        mem_bw_bytes_per_s=check(d["memory_GBps"], "memory_GBps", f"{where}.memory_GBps"),
        efficiency=check(eff, "efficiency", f"{where}.efficiency"),
        launch_overhead_s=check(d.get("launch_overhead_us", 0), "launch_overhead_us",
                                f"{where}.launch_overhead_us"),
        concurrency=_int(d.get("concurrency", 1), f"{where}.concurrency", 1),
        source=_text(d.get("source", ""), f"{where}.source", True),
        precision_efficiency=_precision_efficiency(d.get("precision_efficiency", {}), where, check),
        host_link_bytes_per_s=check(d.get("host_link_GBps", 0), "host_link_GBps", f"{where}.host_link_GBps"),
        host_mem_bw_bytes_per_s=check(d.get("host_memory_GBps", 0), "host_memory_GBps", f"{where}.host_memory_GBps"),
    )


def _precision_efficiency(x: object, where: str, check: _Figures) -> dict[str, float]:
    """``precision_efficiency: {fp8: 0.64}``: the fraction of peak a precision reaches where
    it is not the kind's ``efficiency`` (``DeviceKind.efficiency_at``)."""
    if not isinstance(x, dict):
        raise DistplanError(f"{where}.precision_efficiency must map precision names to fractions of peak, "
                            "e.g. {fp8: 0.64}")
    return {_precision(p, f"{where}.precision_efficiency"): check(v, "efficiency", f"{where}.precision_efficiency.{p}")
            for p, v in x.items()}


def _device(i: int, x: object) -> Device:
    where = f"devices[{i}]"
    d = _mapping(x, where, DEVICE_KEYS, required=("name", "kind"), example=DEVICE_EXAMPLE.lstrip("- "))
    pos = None
    if "pos" in d:
        p = d["pos"]
        if not (isinstance(p, list) and len(p) == 2):
            raise DistplanError(f"{where}.pos must be [row, col], got {brief(p)}")
        pos = (_int(p[0], f"{where}.pos row", 0), _int(p[1], f"{where}.pos col", 0))
    return Device(_text(d["name"], f"{where}.name"), _text(d["kind"], f"{where}.kind"),
                  pos=pos, node=_int(d.get("node", 0), f"{where}.node", 0))


def _links(i: int, x: object, check: _Figures) -> list[Link]:
    where = f"links[{i}]"
    d = _mapping(x, where, LINK_KEYS, required=("src", "dst", "GBps"), example=LINK_EXAMPLE.lstrip("- "))
    src, dst = _text(d["src"], f"{where}.src"), _text(d["dst"], f"{where}.dst")
    if src == dst:
        raise DistplanError(f"{where}: src and dst are both {src!r}; a link joins two different nodes")
    bw = check(d["GBps"], "GBps", f"{where}.GBps")
    if not bw > 0:
        raise DistplanError(f"{where} ({src}->{dst}): GBps must be > 0, got {brief(d['GBps'])}")
    lat_key = _one_of(d, LATENCY_UNITS, where, required=False)
    lat = check(d[lat_key[0]], lat_key[0], f"{where}.{lat_key[0]}") if lat_key else 0.0
    both = d.get("bidirectional", True)
    if not isinstance(both, bool):
        raise DistplanError(f"{where}.bidirectional must be true or false, got {brief(both)}")
    out = [Link(src, dst, bw, lat)]
    if both:
        out.append(Link(dst, src, bw, lat))
    return out


# --- saving --------------------------------------------------------------------------
def save_topology(t: Topology, path: str | Path) -> None:
    """Write ``t`` as YAML or JSON (by suffix) so that ``load_topology`` returns an equal one."""
    write_document(topology_to_dict(t), path)


def topology_to_dict(t: Topology) -> dict:
    """The file document of ``t``: human units, numbers as exact ``Decimal``."""
    doc: dict = {"version": FORMAT_VERSION, "name": t.name}
    if t.description:
        doc["description"] = t.description
    doc["routing"] = t.routing
    doc["kinds"] = {k: _kind_doc(v) for k, v in t.kinds.items()}
    if t.switches:
        doc["switches"] = list(t.switches)
    doc["devices"] = [_device_doc(d) for d in t.devices]
    doc["links"] = _links_doc(t.links)
    return doc


def _si(x: float, unit: Decimal) -> Decimal:
    return shortest(x, [("", unit)])[1]


def _kind_doc(k: DeviceKind) -> dict:
    mem_key, mem = shortest(k.mem_capacity_bytes, MEMORY_UNITS)
    out: dict = {
        "peak_TFLOPs": Flow({p: _si(v, TERA) for p, v in k.peak_flops_per_s.items()}),
        mem_key: mem,
        "memory_GBps": _si(k.mem_bw_bytes_per_s, GIGA),
        "efficiency": _si(k.efficiency, ONE),
        "launch_overhead_us": _si(k.launch_overhead_s, MICRO),
        "concurrency": k.concurrency,
    }
    if k.host_link_bytes_per_s:
        out["host_link_GBps"] = _si(k.host_link_bytes_per_s, GIGA)
    if k.host_mem_bw_bytes_per_s:
        out["host_memory_GBps"] = _si(k.host_mem_bw_bytes_per_s, GIGA)
    if k.precision_efficiency:
        out["precision_efficiency"] = Flow({p: _si(v, ONE) for p, v in k.precision_efficiency.items()})
    if k.source:
        out["source"] = k.source
    return out


def _device_doc(d: Device) -> Flow:
    out = Flow(name=d.name, kind=d.kind)
    if d.pos is not None:
        out["pos"] = list(d.pos)
    if d.node:
        out["node"] = d.node
    return out


def _links_doc(links: tuple[Link, ...]) -> list[Flow]:
    out: list[Flow] = []
    i = 0
    while i < len(links):
        a = links[i]
        nxt = links[i + 1] if i + 1 < len(links) else None
        pair = nxt is not None and (nxt.src, nxt.dst, nxt.bw_bytes_per_s, nxt.latency_s) == (
            a.dst, a.src, a.bw_bytes_per_s, a.latency_s)
        item = Flow(src=a.src, dst=a.dst, GBps=_si(a.bw_bytes_per_s, GIGA))
        if a.latency_s:
            key, lat = shortest(a.latency_s, LATENCY_UNITS)
            item[key] = lat
        item["bidirectional"] = pair
        out.append(item)
        i += 2 if pair else 1
    return out
