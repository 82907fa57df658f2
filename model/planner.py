"""model.solve: plan a Problem in the space ``model.spaces.resolve_space`` picks.

The pipeline space runs four phases (model.pipeline_space), each a function returning a
frozen dataclass. 1. fast (model.phase_fast): heuristic plans and a proven period bound
per replication factor and lane layout; 2. budget (model.phase_budget, under a
sensitivity budget): budget-aware bounds and plans; 3. MILP (model.phase_milp): the
promising layouts' MILPs, warm-started, solved by HiGHS, the others pruned by their
bounds; 4. top-K (model.phase_topk): the K best distinct plans of the winner, by no-good cuts.

Guarantees: the reported bound is the least proven bound over every layout explored, so
it holds over the whole declared plan space. ``time_limit_s`` bounds the whole solve on
one clock (core.clock.Clock); once it (or a Ctrl-C after a first plan) expires, each
phase keeps what it has with valid bounds and lists what it skipped in
``SolveResult.cut_short``. User constraints enter every MILP; the other phases' plans
are used only where they satisfy it (model.admission). More: docs/concepts/milp.md.
"""
from __future__ import annotations

from distplan.core.clock import Clock
from distplan.core.interrupt import stop_on_interrupt
from distplan.costs.problem import Problem
from distplan.model.applies import check_options_apply
from distplan.model.options import SolveOptions, SolveResult
from distplan.model.pipeline_space import Explored, explored_rows  # noqa: F401  (their home before issue 23)
from distplan.model.spaces import resolve_space


def solve(problem: Problem, options: SolveOptions | None = None) -> SolveResult:
    """Plan ``problem``: the best plans found within ``options.time_limit_s`` (end to end);
    ``SolveResult.search`` is the space's own ``core.space.SearchResult``."""
    options = options or SolveOptions()
    with stop_on_interrupt() as stop:
        clock = Clock(options.time_limit_s, stop=stop)
        space = resolve_space(problem, options)
        check_options_apply(problem, options, space.name)   # an option the space never reads: an error, not ignored
        result = space.search(problem, options, clock)
    return SolveResult.of(result)
