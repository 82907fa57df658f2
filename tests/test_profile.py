"""Measured per-op times (issue 24): a profile entry replaces exactly that op's time on
that device kind and precision, missing entries keep the roofline, the file round-trips
and bad files are refused with the op/kind/key named; torch's profiler maps onto the
imported graph's ops; a plan solved with a profile has the period computed by hand."""
from __future__ import annotations

import itertools
import json
import math

import numpy as np
import pytest

import distplan
from distplan.core.errors import DistplanError
from distplan.costs.problem import ProblemOptions, build_problem
from distplan.topologies import kinds as K
from distplan.topologies.builders import hosts_on_network
from distplan.workloads.graph import Graph, Operator, Tensor
from distplan.workloads.io import graph_from_dict, graph_to_dict, load_graph, save_graph
from distplan.workloads.profile import (Profile, apply_profile, load_profile, profile_from_dict, profile_to_dict,
                                        save_profile)


def two_kinds(n_each: int = 1):
    """A V100 host and a T4 host (both run fp16 and fp32; the T4 int8 too)."""
    return hosts_on_network("v100+t4", [(K.V100, n_each), (K.T4, n_each)], 16e9, 1e-6, 12.5e9, 2.5e-6)


def tiny(mode: str = "inference", elems: int = 4096) -> Graph:
    ops = (Operator("a", "matmul", 2.0e9, 4.0e9 if mode == "training" else 0.0, param_elems=1 << 20,
                    out_elems=elems, touched_elems=1.5e6),
           Operator("b", "activation", 1.0e6, 2.0e6 if mode == "training" else 0.0, out_elems=elems,
                    touched_elems=2.0 * elems))
    return Graph("tiny", ops, (Tensor("a", "b", elems),), mode=mode)


def doc(ops: dict) -> dict:
    return {"format": "distplan-profile", "version": 1, "ops": ops}


@pytest.mark.parametrize("mode", ["inference", "training"])
def test_an_entry_replaces_exactly_that_ops_time_on_that_kind_and_precision(mode):
    topo, opts = two_kinds(), ProblemOptions(precisions=("fp16", "fp32"))
    base = build_problem(tiny(mode), topo, opts)
    prof = doc({"a": {"t4": {"fp16": {"fwd_s": 1.25e-3, "bwd_s": 2.5e-3}}}})
    p = build_problem(apply_profile(tiny(mode), prof), topo, opts)
    a, q16, t4 = p.graph.index("a"), p.q_index("fp16"), p.kind_names.index("t4")
    want_f, want_b = np.array(base.fwd_time_s), np.array(base.bwd_time_s)
    want_f[a, q16, t4] = 1.25e-3
    if mode == "training":
        want_b[a, q16, t4] = 2.5e-3
    assert np.array_equal(p.fwd_time_s, want_f) and np.array_equal(p.bwd_time_s, want_b)
    assert base.fwd_time_s[a, q16, t4] != 1.25e-3     # the roofline was something else


def test_kind_wide_entry_precision_entry_and_graph_fields_layer_in_that_order():
    topo, opts = two_kinds(), ProblemOptions(precisions=("fp16", "fp32"))
    g = tiny("training")
    g = Graph(g.name, (Operator(**{**g.ops[0].__dict__, "fwd_s": 9e-3}), g.ops[1]), g.tensors, g.mode)
    prof = doc({"a": {"v100": {"fwd_s": 2e-3, "fp32": {"fwd_s": 3e-3}}}})   # no bwd_s: roofline backward
    p, base = build_problem(apply_profile(g, prof), topo, opts), build_problem(tiny("training"), topo, opts)
    v100, t4 = p.kind_names.index("v100"), p.kind_names.index("t4")
    q16, q32 = p.q_index("fp16"), p.q_index("fp32")
    assert p.fwd_time_s[0, q16, v100] == 2e-3 and p.fwd_time_s[0, q32, v100] == 3e-3  # fp16: kind-wide; fp32: own
    assert p.fwd_time_s[0, q16, t4] == p.fwd_time_s[0, q32, t4] == 9e-3               # the op's own fwd_s
    assert np.array_equal(p.bwd_time_s, base.bwd_time_s)                            # nothing measured there
    assert np.array_equal(p.fwd_time_s[1], base.fwd_time_s[1])                      # op b: the roofline


def test_missing_entries_fall_back_to_the_roofline_and_a_kind_not_in_the_topology_is_not_read():
    topo, opts = two_kinds(), ProblemOptions(precisions=("fp16",))
    base = build_problem(tiny(), topo, opts)
    p = build_problem(apply_profile(tiny(), doc({"b": {"a100": {"fwd_s": 1.0}, "v100": {"int8": {"fwd_s": 1.0}}}})),
                      topo, opts)   # a100: not here; int8: not allowed in this problem
    assert np.array_equal(p.fwd_time_s, base.fwd_time_s)


def test_profile_file_round_trips_and_graph_file_keeps_the_times(tmp_path):
    d = doc({"a": {"t4": {"fwd_s": 1e-3, "fp16": {"fwd_s": 5e-4, "bwd_s": 1e-3}}, "v100": {"bwd_s": 0.0}},
             "b": {"cpu": {"fp32": {"fwd_s": 3.5e-5}}}})
    prof = profile_from_dict(d)
    save_profile(prof, tmp_path / "p.json")
    back = load_profile(tmp_path / "p.json")
    assert back.times == prof.times and profile_to_dict(back) == profile_to_dict(prof)
    assert json.loads((tmp_path / "p.json").read_text())["ops"] == d["ops"]
    g = apply_profile(tiny(), back)
    save_graph(g, tmp_path / "g.json")
    assert load_graph(tmp_path / "g.json") == g and graph_from_dict(graph_to_dict(g)) == g
    assert g.ops[0].measured_s("t4", "fp16", "fwd") == 5e-4 and g.ops[0].measured_s("t4", "fp32", "fwd") == 1e-3


@pytest.mark.parametrize("ops, words", [
    ({"l0.qkv": {"t4": {"fwd_s": -1e-3}}}, ["'l0.qkv'", "'t4'", "fwd_s", ">= 0"]),
    ({"l0.qkv": {"t4": {"fp16": {"fwd_s": math.inf}}}}, ["'l0.qkv'", "'t4'", "fp16", "fwd_s", "finite"]),
    ({"l0.qkv": {"t4": {"fwd_s": "1ms"}}}, ["'l0.qkv'", "'t4'", "fwd_s", "number"]),
    ({"l0.qkv": {"t4": {"fp61": {"fwd_s": 1e-3}}}}, ["'l0.qkv'", "'t4'", "'fp61'", "fp16"]),
    ({"l0.qkv": {"t4": {"fp16": {"fwd": 1e-3}}}}, ["'l0.qkv'", "'t4'", "fp16", "'fwd'"]),
    ({"l0.qkv": {"t4": {}}}, ["'l0.qkv'", "'t4'"]),
    ({"l0.qvk": {"t4": {"fwd_s": 1e-3}}}, ["'l0.qvk'", "close names", "l0.qkv"]),
])
def test_bad_profiles_are_refused_naming_the_op_kind_and_key(ops, words):
    g = Graph("g", (Operator("l0.qkv", "matmul", 1e9), Operator("l0.proj", "matmul", 1e9)),
              (Tensor("l0.qkv", "l0.proj", 0),))
    with pytest.raises(DistplanError) as e:
        apply_profile(g, doc(ops))
    for w in words:
        assert w in str(e.value), (w, str(e.value))


def test_bad_profile_documents_and_files(tmp_path):
    for bad, word in (({"format": "distplan-graph", "version": 1, "ops": {}}, "distplan-profile"),
                      ({"format": "distplan-profile", "version": 2, "ops": {"a": {}}}, "v2"),
                      ({"format": "distplan-profile", "version": 1, "ops": {}}, "non-empty"),
                      ({"format": "distplan-profile", "version": 1, "ops": {"a": {"t4": {"fwd_s": 1}}}, "x": 1},
                       "unknown keys")):
        with pytest.raises(DistplanError, match=word):
            profile_from_dict(bad)
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(DistplanError, match="bad.json"):
        load_profile(tmp_path / "bad.json")
    with pytest.raises(DistplanError, match="t4.*fp16|none of topology"):   # a kind of no device here
        distplan.problem(tiny(), "mcm2x2", profile=doc({"a": {"t4": {"fwd_s": 1e-3}}}))
    with pytest.raises(DistplanError, match="'v100' at int8.*does not run"):  # V100 has no int8
        distplan.problem(tiny(), two_kinds(), precisions="fp16,int8", profile=doc({"a": {"v100": {"int8": {"fwd_s": 1}}}}))
    with pytest.raises(DistplanError, match="batch size 1 only"):
        apply_profile(tiny(), doc({"a": {"t4": {"fwd_s": 1e-3}}})).with_batch_size(2)


def chain(n: int) -> Graph:
    """n matmuls in a chain, tensors of no bytes: the period is the largest stage's compute."""
    ops = tuple(Operator(f"op{i}", "matmul", 1.0e9, out_elems=0, touched_elems=1e5) for i in range(n))
    return Graph("chain", ops, tuple(Tensor(f"op{i}", f"op{i + 1}", 0) for i in range(n - 1)))


def test_a_plan_solved_with_a_profile_has_the_max_stage_load_of_the_profile(tmp_path):
    times = {"v100": [4e-3, 1e-3, 2e-3, 3e-3], "t4": [2e-3, 6e-3, 5e-3, 1e-3]}
    prof = doc({f"op{i}": {k: {"fp16": {"fwd_s": t[i]}} for k, t in times.items()} for i in range(4)})
    (tmp_path / "prof.json").write_text(json.dumps(prof))
    p = distplan.problem(chain(4), two_kinds(), precisions="fp16", microbatches=8, profile=str(tmp_path / "prof.json"))
    report = distplan.solve(p, distplan.SolveOptions(time_limit_s=30, top_k=1))
    best = report.best.plan
    kind_of = [p.topology.devices[s.devices[0]].kind for s in best.stages]
    by_hand = max(math.fsum(times[kind_of[k]][v] for v in range(4) if best.op_stage[v] == k)
                  for k in range(best.n_stages))
    assert best.predicted["milp_period_s"] == pytest.approx(by_hand, rel=1e-9)
    # the optimum over every contiguous split onto the two devices, in either order
    best_split = min(max(math.fsum(times[first][:cut]), math.fsum(times[second][cut:]))
                     for cut in range(5) for first, second in itertools.permutations(times))
    assert by_hand == pytest.approx(best_split, rel=1e-9) and best_split == pytest.approx(6e-3)
    assert report.solver.status == "optimal"


def test_a_coarsened_solve_reads_the_members_measured_times():
    from distplan.api.pipeline import effective_coarse_times
    from distplan.workloads.coarsen import coarsen

    t = [1e-3 * (i + 1) for i in range(8)]
    fine = distplan.problem(chain(8), two_kinds(), precisions="fp16",
                            profile=doc({f"op{i}": {"t4": {"fwd_s": t[i]}} for i in range(8)}))
    c = coarsen(fine.graph, target_ops=3)
    coarse = effective_coarse_times(build_problem(c.coarse, fine.topology, ProblemOptions(precisions=("fp16",))),
                                    fine, c)
    t4, v100 = fine.kind_names.index("t4"), fine.kind_names.index("v100")
    for k in range(coarse.n_ops):
        m = list(c.members(k))
        assert coarse.fwd_time_s[k, 0, t4] == pytest.approx(math.fsum(t[v] for v in m), rel=1e-12)
        assert coarse.fwd_time_s[k, 0, v100] == pytest.approx(math.fsum(fine.fwd_time_s[m, 0, v100]), rel=1e-12)


def test_solve_py_reads_a_profile_and_refuses_microbatch_sizes_with_it(tmp_path):
    import subprocess
    import sys
    from pathlib import Path

    save_graph(chain(4), tmp_path / "g.json")
    (tmp_path / "p.json").write_text(json.dumps(doc({"op0": {"chiplet": {"fwd_s": 0.5}}})))
    solve = str(Path(__file__).resolve().parents[1] / "solve.py")
    run = subprocess.run([sys.executable, solve, "--workload", "g.json", "--topology", "mcm2x2", "--profile",
                          "p.json", "--precisions", "fp16", "--json", "--quiet", "--plan-out", "plan.json",
                          "--time-limit", "30"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    # 0.5 s measured for op0 (its roofline: ~1 ms), over 4 replicas of the chain on the 4 chiplets
    assert json.loads(run.stdout)["plans"][0]["milp_period_s"] == pytest.approx(0.5 / 4, rel=0.01)
    bad = subprocess.run([sys.executable, solve, "--workload", "g.json", "--profile", "p.json", "--mode", "training",
                          "--microbatch-sizes", "1,2"], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and "--microbatch-sizes does not apply with --profile" in bad.stderr


# --- from torch's profiler ---------------------------------------------------------


def cpu_topology():
    from distplan.topologies.topology import DeviceKind

    cpu = DeviceKind("cpu", {"fp32": 1e12}, 64e9, 100e9, efficiency=0.5, launch_overhead_s=1e-6)
    return hosts_on_network("2cpu", [(cpu, 2)], 16e9, 1e-6, 12.5e9, 2.5e-6)


def test_profile_command_times_a_resnet_like_cnn_and_the_trace_gives_the_same_ops(tmp_path):
    """``python -m distplan.profile resnet-tiny``: every conv and the head of the imported
    graph is timed; the Chrome trace of the run maps onto the same ops; the profile plans."""
    pytest.importorskip("torch", reason="the profiler import needs PyTorch: pip install -e '.[torch]'")
    import subprocess
    import sys

    from distplan.cli.profile import tiny_resnet
    from distplan.workloads.torch_import import import_module_with_paths
    from distplan.workloads.torch_profile import module_times_s, profile_from_torch

    run = subprocess.run([sys.executable, "-m", "distplan.profile", "resnet-tiny", "--device", "cpu", "--runs", "3",
                          "--warmup", "1", "--trace", "trace.json"], cwd=tmp_path, capture_output=True, text=True,
                         timeout=300)
    assert run.returncode == 0, run.stderr
    assert "wrote profile.json and graph.json" in run.stdout
    g, prof = load_graph(tmp_path / "graph.json"), load_profile(tmp_path / "profile.json")
    names = {op.name for op in g.ops}
    assert set(prof.times) <= names and prof.kinds == ("cpu",)
    heavy = {op.name for op in g.ops if op.kind in ("conv", "head", "matmul")}
    assert len(heavy) == 6 and heavy <= set(prof.times)        # 5 convs + the fc head
    assert all(t > 0 for per in prof.times.values() for (t, _) in per["cpu"].values())
    _, paths = import_module_with_paths(*tiny_resnet())
    from_trace = profile_from_torch(paths, str(tmp_path / "trace.json"), "cpu", "fp32")
    assert set(from_trace.times) == set(prof.times)
    totals, runs = module_times_s(str(tmp_path / "trace.json"))
    assert runs == 3 and {"stem.0", "layer1.0.conv1", "layer1.1.conv2", "fc"} <= set(totals)
    p = distplan.problem(apply_profile(g, prof), cpu_topology(), precisions="fp32")
    for name, per in prof.times.items():
        assert p.fwd_time_s[g.index(name), 0, 0] == per["cpu"]["fp32"][0]


def test_profiler_key_averages_map_onto_a_small_bert_by_module_path():
    pytest.importorskip("torch", reason="the profiler import needs PyTorch: pip install -e '.[torch]'")
    pytest.importorskip("transformers", reason="the BERT case needs transformers: pip install -e '.[transformers]'")
    import torch

    from distplan.cli.profile import tiny_bert
    from distplan.workloads.torch_import import import_module_with_paths
    from distplan.workloads.torch_profile import annotate_modules, profile_from_torch

    model, inputs = tiny_bert()
    g, paths = import_module_with_paths(model, inputs)
    via = {path for nodes in paths.values() for _, path, _ in nodes}
    assert {"embeddings.word_embeddings", "encoder.layer.0.attention.self.query",
            "encoder.layer.1.output.dense", "pooler.dense"} <= via
    with torch.no_grad(), annotate_modules(model), torch.profiler.profile() as run:
        for _ in range(2):
            model(**inputs)
    prof = profile_from_torch(paths, run.key_averages(), "cpu", "fp32")
    linears = {op for op, nodes in paths.items() if any(n.startswith("linear") for n, _, _ in nodes)}
    assert len(linears) == 2 * 6 + 1                           # q, k, v, out, ffn up, ffn down per layer; pooler
    assert linears <= set(prof.times) <= {op.name for op in g.ops}
    q = next(op for op, nodes in paths.items() if any(p == "encoder.layer.0.attention.self.query"
                                                      for _, p, _ in nodes))
    assert prof.times[q]["cpu"]["fp32"][0] > 0
    apply_profile(g, prof)                                      # every name is the graph's


def test_a_plan_file_carries_the_measured_times_to_its_replay(tmp_path):
    from distplan.costs.plan_file import load_plan_file

    p = distplan.problem(chain(4), two_kinds(), precisions="fp16", profile=doc({"op0": {"t4": {"fwd_s": 0.25}}}))
    distplan.solve(p, distplan.SolveOptions(time_limit_s=10, top_k=1)).write_plan(tmp_path / "plan.json")
    _, back = load_plan_file(tmp_path / "plan.json")
    assert np.array_equal(back.fwd_time_s, p.fwd_time_s) and back.fwd_time_s[0, 0, back.kind_names.index("t4")] == 0.25
