"""Outputs are never destroyed (issue 26): every file the command lines write goes
through core.atomic (temporary file, fsync, rename), a write that fails part-way leaves
the previous file intact and prints one ``error:`` line (exit 2), and no output may be an
input or another output, compared by file identity (hard and symbolic links included)."""
from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from distplan.cli import main as cli_main
from distplan.cli import replay
from distplan.core.atomic import atomic_open, dumps_json, write_atomic, write_json_atomic
from distplan.core.errors import DistplanError

ROOT = Path(__file__).resolve().parents[1]
TINY = {"format": "distplan-graph", "version": 1, "name": "tiny", "mode": "inference", "batch_size": 1, "seq_len": 16,
        "ops": [{"name": f"o{i}", "kind": "matmul", "fwd_flops": 1e9 * (i + 1), "bwd_flops": 2e9 * (i + 1),
                 "param_elems": 1000 * (i + 1), "out_elems": 4096, "touched_elems": 10000} for i in range(3)],
        "tensors": [{"src": f"o{i}", "dst": f"o{i + 1}", "elems": 4096} for i in range(2)]}


def one_error(rc, err: str, *needles: str) -> str:
    lines = [line for line in err.splitlines() if line.strip()]
    assert rc == 2 and len(lines) == 1 and lines[0].startswith("error: "), err
    assert "Traceback" not in err
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


def leftovers(folder: Path) -> list[str]:
    return [p.name for p in folder.iterdir() if p.name.endswith(".tmp")]


# --------------------------------------------------------------------------- core.atomic
def test_write_replaces_and_keeps_the_mode(tmp_path):
    p = tmp_path / "f.json"
    write_atomic(p, "old")
    assert stat.S_IMODE(p.stat().st_mode) == 0o666 & ~_umask()
    p.chmod(0o640)
    write_atomic(p, "new")
    assert p.read_text() == "new" and stat.S_IMODE(p.stat().st_mode) == 0o640
    assert leftovers(tmp_path) == []


def _umask() -> int:
    old = os.umask(0o022)
    os.umask(old)
    return old


def test_failure_part_way_keeps_the_old_file(tmp_path):
    p = tmp_path / "f.json"
    p.write_text("previous")
    with pytest.raises(DistplanError, match="cannot write plan file .* unchanged"):
        with atomic_open(p, "plan file") as f:
            f.write("half")
            raise OSError(27, "File too large")
    with pytest.raises(ZeroDivisionError):   # a bug while writing: propagates, the file is intact too
        with atomic_open(p) as f:
            f.write("half")
            1 / 0
    assert p.read_text() == "previous" and leftovers(tmp_path) == []


@pytest.mark.parametrize("case", ["folder", "long name", "missing folder", "/dev/full"])
def test_unwritable_targets_are_one_error(tmp_path, case):
    if case == "folder":
        (tmp_path / "x").mkdir()
        target = tmp_path / "x"
    elif case == "long name":
        target = tmp_path / ("a" * 300 + ".json")
    elif case == "missing folder":
        target = tmp_path / "no" / "x.json"
    else:
        if not os.path.exists("/dev/full"):
            pytest.skip("no /dev/full")
        target = Path("/dev/full")
    with pytest.raises(DistplanError, match="cannot write"):
        write_atomic(target, "x" * 10000)
    assert leftovers(tmp_path) == []


def test_devices_and_fifos_are_written_in_place(tmp_path):
    write_atomic("/dev/null", "x")   # not renamed over: /dev/null stays a device
    assert stat.S_ISCHR(os.stat("/dev/null").st_mode)
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(DistplanError, match="cannot write"):   # no reader: refused, never waited on
        write_atomic(fifo, "x")
    got: list[bytes] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_bytes()))
    reader.start()
    for _ in range(100):   # the reader opens the FIFO; then the write goes through
        try:
            write_atomic(fifo, "hello")
            break
        except DistplanError:
            threading.Event().wait(0.02)
    reader.join(5)
    assert got == [b"hello"]


def test_a_symbolic_link_is_written_through(tmp_path):
    real = tmp_path / "real.json"
    real.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(real)
    write_atomic(link, "new")
    assert link.is_symlink() and real.read_text() == "new"


def test_json_is_strict(tmp_path):
    with pytest.raises(DistplanError, match=r"plan file .*problem\.seq_len = inf"):
        dumps_json({"problem": {"seq_len": float("inf")}}, "plan file")
    p = tmp_path / "x.json"
    p.write_text("{}")
    with pytest.raises(DistplanError):
        write_json_atomic(p, [float("nan")])
    assert p.read_text() == "{}"


# --------------------------------------------------------------------------- the command lines
@pytest.fixture(scope="module")
def made(tmp_path_factory):
    """A folder with tiny.json, and plan.json / trace.json written by solve.py."""
    d = tmp_path_factory.mktemp("outputs")
    (d / "tiny.json").write_text(json.dumps(TINY))
    rc = cli_main.main(["--workload", str(d / "tiny.json"), "--topology", "mcm2x2", "--time-limit", "10", "--quiet",
                        "--top-k", "1", "--plan-out", str(d / "plan.json"), "--trace", str(d / "trace.json")])
    assert rc == 0
    return d


def solve_argv(d: Path, *extra: str) -> list[str]:
    return ["--workload", str(d / "tiny.json"), "--topology", "mcm2x2", "--time-limit", "10", "--quiet",
            "--top-k", "1", *extra]


def test_replay_refuses_the_plan_as_its_trace(made, capsys):
    plan = made / "plan.json"
    before = plan.read_bytes()
    hard = made / "hl.json"
    if not hard.exists():
        os.link(plan, hard)
    soft = made / "sl.json"
    if not soft.exists():
        soft.symlink_to(plan)
    for trace in (plan, hard, soft, Path(os.path.relpath(plan))):
        rc = replay.main([str(plan), "--trace", str(trace)])
        one_error(rc, capsys.readouterr().err, "--trace", "same file as the plan file", "another file name")
    assert plan.read_bytes() == before


@pytest.mark.parametrize("flags,needle", [
    (("--plan-out", "{d}/x.json", "--trace", "{d}/x.json"), "name the same file"),
    (("--plan-out", "{d}/tiny.json"), "same file as --workload"),
    (("--plan-out", "{d}/hw.json"), "same file as --workload"),   # a hard link to the workload
    (("--trace", "{d}/r/trace.json", "--report", "{d}/r"), "name the same file"),
    (("--plan-out", "{d}/" + "p" * 300 + ".json"), "File name too long"),
    (("--plan-out", "{d}"), "is a folder"),
    (("--report", "{d}/tiny.json"), "is a file"),
])
def test_solve_refuses_clashing_or_unwritable_outputs_before_work(made, capsys, flags, needle):
    if not (made / "hw.json").exists():
        os.link(made / "tiny.json", made / "hw.json")
    (made / "r").mkdir(exist_ok=True)
    before = (made / "tiny.json").read_bytes()
    rc = cli_main.main(solve_argv(made, *(f.format(d=made) for f in flags)))
    one_error(rc, capsys.readouterr().err, needle)
    assert (made / "tiny.json").read_bytes() == before


def test_report_file_that_is_a_folder_is_refused_up_front(made, capsys):
    (made / "rep" / "timeline.png").mkdir(parents=True, exist_ok=True)
    rc = cli_main.main(solve_argv(made, "--plan-out", "", "--report", str(made / "rep")))
    one_error(rc, capsys.readouterr().err, "--report", "timeline.png", "is a folder")


def test_trace_to_dev_full_is_one_error_and_the_plan_is_kept(made, capsys):
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full")
    out = made / "kept.json"
    rc = cli_main.main(solve_argv(made, "--plan-out", str(out), "--trace", "/dev/full"))
    one_error(rc, capsys.readouterr().err, "cannot write trace file '/dev/full'", "No space left")
    assert json.loads(out.read_text())["format"] == "distplan-plan"
    rc = replay.main([str(out), "--trace", "/dev/full"])
    one_error(rc, capsys.readouterr().err, "cannot write trace file")


def _sh(script: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run(["bash", "-c", script], cwd=cwd, capture_output=True, text=True, env=env, timeout=120)


@pytest.mark.skipif(sys.platform != "linux", reason="ulimit -f and /dev/full")
def test_file_size_limit_and_full_stdout_in_a_subprocess(made):
    """``ulimit -f`` part-way through --plan-out, --trace and --report, and a table printed
    to a full disk: one error line, exit 2, every previous file intact; stdout closed
    (``>&-``): the run completes."""
    solve = f"{sys.executable} {ROOT / 'solve.py'} --workload tiny.json --topology mcm2x2 --time-limit 10 --top-k 1"
    (made / "rep2").mkdir(exist_ok=True)
    (made / "rep2" / "placement.png").write_bytes(b"old png")
    old_plan, old_trace = (made / "plan.json").read_bytes(), (made / "trace.json").read_bytes()
    for flags in ("--plan-out plan.json", "--plan-out '' --trace trace.json", "--plan-out '' --report rep2"):
        r = _sh(f"ulimit -f 2; {solve} --quiet {flags}", made)   # 2 KiB: each file is larger
        one_error(r.returncode, r.stderr, "cannot write", "File too large")
    assert (made / "plan.json").read_bytes() == old_plan and (made / "trace.json").read_bytes() == old_trace
    assert (made / "rep2" / "placement.png").read_bytes() == b"old png"
    assert leftovers(made) == [] and leftovers(made / "rep2") == []
    r = _sh(f"{solve} --quiet --plan-out '' > /dev/full", made)
    one_error(r.returncode, r.stderr, "cannot write the standard output")
    r = _sh(f"{sys.executable} -m distplan.sim plan.json > /dev/full", made)
    one_error(r.returncode, r.stderr, "cannot write the standard output")
    r = _sh(f"{solve} --quiet --plan-out closed.json >&-", made)   # stdout closed: the run completes
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    assert json.loads((made / "closed.json").read_text())["format"] == "distplan-plan"


def test_studies_refuse_an_input_as_their_output(made, capsys):
    from distplan.cli import studies

    out = made / "study"
    out.mkdir(exist_ok=True)
    os.link(made / "tiny.json", out / "results.csv") if not (out / "results.csv").exists() else None
    rc = studies.main(["--workloads", str(made / "tiny.json"), "--topologies", "mcm2x2", "--out", str(out), "--quiet"])
    one_error(rc, capsys.readouterr().err, "--out", "results.csv", "same file as --workloads")
    assert json.loads((made / "tiny.json").read_text()) == TINY
