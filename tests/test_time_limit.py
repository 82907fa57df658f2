"""Issue 13, the time limit: ``time_limit_s`` / ``--time-limit`` bounds the whole run
(every phase of model.solve, the simulation and ranking of distplan.solve, the command
line from the process's start, the grid baseline), what the clock cut short is said
(``cut_short``), the bound stays honest, and Ctrl-C keeps the best plan so far.

The target (the issue's): wall time <= limit + 10 % + model build time. ``SLACK_S``
absorbs scheduling noise, scaled by the load average where the machine is busier than
its cores (``load_slack_s``; issue 26: these bounds failed under load and passed alone).
The heavy cases of the issue (llama-7b on dgx-h100 at 30 s, a budgeted bert-large at
60 s) are marked slow.
"""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from distplan import api
from distplan.baselines.grid import search as grid_search
from distplan.core.clock import Clock
from distplan.core.errors import DistplanError, TimeUp
from distplan.costs.plan_file import load_plan_file
from distplan.model import SolveOptions, budget_from_fraction, solve
from distplan.testing.strategies import problems

ROOT = Path(__file__).resolve().parents[1]
SLACK_S = 1.0


def load_slack_s() -> float:
    """``SLACK_S``, scaled by the load average over the cores when the machine is busier
    than its cores (the same bound on an idle machine; on a loaded one every phase's
    clock check comes later in wall time, by about the load factor)."""
    try:
        load = max(os.getloadavg()[0], 0.0)
    except OSError:
        return SLACK_S
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return SLACK_S * max(1.0, load / cores)


def within(elapsed_s: float, limit_s: float, build_s: float) -> bool:
    """The issue's target: limit + 10 % + build, with ``load_slack_s`` (SLACK_S when idle)."""
    return elapsed_s <= 1.1 * limit_s + build_s + load_slack_s()


def timed(f, *args, **kw):
    t0 = time.perf_counter()
    out = f(*args, **kw)
    return out, time.perf_counter() - t0


# --- model.solve: every phase looks at the clock ------------------------------------

def test_topk_phase_looks_at_the_clock():
    """gpt3-1.3b on a100x16 at 5 s took 66-100 s: the top-K loop re-scored every
    neighbour plan of the pool on every plan, without looking at the clock."""
    p = api.problem("gpt3-1.3b", "a100x16")
    r, secs = timed(solve, p, SolveOptions(time_limit_s=5))
    assert within(secs, 5, r.build_seconds), f"{secs:.1f} s for a 5 s limit"
    assert r.plans and r.bound_s <= r.objective_s
    if len(r.plans) < 5:   # the rest of the top-K is what time allows, and the result says so
        assert any(c.startswith("top-K") for c in r.cut_short), r.cut_short


def test_fast_phase_cut_keeps_a_bound_valid_for_the_layouts_it_did_not_evaluate():
    """At 0.2 s the fast phase evaluates one layout of gpt3-1.3b on a100x16 (r=1, whose
    relaxation bound is above the optimum of the replicated layouts): the bound
    reported must still hold for the layouts never evaluated, and the status must say
    time_limit."""
    p = api.problem("gpt3-1.3b", "a100x16")
    full = solve(p, SolveOptions(time_limit_s=120, top_k=1))
    assert full.status == "optimal"
    r, secs = timed(solve, p, SolveOptions(time_limit_s=0.2, top_k=1))
    assert any(c.startswith("fast phase") for c in r.cut_short), r.cut_short
    assert r.status == "time_limit"
    assert r.bound_s <= full.objective_s * (1 + 1e-9), (r.bound_s, full.objective_s)
    assert r.bound_s <= p.period_lower_bound_s() * (1 + 1e-12)   # what is known of the layouts left out
    rows = {e["layout"]: e for e in r.explored}
    assert len(rows) == len(full.explored)   # the layouts left out are still listed, with their bound
    assert within(secs, 0.2, r.build_seconds)


def test_budget_phase_and_milp_phase_hold_the_limit_and_say_what_they_cut():
    """bert-base under a 5 % sensitivity budget at 3 s: the budget phase reaches no
    layout and most MILPs are not solved; the result says so and keeps the limit."""
    p = api.problem("bert-base", "mcm4x4")
    opts = SolveOptions(time_limit_s=3, sensitivity_budget=budget_from_fraction(p, 0.05))
    r, secs = timed(solve, p, opts)
    assert within(secs, 3, r.build_seconds), f"{secs:.1f} s for a 3 s limit"
    assert r.status == "time_limit"
    assert any(c.startswith("budget phase") for c in r.cut_short), r.cut_short
    assert r.plans and r.bound_s <= r.objective_s


# a timing failure does not shrink to anything clearer: generate only
@settings(max_examples=12, deadline=None, phases=[Phase.explicit, Phase.generate],
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(problem=problems(max_ops=30, max_devices=8), limit=st.floats(0.2, 1.0), top_k=st.integers(1, 5))
def test_random_problems_return_within_a_tiny_limit(problem, limit, top_k):
    """Random problems of up to 30 ops on up to 8 devices at 0.2-1 s: the solve (or its
    error) comes back within the limit + 10 % + the model build, and a plan it returns
    has a bound below its objective."""
    t0 = time.perf_counter()
    build = 0.0
    try:
        r = solve(problem, SolveOptions(time_limit_s=limit, top_k=top_k))
        build = r.build_seconds
        assert r.plans and r.bound_s <= r.objective_s * (1 + 1e-9)
        assert r.status in ("optimal", "time_limit")
    except DistplanError:   # no plan within the limit, or none at all: said as quickly
        pass
    secs = time.perf_counter() - t0
    assert within(secs, limit, build), f"{secs:.2f} s for a {limit:.2f} s limit ({problem.n_ops} ops)"


# --- distplan.solve: the MILP gets what is left, the ranking stops at the deadline -----

def test_pipeline_stops_ranking_at_the_deadline(monkeypatch):
    """Simulating large plans can take long: past the deadline the pipeline stops
    ranking after the first plan and says how many it did not simulate."""
    import distplan.api.pipeline as pipeline

    real_sim = pipeline.sim_run

    def slow_sim(*a, **kw):
        time.sleep(0.5)
        return real_sim(*a, **kw)

    monkeypatch.setattr(pipeline, "sim_run", slow_sim)
    p = api.problem("mlp-xs", "mcm2x2")
    rep, secs = timed(api.solve, p, SolveOptions(time_limit_s=1.5))
    assert 1 <= len(rep.plans) < 5
    assert any(c.startswith("ranking") for c in rep.cut_short), rep.cut_short
    assert rep.to_json()["solver"]["cut_short"] == list(rep.cut_short)
    assert "note: cut short: ranking" in rep.table()
    assert secs <= 1.5 + 2 * 0.5 + SLACK_S, f"{secs:.1f} s"   # at most the plan being simulated runs over


def test_a_simulation_slower_than_its_forecast_stops_at_the_deadline(monkeypatch):
    """A forecast assumes a whole core; on a loaded machine a simulation can take many times
    longer (a 175B plan on 512 GPUs: 549 s for a 60 s limit at a tenth of a core). The
    replay looks at the deadline itself: the plan then comes back with the model's figures
    and the report says the simulation was stopped. Here the forecast says 0 s and the
    deadline has already passed, so only the replay's own clock can stop it (looked at every
    16 steps here, so that a small plan reaches it)."""
    import distplan.api.pipeline as pipeline
    import distplan.costs.replay as replay
    from distplan.sim.execute import stop_at
    from distplan.sim.simulate import simulate

    p = api.problem("bert-base", "mcm4x4", microbatches=64)
    plan = api.solve(p, SolveOptions(time_limit_s=30, top_k=1)).best.plan
    monkeypatch.setattr(replay, "CLOCK_EVERY", 16)
    with pytest.raises(TimeUp):
        with stop_at(time.perf_counter() - 1.0):
            simulate(p, plan)
    monkeypatch.setattr(pipeline, "forecast_sim_s", lambda *a, **kw: 0.0)
    ranked, dropped, unranked, why = pipeline._rank(p, [plan], False, None, Clock.until(time.perf_counter() - 1.0),
                                                     0.0)
    assert len(ranked) == 1 and ranked[0].sim is None and not dropped and unranked == 0
    assert why.startswith("simulation stopped at the time limit (forecast 0.0 s"), why
    assert simulate(p, plan).iteration_s > 0   # outside the context: no deadline


def test_pipeline_gives_the_milp_what_is_left(monkeypatch):
    """The MILP's limit is exactly the time left until the deadline less the ranking
    margin (checked by value, whatever the load), the solve keeps to that limit, and
    the whole call to the time limit. It failed on a loaded machine and passed alone
    (issue 26): the wall-clock bounds now take a slack scaled by the load average."""
    from distplan.api import pipeline

    calls: list[tuple[float, float]] = []
    real = pipeline.milp_solve

    def spy(problem, options):
        calls.append((time.perf_counter(), options.time_limit_s))
        return real(problem, options)

    monkeypatch.setattr(pipeline, "milp_solve", spy)
    p = api.problem("bert-base", "mcm4x4")
    opts = SolveOptions(time_limit_s=4)
    t0 = time.perf_counter()
    rep = api.solve(p, opts)
    secs = time.perf_counter() - t0
    assert len(calls) == 1
    called_at, limit = calls[0]
    left = max(t0 + 4 - called_at - pipeline.ranking_margin_s(p, opts), pipeline.MIN_SOLVE_S)
    assert 0 <= limit - left < 0.25, (limit, left)   # what is left, less the margin: no more, hardly less
    slack = load_slack_s()
    assert rep.solver.seconds <= 1.1 * limit + slack, (rep.solver.seconds, limit, slack)
    assert secs <= 1.1 * 4 + rep.solver.build_seconds + slack, f"{secs:.1f} s (slack {slack:.1f} s)"


# --- the command line: the limit counts from the process's start ---------------------

def run_cli(*argv: str, timeout: float = 300) -> tuple[subprocess.CompletedProcess, float]:
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "solve.py", *argv], cwd=ROOT, capture_output=True, text=True,
                       timeout=timeout)
    return r, time.perf_counter() - t0


def test_cli_time_limit_bounds_the_whole_run(tmp_path):
    """``solve.py --workload gpt3-1.3b --topology a100x16 --time-limit 5`` took 66 s."""
    r, secs = run_cli("--workload", "gpt3-1.3b", "--topology", "a100x16", "--time-limit", "5", "--json",
                      "--plan-out", str(tmp_path / "plan.json"))
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert within(secs, 5, doc["solver"]["build_seconds"]), f"{secs:.1f} s for --time-limit 5"
    assert isinstance(doc["solver"]["cut_short"], list) and doc["solver"]["interrupted"] is False
    assert (tmp_path / "plan.json").exists()


@pytest.mark.slow
@pytest.mark.parametrize("argv,limit", [
    (("--workload", "llama-7b", "--topology", "dgx-h100", "--time-limit", "30"), 30),
    (("--workload", "bert-large", "--sensitivity-budget", "10%", "--time-limit", "60"), 60),
    (("--workload", "gpt3-1.3b", "--topology", "a100x16", "--time-limit", "60"), 60),
])
def test_cli_heavy_cases_of_the_issue(tmp_path, argv, limit):
    r, secs = run_cli(*argv, "--json", "--plan-out", str(tmp_path / "plan.json"))
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert within(secs, limit, doc["solver"]["build_seconds"]), f"{secs:.1f} s for {argv}"


# --- baselines: the budget holds when one evaluation is long ------------------------

def test_grid_stops_when_the_next_evaluation_would_overrun():
    """Evaluations of 0.45 s against a 1 s budget: the search used to start one at
    0.9 s and end at 1.35 s; it now starts none once half an evaluation no longer fits.

    Judged on when each evaluation started, not on the total: the setup before the
    first one (enumerating the grid, checking plans) is slow on a loaded machine (0.86 s
    on CI once) and no rule can cut an evaluation whose length is not yet known."""
    p = api.problem("bert-base", "mcm4x4")
    starts: list[float] = []

    def slow(problem, plan):
        starts.append(time.perf_counter())
        time.sleep(0.45)
        return 1.0

    t0 = time.perf_counter()
    r = grid_search(p, 1.0, seed=0, scorer=slow)
    end = time.perf_counter()
    assert r.candidates >= 1 and len(starts) == r.candidates
    late = [s - t0 for s in starts[1:] if s - t0 + 0.5 * 0.45 > 1.0 + 0.05]
    assert not late, f"evaluations started at {late} s with a 1 s budget"
    assert end - starts[-1] <= 0.45 + 0.1, "the search went on after its last evaluation"
    assert r.stopped_by == "time"


# --- Ctrl-C --------------------------------------------------------------------------

def _interrupt_on_first_plan(n: int = 1):
    """A progress callback that sends this process ``n`` SIGINTs when the fast phase
    reports its first layout with a plan."""
    sent = []

    def progress(msg: str) -> None:
        if not sent and msg.startswith("path ") and "heuristic objective inf" not in msg:
            sent.append(msg)
            for _ in range(n):
                os.kill(os.getpid(), signal.SIGINT)
    return progress, sent


def test_ctrl_c_once_a_plan_exists_returns_it_as_interrupted_with_an_honest_bound():
    p = api.problem("bert-base", "mcm4x4")
    full = solve(p, SolveOptions(time_limit_s=60, top_k=1))
    progress, sent = _interrupt_on_first_plan()
    r, secs = timed(solve, p, SolveOptions(time_limit_s=60, progress=progress))
    assert sent and r.status == "interrupted"
    assert r.plans and r.bound_s <= r.objective_s
    assert r.bound_s <= full.objective_s * (1 + 1e-9)
    assert any("interrupted" in c for c in r.cut_short), r.cut_short
    assert secs < 10
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler   # the handler is put back


def test_ctrl_c_in_the_pipeline_simulates_only_the_best_plan():
    p = api.problem("bert-base", "mcm4x4")
    progress, sent = _interrupt_on_first_plan()
    rep = api.solve(p, SolveOptions(time_limit_s=60, progress=progress))
    assert sent and rep.interrupted and rep.solver.status == "interrupted"
    assert len(rep.plans) == 1
    assert "interrupted (Ctrl-C)" in rep.table()
    assert rep.to_json()["solver"]["interrupted"] is True


def test_a_second_ctrl_c_aborts():
    p = api.problem("bert-base", "mcm4x4")
    progress, _ = _interrupt_on_first_plan(n=2)
    with pytest.raises(KeyboardInterrupt):
        solve(p, SolveOptions(time_limit_s=60, progress=progress))
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_ctrl_c_before_any_plan_aborts(monkeypatch):
    import distplan.model.phase_fast as phase_fast

    real = phase_fast.enumerate_downsets

    def interrupted(problem):
        os.kill(os.getpid(), signal.SIGINT)
        return real(problem)

    monkeypatch.setattr(phase_fast, "enumerate_downsets", interrupted)
    with pytest.raises(KeyboardInterrupt):
        solve(api.problem("mlp-xs", "mcm2x2"), SolveOptions(time_limit_s=10))
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_ctrl_c_during_highs_keeps_the_plan_writes_it_and_exits_130(tmp_path):
    """SIGINT to ``solve.py --workload bert-large`` once HiGHS runs (its root LP calls
    no interrupt callback for many seconds): the best plan so far is simulated, written
    and reported as interrupted within seconds; exit status 130."""
    out = tmp_path / "plan.json"
    proc = subprocess.Popen([sys.executable, "solve.py", "--workload", "bert-large", "--time-limit", "300",
                             "--plan-out", str(out)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    seen = []
    try:
        for line in proc.stderr:
            seen.append(line)
            if "built in" in line:   # the first MILP is built: HiGHS starts now
                break
        time.sleep(1.0)
        t0 = time.perf_counter()
        proc.send_signal(signal.SIGINT)
        stdout, stderr = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
    secs = time.perf_counter() - t0
    assert proc.returncode == 130, "".join(seen) + stderr
    assert secs < 15, f"{secs:.1f} s from Ctrl-C to exit"
    assert "interrupted" in stdout and "Ctrl-C: stopping with the best plan" in stderr
    plan, problem = load_plan_file(out)
    assert problem.graph.name == "bert-large" and plan.n_stages >= 1


def test_ctrl_c_during_a_study_run_stops_the_sweep_instead_of_recording_a_cut_run(monkeypatch):
    """A study records finished runs and resumes the rest; a run whose MILP a Ctrl-C cut
    short must not be recorded as finished."""
    import distplan.model.pipeline_space as planner   # the pipeline space runs the phases
    from distplan.studies.runner import run_one
    from distplan.studies.spec import RunSpec

    real = planner.budget_phase

    def interrupted(*a, **kw):   # after the fast phase: a plan exists, the Ctrl-C is graceful
        os.kill(os.getpid(), signal.SIGINT)
        return real(*a, **kw)

    monkeypatch.setattr(planner, "budget_phase", interrupted)
    with pytest.raises(KeyboardInterrupt):
        run_one(RunSpec("mlp-xs", "mcm2x2", methods=("random",), time_limit_s=5))
