"""Where heterogeneity pays (issue 23): a 1F1B pipeline whose stages differ in their
recomputation beats every uniform plan in the simulator when the memory is tight.

Under 1F1B stage 0 of a 2-stage pipeline holds 2 microbatches of activations and the
last stage 1, but the last stage also holds the LM head (50,257 x 1,024 parameters,
4 layers' worth of matrix products on gpt3-1024x8x8). At 2 GB a device no uniform
2-stage plan without full recomputation fits at any split, so the best uniform plan
recomputes everything, the head's stage too; the stage space recomputes fully on stage
0 only and selectively on the head's stage (bench/heterogeneity_bench.py). On 4 stages
at 1.25 GB the recomputation steps down along the pipeline: full | selective | none |
none."""
from __future__ import annotations

import dataclasses

import pytest

import distplan
from distplan.api.problem import problem as make_problem
from distplan.core.clock import Clock
from distplan.costs.check import plan_violations
from distplan.model import SolveOptions
from distplan.model.cluster import _Space, plan_cluster, training_precision
from distplan.model.stage_space import best_start, build_plan, improve, uniform_starts
from distplan.model.stage_terms import stage_configs, stage_terms, undominated
from distplan.sim import simulate
from distplan.testing.cluster_oracle import declared_plans
from distplan.topologies import kinds as K
from distplan.topologies.builders import rail_cluster

#: bytes a device: uniform selective recomputation fits on no 2-stage split
CAP_BYTES = 2.0e9


def _problem(nodes: int = 2, cap_bytes: float = CAP_BYTES, microbatches: int = 8):
    """gpt3-1024x8x8 at seq 1,024, ``microbatches`` of 1, bf16, on ``nodes`` A100 nodes of
    1 GPU holding ``cap_bytes`` each."""
    kind = dataclasses.replace(K.A100, mem_capacity_bytes=cap_bytes)
    topo = rail_cluster(f"a100-{nodes}x1", nodes, 1, kind, K.NVLINK3_BW_BYTES_PER_S, K.NVLINK_LATENCY_S,
                        K.IB_HDR_PORT_BW_BYTES_PER_S, K.IB_LATENCY_S)
    return make_problem("gpt3-1024x8x8", topo, batch_size=1, seq_len=1024, mode="training",
                        precisions=("bf16",), microbatches=microbatches)


def test_per_stage_recomputation_beats_every_uniform_plan_in_the_simulator():
    """Every feasible uniform plan at microbatch 1 (the cluster oracle's declared space,
    interleaving at vp 2 and 4 included) simulated: the best is pp 2 x vp 2 with full
    recomputation, 0.043714 s; the cluster space over microbatch sizes 1, 2, 4, 8 with
    interleaving finds 0.043232 s (microbatch 2), 1F1B alone 0.044767 s. The stage
    space's full | selective plan simulates 0.038727 s: 11.6 % more samples per step
    than the best uniform plan, and its simulated peak stays under the 2 GB."""
    p = _problem()
    uniform = [pl for pl in declared_plans(p, "bf16", virtual_stages=(2, 4)) if not plan_violations(p, pl)]
    assert uniform
    # why: no uniform 2-stage 1F1B plan without full recomputation fits (stage 0 holds 2 microbatches)
    assert all(pl.stages[0].recompute == "full" for pl in uniform if pl.n_stages == 2)
    best_uniform_s = min(simulate(p, pl).iteration_s for pl in uniform)
    cl = distplan.solve(p, SolveOptions(space="cluster", time_limit_s=60, top_k=5, virtual_stages=(2, 4)))
    st = distplan.solve(p, SolveOptions(space="stage", time_limit_s=60, top_k=2, microbatch_sizes=(1,)))
    stages = st.best.plan.stages
    assert [s.recompute for s in stages] == ["full", "selective"]
    assert st.best.sim.iteration_s <= best_uniform_s / 1.12                 # microbatch 1, every plan
    assert st.best.sim.iteration_s <= cl.best.sim.iteration_s / 1.11       # microbatch 1, 2, 4, 8
    assert not plan_violations(p, st.best.plan)
    assert (st.best.sim.peak_memory_bytes <= CAP_BYTES).all()


def test_a_four_stage_pipeline_recomputes_less_towards_its_end_and_beats_every_uniform_plan():
    """4 x 1 A100 at 1.25 GB, 16 microbatches: under 1F1B stage k holds 4 - k microbatches.
    Every uniform plan at microbatch 1 that fits (79 of the 507 the cluster oracle
    declares, vp 1, 2, 4) simulated: the best recomputes fully on pp 4, 0.051794 s (no
    uniform 4-stage 1F1B plan with less recomputation fits), and the cluster space with
    interleaving over microbatch sizes 1-8 finds the same. The stage space recomputes
    fully on stage 0, selectively on stage 1 and not at all on stages 2 and 3, with the
    embedding's and the head's stages holding 1 layer each and the middle ones 3:
    0.042629 s, 21.5 % more samples per step, every simulated peak under the 1.25 GB."""
    cap = 1.25e9
    p = _problem(nodes=4, cap_bytes=cap, microbatches=16)
    uniform = [pl for pl in declared_plans(p, "bf16", virtual_stages=(2, 4)) if not plan_violations(p, pl)]
    assert all(pl.stages[0].recompute == "full" for pl in uniform if pl.n_stages == 4 and pl.schedule == "1f1b")
    best_uniform_s = min(simulate(p, pl).iteration_s for pl in uniform)
    assert best_uniform_s == pytest.approx(0.051794, rel=1e-4)
    cl = distplan.solve(p, SolveOptions(space="cluster", time_limit_s=60, top_k=5, virtual_stages=(2, 4)))
    assert cl.best.sim.iteration_s == pytest.approx(best_uniform_s, rel=1e-9)
    st = distplan.solve(p, SolveOptions(space="stage", time_limit_s=60, top_k=2, microbatch_sizes=(1,)))
    assert [s.recompute for s in st.best.plan.stages] == ["full", "selective", "none", "none"]
    assert st.best.sim.iteration_s == pytest.approx(0.042629, rel=1e-4)
    assert st.best.sim.iteration_s <= best_uniform_s / 1.2
    assert not plan_violations(p, st.best.plan)
    assert (st.best.sim.peak_memory_bytes <= cap).all()


def test_the_hill_climb_keeps_to_plans_the_checker_accepts_and_is_returned_when_time_is_out():
    """The MILP's memory rows bound the checker from below: from the uniform full | full
    start, the rows' best climb (selective | none, objective 0.037132 s) is refused by
    the checker, and HiGHS, started there, had only refused plans to offer once its time
    ran out (llama3-70b on h100x16: no stage plan at all, though full x 3 | selective
    fits and simulates 10.5508 s against 10.9374 s uniform). Climbing through accepted
    moves gives full | selective (0.039063 s), the start best_start returns, so the stage
    space holds a plan the checker accepts before HiGHS runs."""
    p = _problem()
    cl = plan_cluster(p, top_k=5, clock=Clock.until(float("inf")), microbatch_sizes=(1,))
    space = _Space(p, training_precision(p))
    t, index = undominated(stage_terms(p, space, stage_configs(p)))
    start = next((sp, cs) for sp, cs in uniform_starts(t, index, space, cl.plans, 2) if len(cs) == 2)

    def fits(sp, cs):
        return not plan_violations(p, build_plan(p, space, sp, [t.configs[c] for c in cs]))

    assert fits(*start)
    rows_s, sp, cs = improve(t, list(start[0]), list(start[1]), p.n_devices)
    assert not fits(sp, cs) and rows_s == pytest.approx(0.037132, rel=1e-4)
    checked_s, sp, cs = improve(t, list(start[0]), list(start[1]), p.n_devices, fits=fits)
    assert fits(sp, cs) and checked_s == pytest.approx(0.039063, rel=1e-4)
    assert [t.configs[c].recompute for c in cs] == ["full", "selective"]
    # the stage space's start (and, when no solve does better, its plan: the held incumbent)
    best_s, sp, cs = best_start(p, space, t, [start])
    assert best_s == pytest.approx(checked_s) and fits(sp, cs)
    assert [t.configs[c].recompute for c in cs] == ["full", "selective"]
