"""Replicated pipelines ("lanes") and the single-lane surrogate their bounds run on.

With r lanes stage k runs on (lane_0[k], ..., lane_{r-1}[k]) and microbatch m stays in
lane m % r. ``lane_problem(problem, r)`` divides every time by r (link latencies too
under exposed communication) and multiplies every link bandwidth by r. Guarantee: for
every r-lane plan P, ``plan_cost(lane_problem, P on lane i) <= plan_cost(problem, P)``
(feasible sets nested), with equality for alike lanes without shared links, so every
lower bound proven on the surrogate along a lane holds for the r-lane layout, and its
plans, lifted to all lanes (:func:`lift_plan`), are candidates to be re-scored exactly.

The argument: docs/concepts/milp.md, "Lanes and the single-lane surrogate".
"""
from __future__ import annotations

import dataclasses

from distplan.costs.problem import Problem
from distplan.core.plan import Plan, Stage


def lane_problem(problem: Problem, replicas: int) -> Problem:
    """The surrogate Problem for r = ``replicas`` lanes (module docstring)."""
    if replicas == 1:
        return problem
    r = float(replicas)
    # exposed transfers (costs.exposed) pay each link's latency on the device loads: 1/r of it too
    lat = {"link_latency_s": problem.link_latency_s / r} if problem.exposed else {}
    return dataclasses.replace(
        problem, fwd_time_s=problem.fwd_time_s / r, bwd_time_s=problem.bwd_time_s / r,
        cast_s_per_elem=problem.cast_s_per_elem / r, cast_fixed_s=problem.cast_fixed_s / r,
        link_bw_bytes_per_s=problem.link_bw_bytes_per_s * r, _extra={}, **lat)


def lane_stages(lanes: tuple[tuple[int, ...], ...], n_stages: int) -> tuple[Stage, ...]:
    """Stage k = Stage((lane_0[k], ..., lane_{r-1}[k]))."""
    return tuple(Stage(tuple(lane[k] for lane in lanes)) for k in range(n_stages))


def lift_plan(plan: Plan, lanes: tuple[tuple[int, ...], ...]) -> Plan:
    """The same op stages and precisions with stage k on every lane's k-th device."""
    return dataclasses.replace(plan, stages=lane_stages(lanes, plan.n_stages), predicted=dict(plan.predicted))
