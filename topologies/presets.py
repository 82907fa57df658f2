"""Named hardware presets: ``get_topology(name)`` and ``list_presets()``.

``mcm4x4`` (the default) and ``mcm<R>x<C>`` (Simba-class chiplet meshes, XY routing),
``ring<N>``, ``dgx-a100`` / ``dgx-h100`` (8 GPUs on an NVSwitch), ``a100x<N>`` (DGX A100
nodes, one InfiniBand rail per GPU to one fabric switch), ``h100x<N>`` / ``h200x<N>`` /
``b200x<N>`` (8-GPU nodes on a rail-optimised fat tree of 32-node units; ``-os<R>``
oversubscribes above the leaf R:1), ``gb200-nvl72x<N>`` (NVL72 racks) and
``hybrid-v100-t4`` (QSync's mixed fleet on PCIe). Device figures come from
``topologies.kinds``; link bandwidths are per direction, latencies per hop, and figures
without a source are marked ASSUMED.

Every preset, its figures and their sources: docs/guides/topology-files.md (the preset
table) and docs/HARDWARE.md.
"""
from __future__ import annotations

import re
from collections.abc import Callable
from difflib import get_close_matches

from distplan.core.errors import DistplanError
from distplan.topologies import kinds as K
from distplan.topologies.builders import hosts_on_network, mesh, rail_cluster, rail_fat_tree, ring, switched_cluster
from distplan.topologies.topology import Topology

DEFAULT_TOPOLOGY = "mcm4x4"
#: Largest device count a chiplet pattern preset builds (bigger ones are a typo, not a plan).
MAX_DEVICES = 1024
#: Largest GPU count a GPU cluster preset builds: the largest training clusters of 2024-25
#: hold ~100,000 GPUs; a topology of 131,072 builds in seconds.
MAX_GPUS = 131_072
#: GPUs a node of the 8-GPU presets, and rails (network ports) a node.
GPUS_PER_NODE = 8
#: GB200 NVL72: GPUs an NVLink domain (a rack), and the rails its GPUs' ports are cabled to
#: (ASSUMED: 8, GPU j on rail j mod 8, as on 8-GPU nodes; with 4, one per place in a compute
#: tray, a tp 8 group's ranks would share rails and its copies could not be merged:
#: llama3-70b dp 9 x tp 8 x pp 8 on gb200-nvl72x8 took 68 s of CPU, 10.8 s with 8, the
#: iteration within 0.03 %).
NVL72_GPUS = 72
NVL72_RAILS = 8


def _mcm(rows: int, cols: int) -> Topology:
    return mesh(f"mcm{rows}x{cols}", rows, cols, K.CHIPLET, K.NOP_BW_BYTES_PER_S,
                K.NOP_LATENCY_S,
                description=f"{rows}x{cols} mesh of Simba-class chiplets, XY routing, "
                            "100 GB/s 20 ns NoP links")


def _ring(n: int) -> Topology:
    return ring(f"ring{n}", n, K.CHIPLET, K.NOP_BW_BYTES_PER_S, K.NOP_LATENCY_S,
                description=f"ring of {n} Simba-class chiplets, 100 GB/s 20 ns NoP links")


def _dgx(gpu: str) -> Topology:
    kind, bw = (K.A100, K.NVLINK3_BW_BYTES_PER_S) if gpu == "a100" else (K.H100,
                                                                        K.NVLINK4_BW_BYTES_PER_S)
    return switched_cluster(f"dgx-{gpu}", 1, 8, kind, bw, K.NVLINK_LATENCY_S,
                            description=f"DGX {gpu.upper()}: 8 GPUs on one NVSwitch, "
                                        f"{bw / 1e9:g} GB/s per direction")


def _cluster(gpu: str, n: int) -> Topology:
    """``a100x<N>``: DGX A100 nodes, one HDR port per GPU on one non-blocking switch."""
    if n % 8 != 0 or n < 8:
        raise DistplanError(f"topology '{gpu}x{n}': GPU count must be a positive multiple of 8 "
                            f"(8-GPU nodes); try '{gpu}x{max(8, n // 8 * 8)}'")
    kind, nvl, port = K.A100, K.NVLINK3_BW_BYTES_PER_S, K.IB_HDR_PORT_BW_BYTES_PER_S
    return rail_cluster(f"{gpu}x{n}", n // 8, 8, kind, nvl, K.NVLINK_LATENCY_S, port, K.IB_LATENCY_S,
                        description=f"{n // 8} DGX {gpu.upper()} node{'s' if n > 8 else ''}, NVSwitch inside, "
                                    f"one HDR InfiniBand port ({port / 1e9:g} GB/s) per GPU to the fabric")


#: 8-GPU node presets on a rail-optimised fat tree: kind and NVLink bandwidth per direction
_FAT_TREE_GPUS = {"h100": (K.H100, K.NVLINK4_BW_BYTES_PER_S), "h200": (K.H200, K.NVLINK4_BW_BYTES_PER_S),
                  "b200": (K.B200, K.NVLINK5_BW_BYTES_PER_S)}


def _oversubscription(text: str | None, name: str) -> float:
    if text is None:
        return 1.0
    r = float(text)
    if not (1 <= r <= 64):
        raise DistplanError(f"topology {name!r}: oversubscription -os{text} must be between 1 (non-blocking) "
                            "and 64; e.g. '-os2' for 2:1 above the leaf")
    return r


def _os_text(r: float) -> str:
    return "non-blocking" if r == 1 else f"{r:g}:1 oversubscribed above the leaf"


def _fat_tree_cluster(gpu: str, n: int, oversub: float, name: str) -> Topology:
    """``h100x<N>`` / ``h200x<N>`` / ``b200x<N>``[``-os<R>``] (module docstring)."""
    if n % GPUS_PER_NODE != 0:
        raise DistplanError(f"topology {name!r}: GPU count must be a positive multiple of 8 "
                            f"(8-GPU nodes); try '{gpu}x{max(8, n // 8 * 8)}'")
    kind, nvl = _FAT_TREE_GPUS[gpu]
    nodes = n // GPUS_PER_NODE
    return rail_fat_tree(name, nodes, GPUS_PER_NODE, kind, nvl, K.NVLINK_LATENCY_S, GPUS_PER_NODE,
                         K.RAIL_400G_BW_BYTES_PER_S, K.IB_LATENCY_S, K.LEAF_DOWN_PORTS, oversub,
                         description=f"{nodes} {gpu.upper()} node{'s' if nodes > 1 else ''} (8 GPUs on NVSwitch, "
                                     f"{nvl / 1e9:g} GB/s), 8 x 400 Gb/s rails a node on a rail-optimised fat "
                                     f"tree, 32-node units, {_os_text(oversub)}")


def _nvl72(racks: int, oversub: float, name: str) -> Topology:
    """``gb200-nvl72x<N>``[``-os<R>``] (module docstring)."""
    return rail_fat_tree(name, racks, NVL72_GPUS, K.GB200, K.NVLINK5_BW_BYTES_PER_S, K.NVLINK_LATENCY_S,
                         NVL72_RAILS, K.RAIL_400G_BW_BYTES_PER_S, K.IB_LATENCY_S, K.LEAF_DOWN_PORTS, oversub,
                         description=f"{racks} GB200 NVL72 rack{'s' if racks > 1 else ''} (72 GPUs on one NVLink "
                                     f"domain, {K.NVLINK5_BW_BYTES_PER_S / 1e9:g} GB/s), a 400 Gb/s port per GPU "
                                     f"on 8 rails, {_os_text(oversub)}")


def _hybrid() -> Topology:
    return hosts_on_network("hybrid-v100-t4", [(K.V100, 4), (K.T4, 4)],
                            K.PCIE3_BW_BYTES_PER_S, K.PCIE_LATENCY_S,
                            K.NET_100G_BW_BYTES_PER_S, K.NET_LATENCY_S,
                            description="QSync-style mixed fleet: 4 V100 host + 4 T4 host, "
                                        "PCIe gen3 inside, 100 Gb/s network between")


def _count(text: str, what: str, name: str) -> int:
    n = int(text)
    if n < 1 or n > MAX_DEVICES:
        raise DistplanError(f"topology {name!r}: {what} must be between 1 and {MAX_DEVICES}, "
                            f"got {n}")
    return n


def _build_mcm(m: re.Match, name: str) -> Topology:
    r, c = _count(m[1], "rows", name), _count(m[2], "columns", name)
    if r * c > MAX_DEVICES:
        raise DistplanError(f"topology {name!r}: {r * c} chiplets is more than {MAX_DEVICES}")
    return _mcm(r, c)


def _build_ring(m: re.Match, name: str) -> Topology:
    n = _count(m[1], "device count", name)
    if n < 2:
        raise DistplanError(f"topology {name!r}: a ring needs at least 2 devices; try 'ring4'")
    return _ring(n)


def _gpu_count(text: str, name: str, limit: int = MAX_GPUS) -> int:
    n = int(text)
    if n < 1 or n > limit:
        raise DistplanError(f"topology {name!r}: GPU count must be between 1 and {limit:,}, got {n}")
    return n


def _build_cluster(m: re.Match, name: str) -> Topology:
    return _cluster(m[1], _gpu_count(m[2], name))


def _build_fat_tree(m: re.Match, name: str) -> Topology:
    return _fat_tree_cluster(m[1], _gpu_count(m[2], name), _oversubscription(m[3], name), name)


def _build_nvl72(m: re.Match, name: str) -> Topology:
    racks = int(m[1])
    if racks < 1 or racks * NVL72_GPUS > MAX_GPUS:
        raise DistplanError(f"topology {name!r}: rack count must be between 1 and {MAX_GPUS // NVL72_GPUS:,} "
                            f"(at most {MAX_GPUS:,} GPUs), got {racks}")
    return _nvl72(racks, _oversubscription(m[2], name), name)


#: (pattern shown to users, regex, builder, one-line description), in list order.
_PATTERNS: list[tuple[str, re.Pattern, Callable[[re.Match, str], Topology], str]] = [
    ("mcm4x4", re.compile(r"mcm4x4"), lambda m, n: _mcm(4, 4),
     "default: 16 Simba-class chiplets (2 TFLOP/s fp16, 4 TOPS int8/fp8, 64 MiB SRAM) "
     "in a 4x4 mesh, XY routing, 100 GB/s NoP links"),
    ("mcm<R>x<C>", re.compile(r"mcm(\d+)x(\d+)"), _build_mcm,
     "R x C mesh of the same chiplets, e.g. mcm2x2, mcm6x6"),
    ("ring<N>", re.compile(r"ring(\d+)"), _build_ring,
     "N of the same chiplets in a bidirectional ring, e.g. ring8"),
    ("dgx-a100", re.compile(r"dgx-a100"), lambda m, n: _dgx("a100"),
     "8 A100 80 GB on one NVSwitch, 300 GB/s per direction per GPU"),
    ("dgx-h100", re.compile(r"dgx-h100"), lambda m, n: _dgx("h100"),
     "8 H100 80 GB (fp8 too) on one NVSwitch, 450 GB/s per direction per GPU"),
    ("a100x<N>", re.compile(r"(a100)x(\d+)"), _build_cluster,
     "N A100 (multiple of 8) in DGX nodes, one HDR InfiniBand port per GPU, e.g. a100x16"),
    ("h100x<N>", re.compile(r"(h100)x(\d+)(?:-os(\d+(?:\.\d+)?))?"), _build_fat_tree,
     "N H100 80 GB (multiple of 8): 8-GPU NVSwitch nodes, 8 x 400 Gb/s rails a node on a "
     "rail-optimised fat tree (-os<R>: R:1 above the leaf), e.g. h100x32, h100x16384-os2"),
    ("h200x<N>", re.compile(r"(h200)x(\d+)(?:-os(\d+(?:\.\d+)?))?"), _build_fat_tree,
     "N H200 141 GB, built as h100x<N>, e.g. h200x64"),
    ("b200x<N>", re.compile(r"(b200)x(\d+)(?:-os(\d+(?:\.\d+)?))?"), _build_fat_tree,
     "N B200 180 GB (NVLink5 900 GB/s per direction), built as h100x<N>, e.g. b200x64"),
    ("gb200-nvl72x<N>", re.compile(r"gb200-nvl72x(\d+)(?:-os(\d+(?:\.\d+)?))?"), _build_nvl72,
     "N GB200 NVL72 racks (72 GPUs each on one NVLink domain), a 400 Gb/s rail port per GPU, "
     "racks joined by a fat tree, e.g. gb200-nvl72x2"),
    ("hybrid-v100-t4", re.compile(r"hybrid-v100-t4"), lambda m, n: _hybrid(),
     "QSync-style mixed fleet: 4 V100 (fp16/fp32) + 4 T4 (int8/fp16/fp32) on two hosts, "
     "PCIe + 100 Gb/s network"),
]


def list_presets() -> list[tuple[str, str]]:
    """(name or name pattern, one-line description) for every preset, default first."""
    return [(shown, desc) for shown, _, _, desc in _PATTERNS]


def get_topology(name: str) -> Topology:
    """Build the preset called ``name`` (exact name or an instance of a pattern)."""
    key = name.strip().lower()
    for _, regex, build, _ in _PATTERNS:
        m = regex.fullmatch(key)
        if m:
            return build(m, key)
    valid = ", ".join(shown for shown, *_ in _PATTERNS)
    near = _nearest(key)
    raise DistplanError(f"unknown topology {name!r}{f' (did you mean {near!r}?)' if near else ''}; use one of: "
                        f"{valid} (or a .yaml/.json topology file)")


def _nearest(key: str) -> str | None:
    """The preset a misspelt name most likely meant: separators made '-' (or dropped), then
    the closest fixed name or pattern instance, keeping the user's numbers (mcm-4x4 -> mcm4x4)."""
    if not key:
        return None
    for cand in (re.sub(r"[\s_.]+", "-", key), re.sub(r"[\s_.-]+", "", key)):
        if any(regex.fullmatch(cand) for _, regex, _, _ in _PATTERNS):
            return cand
    names = [shown for shown, *_ in _PATTERNS if "<" not in shown] + ["mcm2x2", "ring8", "a100x16", "h100x16",
                                                                              "gb200-nvl72x2"]
    found = get_close_matches(key, names, 1, 0.7)
    return found[0] if found else None
