"""Turn user-facing names into objects: a workload name or graph file -> Graph, a preset
name or topology file -> Topology. The zoo and preset registries own the names."""
from __future__ import annotations

from pathlib import Path

from topologies.topology import Topology
from workloads.graph import Graph


def resolve_workload(spec: str, batch_size: int | None = None, seq_len: int | None = None,
                     mode: str = "inference") -> Graph:
    """A zoo name (``bert-base``), a graph JSON file, or (with the extra) an ``.onnx`` file."""
    suffix = Path(spec).suffix.lower()
    if suffix == ".json":
        from workloads.io import load_graph

        g = load_graph(spec)
        return g if g.mode == mode else g.with_mode(mode)
    if suffix == ".onnx":
        from workloads.onnx_import import import_onnx

        return import_onnx(spec, mode=mode)
    from workloads.zoo import get_workload

    return get_workload(spec, batch_size=batch_size, seq_len=seq_len, mode=mode)


def resolve_topology(spec: str) -> Topology:
    """A preset name (``mcm4x4``) or a topology file (``.yaml``, ``.yml``, ``.json``)."""
    if Path(spec).suffix.lower() in (".yaml", ".yml", ".json"):
        from topologies.io import load_topology

        return load_topology(spec)
    from topologies.presets import get_topology

    return get_topology(spec)
