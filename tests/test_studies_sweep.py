"""Studies: a sweep of 3 workloads x 2 topologies x 3 seeds through a real Dask
LocalCluster, CSV resume after an interrupted sweep (torn last line included), the CLI
and the plots."""
from __future__ import annotations

import math
from pathlib import Path

import pytest

from conftest import chain_graph
from distplan.studies import RunSpec, expand, make_plots, pending, read_rows, run_sweep
from distplan.cli.studies import main as studies_main
from distplan.core.errors import DistplanError
from distplan.studies.spec import KEY_FIELDS
from distplan.studies.store import FIELDS, append_rows, finished_keys
from distplan.workloads.graph import Graph, Operator, Tensor
from distplan.workloads.io import save_graph

TINY = dict(methods=("random", "dp"), threads=1, microbatches=4)


def diamond() -> Graph:
    ops = tuple(Operator(n, "matmul", f, 0, 1000, 100, 1e4) for n, f in
                (("a", 1e9), ("b", 2e9), ("c", 3e9), ("d", 1e9)))
    return Graph("diamond", ops, (Tensor("a", "b", 100), Tensor("a", "c", 100), Tensor("b", "d", 100),
                                  Tensor("c", "d", 100)))


@pytest.fixture
def workloads(tmp_path) -> list[str]:
    paths = []
    for name, g in (("chain4", chain_graph(4)), ("chain6", chain_graph(6)), ("diamond", diamond())):
        p = tmp_path / f"{name}.json"
        save_graph(g, p)
        paths.append(str(p))
    return paths


def test_study_through_dask_local_cluster(workloads, tmp_path):
    from dask.distributed import LocalCluster

    specs = expand(workloads, ["mcm1x2", "mcm1x3"], ["fp16,int8"], [0, 1, 2], [0.2], **TINY)
    assert len(specs) == 18
    csv_path = tmp_path / "out" / "results.csv"
    lines: list[str] = []
    with LocalCluster(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None) as cluster:
        rep = run_sweep(specs, csv_path, scheduler=cluster.scheduler_address, progress=lines.append)
    assert (rep.total, rep.ran, rep.skipped) == (18, 18, 0)
    rows = read_rows(csv_path)
    assert len(rows) == 18 * 3
    assert {r["method"] for r in rows} == {"milp", "random", "dp"}
    assert all(r["status"] != "error" for r in rows), [r["error"] for r in rows if r["error"]][:2]
    for r in rows:
        if r["method"] == "milp":
            assert r["status"] == "optimal" and float(r["gap"]) <= 0.01 + 1e-12
            assert float(r["throughput_per_s"]) > 0 and float(r["bound_s"]) > 0
        else:  # the ratio is against the MILP's simulated plan; baselines get the same budget
            assert float(r["ratio_to_milp"]) > 0
    assert sum(1 for m in lines if m.startswith("[")) == 18
    assert not pending(specs, csv_path)
    made = make_plots(csv_path, tmp_path / "out")
    assert [p.name for p in made] == ["gap_vs_time.png", "ratio_vs_baselines.png", "solve_time_vs_size.png"]
    assert all(p.stat().st_size > 1000 for p in made)


def test_resume_after_interrupt_only_runs_missing(workloads, tmp_path):
    specs = expand(workloads[:2], ["mcm1x2"], ["fp16,int8"], [0, 1], [0.2], **TINY)
    csv_path = tmp_path / "results.csv"
    first = run_sweep(specs[:3], csv_path, workers=1)
    assert first.ran == 3
    # the third run was cut short: its 'dp' row is missing and the file ends in a torn line
    rows = read_rows(csv_path)
    drop = [r for r in rows if tuple(r[f] for f in KEY_FIELDS) == specs[2].key() and r["method"] == "dp"]
    assert len(drop) == 1
    csv_path.unlink()
    append_rows(csv_path, [r for r in rows if r is not drop[0]])
    torn = csv_path.read_text().splitlines()[-1]
    csv_path.write_text(csv_path.read_text() + torn[: len(torn) // 2])
    todo = pending(specs, csv_path)
    assert [s.key() for s in todo] == [specs[2].key(), specs[3].key()]
    seen: list[str] = []
    rep = run_sweep(specs, csv_path, workers=1, progress=seen.append)
    assert (rep.ran, rep.skipped) == (2, 2)
    assert not pending(specs, csv_path)
    assert len(read_rows(csv_path)) == 4 * 3
    assert finished_keys(csv_path, {s.key(): s.all_methods for s in specs}) == {s.key() for s in specs}


def test_append_closes_torn_line(tmp_path):
    p = tmp_path / "r.csv"
    row = {f: "x" for f in FIELDS} | {"method": "milp", "seed": "0", "finished_at": "t"}
    append_rows(p, [row])
    p.write_text(p.read_text() + "bert,mcm4x4,\"fp16,in")  # torn, inside a quoted field
    append_rows(p, [row | {"seed": "1"}])
    assert sorted(r["seed"] for r in read_rows(p)) == ["0", "1"]


def test_cli_runs_resumes_and_plots(workloads, tmp_path, capsys):
    out = tmp_path / "cli"
    args = ["--workloads", ",".join(workloads[:1]), "--topologies", "mcm1x2", "--seeds", "0",
            "--time-limits", "0.2", "--methods", "dp", "--out", str(out), "--workers", "1", "--quiet"]
    assert studies_main(args) == 0
    assert "1 runs done, 0 skipped" in capsys.readouterr().out
    assert studies_main(args) == 0
    assert "0 runs done, 1 skipped" in capsys.readouterr().out
    assert (out / "ratio_vs_baselines.png").exists()
    assert studies_main(["--seeds", "x", "--out", str(out)]) == 2
    assert "error:" in capsys.readouterr().err
    assert studies_main(["--methods", "bogus", "--out", str(out)]) == 2


def test_error_runs_are_recorded_not_retried(tmp_path):
    spec = RunSpec("no-such-model", "mcm1x2", **TINY)
    p = tmp_path / "r.csv"
    run_sweep([spec], p, workers=1)
    rows = read_rows(p)
    assert {r["status"] for r in rows} == {"error"} and "no-such-model" in rows[0]["error"]
    assert not pending([spec], p)


@pytest.mark.slow
def test_study_on_dask_worker_processes(workloads, tmp_path):
    """The same sweep on two worker processes (the way a real cluster runs it)."""
    from dask.distributed import LocalCluster

    specs = expand(workloads, ["mcm1x2", "mcm1x3"], ["fp16,int8"], [0, 1, 2], [0.2], **TINY)
    with LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None) as cluster:
        rep = run_sweep(specs, tmp_path / "results.csv", scheduler=cluster.scheduler_address)
    assert rep.ran == 18
    assert all(r["status"] != "error" for r in read_rows(tmp_path / "results.csv"))


def test_plots_survive_equal_ratios_and_errors(tmp_path):
    """Equal ratios across seeds (mean - min rounding below 0) and error rows."""
    p = tmp_path / "r.csv"
    base = {f: "" for f in FIELDS} | {"workload": "w", "topology": "t", "precisions": "fp16", "mode": "inference",
                                      "time_limit_s": "1", "finished_at": "now", "n_ops": "5"}
    rows = []
    for seed in range(3):
        rows.append(base | {"seed": str(seed), "method": "milp", "status": "optimal", "gap": "0.0",
                            "seconds": "0.5", "throughput_per_s": repr(0.1 + 0.2)})
        rows.append(base | {"seed": str(seed), "method": "sa", "status": "found", "throughput_per_s": "0.1",
                            "ratio_to_milp": "0.3"})
    rows.append(base | {"seed": "9", "method": "milp", "status": "error", "error": "no fit"})
    append_rows(p, rows)
    assert len(make_plots(p, tmp_path)) == 3


@pytest.mark.parametrize("flags,needle", [
    (["--seeds", "-1"], "error: --seeds must be a whole number >= 0, got -1"),
    (["--seeds", "3000000000"], "error: --seeds must be at most 2,147,483,647"),
    (["--workers", "0"], "error: --workers must be a positive whole number"),
    (["--candidates", "0"], "error: --candidates must be a positive whole number"),
    (["--top-k", "0"], "error: --top-k must be a positive whole number"),
    (["--gap", "2"], "error: --gap must be a finite number >= 0 and < 1"),
    (["--microbatches", "0"], "error: --microbatches must be a positive whole number"),
])
def test_study_flags_are_checked_before_the_sweep(tmp_path, capsys, flags, needle):
    """Issue 26: a negative seed, --top-k 0, --gap 2 or --candidates 0 ran the whole sweep
    and wrote an error row per run; --workers 0 was read as the default. Now one error
    line, nothing written."""
    from distplan.cli.studies import main
    out = tmp_path / "out"
    rc = main(["--workloads", "mlp-xs", "--topologies", "mcm2x2", "--time-limits", "1", "--methods", "random",
               "--out", str(out), "--quiet", *flags])
    err = [x for x in capsys.readouterr().err.splitlines() if x.strip()]
    assert rc == 2 and len(err) == 1 and err[0].startswith(needle), err
    assert not out.exists() or not any(out.iterdir())


@pytest.mark.parametrize("kw,needle", [(dict(seed=True), "--seeds"), (dict(time_limit_s=math.nan), "--time-limits"),
                                       (dict(threads=0), "--threads"), (dict(methods=["random"]), "--methods")])
def test_run_spec_checks_its_fields(kw, needle):
    from distplan.studies.spec import RunSpec
    with pytest.raises(DistplanError, match=needle):
        RunSpec("mlp-xs", "mcm2x2", **kw)
