"""Hypothesis strategies for property tests against distplan (needs the ``test`` extra).

Every strategy shrinks towards small counterexamples: one operator, one device, one
stage, the first precision. Building blocks: ``graphs``, ``dag``, ``device_kinds``,
``topologies``, ``topology``; problems and plans: ``problems``, ``feasible_plans(problem)``
(plans ``costs.check.plan_violations`` accepts), ``problem_and_feasible_plan``,
``problem_and_plan`` (a random plan, not checked: for simulator tests)::

    @given(problem_and_feasible_plan(max_ops=5, max_devices=3))
    def test_my_scheduler(pair):
        problem, plan = pair
        assert_feasible(problem, my_scheduler(problem, plan))

What each draws: docs/guides/testing.md, "The strategies".
"""
from __future__ import annotations

import dataclasses

from hypothesis import assume
from hypothesis import strategies as st

from distplan.core.plan import Plan, Stage
from distplan.core.precision import PRECISION_NAMES
from distplan.costs.check import plan_violations
from distplan.costs.problem import LOW_BIT_KINDS, Problem, ProblemOptions, build_problem, low_bit
from distplan.topologies.topology import Device, DeviceKind, Link, Topology
from distplan.workloads.graph import Graph, Operator, Tensor

__all__ = ["finite", "graphs", "device_kinds", "topologies", "KIND_A", "KIND_B", "GENEROUS_KINDS", "dag",
           "topology", "problems", "feasible_plans", "problem_and_feasible_plan", "problem_and_plan"]

finite = st.floats(min_value=0.0, max_value=1e13, allow_nan=False, allow_infinity=False)

#: Two device kinds with 1e12 bytes of memory each: no small graph overflows them.
KIND_A = DeviceKind("ka", {"fp16": 1e12, "int8": 2e12}, mem_capacity_bytes=1e12, mem_bw_bytes_per_s=1e11,
                    efficiency=1.0)
KIND_B = DeviceKind("kb", {"fp16": 3e11, "int8": 9e11}, mem_capacity_bytes=1e12, mem_bw_bytes_per_s=5e10,
                    efficiency=0.5, launch_overhead_s=1e-6)
GENEROUS_KINDS = {"ka": KIND_A, "kb": KIND_B}


# --- graphs ----------------------------------------------------------------------------
@st.composite
def graphs(draw, max_ops: int = 8, mode: str | None = None) -> Graph:
    """A DAG of 1..max_ops ops, each with up to two inputs from earlier ops; FLOPs, sizes
    and tensors drawn from wide ranges (zeros included); ``mode`` drawn when None."""
    n = draw(st.integers(1, max_ops))
    ops = tuple(
        Operator(f"v{i}", draw(st.sampled_from(["matmul", "softmax", "add", "layernorm"])),
                 draw(finite), draw(finite), draw(st.integers(0, 10**6)), draw(st.integers(0, 10**6)),
                 draw(st.floats(0, 1e7)))
        for i in range(n)
    )
    tensors = []
    for j in range(1, n):
        for i in draw(st.sets(st.integers(0, j - 1), max_size=2)):
            tensors.append(Tensor(f"v{i}", f"v{j}", draw(st.integers(0, 10**6))))
    m = mode or draw(st.sampled_from(["inference", "training"]))
    if m == "training" and not any(op.bwd_flops > 0 for op in ops):   # build_problem refuses a free backward
        ops = (dataclasses.replace(ops[0], bwd_flops=1.0),) + ops[1:]
    return Graph("rand", ops, tuple(tensors), mode=m)


@st.composite
def dag(draw, max_ops: int = 6, mode: str = "inference") -> Graph:
    """A DAG of 1..max_ops ops (1e6-1e10 FLOPs, at least one output element each) with
    up to two inputs per op and a batch size of 1..8."""
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


# --- hardware --------------------------------------------------------------------------
@st.composite
def device_kinds(draw, name: str = "k") -> DeviceKind:
    """A kind supporting a random non-empty set of precisions (memory 1e3-1e11 bytes)."""
    precs = draw(st.sets(st.sampled_from(PRECISION_NAMES), min_size=1))
    peaks = {p: draw(st.floats(1e9, 1e15)) for p in sorted(precs)}
    return DeviceKind(name, peaks, draw(st.floats(1e3, 1e11)), draw(st.floats(1e9, 1e13)),
                      draw(st.floats(0.05, 1.0)), draw(st.floats(0, 1e-5)))


@st.composite
def topologies(draw, max_devices: int = 4, min_devices: int = 1, kinds: dict[str, DeviceKind] | None = None,
               bw_range: tuple[float, float] = (1e6, 1e12), latency: bool = True, max_extra_links: int = 3,
               name: str = "rand") -> Topology:
    """A random connected topology: a bidirectional chain plus random extra links; device
    kinds drawn at random unless ``kinds`` fixes them."""
    n = draw(st.integers(min_devices, max_devices))
    if kinds is None:
        kinds = {f"k{i}": draw(device_kinds(f"k{i}")) for i in range(draw(st.integers(1, 2)))}
    devs = tuple(Device(f"d{i}", draw(st.sampled_from(sorted(kinds)))) for i in range(n))
    pairs = {(i, i + 1) for i in range(n - 1)}
    if n > 2:
        pairs |= draw(st.sets(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1))
                              .filter(lambda p: p[0] < p[1]), max_size=max_extra_links))
    links = []
    for a, b in sorted(pairs):
        bw = draw(st.floats(*bw_range))
        lat = draw(st.floats(0, 1e-5)) if latency else 0.0
        links += [Link(f"d{a}", f"d{b}", bw, lat), Link(f"d{b}", f"d{a}", bw, lat)]
    return Topology(name, kinds, devs, tuple(links))


def topology(n_min: int = 1, n_max: int = 4, latency: bool = True) -> st.SearchStrategy[Topology]:
    """Random connected topologies of the two fixed kinds KIND_A and KIND_B."""
    return topologies(max_devices=n_max, min_devices=n_min, kinds=GENEROUS_KINDS,
                      bw_range=(1e8, 1e11), latency=latency, max_extra_links=2, name="t")


# --- problems and plans ----------------------------------------------------------------
@st.composite
def problems(draw, max_ops: int = 6, max_devices: int = 4, mode: str | st.SearchStrategy[str] = "inference",
             schedule: str | None = None, microbatches: int | st.SearchStrategy[int] = st.integers(1, 64),
             kinds: dict[str, DeviceKind] | None = None, latency: bool = True) -> Problem:
    """A Problem: a :func:`dag` whose tensors are clipped to their producer's output (so
    the graph saves and loads with ``distplan.workloads.io``), a connected topology of
    ``kinds`` (default the generous KIND_A/KIND_B, so memory never binds) and a non-empty
    subset of the precisions the kinds run. ``schedule`` None: 'stream' for inference,
    '1f1b' or 'gpipe' for training."""
    if not isinstance(mode, str):
        mode = draw(mode)
    g = draw(dag(max_ops, mode))
    out = {op.name: op.out_elems for op in g.ops}
    g = Graph(g.name, g.ops, tuple(Tensor(t.src, t.dst, min(t.elems, out[t.src])) for t in g.tensors),
              mode=g.mode, batch_size=g.batch_size)
    kinds = kinds or GENEROUS_KINDS
    topo = draw(topologies(max_devices=max_devices, kinds=kinds, bw_range=(1e8, 1e11), latency=latency,
                           max_extra_links=2, name="t"))
    runnable = sorted({p for k in kinds.values() for p in k.peak_flops_per_s})
    precs = draw(st.lists(st.sampled_from(runnable), min_size=1, max_size=len(runnable), unique=True))
    assume(any(topo.kind_of(d).supports(p) for d in range(topo.n_devices) for p in precs))
    sched = schedule or ("stream" if mode == "inference" else draw(st.sampled_from(["1f1b", "gpipe"])))
    M = microbatches if isinstance(microbatches, int) else draw(microbatches)
    return build_problem(g, topo, ProblemOptions(precisions=tuple(precs), microbatches=M, schedule=sched,
                                                 low_bit_ops=draw(_low_bit_ops(g, precs))))


def _low_bit_ops(g: Graph, precs) -> st.SearchStrategy[str]:
    """Either low-bit policy; "all" when the precisions leave some op nothing under "matmul"."""
    if all(low_bit(p) for p in precs) and any(op.kind not in LOW_BIT_KINDS for op in g.ops):
        return st.just("all")
    return st.sampled_from(["matmul", "all"])


@st.composite
def feasible_plans(draw, problem: Problem, max_stages: int | None = None, replicas: bool = False,
                   max_tp: int = 1) -> Plan:
    """A plan for ``problem`` that ``plan_violations`` accepts. Built feasible: each stage
    picks a precision some device runs and devices that run it, ops take stages that no
    tensor flows backwards through and a precision every device of their stage runs.
    Memory is the one constraint left to chance (rejected with ``assume``): on the
    generous kinds of :func:`problems` it never binds. ``replicas``: stages of 1-2
    data-parallel replicas; ``max_tp`` > 1: tensor-parallel groups (the analytic period
    of ``costs.evaluate`` then no longer applies)."""
    topo, D = problem.topology, problem.n_devices
    runs = {p: [d for d in range(D) if topo.kind_of(d).supports(p)] for p in problem.precisions}
    anchors = [p for p in problem.precisions if runs[p]]
    K = draw(st.integers(1, max_stages or D))
    stages, allowed = [], []
    for _ in range(K):
        cands = runs[draw(st.sampled_from(anchors))]
        tp = draw(st.integers(1, max(1, min(max_tp, len(cands)))))
        r = draw(st.integers(1, max(1, min(2, len(cands) // tp)))) if replicas else 1
        devs = tuple(draw(st.permutations(cands))[:tp * r])
        stages.append(Stage(devs, tp))
        allowed.append([p for p in problem.precisions if all(topo.kind_of(d).supports(p) for d in devs)])
    preds = problem.graph.preds()
    op_stage: list[int] = []
    for v in range(problem.n_ops):
        op_stage.append(draw(st.integers(max((op_stage[u] for u in preds[v]), default=0), K - 1)))
    ok = [[p for p in allowed[k] if problem.op_allowed[v, problem.q_index(p)]] for v, k in enumerate(op_stage)]
    assume(all(ok))   # an int8-only stage cannot take a softmax under the "matmul" policy
    precs = tuple(draw(st.sampled_from(o)) for o in ok)
    plan = Plan(tuple(op_stage), precs, tuple(stages), problem.microbatches, problem.schedule)
    assume(not plan_violations(problem, plan))
    return plan


@st.composite
def problem_and_feasible_plan(draw, max_stages: int | None = None, replicas: bool = False, max_tp: int = 1,
                              **problem_options) -> tuple[Problem, Plan]:
    """``(problem, plan)``: a :func:`problems` draw (``problem_options`` are its keyword
    arguments) and a :func:`feasible_plans` draw on it."""
    pb = draw(problems(**problem_options))
    return pb, draw(feasible_plans(pb, max_stages=max_stages, replicas=replicas, max_tp=max_tp))


@st.composite
def problem_and_plan(draw, mode: str | st.SearchStrategy = "inference", schedule: str | None = None, max_ops: int = 6,
                     microbatches: int | st.SearchStrategy = 64, replicas: bool = False, distinct: bool = False,
                     latency: bool = True, max_tp: int = 1, max_devices: int = 4):
    """A problem and a random plan on it (not checked). ``replicas``: stages of 1-2
    data-parallel replicas; ``max_tp`` > 1: each stage's replicas are groups of 1..max_tp
    tensor-parallel devices (matmul ops all-reduce their output within a group);
    ``distinct``: single-device stages on distinct devices while there are unused ones."""
    if not isinstance(mode, str):
        mode = draw(mode)
    g = draw(dag(max_ops, mode))
    topo = draw(topology(n_max=max_devices, latency=latency))
    sched = schedule or ("stream" if mode == "inference" else draw(st.sampled_from(["gpipe", "1f1b"])))
    M = microbatches if isinstance(microbatches, int) else draw(microbatches)
    pb = build_problem(g, topo, ProblemOptions(precisions=("fp16", "int8"), microbatches=M, schedule=sched,
                                               low_bit_ops=draw(st.sampled_from(["matmul", "all"]))))
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
    precs = tuple(draw(st.sampled_from(["fp16", "int8"] if pb.op_allowed[v, 1] else ["fp16"])) for v in range(n))
    return pb, Plan(tuple(stage), precs, tuple(stages), M, sched)
