"""How long a realistic simulation will take, before running it: the ranking of a
solve's plans (distplan.api.pipeline) simulates only what fits its time limit.

A run's cost is its nodes: the operator tasks and tensor-parallel ring steps of every
microbatch (``sim.simulate.expected_nodes``) and the link hops of the data-parallel
gradient reduction (``reduction_hops``: per bucket, per simulated rank, every ring step
of every simulated replica on every link of its route, as ``sim.taskgraph`` builds
them), both counted for the copy a symmetry reduction simulates (``sim.symmetry``: one
replica, or one node's replicas where a node holds several, as dp x tp 4 layouts on
8-GPU nodes do: gpt3-175b dp 32 x tp 4 x pp 8 on a100x1024 forecasts 2.3 s, simulated
in 1.5-4 s, where its unmerged replicas forecast 37 s and ran 73 s). Without a
reduction (replicas whose routes differ, replicas unlike) the reduction alone can be
millions of hops.
"""
from __future__ import annotations

from distplan.core.plan import Plan
from distplan.costs.collectives import reduction_size
from distplan.costs.problem import Problem
from distplan.sim.simulate import expected_nodes
from distplan.sim.symmetry import Symmetry, find_symmetry

#: seconds per node of ``expected_nodes`` and per reduction hop: fitted on gpt3-6.7b
#: (a100x128) and gpt3-175b (a100x1024) plans, with and without symmetry, 64-1,536
#: microbatches, 1.2-91 s runs on one core; within 0.5-2.2x of the run (the old
#: 1e-6 s per node alone was up to 9x low where the reduction's hops dominate); runs
#: merged by nodes of two replicas (gpt3-175b dp 16-64 x tp 4, 1.2-3.9 s) within 0.65-1.5x
SIM_S_PER_EXPECTED_NODE = 2e-6
SIM_S_PER_REDUCTION_HOP = 8e-6
#: seconds per operator of each microbatch pattern built beyond the microbatches run: the
#: simulator builds ``Plan.cycle`` patterns (one per lane of a 1,024-lane inference plan)
#: however few microbatches run; bert-base on a100x1024, 1,024 lanes, 16 microbatches:
#: 4.8 s, which the node count alone forecast at 0.005 s
SIM_S_PER_PATTERN_OP = 3.2e-5


def reduction_hops(problem: Problem, plan: Plan, sym: Symmetry | None = None) -> int:
    """The link hops the gradient reduction adds to a run (module docstring); 0 in
    inference. Under a replica reduction the copy's replicas send (``sym.group`` of
    them: one, or one node's worth; a hierarchical reduction's inside rings of the
    copy's nodes, and its rings across nodes from the copy's nodes only)."""
    if not problem.training:
        return 0
    one_rank = sym is not None and sym.ranks > 1
    one_replica = sym is not None and sym.replicas > 1
    total = 0
    for k, st in enumerate(plan.stages):
        r, tp = st.replicas, st.tensor_parallel
        if r < 2:
            continue
        held = sym.group if one_replica else r   # replicas that send: indices 0..held-1
        ops = [v for v in plan.ops_in_stage(k) if problem.graph.ops[v].param_elems > 0]
        buckets = len(ops) if plan.overlap_grad_reduce else min(1, len(ops))
        devs = [st.devices[i * tp] for i in range(r)]
        per = reduction_size(problem.topology, devs, plan.dp_allreduce == "hierarchical", st.zero, held, hops=True)
        total += buckets * (sym.rank_group if one_rank else tp) * per
    return total


def expected_sim_s(problem: Problem, plan: Plan, trace: bool = False) -> float:
    """A rough forecast of one realistic simulation's seconds (identical copies merged,
    as the simulator merges them: not when it keeps a ``trace``)."""
    sym = find_symmetry(problem, plan, ideal=False, trace=trace)
    copies = sym.factor if sym is not None else 1
    idle_patterns = max(0, plan.cycle - plan.microbatches) if sym is None else 0
    return (SIM_S_PER_EXPECTED_NODE * expected_nodes(problem, plan, copies)
            + SIM_S_PER_REDUCTION_HOP * reduction_hops(problem, plan, sym)
            + SIM_S_PER_PATTERN_OP * idle_patterns * problem.n_ops)
