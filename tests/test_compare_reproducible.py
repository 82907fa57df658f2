"""--compare with a deterministic budget (candidates) reproduces every method exactly."""
from __future__ import annotations

import distplan
from conftest import chain_graph, line_topology


def _run():
    p = distplan.problem(chain_graph(6), line_topology(3, bw=1e10), precisions="fp16,int8", microbatches=4)
    return distplan.compare(p, ("random", "sa", "grid"), budget_s=60, seed=3, candidates=40)


def test_same_seed_and_candidate_budget_give_the_same_comparison():
    a, b = _run(), _run()
    for x, y in zip(a.rows, b.rows):
        assert (x.method, x.throughput_per_s, x.candidates, x.plan) == (y.method, y.throughput_per_s, y.candidates, y.plan)
    for r in a.rows[1:]:
        assert r.extra["stopped_by"] in ("candidates", "exhausted")
        assert r.candidates <= 40
