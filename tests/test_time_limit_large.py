"""The time limit on large topologies: the fast phase's heuristic DP (model.heuristic._dp,
stages x op positions) and its layout keys (model.phase_fast.surrogate_key, every
boundary's route) look at the clock. On a 4,096-device topology they took 20 s a DP call
and ~95 s of routes before the deadline was checked (a100x1024 bert-base at
--time-limit 30: 33.8 s wall; a 4,096-device chain: 122 s). A phase cut short keeps the
best plan found so far and says what it left undone (Clock.cut_short). No tight
wall-time asserts: only that the work stops where the clock says and is reported.
"""
from __future__ import annotations

import time

from distplan import api
from distplan.costs.check import plan_violations
from distplan.model.admission import PlanGate
from distplan.model.heuristic import _dp, heuristic_plan, precision_candidates
from distplan.model.options import SolveOptions
from distplan.model.phase_fast import fast_phase, surrogate_key
from distplan.model.progress import Clock, Log
from distplan.topologies.paths import device_paths, lane_layouts


class Ticks:
    """An ``expired`` that turns true after ``n`` looks (deterministic, unlike a clock)."""

    def __init__(self, n: int):
        self.n, self.looks = n, 0

    def __call__(self) -> bool:
        self.looks += 1
        return self.looks > self.n


def test_heuristic_dp_stops_at_the_clock_and_keeps_the_plan_of_the_stages_reached():
    p = api.problem("bert-base", "a100x256")
    path = device_paths(p.topology)[0][1]
    prec = precision_candidates(p, path, None)[0]
    cut: list[str] = []
    stage = _dp(p, path, prec, False, expired=Ticks(20), cut=cut)
    assert cut == [f"heuristic DP: 21 of {len(path)} pipeline stages considered"], cut
    assert stage is not None and max(stage) <= 20   # the best plan over the first 21 stages
    assert _dp(p, path, prec, False, expired=Ticks(10 ** 9)) == _dp(p, path, prec, False)   # ample time: same


def test_heuristic_plan_reports_what_it_cut_and_returns_a_feasible_plan():
    p = api.problem("bert-base", "a100x256")
    path = device_paths(p.topology)[0][1]
    cut: list[str] = []
    h = heuristic_plan(p, path, expired=Ticks(40), cut=cut)
    assert any(c.startswith("heuristic DP:") for c in cut), cut
    assert h is not None and not plan_violations(p, h[0])
    cut = []
    heuristic_plan(p, path, expired=lambda: True, cut=cut)   # one stage, then no other candidate
    assert cut[0] == f"heuristic DP: 1 of {len(path)} pipeline stages considered", cut
    assert any("precision candidates not tried" in c for c in cut), cut


def test_fast_phase_at_a_tiny_limit_returns_and_says_the_dp_was_cut():
    """At 1 ms on a100x1024 the first layout is still evaluated (its DP cut at the
    clock), the rest are left unevaluated, and cut_short says both."""
    p = api.problem("bert-base", "a100x1024")
    opts = SolveOptions(time_limit_s=0.001)
    clock = Clock(0.001)
    t0 = time.perf_counter()
    fast = fast_phase(p, opts, PlanGate(p, opts), clock, Log())
    secs = time.perf_counter() - t0
    assert any("heuristic DP:" in c for c in clock.cut_short), clock.cut_short
    assert any(c.startswith("fast phase:") and "layouts not evaluated" in c for c in clock.cut_short)
    assert fast.unevaluated and len(fast.candidates) > 1
    assert secs < 15, secs   # was ~40 s (two 20 s DP calls); generous: a loaded 2-core machine


def test_surrogate_key_stops_routing_at_the_clock():
    """A 1,024-device chain (ring1024), 512 lanes dealt round-robin: 512 routes of 512
    hops. The key gives up (None) when the clock says so, between routes."""
    p = api.problem("mlp-xs", "ring1024")
    lanes = dict(lane_layouts(p.topology, 512))
    name = next(n for n in lanes if n.endswith("strided"))
    looks = Ticks(5)
    assert surrogate_key(p, 512, lanes[name], expired=looks) is None
    assert looks.looks == 6
    assert surrogate_key(p, 2, lanes[next(iter(lanes))], expired=lambda: False) is not None
