"""distplan: shared vocabulary (errors, precisions, plans) and the Python API."""
from distplan.errors import DistplanError

__all__ = ["DistplanError"]
