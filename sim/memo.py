"""Simulating many plans of one problem (a search's candidates): each event run made once.

A plan's figures come from one event run of its program (``sim.program``) expanded over
its reduced plan (``sim.symmetry``); precisions reach the run only through the program's
durations and bytes. So two plans whose programs are equal field by field, and whose
reduced plans agree on everything but the op precisions, run the same events:
:class:`RunMemo` runs them once and measures each plan's figures from that run, so every
result equals ``sim.simulate``'s. ``settle=False`` skips the longer runs the steady-state
period may need: ``period_s``, ``steady`` and ``throughput_per_s`` are then the plan's
own run's, every other figure unchanged (a training step's score reads none of them).
"""
from __future__ import annotations

import dataclasses
import hashlib
import pickle
from collections import OrderedDict

import numpy as np

from distplan.core.plan import Plan
from distplan.costs.problem import Problem
from distplan.sim.execute import Net, Run, expand, run
from distplan.sim.options import SimOptions
from distplan.sim.program import build_program
from distplan.sim.result import SimResult
from distplan.sim.simulate import _check_size, _measure, _validate, merges
from distplan.sim.symmetry import find_symmetry

#: stored runs hold at most this many nodes together (about 25 bytes a node kept)
MEMO_NODE_BUDGET = 4_000_000


class RunMemo:
    """``simulate(plan)`` = ``sim.simulate(problem, plan, options)``, each distinct
    event run made once (module docstring). ``runs`` counts the runs made, ``hits``
    the plans measured on a stored one."""

    def __init__(self, problem: Problem, options: SimOptions | None = None,
                 node_budget: int = MEMO_NODE_BUDGET) -> None:
        self.problem = problem
        self.options = options or SimOptions()
        self.node_budget = node_budget
        self._runs: OrderedDict[bytes, tuple[Net, Run]] = OrderedDict()
        self._nodes = 0
        self.runs = 0
        self.hits = 0

    def simulate(self, plan: Plan, settle: bool = True) -> SimResult:
        """The plan's SimResult (``settle``: module docstring)."""
        pb, opts = self.problem, self.options
        _validate(pb, plan)
        static_links = opts.ideal and opts.link_model == "fifo" and plan.schedule != "interleaved"
        sym = find_symmetry(pb, plan, opts.ideal, opts.trace) if opts.symmetry else None
        _check_size(pb, plan, sym)
        prog = build_program(pb, plan, ideal=opts.ideal, static_links=static_links, sym=sym, merge=merges(opts))
        run_plan = plan if sym is None else sym.reduced
        key = run_key(prog, run_plan, opts)
        got = self._runs.get(key)
        if got is None:
            net = expand(prog, run_plan)
            got = (_slim(net), run(net, prog, opts.link_model))
            self.runs += 1
            self._store(key, got)
        else:
            self.hits += 1
            self._runs.move_to_end(key)
        net, r = got
        return _measure(pb, plan, opts, prog, net, r, sym, settle=settle)

    def _store(self, key: bytes, entry: tuple[Net, Run]) -> None:
        n = entry[0].N
        if n > self.node_budget:
            return
        self._runs[key] = entry
        self._nodes += n
        while self._nodes > self.node_budget:
            _, (old, _) = self._runs.popitem(last=False)
            self._nodes -= old.N


def run_key(prog, run_plan: Plan, options: SimOptions) -> bytes:
    """A digest of everything an event run reads: the program (every field), the run
    plan's structure (all but its op precisions and predicted figures) and the options
    (the link model). Equal digests: the same run."""
    structure = (run_plan.op_stage, run_plan.stages, run_plan.microbatches, run_plan.schedule,
                 run_plan.device_order, run_plan.dp_allreduce, run_plan.overlap_grad_reduce)
    blob = pickle.dumps((prog, structure, options), protocol=pickle.HIGHEST_PROTOCOL)
    return hashlib.blake2b(blob, digest_size=32).digest()


def _slim(net: Net) -> Net:
    """The parts of ``net`` the measurement reads (sizes, valid, micro); its per-node
    successor, pending, duration, server and order lists dropped."""
    return dataclasses.replace(net, succ=[], pending=[], dur=[], server=[], seqs=[],
                               valid=np.asarray(net.valid), micro=np.asarray(net.micro))
