"""distplan: shared vocabulary (errors, precisions, plans) and the Python API.

``from_module(module, example_inputs)`` traces a torch ``nn.Module`` into a Graph
(needs the ``torch`` extra; torch is imported only when it is called).
"""
from distplan.errors import DistplanError


def from_module(module, example_inputs, mode: str = "inference", name: str | None = None):
    """Trace an ``nn.Module`` with torch.fx into a distplan Graph (see workloads.torch_import)."""
    from workloads.torch_import import import_module

    return import_module(module, example_inputs, mode=mode, name=name)


__all__ = ["DistplanError", "from_module"]
