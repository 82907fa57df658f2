"""Hardware topologies: types, presets and file loading."""
from distplan.topologies.topology import Device, DeviceKind, Link, Topology

__all__ = ["Device", "DeviceKind", "Link", "Topology"]
