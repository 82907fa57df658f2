"""Topology files: ``load_topology(path)`` and ``save_topology(t, path)`` (YAML or JSON).

Keys carry human units, converted to SI once, here; every key is checked (an unknown
key is an error naming it and the allowed ones). Layout (``?`` = optional)::

    version?: 1
    name?: small-mesh                 # default: the file name without suffix
    description?: ...
    routing?: xy | shortest           # default shortest; xy needs pos on every device
    kinds:
      chiplet:
        peak_TFLOPs: {fp16: 2, int8: 4}       # dense peak per supported precision
        memory_GiB | memory_MiB | memory_GB: 0.0625   # exactly one
        memory_GBps: 2000
        efficiency?: 0.75                     # default 0.7
        launch_overhead_us?: 1                # default 0
        concurrency?: 1
        source?: where the numbers come from
    switches?: [sw0]                  # nodes that only forward
    devices:
      - {name: c0_0, kind: chiplet, pos?: [0, 0], node?: 0}
    links:
      - {src: c0_0, dst: c0_1, GBps: 100, latency_us | latency_ns ?: 0.02, bidirectional?: true}

``bidirectional`` (default true) adds the reverse link right after the forward one.
``save_topology`` writes such pairs back as one entry, so ``load(save(t)) == t`` exactly,
link order included. Every error names the file.
"""
from __future__ import annotations

from decimal import Decimal
from pathlib import Path

from distplan.core.errors import DistplanError
from distplan.topologies.textformat import Flow, read_document, write_document
from distplan.topologies.topology import Device, DeviceKind, Link, Topology
from distplan.core.units import (GIB, GIGA, MIB, MICRO, NANO, ONE, TERA, brief, shortest, to_si)

FORMAT_VERSION = 1
TOP_KEYS = ("version", "name", "description", "routing", "kinds", "switches", "devices", "links")
KIND_KEYS = ("peak_TFLOPs", "memory_GiB", "memory_MiB", "memory_GB", "memory_GBps",
             "efficiency", "launch_overhead_us", "concurrency", "source")
DEVICE_KEYS = ("name", "kind", "pos", "node")
LINK_KEYS = ("src", "dst", "GBps", "latency_us", "latency_ns", "bidirectional")
MEMORY_UNITS: list[tuple[str, Decimal]] = [("memory_GiB", GIB), ("memory_MiB", MIB),
                                           ("memory_GB", GIGA)]
LATENCY_UNITS: list[tuple[str, Decimal]] = [("latency_us", MICRO), ("latency_ns", NANO)]


# --- loading -------------------------------------------------------------------------
def load_topology(path: str | Path) -> Topology:
    """Read a topology from a ``.yaml``/``.yml``/``.json`` file; errors name the file."""
    path = Path(path)
    doc = read_document(path)
    try:
        return topology_from_dict(doc, default_name=path.stem)
    except DistplanError as e:
        raise DistplanError(f"{path}: {e}") from None


def topology_from_dict(doc: object, default_name: str = "topology") -> Topology:
    """Build a Topology from a parsed document (numbers as int, float or Decimal)."""
    top = _mapping(doc, "top level", TOP_KEYS, required=("kinds", "devices"))
    if "version" in top and top["version"] != FORMAT_VERSION:
        raise DistplanError(f"version {brief(top['version'])} is not supported; use {FORMAT_VERSION}")
    name = _text(top.get("name", default_name), "name")
    kinds_doc = top["kinds"]
    if not isinstance(kinds_doc, dict) or not kinds_doc:
        raise DistplanError("'kinds' must be a non-empty mapping of kind name -> figures")
    kinds = {_text(k, "a kind name"): _kind(k, v) for k, v in kinds_doc.items()}
    devices = [_device(i, d) for i, d in enumerate(_list(top["devices"], "devices"))]
    switches = [_text(s, f"switches[{i}]")
                for i, s in enumerate(_list(top.get("switches", []), "switches"))]
    links: list[Link] = []
    for i, item in enumerate(_list(top.get("links", []), "links")):
        links += _links(i, item)
    return Topology(name, kinds, tuple(devices), tuple(links), tuple(switches),
                    routing=_text(top.get("routing", "shortest"), "routing"),
                    description=_text(top.get("description", ""), "description", True))


def _mapping(x: object, where: str, allowed: tuple[str, ...],
             required: tuple[str, ...] = ()) -> dict:
    if not isinstance(x, dict):
        raise DistplanError(f"{where} must be a mapping, got {type(x).__name__}")
    unknown = [k for k in x if k not in allowed]
    if unknown:
        raise DistplanError(f"{where}: unknown key {unknown[0]!r}; allowed keys: "
                            f"{', '.join(allowed)}")
    missing = [k for k in required if k not in x]
    if missing:
        raise DistplanError(f"{where}: missing key {missing[0]!r}")
    return x


def _list(x: object, where: str) -> list:
    if not isinstance(x, list):
        raise DistplanError(f"'{where}' must be a list, got {type(x).__name__}")
    return x


def _text(x: object, where: str, allow_empty: bool = False) -> str:
    if not isinstance(x, str) or not (x or allow_empty):
        raise DistplanError(f"{where} must be a{'' if allow_empty else ' non-empty'} string, "
                            f"got {brief(x)}")
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


def _kind(name: str, x: object) -> DeviceKind:
    where = f"kinds.{name}"
    d = _mapping(x, where, KIND_KEYS, required=("peak_TFLOPs", "memory_GBps"))
    peaks = d["peak_TFLOPs"]
    if not isinstance(peaks, dict) or not peaks:
        raise DistplanError(f"{where}.peak_TFLOPs must map precision names to TFLOP/s, "
                            "e.g. {fp16: 312, int8: 624}")
    mem_key, mem_unit = _one_of(d, MEMORY_UNITS, where, required=True)
    return DeviceKind(
        name=name,
        peak_flops_per_s={str(p): to_si(v, TERA, f"{where}.peak_TFLOPs.{p}")
                          for p, v in peaks.items()},
        mem_capacity_bytes=to_si(d[mem_key], mem_unit, f"{where}.{mem_key}"),
        mem_bw_bytes_per_s=to_si(d["memory_GBps"], GIGA, f"{where}.memory_GBps"),
        efficiency=to_si(d.get("efficiency", 0.7), ONE, f"{where}.efficiency"),
        launch_overhead_s=to_si(d.get("launch_overhead_us", 0), MICRO,
                                f"{where}.launch_overhead_us"),
        concurrency=_int(d.get("concurrency", 1), f"{where}.concurrency", 1),
        source=_text(d.get("source", ""), f"{where}.source", True),
    )


def _device(i: int, x: object) -> Device:
    where = f"devices[{i}]"
    d = _mapping(x, where, DEVICE_KEYS, required=("name", "kind"))
    pos = None
    if "pos" in d:
        p = d["pos"]
        if not (isinstance(p, list) and len(p) == 2):
            raise DistplanError(f"{where}.pos must be [row, col], got {brief(p)}")
        pos = (_int(p[0], f"{where}.pos row", 0), _int(p[1], f"{where}.pos col", 0))
    return Device(_text(d["name"], f"{where}.name"), _text(d["kind"], f"{where}.kind"),
                  pos=pos, node=_int(d.get("node", 0), f"{where}.node", 0))


def _links(i: int, x: object) -> list[Link]:
    where = f"links[{i}]"
    d = _mapping(x, where, LINK_KEYS, required=("src", "dst", "GBps"))
    src, dst = _text(d["src"], f"{where}.src"), _text(d["dst"], f"{where}.dst")
    bw = to_si(d["GBps"], GIGA, f"{where}.GBps")
    if not bw > 0:
        raise DistplanError(f"{where} ({src}->{dst}): GBps must be > 0, got {brief(d['GBps'])}")
    lat_key = _one_of(d, LATENCY_UNITS, where, required=False)
    lat = to_si(d[lat_key[0]], lat_key[1], f"{where}.{lat_key[0]}") if lat_key else 0.0
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
