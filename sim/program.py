"""The program a plan induces: its task graph (``sim.taskgraph``: nodes, dependencies,
transfers, casts, all-reduces, buffers) ordered by its schedule (``sim.schedule``:
rounds, per-server static order, stream backpressure). ``sim.execute`` runs it.
"""
from __future__ import annotations

from distplan.costs.problem import Problem
from distplan.core.plan import Plan
from distplan.sim.schedule import assign_schedule
from distplan.sim.symmetry import Symmetry
from distplan.sim.taskgraph import TP_ALLREDUCE_KINDS, Program, build_task_graph

__all__ = ["Program", "TP_ALLREDUCE_KINDS", "build_program"]


def build_program(problem: Problem, plan: Plan, ideal: bool = False, static_links: bool = False,
                  sym: Symmetry | None = None, merge: bool = False) -> Program:
    """The node types, offsets, buffers and collectives of ``plan`` on ``problem``; with
    ``sym``, of its reduced plan (one copy, ``sim.symmetry``); ``merge``: uncontended
    ZeRO-3 chains as one node each (``sim.stream_runs``)."""
    prog = build_task_graph(problem, plan, ideal=ideal, static_links=static_links, sym=sym, merge=merge)
    assign_schedule(prog, plan if sym is None else sym.reduced, ideal)
    return prog
