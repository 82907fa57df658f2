"""Options a plan space never reads are errors naming them (issue 26, flags silently
ignored): ``model.applies`` is the one rule; ``model.solve`` names the SolveOptions
field, ``solve.py`` the flag. Every case is refused before any solve (milliseconds)."""
from __future__ import annotations

import json

import pytest

import distplan
from distplan.cli import main as cli_main
from distplan.core.errors import DistplanError
from distplan.model.applies import NOT_READ, unused_options
from distplan.model.spaces import resolve_space

TINY = {"format": "distplan-graph", "version": 1, "name": "tiny", "mode": "inference", "batch_size": 1, "seq_len": 16,
        "ops": [{"name": f"o{i}", "kind": "matmul", "fwd_flops": 1e9 * (i + 1), "bwd_flops": 2e9 * (i + 1),
                 "param_elems": 1000 * (i + 1), "out_elems": 4096, "touched_elems": 10000} for i in range(3)],
        "tensors": [{"src": f"o{i}", "dst": f"o{i + 1}", "elems": 4096} for i in range(2)]}


@pytest.fixture(scope="module")
def cluster_problem():
    """mlp-xs training on 8 A100: the auto space is the cluster space."""
    p = distplan.problem("mlp-xs", "a100x8", mode="training")
    assert resolve_space(p, distplan.SolveOptions()).name == "cluster"
    return p


@pytest.fixture(scope="module")
def pipeline_training(tmp_path_factory):
    """A training graph on chiplets: the auto space is the pipeline space."""
    f = tmp_path_factory.mktemp("apply") / "tiny.json"
    f.write_text(json.dumps(TINY))
    p = distplan.problem(str(f), "mcm2x2", mode="training")
    assert resolve_space(p, distplan.SolveOptions()).name == "pipeline"
    return p, f


@pytest.mark.parametrize("kw,field", [
    (dict(coarsen_ops=50), "coarsen_ops"), (dict(sensitivity_weight=1.0), "sensitivity_weight"),
    (dict(space="cluster", n_stages=2), "n_stages"), (dict(space="cluster", sensitivity_budget=5.0),
                                                       "sensitivity_budget"),
    (dict(space="cluster", replicas=2), "replicas"),
    (dict(space="cluster", extra_constraints=lambda m, p, s: None), "extra_constraints"),
])
def test_the_cluster_space_refuses_what_it_does_not_read(cluster_problem, kw, field):
    with pytest.raises(DistplanError, match=rf"^SolveOptions\.{field} does not apply in the cluster plan space"):
        distplan.solve(cluster_problem, distplan.SolveOptions(time_limit_s=5, **kw))


@pytest.mark.parametrize("kw,field", [(dict(virtual_stages=(2,)), "virtual_stages"),
                                      (dict(microbatch_sizes=(1, 2)), "microbatch_sizes")])
def test_the_pipeline_space_refuses_the_cluster_spaces_options(pipeline_training, kw, field):
    """--virtual-stages on a training problem the auto space sends to the pipeline MILP was
    dropped without a word (exit 0, a 1F1B pipeline plan)."""
    p, _ = pipeline_training
    with pytest.raises(DistplanError, match=rf"^SolveOptions\.{field} does not apply in the pipeline plan space"):
        distplan.solve(p, distplan.SolveOptions(time_limit_s=5, **kw))


def test_coarsen_zero_and_defaults_apply_everywhere(cluster_problem, pipeline_training):
    for p in (cluster_problem, pipeline_training[0]):
        for space in NOT_READ:
            assert unused_options(p, distplan.SolveOptions(coarsen_ops=0), space) == []


def test_every_option_not_read_has_a_reason_and_a_real_field():
    fields = set(distplan.SolveOptions.__dataclass_fields__)
    assert all(set(v) <= fields and all(v.values()) for v in NOT_READ.values())
    named = {k for v in NOT_READ.values() for k in v} - {"path", "replicas", "extra_constraints"}   # no flags
    assert named <= set(cli_main.FLAG_OF)


@pytest.mark.parametrize("flags,needle", [
    (["--coarsen", "50"], "--coarsen does not apply in the cluster plan space"),
    (["--sensitivity-weight", "1"], "--sensitivity-weight does not apply in the cluster plan space"),
    (["--space", "cluster", "--stages", "2"], "--stages does not apply in the cluster plan space"),
    (["--space", "cluster", "--sensitivity-budget", "5"], "--sensitivity-budget does not apply in the cluster"),
])
def test_cli_names_the_flag_in_the_cluster_space(tmp_path, capsys, monkeypatch, flags, needle):
    monkeypatch.chdir(tmp_path)
    rc = cli_main.main(["--workload", "mlp-xs", "--topology", "a100x8", "--mode", "training", "--quiet",
                        "--time-limit", "10", *flags])
    err = [x for x in capsys.readouterr().err.splitlines() if x.strip()]
    assert rc == 2 and len(err) == 1 and err[0].startswith("error: ") and needle in err[0], err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("flags,needle", [
    (["--mode", "training", "--virtual-stages", "2"], "--virtual-stages does not apply in the pipeline plan space"),
    (["--mode", "training", "--microbatch-sizes", "1,2"], "--microbatch-sizes does not apply in the pipeline"),
    (["--pareto", "3", "--objective", "latency"], "--objective does not apply with --pareto (got latency)"),
    (["--pareto", "3", "--sensitivity-budget", "5"], "--sensitivity-budget does not apply with --pareto"),
])
def test_cli_names_the_flag_in_the_pipeline_space_and_the_frontier(pipeline_training, tmp_path, capsys,
                                                                  monkeypatch, flags, needle):
    monkeypatch.chdir(tmp_path)
    rc = cli_main.main(["--workload", str(pipeline_training[1]), "--topology", "mcm2x2", "--quiet",
                        "--time-limit", "10", *flags])
    err = [x for x in capsys.readouterr().err.splitlines() if x.strip()]
    assert rc == 2 and len(err) == 1 and err[0].startswith("error: ") and needle in err[0], err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("kw,needle", [
    (dict(objective="latency"), "options.objective 'latency' does not apply to the frontier"),
    (dict(sensitivity_budget=1.0), "options.sensitivity_budget does not apply to the frontier"),
])
def test_pareto_refuses_what_it_would_override(pipeline_training, kw, needle):
    from distplan.api.pareto import pareto
    with pytest.raises(DistplanError, match=needle):
        pareto(pipeline_training[0], 3, distplan.SolveOptions(time_limit_s=10, **kw))


@pytest.mark.parametrize("flags,needle", [
    (["--stages", "0"], "error: --stages must be a positive whole number or None, got 0"),
    (["--threads", "0"], "error: --threads must be a positive whole number, got 0"),
    (["--coarsen", "-1"], "error: --coarsen must be a whole number >= 0"),
    (["--gap", "2"], "error: --gap must be a finite number >= 0 and < 1, got 2.0"),
    (["--sensitivity-weight", "-1"], "error: --sensitivity-weight must be a finite number >= 0"),
    (["--microbatches", "0"], "error: --microbatches must be a positive whole number, got 0"),
    (["--time-limit", "0"], "error: --time-limit must be a finite number > 0, got 0.0"),
    (["--time-limit", "-5"], "error: --time-limit must be a finite number > 0, got -5.0"),
    (["--compare", "random", "--candidates", "0"], "error: --candidates must be a positive whole number"),
])
def test_cli_errors_name_the_flag_not_the_api_field(pipeline_training, tmp_path, capsys, monkeypatch, flags,
                                                    needle):
    """solve.py printed the API's names ('SolveOptions.n_stages must be ...', 'candidates
    must be ...'); --time-limit -5 was read as a loading deadline ('raise --time-limit to
    at least -3 s')."""
    monkeypatch.chdir(tmp_path)
    rc = cli_main.main(["--workload", str(pipeline_training[1]), "--topology", "mcm2x2", "--quiet", *flags])
    err = [x for x in capsys.readouterr().err.splitlines() if x.strip()]
    assert rc == 2 and len(err) == 1 and err[0].startswith(needle), err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("message,shown", [
    ("SolveOptions.n_stages must be a positive whole number", "--stages must be a positive whole number"),
    ("SolveOptions.virtual_stages does not apply in the pipeline plan space", "--virtual-stages does not apply in"),
    ("ProblemOptions.microbatches must be", "--microbatches must be"),
    ("seq_len 4096 exceeds its 2048 learned positions; use seq_len <= 2048",
     "seq_len 4096 exceeds its 2048 learned positions; use seq_len <= 2048"),   # not a leading argument name
    ("SolveOptions.path does not apply in the cluster plan space", "SolveOptions.path does not apply in the cluster"),
])
def test_flag_named_rewrites_only_a_leading_argument_name(message, shown):
    assert cli_main.flag_named(message).startswith(shown)
