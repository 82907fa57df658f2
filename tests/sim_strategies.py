"""Hypothesis strategies for simulator tests: small problems with random plans."""
from __future__ import annotations

from hypothesis import strategies as st

from distplan.costs.problem import ProblemOptions, build_problem
from distplan.core.plan import Plan, Stage
from strategies import topologies
from distplan.topologies.topology import DeviceKind, Topology
from distplan.workloads.graph import Graph, Operator, Tensor

KIND_A = DeviceKind("ka", {"fp16": 1e12, "int8": 2e12}, mem_capacity_bytes=1e12, mem_bw_bytes_per_s=1e11,
                    efficiency=1.0)
KIND_B = DeviceKind("kb", {"fp16": 3e11, "int8": 9e11}, mem_capacity_bytes=1e12, mem_bw_bytes_per_s=5e10,
                    efficiency=0.5, launch_overhead_s=1e-6)


@st.composite
def dag(draw, max_ops: int = 6, mode: str = "inference") -> Graph:
    n = draw(st.integers(1, max_ops))
    ops = tuple(Operator(f"v{i}", draw(st.sampled_from(["matmul", "add", "softmax"])),
                         draw(st.floats(1e6, 1e10)), draw(st.floats(1e6, 2e10)),
                         draw(st.integers(0, 10**5)), draw(st.integers(1, 10**5)), draw(st.floats(0, 1e6)))
                for i in range(n))
    tensors = []
    for j in range(1, n):
        srcs = draw(st.sets(st.integers(0, j - 1), min_size=0, max_size=2))
        for i in sorted(srcs):
            tensors.append(Tensor(f"v{i}", f"v{j}", draw(st.integers(0, 10**6))))
    return Graph("g", ops, tuple(tensors), mode=mode, batch_size=draw(st.integers(1, 8)))


def topology(n_min: int = 1, n_max: int = 4, latency: bool = True) -> st.SearchStrategy[Topology]:
    """Random connected topologies of the two fixed kinds KIND_A and KIND_B."""
    return topologies(max_devices=n_max, min_devices=n_min, kinds={"ka": KIND_A, "kb": KIND_B},
                      bw_range=(1e8, 1e11), latency=latency, max_extra_links=2, name="t")


@st.composite
def problem_and_plan(draw, mode: str | st.SearchStrategy = "inference", schedule: str | None = None, max_ops: int = 6,
                     microbatches: int | st.SearchStrategy = 64, replicas: bool = False, distinct: bool = False,
                     latency: bool = True, max_tp: int = 1, max_devices: int = 4):
    """A problem and a random plan on it. ``replicas``: stages of 1-2 data-parallel
    replicas; ``max_tp`` > 1: each stage's replicas are groups of 1..max_tp
    tensor-parallel devices (matmul ops all-reduce their output within a group)."""
    if not isinstance(mode, str):
        mode = draw(mode)
    g = draw(dag(max_ops, mode))
    topo = draw(topology(n_max=max_devices, latency=latency))
    sched = schedule or ("stream" if mode == "inference" else draw(st.sampled_from(["gpipe", "1f1b"])))
    M = microbatches if isinstance(microbatches, int) else draw(microbatches)
    pb = build_problem(g, topo, ProblemOptions(precisions=("fp16", "int8"), microbatches=M, schedule=sched))
    n = len(g.ops)
    K = draw(st.integers(1, 4))
    # stage of each op: >= the stages of its inputs (ops are in topological order)
    preds = g.preds()
    stage = []
    for v in range(n):
        lo = max((stage[u] for u in preds[v]), default=0)
        stage.append(draw(st.integers(lo, K - 1)))
    D = topo.n_devices
    stages = []
    used: set[int] = set()
    for k in range(K):
        if replicas or max_tp > 1:
            tp = draw(st.integers(1, max_tp))
            r = draw(st.integers(1, 2)) if replicas else 1
            size = min(D, tp * r)
            size -= size % tp or 0
            if size == 0:
                tp, size = 1, 1
            devs = draw(st.permutations(range(D)))[:size]
            stages.append(Stage(tuple(devs), tp))
        elif distinct and len(used) < D:
            d = draw(st.sampled_from(sorted(set(range(D)) - used)))
            used.add(d)
            stages.append(Stage((d,)))
        else:
            stages.append(Stage((draw(st.integers(0, D - 1)),)))
    precs = tuple(draw(st.sampled_from(["fp16", "int8"])) for _ in range(n))
    return pb, Plan(tuple(stage), precs, tuple(stages), M, sched)
