"""Replicated pipelines ("lanes") and the single-lane surrogate their bounds run on.

A layout of r lanes (model.paths.lane_layouts) runs stage k on the devices
(lane_0[k], ..., lane_{r-1}[k]); microbatch m stays in lane m % r, so per microbatch
(costs.evaluate averages over the replica cycle) a device of stage k carries 1/r of
the stage's compute and a link carries 1/r of the bytes of every lane boundary routed
over it.

``lane_problem(problem, r)`` is the Problem with every time divided by r and every link
bandwidth multiplied by r. A single-lane plan on lane i of the surrogate has exactly
the loads that lane i's devices and links carry in the r-lane plan, minus what the
other lanes add to shared links; and its memory and precision constraints are those of
lane i's devices only. Hence for every r-lane plan P:
  plan_cost(lane_problem, P restricted to lane i) <= plan_cost(problem, P)   (feasible
sets likewise nested), with equality when the lanes have the same device kinds position
by position, the same link bandwidths and no shared links. Every lower bound the
single-path machinery (model.downsets, model.budget) proves on the surrogate along a
lane is thus valid for the r-lane layout, and its plans, lifted to all lanes
(:func:`lift_plan`), are candidates to be re-scored exactly.
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
    return dataclasses.replace(
        problem, fwd_time_s=problem.fwd_time_s / r, bwd_time_s=problem.bwd_time_s / r,
        cast_s_per_elem=problem.cast_s_per_elem / r, cast_fixed_s=problem.cast_fixed_s / r,
        link_bw_bytes_per_s=problem.link_bw_bytes_per_s * r, _extra={})


def lane_stages(lanes: tuple[tuple[int, ...], ...], n_stages: int) -> tuple[Stage, ...]:
    """Stage k = Stage((lane_0[k], ..., lane_{r-1}[k]))."""
    return tuple(Stage(tuple(lane[k] for lane in lanes)) for k in range(n_stages))


def lift_plan(plan: Plan, lanes: tuple[tuple[int, ...], ...]) -> Plan:
    """The same op stages and precisions with stage k on every lane's k-th device."""
    return dataclasses.replace(plan, stages=lane_stages(lanes, plan.n_stages), predicted=dict(plan.predicted))
