"""Turn user-facing names into objects: a workload name or graph file -> Graph, a preset
name or topology file -> Topology. The zoo and preset registries own the names."""
from __future__ import annotations

import os
from pathlib import Path

from distplan.core.errors import DistplanError
from distplan.core.validate import check_path, check_str
from distplan.topologies.topology import Topology
from distplan.workloads.graph import Graph


def resolve_workload(spec: str, batch_size: int | None = None, seq_len: int | None = None,
                     mode: str = "inference", input_shapes: dict[str, tuple[int, ...]] | None = None,
                     attention: str | None = None) -> Graph:
    """A zoo name (``bert-base``), a graph JSON file, or (with the extra) an ``.onnx`` file
    (``input_shapes`` fixes its symbolic input dimensions); ``attention``: a zoo model's
    attention core (``zoo.attention``; None: explicit)."""
    check_path("workload", spec, "a workload name or a graph file's name")
    if input_shapes and Path(spec).suffix.lower() != ".onnx":
        raise DistplanError(f"input shapes apply to .onnx workloads only, not {spec!r}")
    suffix = Path(spec).suffix.lower()
    if suffix in (".json", ".onnx"):
        check_regular_file(spec, "workload")
    if suffix == ".json":
        from distplan.workloads.io import load_graph

        g = load_graph(spec)
        return g if g.mode == mode else g.with_mode(mode)
    if suffix == ".onnx":
        from distplan.workloads.onnx_import import import_onnx

        return import_onnx(spec, mode=mode, input_shapes=input_shapes)
    from distplan.workloads.zoo import get_workload

    try:
        return get_workload(spec, batch_size=batch_size, seq_len=seq_len, mode=mode,
                            attention=attention or "explicit")
    except DistplanError:
        _not_a_name(spec, "workload", "a graph file ends in .json (an ONNX model in .onnx)")
        raise


def resolve_topology(spec: str) -> Topology:
    """A preset name (``mcm4x4``) or a topology file (``.yaml``, ``.yml``, ``.json``)."""
    check_path("topology", spec, "a preset name or a topology file's name")
    if Path(spec).suffix.lower() in (".yaml", ".yml", ".json"):
        from distplan.topologies.io import load_topology

        check_regular_file(spec, "topology")
        return load_topology(spec)
    from distplan.topologies.presets import get_topology

    try:
        return get_topology(spec)
    except DistplanError:
        _not_a_name(spec, "topology", "a topology file ends in .yaml, .yml or .json")
        raise


def check_regular_file(spec: str, what: str) -> None:
    """A workload or topology path that exists must be a regular file (or a folder, which
    its reader names): a FIFO, a character or block device, or a socket is refused by
    its kind without opening it (a FIFO without a writer blocked the read forever, a
    device such as /dev/zero read without end)."""
    import stat

    try:
        mode = os.stat(spec).st_mode
    except (OSError, ValueError):
        return   # missing or unreadable: the reader says so
    kind = ("a FIFO (named pipe)" if stat.S_ISFIFO(mode) else "a character device" if stat.S_ISCHR(mode)
            else "a block device" if stat.S_ISBLK(mode) else "a socket" if stat.S_ISSOCK(mode) else None)
    if kind is not None:
        raise DistplanError(f"{what} {spec!r} is {kind}, not a regular file; give the path of a saved {what}")


def _not_a_name(spec: str, what: str, hint: str) -> None:
    """``spec`` named no preset: when it is a file or folder on disk, say so (rather than
    listing every preset name)."""
    if not spec.strip():
        return
    try:
        p = Path(spec)
        kind = "folder" if p.is_dir() else "file" if p.exists() else None
    except (OSError, ValueError):
        return
    if kind:
        raise DistplanError(f"{what} {spec!r} is a {kind}, not a {what} name; {hint}") from None


def parse_input_shape(text: str) -> tuple[str, tuple[int, ...]]:
    """``NAME=1x128`` -> (NAME, (1, 128)): one ONNX input's static shape."""
    check_str("input shape", text)
    name, sep, dims = text.rpartition("=")
    try:
        shape = tuple(int(d) for d in dims.lower().split("x"))
    except ValueError:
        shape = ()
    if not sep or not name or not shape or any(d < 1 for d in shape):
        raise DistplanError(f"input shape {text!r} not understood; write NAME=D1xD2..., e.g. input_ids=1x128")
    return name, shape
