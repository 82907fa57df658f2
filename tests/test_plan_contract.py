"""What ``solve`` writes, the replay accepts (issue 26): for every plan space, the plan
file the report writes (``SolveReport.write_plan``, what ``solve.py --plan-out`` calls)
is replayed by ``python -m distplan.sim PLAN`` (its ``main``, in this process, for the
random problems; one subprocess round trip per space) and accepted: exit 0, the
checker's constraints hold (memory included) and the simulated peak fits.

Random small problems (hypothesis, few examples): pipeline space on random DAGs and
topologies (``distplan.testing.strategies.problems``), cluster space on GPT-shaped
decoders over 1-2 nodes of 1-4 A100 (training, and inference latency), fleet space on
layered graphs over two hosts of two kinds. The replay is never weakened here: a plan
it refuses is a writer's bug."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, reject, settings
from hypothesis import strategies as st

import distplan
from distplan.core.errors import DistplanError
from distplan.cli import replay
from distplan.costs.check import plan_violations
from distplan.costs.plan_file import load_plan_file
from distplan.model import SolveOptions
from distplan.testing.strategies import KIND_A, KIND_B, problems
from distplan.topologies import kinds as K
from distplan.topologies.builders import hosts_on_network, rail_cluster
from distplan.workloads.graph import Graph, Operator, Tensor

ROOT = Path(__file__).resolve().parents[1]
SETTINGS = settings(max_examples=8, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                           HealthCheck.filter_too_much])


def round_trip(problem, options: SolveOptions, tmp: Path, space: str, capsys) -> None:
    """Solve, write the winner's plan file, replay it with the replay's own ``main``
    (a problem the space has no plan for is not a case: nothing is written)."""
    try:
        rep = distplan.solve(problem, options)
    except DistplanError as e:
        assert "no plan" in str(e) or "fits" in str(e) or "none of the" in str(e), e
        reject()
    assert rep.solver.path_name is not None
    path = tmp / f"plan-{space}.json"
    rep.write_plan(path)
    capsys.readouterr()
    rc = replay.main([str(path)])
    out, err = capsys.readouterr()
    assert rc == 0, f"the replay refused the {space} space's plan ({rep.best.plan.predicted}):\n{err}"
    assert "makespan" in out
    plan, pb = load_plan_file(path)
    assert plan_violations(pb, plan) == [], plan_violations(pb, plan)


# --- pipeline space ----------------------------------------------------------------

@SETTINGS
@given(problem=problems(max_ops=5, max_devices=3, mode=st.sampled_from(["inference", "training"]),
                        microbatches=st.integers(1, 8)))
def test_pipeline_space_plans_replay(problem, tmp_path, capsys):
    round_trip(problem, SolveOptions(space="pipeline", time_limit_s=10, top_k=2), tmp_path, "pipeline", capsys)


# --- cluster space -----------------------------------------------------------------

def _gpus(nodes: int, per_node: int):
    return rail_cluster(f"tiny{nodes}x{per_node}", nodes, per_node, K.A100, K.NVLINK3_BW_BYTES_PER_S,
                        K.NVLINK_LATENCY_S, K.IB_HDR_PORT_BW_BYTES_PER_S, K.IB_LATENCY_S)


@SETTINGS
@given(layers=st.integers(1, 3), nodes=st.sampled_from([1, 2]), per_node=st.sampled_from([1, 2, 4]),
       M=st.sampled_from([1, 2, 4]), seq=st.sampled_from([32, 128]), mode=st.sampled_from(["training", "inference"]))
def test_cluster_space_plans_replay(layers, nodes, per_node, M, seq, mode, tmp_path, capsys):
    p = distplan.problem(f"gpt3-256x{layers}x4", _gpus(nodes, per_node), batch_size=1, seq_len=seq, mode=mode,
                         precisions="bf16", microbatches=M)
    opts = SolveOptions(space="cluster", objective="throughput" if mode == "training" else "latency",
                        time_limit_s=10, top_k=2)
    round_trip(p, opts, tmp_path, "cluster", capsys)


# --- fleet space -------------------------------------------------------------------

@st.composite
def layered(draw) -> Graph:
    """2-4 layers of a matmul and an add, named l{i}.* (the fleet space splits layers)."""
    ops = []
    for i in range(draw(st.integers(2, 4))):
        f = draw(st.floats(1e8, 1e10))
        ops += [Operator(f"l{i}.mm", "matmul", f, 2 * f, draw(st.integers(1000, 400_000)),
                         draw(st.integers(100, 50_000)), 1e5),
                Operator(f"l{i}.add", "add", 1e6, 2e6, 0, draw(st.integers(100, 50_000)), 2e4)]
    names = [o.name for o in ops]
    ts = [Tensor(a, b, min(o.out_elems, 10_000)) for (a, b), o in zip(zip(names, names[1:]), ops)]
    return Graph("layers", tuple(ops), tuple(ts), mode="training")


@SETTINGS
@given(g=layered(), a=st.integers(1, 2), b=st.integers(1, 2), M=st.sampled_from([2, 4]),
       precisions=st.sampled_from([("fp16",), ("fp16", "int8")]))
def test_fleet_space_plans_replay(g, a, b, M, precisions, tmp_path, capsys):
    from distplan.costs.problem import ProblemOptions, build_problem

    topo = hosts_on_network("tiny-mixed", [(KIND_A, a), (KIND_B, b)], 1e10, 1e-6, 1e9, 1e-5)
    p = build_problem(g, topo, ProblemOptions(precisions=precisions, microbatches=M))
    round_trip(p, SolveOptions(space="fleet", time_limit_s=10, top_k=2), tmp_path, "fleet", capsys)


# --- one subprocess round trip per space ---------------------------------------------

@pytest.mark.parametrize("space,argv", [
    ("pipeline", ["--workload", "mlp-xs", "--topology", "mcm2x2"]),
    ("cluster", ["--workload", "gpt3-256x2x4", "--topology", "dgx-a100", "--mode", "training", "--seq-len", "128"]),
    ("fleet", ["--workload", "gpt3-256x2x4", "--topology", "hybrid-v100-t4", "--mode", "training",
               "--seq-len", "128"]),
])
def test_solve_py_writes_what_the_replay_accepts(tmp_path, space, argv):
    plan = tmp_path / "plan.json"
    r = subprocess.run([sys.executable, "solve.py", *argv, "--space", space, "--time-limit", "15", "--quiet",
                        "--plan-out", str(plan)], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    r = subprocess.run([sys.executable, "-m", "distplan.sim", str(plan)], cwd=ROOT, capture_output=True, text=True,
                       timeout=120)
    assert r.returncode == 0, f"the replay refused solve.py's {space} plan: {r.stderr}"
    assert "makespan" in r.stdout
