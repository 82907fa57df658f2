"""Rank-group symmetry (``sim.symmetry``, ``Symmetry.rank_group``): a tensor-parallel
group spanning nodes, whose ranks no shift by one maps onto each other, merges its
nodes' copies (one node's ranks simulated) and gives exactly the full run's figures."""
from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from distplan import api
from distplan.baselines import grid
from distplan.sim import SimOptions, simulate
from distplan.sim.forecast import reduction_hops
from distplan.sim.program import build_program
from distplan.sim.symmetry import find_symmetry
from distplan.workloads.zoo.mlp import MLPConfig, build_mlp


def tiny_problem(topology: str):
    """A two-layer MLP (four ops) in training, two microbatches."""
    g = build_mlp(MLPConfig("mlp-2x1024", 2, 1024), 256, "training")
    return api.problem(g, topology, mode="training", microbatches=2)


def assert_identical(a, b) -> None:
    for f in dataclasses.fields(a):
        x, y = getattr(a, f.name), getattr(b, f.name)
        assert np.array_equal(x, y) if isinstance(x, np.ndarray) else x == y, f.name


@pytest.mark.parametrize("recompute,sp", [("none", False), ("full", True)])
def test_tp16_over_two_nodes_simulates_one_node_of_ranks(recompute, sp):
    p = tiny_problem("a100x16")
    plan = grid.grid_plan(p, 1, 16, 1, 2, "bf16", grid.device_paths(p)[0][1], (recompute, 0, sp))
    sym = find_symmetry(p, plan, ideal=False, trace=False)
    assert sym is not None and (sym.replicas, sym.ranks, sym.rank_group) == (1, 2, 8)
    assert list(sym.device_rep) == [d % 8 for d in range(16)]
    assert_identical(simulate(p, plan), simulate(p, plan, SimOptions(symmetry=False)))


def test_replicas_and_rank_groups_merge_together():
    """dp 2 x tp 16 on four nodes: replica 1 repeats replica 0 (two nodes each), and each
    replica's second node repeats its first; the gradient ring's hops are counted alike."""
    p = tiny_problem("a100x32")
    plan = grid.grid_plan(p, 2, 16, 1, 2, "bf16", grid.device_paths(p)[0][1], ("none", 1, False))
    sym = find_symmetry(p, plan, ideal=False, trace=False)
    assert sym is not None and (sym.replicas, sym.ranks, sym.rank_group, sym.factor) == (2, 2, 8, 4)
    prog = build_program(p, plan, sym=sym)
    assert reduction_hops(p, plan, sym) == sum(1 for s in prog.x_server if s >= prog.D)
    assert_identical(simulate(p, plan), simulate(p, plan, SimOptions(symmetry=False)))
