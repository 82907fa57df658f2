"""The API is as strict as the CLI (issue 26): every argument is checked at the edge
(core.validate) and a wrong one is one DistplanError naming it; plan files are strict
JSON; a command-line flag that does not apply to the run is an error naming the flag
(cli.args.refuse_flags), never silently ignored."""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

import distplan
from distplan.cli import main as cli_main
from distplan.cli import replay
from distplan.core.errors import DistplanError
from distplan.core.validate import check_bool, check_float, check_int

TINY = {"format": "distplan-graph", "version": 1, "name": "tiny", "mode": "inference", "batch_size": 1, "seq_len": 16,
        "ops": [{"name": f"o{i}", "kind": "matmul", "fwd_flops": 1e9 * (i + 1), "bwd_flops": 2e9 * (i + 1),
                 "param_elems": 1000 * (i + 1), "out_elems": 4096, "touched_elems": 10000} for i in range(3)],
        "tensors": [{"src": f"o{i}", "dst": f"o{i + 1}", "elems": 4096} for i in range(2)]}
NAN, INF = math.nan, math.inf


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("validation")
    (d / "tiny.json").write_text(json.dumps(TINY))
    return d / "tiny.json"


@pytest.fixture(scope="module")
def solved(tiny):
    """A problem, its report (two plans) and its plan file."""
    p = distplan.problem(str(tiny), "mcm2x2")
    rep = distplan.solve(p, distplan.SolveOptions(time_limit_s=10, top_k=2))
    plan_file = tiny.parent / "plan.json"
    rep.write_plan(plan_file)
    return p, rep, plan_file


# --------------------------------------------------------------------------- core.validate
@pytest.mark.parametrize("value", ["16", 2.5, True, 0, -1, None, NAN])
def test_counts_are_positive_ints(value):
    with pytest.raises(DistplanError, match=r"^n must be a positive whole number, got "):
        check_int("n", value)


@pytest.mark.parametrize("value", ["30", NAN, INF, -INF, True, None, [1]])
def test_floats_are_finite_numbers(value):
    with pytest.raises(DistplanError, match=r"^x must be a finite number"):
        check_float("x", value)


@pytest.mark.parametrize("value", ["no", "yes", 0, 1, None, "False"])
def test_bools_are_bools(value):
    with pytest.raises(DistplanError, match=r"^flag must be True or False"):
        check_bool("flag", value)


def test_good_values_pass():
    import numpy as np

    assert check_int("n", np.int64(3)) == 3 and check_float("x", 2) == 2.0 and check_bool("b", np.True_) is True


# --------------------------------------------------------------------------- distplan.problem
@pytest.mark.parametrize("kw,needle", [
    (dict(microbatches="16"), "microbatches must be a positive whole number, got '16'"),
    (dict(microbatches=2.5), "microbatches must be a positive whole number, got 2.5"),
    (dict(microbatches=True), "microbatches must be a positive whole number, got True"),
    (dict(precisions=123), "precisions must be a string such as 'fp16,int8'"),
    (dict(precisions=[16]), "precisions must be"),
    (dict(batch_size="4"), "batch_size must be a positive whole number"),
    (dict(seq_len=0), "seq_len must be a positive whole number"),
    (dict(mode="train"), "mode must be one of 'inference', 'training'"),
    (dict(schedule=1), "schedule must be one of"),
    (dict(low_bit_ops="most"), "low_bit_ops must be one of"),
    (dict(attention="fast"), "attention must be one of 'explicit', 'flash'"),
    (dict(input_shapes={"x": "1x2"}), "input_shapes['x'] must be a list of whole numbers"),
])
def test_problem_arguments(kw, needle):
    with pytest.raises(DistplanError, match=None) as e:
        distplan.problem("mlp-xs", "mcm2x2", **kw)
    assert needle in str(e.value)


@pytest.mark.parametrize("kw", [dict(batch_size=4), dict(seq_len=64), dict(attention="flash")])
def test_batch_and_sequence_do_not_apply_to_a_graph_file(tiny, kw):
    with pytest.raises(DistplanError, match="applies to a zoo workload, not to the graph file"):
        distplan.problem(str(tiny), "mcm2x2", **kw)


# --------------------------------------------------------------------------- options
@pytest.mark.parametrize("kw,needle", [
    (dict(time_limit_s="30"), "SolveOptions.time_limit_s must be a finite number > 0, got '30'"),
    (dict(time_limit_s=INF), "SolveOptions.time_limit_s must be a finite number"),
    (dict(n_stages=2.5), "SolveOptions.n_stages must be a positive whole number or None, got 2.5"),
    (dict(extra_constraints=5), "SolveOptions.extra_constraints must be a function"),
    (dict(progress="print"), "SolveOptions.progress must be a function"),
    (dict(sensitivity_budget=NAN), "SolveOptions.sensitivity_budget must be a finite number >= 0"),
    (dict(sensitivity_budget=INF), "SolveOptions.sensitivity_budget must be a finite number >= 0"),
    (dict(sensitivity_weight=NAN), "SolveOptions.sensitivity_weight must be a finite number >= 0"),
    (dict(top_k=True), "SolveOptions.top_k must be a positive whole number"),
    (dict(rel_gap=1.0), "SolveOptions.rel_gap must be a finite number >= 0 and < 1"),
    (dict(threads=0), "SolveOptions.threads must be a positive whole number"),
    (dict(verbose="yes"), "SolveOptions.verbose must be True or False"),
    (dict(coarsen_ops=-1), "SolveOptions.coarsen_ops must be a whole number >= 0"),
    (dict(microbatch_sizes=(1, 2.5)), "SolveOptions.microbatch_sizes must be a list of whole numbers"),
    (dict(iteration_target="fast"), "SolveOptions.iteration_target must be seconds"),
    (dict(iteration_target=NAN), "SolveOptions.iteration_target must be a finite number > 0"),
    (dict(objective="speed"), "SolveOptions.objective must be one of"),
])
def test_solve_options(kw, needle):
    with pytest.raises(DistplanError) as e:
        distplan.SolveOptions(**kw)
    assert needle in str(e.value)


def test_solve_options_normalise():
    o = distplan.SolveOptions(time_limit_s=30, microbatch_sizes=[1, 2], iteration_target="5%")
    assert o.time_limit_s == 30.0 and o.microbatch_sizes == (1, 2) and o.iteration_target == "5%"


@pytest.mark.parametrize("kw,needle", [(dict(ideal="no"), "SimOptions.ideal must be True or False, got 'no'"),
                                       (dict(trace=1), "SimOptions.trace must be True or False"),
                                       (dict(symmetry=None), "SimOptions.symmetry must be True or False"),
                                       (dict(link_model="fast"), "SimOptions.link_model 'fast' unknown")])
def test_sim_options(kw, needle):
    with pytest.raises(DistplanError) as e:
        distplan.SimOptions(**kw)
    assert needle in str(e.value)


# --------------------------------------------------------------------------- calls
def test_a_file_name_is_not_a_problem_or_a_plan(solved, tiny):
    p, rep, plan_file = solved
    with pytest.raises(DistplanError, match=r"problem must be a Problem, got .*tiny.json.* distplan.problem"):
        distplan.solve(str(tiny))
    with pytest.raises(DistplanError, match=r"plan must be a Plan, got 'plan.json' \(str\).*load_plan"):
        distplan.simulate(p, "plan.json")
    with pytest.raises(DistplanError, match=r"plan must be a Plan"):
        distplan.check(p, str(plan_file))
    with pytest.raises(DistplanError, match=r"options must be a SolveOptions"):
        distplan.solve(p, {"time_limit_s": 5})
    with pytest.raises(DistplanError, match=r"options must be a SimOptions"):
        distplan.simulate(p, rep.best.plan, {"ideal": True})
    with pytest.raises(DistplanError, match=r"budget_s must be a finite number > 0"):
        distplan.compare(p, "random", budget_s="30")


@pytest.mark.parametrize("rank", [0, -1, 99, 1.0, True, "1"])
def test_report_ranks(solved, tmp_path, rank):
    _, rep, _ = solved
    for write in (rep.write_plan, rep.write_trace):
        with pytest.raises(DistplanError, match=rf"rank must be a whole number from 1 \(the winner\) to "
                                                rf"{len(rep.plans)}"):
            write(tmp_path / "x.json", rank=rank)
    assert not (tmp_path / "x.json").exists()


def test_report_paths(solved):
    _, rep, _ = solved
    with pytest.raises(DistplanError, match="path must be a file name"):
        rep.write_plan(None)


def test_last_rank_writes_that_plan(solved, tmp_path):
    p, rep, _ = solved
    rep.write_plan(tmp_path / "last.json", rank=len(rep.plans))
    from distplan.core.plan import plan_from_dict

    got = plan_from_dict(json.loads((tmp_path / "last.json").read_text()), p)
    assert got.op_precision == rep.plans[-1].plan.op_precision and got.stages == rep.plans[-1].plan.stages


# --------------------------------------------------------------------------- strict JSON files
def _one_error(rc, err: str, *needles: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert rc == 2 and len(lines) == 1 and lines[0].startswith("error: "), err
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


@pytest.mark.parametrize("edit,needle", [
    (lambda t: t.replace('"seq_len": 16', '"seq_len": Infinity', 1), "Infinity is not a JSON number"),
    (lambda t: t.replace('"seq_len": 16', '"seq_len": NaN', 1), "NaN is not a JSON number"),
    (lambda t: t.replace('"seq_len": 16', '"seq_len": 1e999', 1), "1e999 is too large"),
    (lambda t: t.replace('"microbatches": 16', '"microbatches": 16, "microbatches": 2', 1),
     "key 'microbatches' appears twice"),
])
def test_plan_files_are_strict_json(solved, tmp_path, capsys, edit, needle):
    _, _, plan_file = solved
    text = plan_file.read_text()
    assert '"seq_len": 16' in text and '"microbatches": 16' in text
    bad = tmp_path / "bad.json"
    bad.write_text(edit(text))
    _one_error(replay.main([str(bad)]), capsys.readouterr().err, "plan file", needle)


def test_graph_files_are_strict_json(tiny, tmp_path):
    bad = tmp_path / "g.json"
    bad.write_text(tiny.read_text().replace('"seq_len": 16', '"seq_len": Infinity'))
    with pytest.raises(DistplanError, match="graph file .* Infinity is not a JSON number"):
        distplan.problem(str(bad), "mcm2x2")


def test_plan_files_hold_no_non_json_literals(solved, tmp_path):
    p, rep, _ = solved
    plan = rep.best.plan.with_predicted(odd=INF, none=NAN)
    distplan.save_plan(plan, p, tmp_path / "p.json")
    text = (tmp_path / "p.json").read_text()
    assert "Infinity" not in text and "NaN" not in text
    assert json.loads(text)["predicted"]["odd"] is None


# --------------------------------------------------------------------------- flags that do not apply
@pytest.mark.parametrize("flags,needle", [
    (["--batch-size", "4"], "--batch-size does not apply to a graph file"),
    (["--seq-len", "64"], "--seq-len does not apply to a graph file"),
    (["--attention", "flash"], "--attention does not apply to a graph file"),
    (["--compare", "random", "--pareto", "3"], "--pareto does not apply with --compare"),
    (["--compare", "random", "--plan-out", "p.json"], "--plan-out does not apply with --compare"),
    (["--compare", "random", "--trace", "t.json"], "--trace does not apply with --compare"),
    (["--pareto", "3", "--plan-out", "p.json"], "--plan-out does not apply with --pareto"),
    (["--pareto", "3", "--trace", "t.json"], "--trace does not apply with --pareto"),
    (["--iteration-target", "5%"], "--iteration-target does not apply in inference"),
    (["--microbatch-sizes", "1,2"], "--microbatch-sizes does not apply in inference"),
    (["--mode", "training", "--iteration-target", "5%"], "--iteration-target does not apply without --objective "
                                                         "sensitivity"),
    (["--mode", "training", "--space", "pipeline", "--microbatch-sizes", "1,2"],
     "--microbatch-sizes does not apply with --space pipeline"),
    (["--virtual-stages", "2"], "--virtual-stages does not apply in inference"),
    (["--mode", "training", "--space", "pipeline", "--virtual-stages", "2"],
     "--virtual-stages does not apply with --space pipeline"),
    (["--candidates", "10"], "--candidates does not apply without --compare"),
    (["--budget", "5"], "--budget does not apply without --compare"),
    (["--plan-out=p.json", "--budget=5"], "--budget does not apply without --compare"),
])
def test_solve_flags_that_do_not_apply(tiny, tmp_path, capsys, monkeypatch, flags, needle):
    monkeypatch.chdir(tmp_path)
    rc = cli_main.main(["--workload", str(tiny), "--topology", "mcm2x2", "--quiet", *flags])
    _one_error(rc, capsys.readouterr().err, needle, "leave it out")
    assert list(tmp_path.iterdir()) == []   # refused before any work: nothing written


def test_batch_size_still_applies_to_a_zoo_name(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rc = cli_main.main(["--workload", "mlp-xs", "--topology", "mcm2x2", "--batch-size", "2", "--describe"])
    assert rc == 0 and "(inference, batch 2)" in capsys.readouterr().out


def test_attention_flag_builds_the_fused_core(capsys):
    """``--attention flash``: one flash_attn op a layer in place of scores, softmax and context
    (gpt2: 12 layers, 3 ops -> 1 each); an MLP has no attention to fuse."""
    explicit = distplan.problem("gpt2", "mcm2x2", mode="training")
    flash = distplan.problem("gpt2", "mcm2x2", mode="training", attention="flash")
    names = [op.name.rsplit(".", 1)[-1] for op in flash.graph.ops]
    assert names.count("flash_attn") == 12 and "softmax" not in names
    assert explicit.n_ops - flash.n_ops == 12 * 2
    rc = cli_main.main(["--workload", "mlp-xs", "--topology", "mcm2x2", "--attention", "flash", "--describe"])
    _one_error(rc, capsys.readouterr().err, "has no attention to split (--cp) or fuse (--attention)")


def test_compare_and_pareto_do_not_check_the_default_plan_out(tiny, tmp_path, monkeypatch):
    """--compare and --pareto write no plan: the default --plan-out plan.json is dropped."""
    args = cli_main.parse_args(["--workload", str(tiny), "--compare", "random"])
    cli_main.check_flags(args)
    assert args.plan_out is None


@pytest.mark.parametrize("flags,needle", [
    (["--seq-len", "64"], "--seq-len does not apply beside a plan file"),
    (["--dp", "2"], "--dp does not apply beside a plan file"),
    (["--tp", "1"], "--tp does not apply beside a plan file"),   # given, even at its default value
    (["--mode", "training"], "--mode does not apply beside a plan file"),
    (["--json"], "--json does not apply beside a plan file"),
    (["--recompute", "full"], "--recompute does not apply beside a plan file"),
])
def test_whatif_flags_beside_a_plan_file(solved, capsys, flags, needle):
    _, _, plan_file = solved
    _one_error(replay.main([str(plan_file), *flags]), capsys.readouterr().err, needle)


@pytest.mark.parametrize("flags,needle", [(["--ideal"], "--ideal does not apply to a named configuration"),
                                          (["--link-model", "fair"], "--link-model does not apply to a named")])
def test_replay_flags_without_a_plan_file(capsys, flags, needle):
    rc = replay.main(["--workload", "mlp-xs", "--topology", "dgx-a100", "--dp", "2", *flags])
    _one_error(rc, capsys.readouterr().err, needle)


# --------------------------------------------------------------------------- issue 26, the rest of the API
@pytest.mark.parametrize("call,needle", [
    (lambda p, rep, f: distplan.compare(p, 5, budget_s=1), r"^methods must be a name such as 'random,sa'"),
    (lambda p, rep, f: distplan.compare(p, [], budget_s=1), r"^methods must be"),
    (lambda p, rep, f: distplan.compare(p, ["random", 3], budget_s=1), r"^methods must be"),
    (lambda p, rep, f: distplan.compare(p, "random", budget_s=1, progress=5), r"^progress must be a function"),
    (lambda p, rep, f: distplan.compare(p, "random", budget_s=1, sensitivity_budget=NAN),
     r"^sensitivity_budget must be a finite number >= 0"),
    (lambda p, rep, f: distplan.compare(p, "random", budget_s=1, sensitivity_budget=5.0,
                                        solve_options=distplan.SolveOptions()), r"differs from solve_options"),
    (lambda p, rep, f: distplan.load_plan(5), r"^path must be a plan file's name"),
    (lambda p, rep, f: distplan.load_plan(None), r"^path must be a plan file's name"),
    (lambda p, rep, f: distplan.load_plan(str(f), "tiny.json"), r"^graph must be a Problem, a Graph or None"),
    (lambda p, rep, f: distplan.load_plan(str(f), p.graph, "mcm2x2"), r"^topology must be a Topology"),
    (lambda p, rep, f: distplan.save_plan(rep.best.plan, p, 5), r"^path must be a file name"),
    (lambda p, rep, f: distplan.save_plan("plan", p, "x.json"), r"^plan must be a Plan"),
    (lambda p, rep, f: distplan.save_plan(rep.best.plan, "p", "x.json"), r"^problem must be a Problem"),
    (lambda p, rep, f: rep.write_plan("a\0b.json"), r"^path must be a file name .*NUL byte"),
    (lambda p, rep, f: rep.write_report("a\0b"), r"^folder must be .*NUL byte"),
    (lambda p, rep, f: distplan.problem("a\0b.json", "mcm2x2"), r"^workload must be .*NUL byte"),
    (lambda p, rep, f: distplan.problem("mlp-xs", "a\0b.yaml"), r"^topology must be .*NUL byte"),
])
def test_api_calls_name_the_argument(solved, tmp_path, monkeypatch, call, needle):
    """Each was a TypeError, AttributeError or ValueError traceback (compare(p, 5):
    'can only join an iterable'; load_plan(5); save_plan('plan', ...); a NUL byte in a
    name: 'embedded null byte')."""
    p, rep, plan_file = solved
    monkeypatch.chdir(tmp_path)
    with pytest.raises(DistplanError, match=needle):
        call(p, rep, plan_file)
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("n,options,needle", [
    (2.5, None, r"^n must be a positive whole number"), ("3", None, r"^n must be"),
    (3, 5, r"^options must be a SolveOptions"),
])
def test_pareto_arguments(solved, n, options, needle):
    from distplan.api.pareto import pareto
    with pytest.raises(DistplanError, match=needle):
        pareto(solved[0], n, options)


@pytest.mark.parametrize("kw,needle", [
    (dict(microbatches=2.5), r"^ProblemOptions\.microbatches must be a positive whole number, got 2.5"),
    (dict(microbatches="16"), r"^ProblemOptions\.microbatches must be a positive whole number"),
    (dict(microbatches=True), r"^ProblemOptions\.microbatches must be a positive whole number"),
    (dict(precisions=123), r"^ProblemOptions\.precisions must be a string such as 'fp16,int8'"),
    (dict(precisions=("fp16", 5)), r"^ProblemOptions\.precisions must be"),
    (dict(schedule=5), r"^ProblemOptions\.schedule must be one of"),
    (dict(low_bit_ops=None), r"^ProblemOptions\.low_bit_ops must be one of"),
    (dict(comm="sometimes"), r"^ProblemOptions\.comm must be one of"),
])
def test_problem_options(kw, needle):
    """distplan.ProblemOptions(microbatches=2.5) was accepted (build_problem then ran, the
    simulator failed later); "16" was a TypeError in build_problem."""
    with pytest.raises(DistplanError, match=needle):
        distplan.ProblemOptions(**kw)


def test_problem_options_normalise_numpy_counts():
    import numpy as np
    assert type(distplan.ProblemOptions(microbatches=np.int64(4)).microbatches) is int


@pytest.mark.parametrize("call,needle", [
    (lambda p, rep: distplan.api.rank_plans(p, 5), r"^plans must be a list of Plans"),
    (lambda p, rep: distplan.api.rank_plans(5, []), r"^problem must be a Problem"),
    (lambda p, rep: distplan.api.rank_plans(p, [rep.best.plan], trace="yes"), r"^trace must be True or False"),
    (lambda p, rep: distplan.api.rank_plans(p, [rep.best.plan], sensitivity_budget=NAN),
     r"^sensitivity_budget must be a finite number"),
    (lambda p, rep: distplan.api.plan_difference(p, 1, 2), r"^winner must be a Plan"),
    (lambda p, rep: distplan.api.plan_difference("p", rep.best.plan, rep.best.plan), r"^problem must be a Problem"),
    (lambda p, rep: distplan.api.parse_input_shape(5), r"^input shape must be a string"),
    (lambda p, rep: distplan.api.sensitivity_budget_value("10%", 5), r"^problem must be a Problem"),
    (lambda p, rep: distplan.api.sensitivity_budget_value([1], p), r"^sensitivity budget must be a finite number"),
])
def test_api_helpers_name_the_argument(solved, call, needle):
    """Each was an AttributeError or TypeError traceback ('int' object is not iterable,
    has no attribute 'used_stages' / 'rpartition' / 'op_allowed')."""
    p, rep, _ = solved
    with pytest.raises(DistplanError, match=needle):
        call(p, rep)


def test_api_helpers_still_take_what_they_took(solved):
    p, rep, _ = solved
    ranked, _ = distplan.api.rank_plans(p, (rep.best.plan,))
    assert ranked[0].plan == rep.best.plan
    assert distplan.api.plan_difference(p, rep.best.plan, rep.best.plan) == "winner"
    assert distplan.api.sensitivity_budget_value(np.float32(2.5), p) == 2.5
    assert distplan.api.parse_input_shape("ids=1x8") == ("ids", (1, 8))


def test_solver_threads_are_bounded():
    """threads=32768 aborted the process inside HiGHS after 99 s ('terminate called without
    an active exception'), 4096 ran a 3 s limit for 14 s: at most 1,024."""
    from distplan.model.options import MAX_THREADS
    assert distplan.SolveOptions(threads=MAX_THREADS).threads == MAX_THREADS
    with pytest.raises(DistplanError, match=r"^SolveOptions\.threads must be at most 1,024"):
        distplan.SolveOptions(threads=MAX_THREADS + 1)


@pytest.mark.parametrize("method", ["write_trace", "write_report"])
def test_trace_and_report_say_how_to_keep_the_events(solved, tmp_path, method):
    """The report said 'simulate with SimOptions(trace=True)', which a report's user never calls."""
    _, rep, _ = solved
    with pytest.raises(DistplanError, match=r"needs the simulation's events.*distplan\.solve\(problem, options, "
                                            r"trace=True\)"):
        getattr(rep, method)(tmp_path / "out")
    assert list(tmp_path.iterdir()) == []


def test_a_pathlib_path_names_a_workload_and_a_topology(tiny, tmp_path):
    """problem(Path('tiny.json'), ...) was refused ('must be a name, a file path or a Graph,
    got PosixPath'), though a file path is what it asked for."""
    import yaml
    topo = tmp_path / "pair.yaml"
    topo.write_text(yaml.safe_dump({"name": "pair", "kinds": {"c": {"peak_TFLOPs": {"fp16": 2}, "memory_MiB": 256,
                                                                   "memory_GBps": 1000}},
                                    "devices": [{"name": "a", "kind": "c"}, {"name": "b", "kind": "c"}],
                                    "links": [{"src": "a", "dst": "b", "GBps": 50}]}))
    p = distplan.problem(Path(tiny), topo, precisions="fp16")
    assert p.n_ops == 3 and p.topology.n_devices == 2


@pytest.mark.parametrize("seed", [-1, 2**31, 2**70])
def test_seeds_run_from_zero_to_the_solvers_largest(solved, seed):
    """compare(..., seed=-1) was a ValueError traceback from numpy ('expected non-negative
    integer'); SolveOptions(seed=-1) or 2**31 was dropped by HiGHS without a word (it kept
    its previous seed)."""
    with pytest.raises(DistplanError, match=r"^SolveOptions\.seed must be"):
        distplan.SolveOptions(seed=seed)
    with pytest.raises(DistplanError, match=r"^seed must be"):
        distplan.compare(solved[0], "random", budget_s=1, seed=seed)
    assert distplan.SolveOptions(seed=2**31 - 1).seed == 2**31 - 1


def test_cli_seed_names_the_flag(tiny, tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rc = cli_main.main(["--workload", str(tiny), "--topology", "mcm2x2", "--quiet", "--seed", "-1"])
    _one_error(rc, capsys.readouterr().err, "--seed must be a whole number >= 0, got -1")


def test_an_option_highs_refuses_is_an_internal_error():
    """setOptionValue's kError was unchecked: HiGHS kept its previous value without a word."""
    import highspy

    from distplan.core.errors import InternalError
    from distplan.model.highs import _set_option
    h = highspy.Highs()
    _set_option(h, "output_flag", False)
    _set_option(h, "random_seed", 2**31 - 1)
    with pytest.raises(InternalError, match="HiGHS refused option random_seed=-1"):
        _set_option(h, "random_seed", -1)
