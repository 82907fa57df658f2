"""Computation graphs: the Graph type, its JSON form, and the built-in zoo."""
from distplan.workloads.graph import Graph, Operator, Tensor
from distplan.workloads.io import load_graph, save_graph

__all__ = ["Graph", "Operator", "Tensor", "load_graph", "save_graph"]
