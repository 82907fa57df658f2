"""Inputs bounded before they hang (issue 26): a FIFO or device given as the workload,
topology or plan file is refused without being opened; a YAML alias bomb is refused
before it is expanded; a device kind's concurrency is bounded; ``--pareto N`` that the
time limit cannot hold is refused up front with both figures. Each case: one
``error:`` line, exit 2, within seconds (each hung or ran past 60 s before)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

import solve
from distplan.core.errors import DistplanError

ROOT = Path(__file__).resolve().parents[1]


def run(argv, capsys) -> tuple[int, str, float]:
    t0 = time.perf_counter()
    rc = solve.main([*argv, "--quiet"])
    return rc, capsys.readouterr().err, time.perf_counter() - t0


@pytest.mark.parametrize("flag,name", [("--workload", "w.json"), ("--topology", "t.yaml")])
def test_a_fifo_is_refused_not_waited_on(tmp_path, capsys, flag, name):
    fifo = tmp_path / name
    os.mkfifo(fifo)
    argv = ["--workload", "mlp-xs", "--topology", "mcm2x2", flag, str(fifo), "--plan-out", str(tmp_path / "p.json")]
    rc, err, secs = run(argv, capsys)
    assert rc == 2 and "is a FIFO (named pipe), not a regular file" in err and secs < 10, err


def test_a_device_is_refused(tmp_path, capsys):
    dev = tmp_path / "z.json"
    dev.symlink_to("/dev/zero")
    rc, err, _ = run(["--workload", str(dev), "--plan-out", str(tmp_path / "p.json")], capsys)
    assert rc == 2 and "is a character device" in err, err


def test_a_fifo_plan_file_is_refused_by_the_replay(tmp_path):
    fifo = tmp_path / "plan.json"
    os.mkfifo(fifo)
    r = subprocess.run([sys.executable, "-m", "distplan.sim", str(fifo)], cwd=ROOT, capture_output=True, text=True,
                       timeout=30)
    assert r.returncode == 2 and "plan file" in r.stderr and "FIFO" in r.stderr, r.stderr


def test_a_yaml_alias_bomb_under_description_is_refused(tmp_path, capsys):
    rows = ['  - &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    rows += [f"  - &a{i} [{','.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 9)]
    src = (ROOT / "examples" / "topologies" / "gpu-node-switch.yaml").read_text()
    src = "\n".join(line for line in src.splitlines() if not line.startswith("description:"))
    path = tmp_path / "bomb.yaml"
    path.write_text("description:\n" + "\n".join(rows) + "\n" + src)
    rc, err, secs = run(["--workload", "mlp-xs", "--topology", str(path), "--time-limit", "5",
                         "--plan-out", str(tmp_path / "p.json")], capsys)
    assert rc == 2 and "aliases (*name) expand to more than" in err and secs < 10, err


def test_a_shared_anchor_still_reads(tmp_path):
    from distplan.topologies.textformat import read_document

    path = tmp_path / "t.yaml"
    path.write_text("base: &k {a: 1, b: [1, 2, 3]}\nx: *k\ny: {<<: *k, a: 2}\n")
    assert read_document(path)["y"]["a"] == 2


def test_concurrency_is_bounded(tmp_path, capsys):
    from distplan.api.resolve import resolve_topology
    from distplan.topologies.io import topology_to_dict
    from distplan.topologies.textformat import dump_json

    d = json.loads(dump_json(topology_to_dict(resolve_topology("mcm2x2"))))
    for k in d["kinds"].values():
        k["concurrency"] = 1_000_000_000
    path = tmp_path / "conc.json"
    path.write_text(json.dumps(d))
    rc, err, secs = run(["--workload", "mlp-xs", "--topology", str(path), "--time-limit", "5",
                         "--plan-out", str(tmp_path / "p.json")], capsys)
    assert rc == 2 and "concurrency 1,000,000,000" in err and "at most 1,024" in err and secs < 10, err


def test_pareto_the_limit_cannot_hold_is_refused_up_front(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    rc, err, secs = run(["--workload", "mlp-xs", "--topology", "mcm2x2", "--pareto", "1000000",
                         "--time-limit", "5"], capsys)
    assert rc == 2 and "1,000,000 points need at least 1,000,000 s" in err and "time limit is 5 s" in err, err
    assert secs < 5 and not (tmp_path / "pareto.png").exists()


def test_pareto_api_refuses_too_many_points():
    import distplan
    from distplan.api.pareto import pareto

    with pytest.raises(DistplanError, match="at most 3 points"):
        pareto(distplan.problem("mlp-xs", "mcm2x2"), 50, distplan.SolveOptions(time_limit_s=3))
