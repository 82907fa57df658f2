"""The grid baseline's context- and expert-parallel points, on the cluster space's rank
problems (``model.cluster_ranks``: one cost model for both searches).

A grid point with cp > 1 or ep > 1 runs one rank's graph (``seq_len / cp`` tokens a
sequence, ``E / ep`` routed experts a layer) over ``microbatches x cp`` microbatches, on
its *timed* problem: the K/V ring's exposed part and the all-to-alls timed on the
point's own groups (``timed_problem``), which lie as the cluster space lays them out
(stage k on the next dp x cp x tp devices in device order; ``skeleton_plan``). Its
degrees are the cluster space's (``cp_degrees`` / ``ep_degrees``, same defaults); only a
zoo transformer's training has any besides 1.
"""
from __future__ import annotations

from distplan.core.errors import DistplanError
from distplan.costs.problem import Problem
from distplan.model.cluster_ranks import bare_problem, cp_degrees, ep_degrees, timed_problem, zoo_origin


class GridRanks:
    """The cp / ep degrees of one grid and the timed problem of each point's groups
    (built once, on first use)."""

    def __init__(self, problem: Problem, context_parallel=None, expert_parallel=None,
                 dispatcher: str = "alltoall") -> None:
        self.problem = problem
        self.dispatcher = dispatcher
        self.origin = zoo_origin(problem.graph) if problem.training else None
        self.cps: tuple[int, ...] = cp_degrees(problem, self.origin, context_parallel)
        self.eps: tuple[int, ...] = ep_degrees(problem, self.origin, expert_parallel)
        self._bare: dict[tuple[int, int], Problem | None] = {}
        self._timed: dict[tuple, Problem | None] = {}

    def problem_of(self, dp: int, tp: int, pp: int, sp: bool, cp: int, ep: int) -> Problem | None:
        """The problem a point of ``dp`` data ranks (each of ``cp`` context ranks) is
        simulated on: the caller's at cp = ep = 1, else its timed rank problem (None where
        the model cannot split so)."""
        if cp == ep == 1:
            return self.problem
        sp = bool(sp and tp > 1)
        key = (cp, ep, dp * cp, tp, pp, sp)
        if key not in self._timed:
            bare = self._bare_problem(cp, ep)
            try:
                self._timed[key] = None if bare is None else \
                    timed_problem(bare, self.origin, dp * cp, tp, pp, sp, cp, ep, self.dispatcher)
            except DistplanError:
                self._timed[key] = None
        return self._timed[key]

    def _bare_problem(self, cp: int, ep: int) -> Problem | None:
        if (cp, ep) not in self._bare:
            try:
                self._bare[(cp, ep)] = bare_problem(self.problem, self.origin, cp, ep)
            except DistplanError:
                self._bare[(cp, ep)] = None
        return self._bare[(cp, ep)]

    def line(self) -> str:
        """'cp 1/2, ep 1/2/4' for the degrees besides 1, '' without any."""
        parts = [f"{name} {'/'.join(map(str, d))}" for name, d in (("cp", self.cps), ("ep", self.eps)) if len(d) > 1]
        return ", ".join(parts)
