"""Host devices (issue 24): a host CPU stated as a device kind of its own in a topology
file (examples/topologies/a100-host.yaml: one A100 and its host on a PCIe gen4 x16 link),
with its own measured per-op times (``Operator.times`` / a distplan-profile keyed by kind
``cpu``), is a pipeline stage like any other. The optimum of a 3-op chain is worked out
by hand below, not by the planner."""
from __future__ import annotations

from pathlib import Path

import pytest

from distplan.costs.problem import ProblemOptions, build_problem
from distplan.model import SolveOptions, solve
from distplan.topologies.io import load_topology
from distplan.workloads.graph import Graph, Operator, Tensor
from distplan.workloads.profile import Profile, apply_profile

TOPOLOGY = Path(__file__).resolve().parents[1] / "examples" / "topologies" / "a100-host.yaml"
#: measured forward ms per op: (on the A100, on the host)
TIMES_MS = {"a": (1.0, 1.5), "b": (6.0, 60.0), "c": (3.0, 4.0)}
#: a and b each send 1,000 fp32 elements: 4,000 bytes
SENT_BYTES = 4000
PCIE_BW, PCIE_LATENCY_S = 31.5e9, 1e-6


def chain(colocate=()) -> Graph:
    ops = tuple(Operator(n, "matmul", 1e9, out_elems=1000,
                         times=(("a100", "", g * 1e-3, None), ("cpu", "", h * 1e-3, None)))
                for n, (g, h) in TIMES_MS.items())
    return Graph("host-chain", ops, (Tensor("a", "b", 1000), Tensor("b", "c", 1000)), colocate=colocate)


def problem(graph: Graph, comm: str = "overlapped"):
    return build_problem(graph, load_topology(TOPOLOGY), ProblemOptions(precisions=("fp32",), microbatches=8,
                                                                        comm=comm))


def test_the_host_takes_a_stage_by_hand():
    """Stream, one lane. All on the A100: 1 + 6 + 3 = 10 ms. host {a} | A100 {b, c}:
    max(1.5, 9) = 9 ms. A100 {a, b} | host {c}: max(7, 4) = 7 ms (the link carries 4,000
    bytes, 0.13 us). Anything with b on the host is >= 60 ms. Optimum: 7 ms, c on the host."""
    pb = problem(chain())
    assert pb.kind_names == ("a100", "cpu")
    res = solve(pb, SolveOptions(replicas=1, time_limit_s=20))
    assert res.status == "optimal" and res.objective_s == pytest.approx(7e-3)
    best = res.plans[0]
    assert best.op_stage == (0, 0, 1)
    assert [pb.topology.devices[s.devices[0]].name for s in best.stages] == ["gpu0", "host"]


def test_exposed_transfers_are_paid_on_both_ends():
    """Under comm 'exposed' the b -> c transfer (4,000 B / 31.5 GB/s + 1 us) adds to the
    A100's and the host's loads: 7 ms + 1.127 us."""
    res = solve(problem(chain(), "exposed"), SolveOptions(replicas=1, time_limit_s=20))
    assert res.objective_s == pytest.approx(7e-3 + SENT_BYTES / PCIE_BW + PCIE_LATENCY_S)


def test_colocation_moves_the_host_stage():
    """b and c colocated: A100 {a, b} | host {c} is gone; host {a} | A100 {b, c} at 9 ms
    wins, on the path that visits the host first (the 'slow-first' family)."""
    pb = problem(chain((("b", "c"),)))
    res = solve(pb, SolveOptions(replicas=1, time_limit_s=20))
    assert res.objective_s == pytest.approx(9e-3) and res.plans[0].op_stage == (0, 1, 1)
    assert [pb.topology.devices[s.devices[0]].name for s in res.plans[0].stages] == ["host", "gpu0"]


def test_a_profile_keyed_by_kind_gives_the_host_its_times():
    """The same times from a distplan-profile (the kind 'cpu' is what
    ``python -m distplan.profile MODEL --device cpu`` writes)."""
    bare = Graph("host-chain", tuple(Operator(n, "matmul", 1e9, out_elems=1000) for n in TIMES_MS),
                 (Tensor("a", "b", 1000), Tensor("b", "c", 1000)))
    prof = Profile({n: {"a100": {"": (g * 1e-3, None)}, "cpu": {"": (h * 1e-3, None)}}
                    for n, (g, h) in TIMES_MS.items()})
    pb = problem(apply_profile(bare, prof))
    want = [t * 1e-3 for pair in TIMES_MS.values() for t in pair]
    assert pb.fwd_time_s[:, 0, :].ravel().tolist() == pytest.approx(want)


def test_a_host_on_shared_memory_pays_almost_nothing(tmp_path):
    """The docs' way to state a host that pays no communication: its link at 1,000,000
    GB/s with no latency. Exposed, the 4,000-byte transfer then costs 4 ps on each end."""
    free = tmp_path / "free-host.yaml"
    free.write_text(TOPOLOGY.read_text().replace("GBps: 31.5, latency_us: 1", "GBps: 1000000"))
    pb = build_problem(chain(), load_topology(free), ProblemOptions(precisions=("fp32",), comm="exposed"))
    res = solve(pb, SolveOptions(replicas=1, time_limit_s=20))
    assert res.objective_s == pytest.approx(7e-3 + SENT_BYTES / 1e15, rel=1e-12)
