"""What a baseline search returns (BaselineResult) and the bookkeeping every search
shares (Tracker): the wall-clock deadline, the feasibility gate, the scorer, the
count of candidates scored and the best plan so far.

A candidate is *evaluated* when the scorer runs on it (cache hits and plans rejected
by the feasibility gate are not counted as evaluated; rejections are counted apart).
Only plans that pass the independent checker (``sim.check.plan_violations``) and the
sensitivity budget are ever scored, so a search can only return a feasible plan.

A score above the physical ceiling ``batch_size / problem.period_lower_bound_s()``
(every op at its fastest, all devices busy all the time) cannot be a real throughput:
such a candidate is counted as ``implausible`` and discarded rather than allowed to win
(it means the scorer mis-measured it; a baseline "beating" physics is a bug report, not
a result).
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass, field

from distplan.costs.evaluate import plan_sensitivity
from distplan.costs.problem import Problem
from distplan.core.errors import DistplanError
from distplan.core.clock import Clock
from distplan.core.interrupt import Stop, current_stop
from distplan.core.space import BoundKind, SearchResult, Status
from distplan.core.plan import Plan
from distplan.baselines.scoring import Scorer, default_scorer


@dataclass(frozen=True)
class BaselineResult:
    """Outcome of one search.

    ``plan`` is the best feasible plan found (None when none was found within the
    budget), ``throughput_per_s`` its score (samples/s; 0.0 when ``plan`` is None),
    ``seconds`` the wall-clock time used, ``candidates`` the plans scored,
    ``rejected`` the candidates the feasibility gate turned away before scoring,
    ``implausible`` the scored candidates discarded because their score exceeded the
    physical ceiling (see :class:`Tracker`), and ``history`` (seconds, best throughput)
    each time the best improved. ``stopped_by``: what ended the search: "candidates"
    (the deterministic budget: a seeded search then reproduces exactly), "time" (the
    wall clock: not reproducible run to run), "interrupted" (Ctrl-C) or "exhausted" (no
    new plan to try). ``problem``: the best plan's problem where it is not the one
    searched (a grid point's rank problem under context or expert parallelism,
    ``baselines.grid_ranks``), else None; ``space``: what the search covered, one line
    ('' where the method states none).

    A view of ``core.space.SearchResult`` (``search``) for the baselines' public API.
    """

    method: str
    plan: Plan | None
    throughput_per_s: float
    seconds: float
    candidates: int
    rejected: int = 0
    implausible: int = 0
    history: tuple[tuple[float, float], ...] = field(default=(), compare=False)
    stopped_by: str = field(default="", compare=False)
    search: SearchResult | None = field(default=None, compare=False, repr=False)
    problem: Problem | None = field(default=None, compare=False, repr=False)
    space: str = field(default="", compare=False)

    @classmethod
    def of(cls, r: SearchResult) -> BaselineResult:
        """The view of a baseline's search."""
        d = r.details
        return cls(d["method"], r.best, d["throughput_per_s"], r.seconds, d["candidates"], d["rejected"],
                   d["implausible"], d["history"], d["stopped_by"], r, r.problem, d.get("space", ""))


def plan_key(plan: Plan) -> tuple:
    """Hashable identity of a plan as a scorer sees it."""
    return (plan.op_stage, plan.op_precision, plan.stages, plan.microbatches, plan.schedule)


class Tracker:
    """Deadline, feasibility gate, scoring with a cache, and best-so-far of one search.

    ``max_candidates`` (optional) ends the search after that many scored plans, and
    then the search's schedule (SA's temperature) follows the candidate count, not the
    clock: a seeded search is deterministic unless the wall-clock budget, kept as a
    safety cap, ends it first (``stopped_by`` says which).

    The budget holds even when one evaluation is long (simulating a large plan): the
    search also stops when half the mean evaluation time no longer fits before the
    deadline (expected overrun and underrun: half an evaluation each), and at once on a
    Ctrl-C that asked to stop (distplan.core.interrupt). ``clock`` (core.clock): the
    search's clock (default: one of ``budget_s`` started now); the search ends at the
    earlier of its deadline and ``budget_s`` from now.

    A candidate may be a plan of another problem than the one searched (``evaluate``'s
    ``problem``: a grid point's rank problem, whose ``cp`` context ranks each run a
    ``1/cp`` share of every sequence): it is gated and scored on that problem, its score
    divided by ``cp`` (whole sequences), its ceiling that problem's.
    """

    def __init__(self, problem: Problem, method: str, budget_s: float, scorer: Scorer | None = None,
                 sensitivity_budget: float | None = None, max_candidates: int | None = None,
                 clock: Clock | None = None) -> None:
        if not budget_s > 0:
            raise DistplanError(f"baseline {method!r}: budget must be > 0 s, got {budget_s}")
        if max_candidates is not None and max_candidates < 1:
            raise DistplanError(f"baseline {method!r}: max_candidates must be >= 1, got {max_candidates}")
        self.problem = problem
        self.method = method
        self.scorer = scorer or default_scorer()
        self.sensitivity_budget = sensitivity_budget
        self.max_candidates = max_candidates
        self.clock = clock if clock is not None else Clock(budget_s, stop=current_stop() or Stop())
        self.t0 = self.clock.t0
        self.deadline = min(self.clock.deadline, time.perf_counter() + budget_s)
        self.budget_s = budget_s
        self.candidates = 0
        self.rejected = 0
        self.best_plan: Plan | None = None
        self.best_problem: Problem = problem
        self.best = 0.0
        self.space = ""   # what the search covers (``note``)
        self.history: list[tuple[float, float]] = []
        self._cache: dict[tuple, float | None] = {}
        self.implausible = 0
        self.ceiling_per_s = self.ceiling_of(problem)
        self._ceilings: dict[int, tuple[Problem, float]] = {}
        self._stale = 0  # consecutive proposals already seen (a small space is exhausted)
        self._eval_s = 0.0  # seconds spent in the scorer, over self.candidates evaluations
        self._cut = ""      # why expired() ended the search before the deadline ("time", "interrupted")

    #: consecutive already-seen proposals after which a search stops early
    STALE_LIMIT = 2000

    @staticmethod
    def ceiling_of(problem: Problem, cp: int = 1) -> float:
        """The physical ceiling of a score on ``problem`` in whole sequences:
        ``batch_size / (cp x period_lower_bound_s)`` (every op at its fastest, all devices
        busy all the time)."""
        lb = problem.period_lower_bound_s()
        return problem.graph.batch_size / (cp * lb) if lb > 0 else float("inf")

    def note(self, space: str) -> None:
        """Record what the search covers (``BaselineResult.space``)."""
        self.space = space

    def elapsed_s(self) -> float:
        return time.perf_counter() - self.t0

    def fraction(self) -> float:
        """Share of the budget used: candidates scored when a candidate budget is set
        (deterministic), else wall-clock time."""
        if self.max_candidates:
            return min(1.0, self.candidates / self.max_candidates)
        return min(1.0, self.elapsed_s() / self.budget_s)

    def stopped_by(self) -> str:
        if self.max_candidates is not None and self.candidates >= self.max_candidates:
            return "candidates"
        if self._cut:
            return self._cut
        if time.perf_counter() >= self.deadline:
            return "time"
        return "exhausted"

    def expired(self) -> bool:
        if self._stale >= self.STALE_LIMIT:
            return True
        if self.max_candidates is not None and self.candidates >= self.max_candidates:
            return True
        stop = current_stop()
        if self.clock.stop.requested or (stop is not None and stop.requested):
            self._cut = "interrupted"
            return True
        now = time.perf_counter()
        half_eval = 0.5 * self._eval_s / self.candidates if self.candidates else 0.0
        if now < self.deadline <= now + half_eval:
            self._cut = "time"   # the next evaluation would end past the deadline by more than it saves
            return True
        return now >= self.deadline

    def violations(self, plan: Plan, problem: Problem | None = None) -> list[str]:
        from distplan.costs.check import plan_violations

        problem = problem if problem is not None else self.problem
        bad = plan_violations(problem, plan)
        if not bad and self.sensitivity_budget is not None:
            s = plan_sensitivity(problem, plan)
            if s > self.sensitivity_budget * (1 + 1e-9) + 1e-12:
                bad = [f"sensitivity {s:.6g} over the budget {self.sensitivity_budget:.6g}"]
        return bad

    def idle(self) -> None:
        """Record a proposal that produced no new candidate (counts towards stopping early)."""
        self._stale += 1

    def _ceiling(self, problem: Problem, cp: int) -> float:
        if problem is self.problem and cp == 1:
            return self.ceiling_per_s
        got = self._ceilings.get(id(problem))
        if got is None or got[0] is not problem:
            got = self._ceilings[id(problem)] = (problem, self.ceiling_of(problem, cp))
        return got[1]

    def evaluate(self, plan: Plan, problem: Problem | None = None, cp: int = 1) -> float | None:
        """Score ``plan`` (samples/s) if it is feasible, else None; updates the best.
        ``problem``: the plan's problem when not the searched one, ``cp``: its context
        ranks a sequence (class docstring)."""
        pb = problem if problem is not None else self.problem
        key = plan_key(plan) if pb is self.problem else (plan_key(plan), id(pb))
        if key in self._cache:
            self._stale += 1
            return self._cache[key]
        self._stale = 0
        if self.violations(plan, pb):
            self.rejected += 1
            self._cache[key] = None
            return None
        t0 = time.perf_counter()
        try:
            score = float(self.scorer(pb, plan)) / cp
        except DistplanError:
            self.rejected += 1  # the scorer cannot model this plan (e.g. analytic cost with tp > 1)
            self._cache[key] = None
            return None
        self.candidates += 1
        self._eval_s += time.perf_counter() - t0
        if score > self._ceiling(pb, cp) * (1 + 1e-9):
            self.implausible += 1
            score = None
        elif score > self.best:
            self.best, self.best_plan, self.best_problem = score, plan, pb
            self.history.append((self.elapsed_s(), score))
            self.clock.stop.arm()   # a plan exists: a first Ctrl-C/SIGTERM now keeps it
        self._cache[key] = score
        return score

    def search_result(self) -> SearchResult:
        """The search's outcome in the one interface: no bound, no solver report; the
        objective is the best plan's seconds per sample batch (batch size / throughput)."""
        stopped = self.stopped_by()
        found = self.best_plan is not None
        rate = self.best if found else 0.0
        status = {"interrupted": Status.INTERRUPTED, "time": Status.TIME_LIMIT}.get(stopped, Status.SEARCHED)
        plans = (self.best_plan,) if found else ()
        objective = self.problem.graph.batch_size / rate if found and rate > 0 else math.inf
        cut = (f"{self.method}: search stopped by the {'interruption' if stopped == 'interrupted' else 'time limit'}",
               ) if stopped in ("interrupted", "time") else ()
        details = {"method": self.method, "throughput_per_s": rate, "candidates": self.candidates,
                   "rejected": self.rejected, "implausible": self.implausible, "history": tuple(self.history),
                   "stopped_by": stopped, "space": self.space}
        other = self.best_problem if found and self.best_problem is not self.problem else None
        return SearchResult(self.method, status if found else Status.NOT_FOUND, plans, objective, -math.inf,
                            BoundKind.NONE, cut_short=cut, seconds=self.elapsed_s(), problem=other,
                            details=details)

    def result(self) -> BaselineResult:
        return BaselineResult.of(self.search_result())
