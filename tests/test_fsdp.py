"""ZeRO-2 and ZeRO-3 (FSDP, issue 22): static bytes and gather buffers by hand, the ZeRO-3
timeline by hand on 2, 4 and 8 replicas (simulator == analytic), argument checks, and on
random Megatron plans the checker's bound over the simulated peak and the analytic
iteration near the simulator's."""
from __future__ import annotations

import dataclasses

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import distplan
from distplan.api.configs import megatron_plan, whatif
from distplan.api.problem import problem as make_problem
from distplan.core.errors import DistplanError
from distplan.core.plan import Plan, Stage
from distplan.costs.check import plan_violations
from distplan.costs.evaluate import plan_memory_bytes, static_memory_bytes
from distplan.costs.iteration import estimate_iteration
from distplan.costs.sharding import fsdp_units, gather_memory_bytes
from distplan.topologies.topology import Device, DeviceKind, Link, Topology
from distplan.workloads.graph import Graph, Operator, Tensor
from test_costs_iteration import _problem  # one cache of the random plans' problems

KIND = DeviceKind("k", {"fp16": 1e12}, mem_capacity_bytes=1e12, mem_bw_bytes_per_s=1e18, efficiency=1.0)
MS = 1e-3
P = 10**6   # parameters per layer: 2 MB at fp16


def _layers(n: int, zero: int):
    """l0.w -> l1.w (1 GFLOP forward each: 1 ms; backward 2 ms), each 10**6 fp16
    parameters, on n replicas in a ring of 1 MB/s links, one microbatch each."""
    ops = (Operator("l0.w", "matmul", 1e9, 2e9, P, 10, 0), Operator("l1.w", "matmul", 1e9, 2e9, P, 10, 0))
    g = Graph("two", ops, (Tensor("l0.w", "l1.w", 10),), mode="training")
    devs = tuple(Device(f"d{i}", "k") for i in range(n))
    links = tuple(x for i in range(n) for x in (Link(f"d{i}", f"d{(i + 1) % n}", 1e6),
                                                Link(f"d{(i + 1) % n}", f"d{i}", 1e6))) if n > 2 else \
        (Link("d0", "d1", 1e6), Link("d1", "d0", 1e6))
    p = distplan.problem(g, Topology("ring", {"k": KIND}, devs, links), precisions="fp16", microbatches=n)
    plan = Plan((0, 0), ("fp16",) * 2, (Stage(tuple(range(n)), zero=zero),), n, "1f1b")
    assert plan_violations(p, plan) == []
    return p, plan


def test_static_bytes_of_each_level():
    # 2 x 10**6 parameters at fp16 in training: 2 B weights + 2 B gradients + 12 B Adam = 32 MB;
    # over 2 replicas ZeRO-1 drops half the Adam state, ZeRO-2 half the gradients too, ZeRO-3 half of all
    full = static_memory_bytes(*_layers(2, 0))[0]
    assert full == pytest.approx(32e6)
    for zero, saved in ((1, 12e6), (2, 14e6), (3, 16e6)):
        assert full - static_memory_bytes(*_layers(2, zero))[0] == pytest.approx(saved)


def test_zero2_communicates_as_zero1():
    one, two = (distplan.simulate(*_layers(2, z)) for z in (1, 2))
    assert two.iteration_s == one.iteration_s and two.makespan_s == one.makespan_s


def test_zero3_timeline_on_two_replicas():
    """Each gather or reduce-scatter: 1 step of 1 MB at 1 MB/s = 1 s. Forward: gather l0
    [0, 1], l0 runs at 1 and prefetches l1 [1, 2], l1 runs at 2 (ends 2.001). Backward:
    gather l1 [2.001, 3.001], l1 runs 3.001-3.003 and prefetches l0 [3.001, 4.001]; l1's
    reduce-scatter after that prefetch [4.001, 5.001]; l0 runs 4.001-4.003, its
    reduce-scatter follows l1's [5.001, 6.001]: 6.001 s, no reduction after the run."""
    p, plan = _layers(2, 3)
    sim, est = distplan.simulate(p, plan), estimate_iteration(p, plan)
    assert sim.makespan_s == pytest.approx(6 + 1 * MS, rel=1e-12)
    assert est.stage_forward_s[0] == pytest.approx(2 + 1 * MS, rel=1e-12)
    assert est.stage_backward_s[0] == pytest.approx(4.0, rel=1e-12)
    assert est.iteration_s == pytest.approx(sim.iteration_s, rel=1e-12)
    # Adam over half the parameters (10**6 x 28 B at 1e18 B/s), no gather after the step
    assert sim.optimizer_s == pytest.approx(10**6 * 28 / 1e18, rel=1e-9)


@pytest.mark.parametrize("n, want_s", [(4, 9 + 1 * MS), (8, 10.5 + 1 * MS)])
def test_zero3_timeline_on_more_replicas(n, want_s):
    """n-1 ring steps of 2/n MB: a = 2 (n-1)/n s a gather or reduce-scatter (1.5 s on 4,
    1.75 s on 8); forward 2a + 1 ms, backward: gather a, prefetch a (l1 runs beside it),
    two reduce-scatters 2a: 6a + 1 ms."""
    p, plan = _layers(n, 3)
    sim, est = distplan.simulate(p, plan), estimate_iteration(p, plan)
    assert sim.makespan_s == pytest.approx(want_s, rel=1e-12)
    assert est.iteration_s == pytest.approx(sim.iteration_s, rel=1e-12)


def test_zero3_memory_holds_gathered_units_and_gradients():
    """Checker: 1/2 of the static bytes (16 MB) plus, during a unit's backward, that unit
    gathered, the next one prefetched, its gradients and the previous unit's being
    reduce-scattered: max over i of b[i-1] + 2 b[i] + b[i+1] = 6 MB. Simulated: l0's
    backward holds l0 gathered, its gradients and l1's still being reduce-scattered:
    6 MB beyond the shards, the charge exactly."""
    from distplan.costs.sharding import gather_buffer_bytes
    assert gather_buffer_bytes([1.0, 5.0, 2.0, 3.0]) == 1 + 10 + 2 and gather_buffer_bytes([]) == 0
    p, plan = _layers(2, 3)
    assert gather_memory_bytes(p, plan)[0] == pytest.approx(6e6)
    sim = distplan.simulate(p, plan)
    static = static_memory_bytes(p, plan)
    assert static[0] == pytest.approx(16e6)
    p0, plan0 = _layers(2, 0)   # the same activations on top (60 B of tensors and gradients)
    held0 = distplan.simulate(p0, plan0).peak_memory_bytes[0] - static_memory_bytes(p0, plan0)[0]
    assert sim.peak_memory_bytes[0] - static[0] == pytest.approx(6e6 + held0, rel=1e-12)


def test_units_are_runs_of_one_layer_holding_parameters():
    p = make_problem("gpt3-125m", "dgx-a100", batch_size=1, seq_len=64, mode="training", precisions=("bf16",))
    units = fsdp_units(p, range(p.n_ops))
    names = [p.graph.ops[u[0]].name.split(".")[0] for u in units]
    assert names[1:13] == [f"l{i}" for i in range(12)] and len(units) >= 13
    assert sorted(v for u in units for v in u) == sorted(set(v for u in units for v in u))
    # the tied LM head gathers the embedding's table again when both are on the stage
    from distplan.costs.sharding import unit_param_bytes
    qs = [0] * p.n_ops
    head, embed = (unit_param_bytes(p, u, qs, 1, set(range(p.n_ops))) for u in (units[-1], units[0]))
    assert head >= 2 * p.graph.ops[units[-1][-1]].tied_elems > 0.9 * embed
    assert unit_param_bytes(p, units[-1], qs, 1, set(units[-1])) < embed / 10   # its stage alone: held whole


@pytest.mark.parametrize("kw, needle", [
    (dict(zero=3, dp=1), "--zero 3 shards over the data-parallel replicas: it needs --dp >= 2, got --dp 1"),
    (dict(zero=4, dp=2), "--zero must be 0 (none), 1"),
    (dict(zero=True, dp=2), "got True"),
])
def test_whatif_checks_the_level(kw, needle):
    with pytest.raises(DistplanError, match=needle.replace("(", r"\(").replace(")", r"\)")):
        whatif("gpt3-125m", "dgx-a100", tp=1, pp=1, **kw)


def test_checker_refuses_unknown_levels_and_levels_without_replicas():
    p, plan = _layers(2, 3)
    bad = dataclasses.replace(plan, stages=(dataclasses.replace(plan.stages[0], zero=5),))
    assert any("zero 5 unknown" in m for m in plan_violations(p, bad))
    one = dataclasses.replace(plan, stages=(Stage((0,), zero=3),))
    assert any("zero 3 shards over the stage's data-parallel replicas, but it has one" in m
               for m in plan_violations(p, one))


def test_cli_fsdp_is_zero(capsys):
    from distplan.cli.replay import main
    assert main(["--workload", "gpt3-125m", "--topology", "dgx-a100", "--dp", "2", "--fsdp", "3", "--json"]) == 0
    a = capsys.readouterr().out
    assert main(["--workload", "gpt3-125m", "--topology", "dgx-a100", "--dp", "2", "--zero", "3", "--json"]) == 0
    assert capsys.readouterr().out == a
    assert main(["--workload", "gpt3-125m", "--topology", "dgx-a100", "--dp", "1", "--fsdp", "2"]) == 2
    assert "--fsdp 2 shards over the data-parallel replicas" in capsys.readouterr().err
    assert main(["--workload", "gpt3-125m", "--topology", "dgx-a100", "--dp", "2", "--fsdp", "3", "--zero", "1"]) == 2
    assert "disagree" in capsys.readouterr().err




@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(workload=st.sampled_from(["gpt3-256x4x4", "gpt3-1024x8x16"]),
       topology=st.sampled_from(["a100x32", "h100x32", "dgx-a100"]),
       dp=st.sampled_from([2, 4, 8]), tp=st.sampled_from([1, 2, 4]), pp=st.sampled_from([1, 2, 4]),
       per_replica=st.integers(1, 6), recompute=st.sampled_from(["none", "selective", "full"]),
       sp=st.booleans(), zero=st.sampled_from([2, 3]))
def test_estimate_follows_the_simulator(workload, topology, dp, tp, pp, per_replica, recompute, sp, zero):
    """ZeRO-2: as ZeRO-1 (test_costs_iteration). ZeRO-3, 106 random plans when written:
    exact at tp 1 and pp 1; pp > 1: median 1.9 %, worst +14 % (the 1F1B closed form over
    stages the embedding's and head's gathers unbalance); tp > 1: median 0.0-4.6 %, worst
    -19 % (the gathers contend with the tensor-parallel all-reduces for NVLink ports, which
    the closed form leaves out). The optimizer step is exact."""
    assume(dp * tp * pp <= (8 if topology == "dgx-a100" else 32))
    p = _problem(workload, topology, dp * per_replica)
    plan = megatron_plan(p, dp, tp, pp, "bf16", None, recompute, sp and tp > 1, zero)
    est, sim = estimate_iteration(p, plan), distplan.simulate(p, plan)
    assert est.iteration_s == pytest.approx(sim.iteration_s, rel=1e-9 if tp == pp == 1 else 0.20)
    assert est.optimizer_s == pytest.approx(sim.optimizer_s, rel=1e-12)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from(["gpt3-125m", "gpt3-512x6x8", "llama-1024x8x16"]), st.sampled_from([1, 2, 4]),
       st.sampled_from([1, 2, 4]), st.sampled_from([2, 4]), st.sampled_from([1, 2]), st.sampled_from([4, 8]),
       st.sampled_from(["none", "selective", "full"]), st.booleans(), st.sampled_from([2, 3]),
       st.sampled_from([256, 512]))
def test_checker_bounds_the_simulated_peak(w, tp, pp, dp, mb, m, rc, sp, zero, seq):
    """Random Megatron plans on 16 A100s with ZeRO-2 or ZeRO-3: the simulated peak never
    exceeds the checker's bound on any device."""
    assume(dp * tp * pp <= 16)
    r = whatif(w, "a100x16", dp, tp, pp, mb, mb * dp * m, recompute=rc, sequence_parallel=sp and tp > 1,
               zero=zero, seq_len=seq, check_memory=False, breakdown=False)
    used = sorted({d for s in r.plan.stages for d in s.devices})
    bound, peak = plan_memory_bytes(r.problem, r.plan)[used], r.sim.peak_memory_bytes[used]
    assert (peak <= bound * (1 + 1e-9)).all()


def test_cluster_space_shards_gradients_where_only_that_fits():
    """4 layers on 4 devices of 110 MB: ZeRO-1 plans no longer fit and ZeRO-2 ones do at the
    same analytic time; the oracle test (test_cluster_space) checks the whole space."""
    import sys
    sys.path.insert(0, __file__.rsplit("/", 1)[0])
    from test_cluster_space import _tiny_topology
    from distplan.model.cluster import plan_cluster
    p = make_problem("gpt3-256x4x4", _tiny_topology(1, 4, 1.1e8), batch_size=1, seq_len=64, mode="training",
                     precisions=("bf16",), microbatches=4)
    best = plan_cluster(p, top_k=1).plans[0]
    assert best.point.zero == 2 and "ZeRO-2" in best.point.label()
    one = dataclasses.replace(best.plan, stages=tuple(dataclasses.replace(s, zero=1) for s in best.plan.stages))
    assert any("needs" in m for m in plan_violations(p, one))
    assert estimate_iteration(p, one).iteration_s == best.iteration_s


@pytest.mark.parametrize("w, t, dp, tp, pp", [("gpt3-256x4x4", "a100x32", 8, 1, 2), ("gpt3-256x4x4", "a100x32", 4, 2, 2),
                                               ("gpt3-256x4x4", "h100x32", 16, 2, 1)])
def test_symmetry_reduction_is_exact_with_fsdp(w, t, dp, tp, pp):
    """Identical replicas and ranks simulated once (sim.symmetry) give the full run's
    iteration and peaks with ZeRO-3 too (its gathers ride the flat ring's hops)."""
    from distplan.sim import SimOptions
    p = _problem(w, t, dp * 2)
    plan = megatron_plan(p, dp, tp, pp, "bf16", None, "none", False, 3)
    red, full = distplan.simulate(p, plan), distplan.simulate(p, plan, SimOptions(symmetry=False))
    assert red.iteration_s == pytest.approx(full.iteration_s, rel=1e-12)
    assert red.peak_memory_bytes == pytest.approx(full.peak_memory_bytes, rel=1e-12)


def test_whatif_says_the_level():
    r = whatif("gpt3-125m", "dgx-a100", 2, 1, 1, zero=3, breakdown=False)
    assert r.table().splitlines()[0].endswith(", ZeRO-3 (FSDP)") and r.to_json()["zero"] == 3
    assert "ZeRO" not in whatif("gpt3-125m", "dgx-a100", 2, 1, 1, breakdown=False).table().splitlines()[0]


def test_fsdp_with_tp_on_links_of_its_own_is_exact():
    """tp 8 filling each node and the ZeRO-3 ring across the two: no link carries two
    rings' hops or a ring's and the group's, and the analytic iteration is the
    simulator's (the cluster space searches ZeRO-3 there); tp 2 inside a node shares the
    NVLink ports with the gathers and is left to the what-if."""
    from distplan.costs.sharding import fsdp_links_apart, searched_zero_levels
    p = _problem("gpt3-256x4x4", "h100x16", 4)
    assert fsdp_links_apart(p, 2, 8) and not fsdp_links_apart(p, 2, 2)
    assert searched_zero_levels(2, 8, 1, 1, p) == (0, 1, 2, 3) and searched_zero_levels(2, 2, 1, 1, p) == (0, 1, 2)
    plan = megatron_plan(p, 2, 8, 1, "bf16", None, "none", True, 3)
    assert estimate_iteration(p, plan).iteration_s == pytest.approx(distplan.simulate(p, plan).iteration_s, rel=1e-9)


def test_a_zero3_plan_file_replays_the_same(tmp_path, capsys):
    from distplan.cli.replay import main
    from distplan.costs.plan_file import load_plan_file, save_plan
    p, plan = _layers(2, 3)
    save_plan(plan, p, tmp_path / "p.json")
    back, pb = load_plan_file(tmp_path / "p.json")
    assert back == plan and back.stages[0].zero == 3
    assert distplan.simulate(pb, back).iteration_s == distplan.simulate(p, plan).iteration_s
    assert main([str(tmp_path / "p.json")]) == 0 and "6.001" in capsys.readouterr().out
