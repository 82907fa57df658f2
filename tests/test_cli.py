"""solve.py: listing, describe, and one clear error line (exit 2) for each bad input."""
from __future__ import annotations

import json

import pytest

import solve
from conftest import chain_graph
from distplan.workloads.io import graph_to_dict


def run(capsys, *argv):
    rc = solve.main(list(argv))
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_list_names_every_preset(capsys):
    rc, out, _ = run(capsys, "--list")
    assert rc == 0
    for name in ("mlp-xs", "bert-base", "bert-large", "gpt2", "gpt2-xl", "gpt3-<hidden>x<layers>x<heads>", "llama-7b",
                 "mcm4x4", "mcm<R>x<C>", "ring<N>", "dgx-a100", "dgx-h100", "a100x<N>", "h100x<N>", "hybrid-v100-t4"):
        assert name in out


def test_describe_mcm4x4(capsys):
    rc, out, _ = run(capsys, "--topology", "mcm4x4", "--describe")
    assert rc == 0
    assert "146 ops" in out and "16 devices" in out and "period lower bound" in out
    assert "109,482,240" in out


def _one_error_line(rc, err, *needles):
    assert rc == 2
    lines = [l for l in err.splitlines() if l.strip()]
    assert len(lines) == 1 and lines[0].startswith("error: ")
    for n in needles:
        assert n in lines[0]


def test_cyclic_graph_file(capsys, tmp_path):
    d = graph_to_dict(chain_graph(3))
    d["tensors"].append({"src": "o2", "dst": "o0", "elems": 1})
    (tmp_path / "cyc.json").write_text(json.dumps(d))
    rc, _, err = run(capsys, "--workload", str(tmp_path / "cyc.json"), "--describe")
    _one_error_line(rc, err, "cycle")


def test_negative_bandwidth_file(capsys, tmp_path):
    (tmp_path / "t.yaml").write_text(
        "kinds:\n  c: {peak_TFLOPs: {fp16: 1}, memory_GiB: 1, memory_GBps: 100}\n"
        "devices:\n  - {name: a, kind: c}\n  - {name: b, kind: c}\n"
        "links:\n  - {src: a, dst: b, GBps: -5}\n")
    rc, _, err = run(capsys, "--topology", str(tmp_path / "t.yaml"), "--describe")
    _one_error_line(rc, err, "bandwidth")


@pytest.mark.parametrize("argv,needle", [
    (("--topology", "nope"), "unknown topology 'nope'"),
    (("--workload", "bert-gigantic"), "bert-gigantic"),
    (("--precisions", "fp64"), "fp64"),
    (("--workload", "/no/such/graph.json"), "not found"),
])
def test_unknown_names(capsys, argv, needle):
    rc, _, err = run(capsys, *argv, "--describe")
    _one_error_line(rc, err, needle)


def test_main_job_json_small(capsys, tmp_path):
    """End to end on a small instance: the JSON document carries the promised fields and
    the ideal simulation reproduces the MILP period."""
    rc, out, _ = run(capsys, "--workload", "mlp-xs", "--topology", "mcm2x2", "--time-limit", "20", "--top-k", "2",
                     "--json", "--plan-out", str(tmp_path / "plan.json"))
    assert rc == 0
    doc = json.loads(out)
    for key in ("status", "objective_s", "bound_s", "gap", "seconds"):
        assert key in doc["solver"]
    assert doc["plans"] and (tmp_path / "plan.json").exists()
    for p in doc["plans"]:
        assert set(p) >= {"rank", "milp_period_s", "sim_period_s", "throughput_per_s", "stages", "precisions",
                          "peak_memory_bytes"}
        assert p["sim_ideal_period_s"] == pytest.approx(p["milp_period_s"], rel=1e-6)
        assert len(p["precisions"]) == 16


def test_coarsened_solve_maps_back_to_every_op(capsys, tmp_path):
    # mlp-xs fits 4 chiplets only with int8 on (nearly) every op: the coarse groups fuse
    # each matmul with its ReLU, which the default policy keeps in fp16
    rc, out, _ = run(capsys, "--workload", "mlp-xs", "--topology", "mcm2x2", "--coarsen", "6", "--time-limit", "20",
                     "--top-k", "1", "--json", "--plan-out", str(tmp_path / "plan.json"), "--low-bit-ops", "all")
    assert rc == 0
    doc = json.loads(out)
    assert doc["solver"]["coarse_ops"] <= 6
    assert len(doc["plans"][0]["precisions"]) == 16


@pytest.mark.parametrize("budget,needle", [("-1", ">= 0"), ("abc", "percentage")])
def test_bad_budget(capsys, budget, needle):
    rc, _, err = run(capsys, "--workload", "mlp-xs", "--topology", "mcm2x2", "--sensitivity-budget", budget)
    _one_error_line(rc, err, needle)


def test_budget_below_what_memory_forces(capsys):
    """GPT-2's embedding fits a 64 MiB chiplet only at int8, so a zero budget is infeasible:
    the message names the op and the shortfall."""
    rc, _, err = run(capsys, "--workload", "gpt2", "--seq-len", "512", "--sensitivity-budget", "0", "--quiet")
    _one_error_line(rc, err, "below the minimum", "embed (int8)", "short by")


def test_tied_head_that_fits_nowhere(capsys):
    """GPT-2 at 1,024 tokens: the LM head's logits (49 MiB at int8) and the embedding table
    it reads (37 MiB) fit a 64 MiB chiplet neither together nor apart."""
    rc, _, err = run(capsys, "--workload", "gpt2", "--quiet")
    _one_error_line(rc, err, "'head' reads the weights of 'embed'", "short by 21.89 MiB")


def _exit(capsys, *argv):
    """Flags argparse refuses: SystemExit(2) and one error line."""
    with pytest.raises(SystemExit) as e:
        solve.main(list(argv))
    return e.value.code, capsys.readouterr().err


@pytest.mark.parametrize("flag", ["--sensitivity-weight", "--time-limit", "--gap", "--budget"])
@pytest.mark.parametrize("value", ["nan", "inf", "-inf", "abc"])
def test_non_finite_numbers_are_refused_up_front(capsys, flag, value):
    rc, err = _exit(capsys, flag, value)
    _one_error_line(rc, err, flag)


def test_nan_sensitivity_budget_is_one_line(capsys):
    rc, _, err = run(capsys, "--sensitivity-budget", "nan", "--quiet")
    _one_error_line(rc, err, "sensitivity budget", "'nan'")


@pytest.mark.parametrize("flag,path,needle", [
    ("--plan-out", "missing-folder/p.json", "does not exist"),
    ("--plan-out", ".", "is a folder"),
    ("--trace", "missing-folder/t.json", "does not exist"),
    ("--report", "afile", "is a file"),
])
def test_output_paths_are_checked_before_the_solve(capsys, tmp_path, monkeypatch, flag, path, needle):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "afile").write_text("x")
    # a problem whose solve would take long: the check must come first
    rc, out, err = run(capsys, "--workload", "bert-large", flag, path, "--quiet")
    _one_error_line(rc, err, flag, needle)
    assert out == ""


def test_studies_refuse_an_unknown_workload(capsys, tmp_path):
    from distplan.cli.studies import main

    rc = main(["--workloads", "nope", "--topologies", "mcm2x2", "--out", str(tmp_path / "o"), "--quiet"])
    _one_error_line(rc, capsys.readouterr().err, "unknown workload 'nope'")
    assert not (tmp_path / "o" / "results.csv").exists()
