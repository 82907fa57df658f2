"""The clock covers loading (issue 26): reading, checking, costing and coarsening a graph
look at the run's deadline (``distplan.core.deadline``) and stop with one error naming the
phase, the size and the limit; inputs too large for the limit are refused up front; the
fast paths that made large graphs load in time give the same numbers as before."""
from __future__ import annotations

import json
import random
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

import distplan
from distplan.core.deadline import check_time, deadline_at
from distplan.core.errors import DistplanError
from distplan.costs.memory import DENSE_LIVENESS_OPS, _alive_sums, last_reader
from distplan.costs.problem import _reach_counts, build_problem
from distplan.model import SolveOptions
from distplan.topologies.presets import get_topology
from distplan.workloads.coarsen import coarsen
from distplan.workloads.graph import Graph, Operator, Tensor
from distplan.workloads.io import graph_from_dict

ROOT = Path(__file__).resolve().parents[1]


def _doc(n: int, star: bool = False) -> dict:
    edges = [(0, i) for i in range(1, n)] if star else [(i, i + 1) for i in range(n - 1)]
    return {"format": "distplan-graph", "version": 1, "name": f"g{n}", "mode": "inference",
            "ops": [{"name": f"o{i}", "kind": "matmul" if i % 3 == 0 else "activation", "fwd_flops": 2.0e8,
                     "out_elems": 4096, "touched_elems": 12288} for i in range(n)],
            "tensors": [{"src": f"o{a}", "dst": f"o{b}", "elems": 4096} for a, b in edges]}


def _expired():
    return deadline_at(time.perf_counter() - 100.0, 1.0)


def test_check_time_names_the_phase_the_size_and_the_limit():
    check_time("anything", "1 op")   # no deadline: never
    with deadline_at(time.perf_counter() - 100.0, 20.0, active=False):
        check_time("anything", "1 op")   # the run's limit, for messages only
        with deadline_at(time.perf_counter() - 50.0, 2.0):
            with pytest.raises(DistplanError, match=r"time limit of 20 s ran out while coarsening \(5 ops\), 100"):
                check_time("coarsening", "5 ops")


def test_too_large_for_the_limit_is_refused_up_front():
    doc = _doc(30_000)
    with deadline_at(time.perf_counter(), 0.1), pytest.raises(DistplanError) as e:
        graph_from_dict(doc, "graph file 'g.json'")
    assert "30,000 ops, 29,999 tensors" in str(e.value) and "time limit of 0.1 s" in str(e.value)


def test_every_phase_looks_at_the_clock():
    g = graph_from_dict(_doc(500))
    with _expired(), pytest.raises(DistplanError, match="while checking the operators"):
        Graph(g.name, g.ops, g.tensors)
    with _expired(), pytest.raises(DistplanError, match="while counting every operator's ancestors"):
        build_problem(g, get_topology("mcm4x4"))
    with _expired(), pytest.raises(DistplanError, match="while coarsening the graph"):
        coarsen(g, 50)


def test_reach_counts_are_exact():
    rng = random.Random(1)
    for _ in range(200):
        n, p = rng.randint(1, 30), rng.random() * 0.3
        preds = [[u for u in range(v) if rng.random() < p] for v in range(n)]
        succs = [[v for v in range(n) if u in preds[v]] for u in range(n)]
        anc = [set() for _ in range(n)]
        for v in range(n):
            for u in preds[v]:
                anc[v] |= anc[u] | {u}
        assert _reach_counts(range(n), preds, succs, "") == [len(a) for a in anc]


def test_liveness_by_intervals_equals_the_matrix():
    rng = np.random.default_rng(0)
    for _ in range(100):
        n = int(rng.integers(2, 50))
        edges = np.array([(a, b) for a in range(n) for b in range(a + 1, n) if rng.random() < 0.15],
                         dtype=np.int64).reshape(-1, 2)
        send, last, leaves = rng.random(n) * 50, last_reader(n, edges), rng.random(n) < 0.3
        o = np.sort(rng.choice(n, size=int(rng.integers(1, n + 1)), replace=False))
        i = np.arange(len(o))
        alive = (i[None, :] < i[:, None]) & ((last[o][None, :] >= o[:, None]) | leaves[o][None, :])
        np.testing.assert_allclose(_alive_sums(o, send[o], last, leaves), alive @ send[o], rtol=1e-12, atol=1e-9)
    assert DENSE_LIVENESS_OPS >= 1024   # small stages keep the matrix, to the last bit


@pytest.mark.parametrize("star", [False, True])
def test_large_graphs_coarsen_in_linear_time(star):
    """A 20,000-op star or chain goes through runs of the order first (a 100,000-op star
    spent minutes in the pairwise phases); totals are conserved."""
    g = graph_from_dict(_doc(20_000, star))
    t0 = time.perf_counter()
    c = coarsen(g, 150)
    assert time.perf_counter() - t0 < 10
    assert 1 <= len(c.coarse.ops) <= 150
    assert c.coarse.fwd_flops == g.fwd_flops and sum(op.out_elems for op in c.coarse.ops) == 4096 * 20_000


def test_a_first_plan_too_slow_for_the_limit_is_refused():
    """``--coarsen 0`` on a 2,000-op chain at 10 s ended after 27 s: the first plan's search
    is cubic in the ops."""
    p = distplan.problem(graph_from_dict(_doc(2_000)), "mcm4x4")
    with pytest.raises(DistplanError, match=r"2,000 ops: the search for a first plan takes about \d+ s"):
        distplan.solve(p, SolveOptions(time_limit_s=2, coarsen_ops=0))


def test_cli_stops_loading_at_the_limit(tmp_path):
    """A 20,000-op chain at --time-limit 0.5: one error line naming the size and the limit,
    exit 2, within the limit's bound (x 1.1 + 5 s)."""
    path = tmp_path / "chain.json"
    path.write_text(json.dumps(_doc(20_000)))
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "solve.py", "--workload", str(path), "--time-limit", "0.5",
                        "--plan-out", str(tmp_path / "plan.json")], cwd=ROOT, capture_output=True, text=True,
                       timeout=120)
    wall = time.perf_counter() - t0
    assert r.returncode == 2, r.stderr
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and "time limit of 0.5 s" in lines[0], r.stderr
    assert "20,000 ops" in lines[0] or "bytes" in lines[0]
    assert wall <= 0.5 * 1.1 + 5
    assert not (tmp_path / "plan.json").exists()
