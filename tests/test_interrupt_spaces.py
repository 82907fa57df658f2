"""Ctrl-C (SIGINT) and SIGTERM in every plan space and in the replay (issue 26): the
best plan found so far is kept (table, a line saying so, the plan file) or, when none
exists yet, cleanly dropped with one line; exit 130 (SIGINT) / 143 (SIGTERM), never a
traceback. Each subprocess case sends its signal once the run reaches a known point (a
line on stderr), plus a short delay, and takes < 15 s here."""
from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from distplan.core.interrupt import Interrupted, exit_status, stop_on_interrupt

ROOT = Path(__file__).resolve().parents[1]
EXIT = {signal.SIGINT: 130, signal.SIGTERM: 143}


#: a hang guard, not a speed target: the messages asserted below show the interrupt path
#: was taken (a run that ignored the signal would print none of them); under load the
#: interrupted run's own exit (a plot, a plan file) took 18 s where it takes 2 s alone
HANG_S = 45


def signalled(argv: list[str], sig: int, after: str | None, delay: float, cwd: Path, timeout: float = 60):
    """Run ``argv``; once a stderr line contains ``after`` (None: at once), wait
    ``delay`` s and send ``sig``. Returns (returncode, stdout, stderr, seconds from
    the signal to the exit)."""
    proc = subprocess.Popen([sys.executable, *argv], cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    seen = []
    try:
        if after is not None:
            for line in proc.stderr:
                seen.append(line)
                if after in line:
                    break
        time.sleep(delay)
        t0 = time.perf_counter()
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
    return proc.returncode, out, "".join(seen) + err, time.perf_counter() - t0


def assert_clean(rc: int, sig: int, out: str, err: str) -> None:
    assert rc == EXIT[sig], f"rc {rc}\n{out}\n{err}"
    assert "Traceback" not in err and "Traceback" not in out, err


def replays(plan: Path) -> str:
    """The plan file replays (``python -m distplan.sim``): its summary."""
    r = subprocess.run([sys.executable, "-m", "distplan.sim", str(plan)], cwd=ROOT, capture_output=True, text=True,
                       timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout


# --- the mechanism ----------------------------------------------------------------

def test_sigterm_is_handled_like_sigint_and_exits_143():
    with stop_on_interrupt() as stop:
        assert signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
        stop.arm()
        os.kill(os.getpid(), signal.SIGTERM)
        assert stop.requested and stop.signum == signal.SIGTERM and stop.exit_status == 143
        assert stop.name == "SIGTERM"
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_before_a_plan_a_signal_raises_interrupted_with_its_number():
    with pytest.raises(Interrupted) as e, stop_on_interrupt():
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(1)
    assert isinstance(e.value, KeyboardInterrupt) and exit_status(e.value) == 143


def test_raising_drops_the_step_in_progress_at_the_first_signal():
    with stop_on_interrupt() as stop:
        stop.arm()
        with pytest.raises(KeyboardInterrupt), stop.raising():
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(1)
        assert stop.requested and not stop.aborted


# --- the command lines --------------------------------------------------------------

@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_cluster_space_keeps_its_best_plan(tmp_path, sig):
    """The cluster space: was a bare 'interrupted', exit 130, no table, no plan. gpt3-13b
    on 256 A100 (gpt3-1.3b on 64, ~8 s of search when written, now proves its optimum in
    about 1 s, before the signal lands)."""
    plan = tmp_path / "plan.json"
    rc, out, err, secs = signalled(["solve.py", "--workload", "gpt3-13b", "--topology", "a100x256", "--mode",
                                    "training", "--time-limit", "60", "--plan-out", str(plan)],
                                   sig, "points visited, best", 0.2, ROOT)
    assert_clean(rc, sig, out, err)
    assert secs < HANG_S
    assert "cluster space, interrupted" in out and "rank" in out, out
    name = "Ctrl-C" if sig == signal.SIGINT else "SIGTERM"
    assert f"interrupted ({name}): wrote the best plan found so far to {plan}" in err
    assert "iteration" in replays(plan)


def test_fleet_space_keeps_its_best_plan(tmp_path):
    plan = tmp_path / "plan.json"
    rc, out, err, secs = signalled(["solve.py", "--workload", "gpt2", "--topology", "hybrid-v100-t4", "--mode",
                                    "training", "--time-limit", "60", "--plan-out", str(plan)],
                                   signal.SIGINT, "fleet space: microbatch size 2", 0.2, ROOT)
    assert_clean(rc, signal.SIGINT, out, err)
    assert secs < HANG_S
    assert "fleet space, interrupted" in out, out
    assert "wrote the best plan found so far" in err
    replays(plan)


def test_stage_space_interrupts_its_milp_and_keeps_its_best_plan(tmp_path):
    """The stage space (its MILP built in highspy directly): HiGHS ran on in the main
    thread, where the signal handler waits, so a Ctrl-C during a MILP was answered only
    at its 20 s limit (13.6 s after the signal on gpt3-1.3b, a100x16); now HiGHS runs
    watched (model.highs_watch) and stops at its next callback (gpt3-6.7b on 128 A100s,
    the signal 3 s into the first MILP: answered in 1.0 s)."""
    plan = tmp_path / "plan.json"
    rc, out, err, secs = signalled(["solve.py", "--workload", "gpt3-6.7b", "--topology", "a100x128", "--mode",
                                    "training", "--microbatches", "16", "--space", "stage", "--time-limit", "120",
                                    "--plan-out", str(plan)], signal.SIGINT, "pruned by bound", 3.0, ROOT)
    assert_clean(rc, signal.SIGINT, out, err)
    assert secs < HANG_S
    assert "stage space, interrupted" in out, out
    assert "the MILP was interrupted" in out or "not solved (interrupted)" in out, out
    assert "wrote the best plan found so far" in err
    replays(plan)


def test_pipeline_space_sigterm_keeps_its_best_plan(tmp_path):
    plan = tmp_path / "plan.json"
    rc, out, err, secs = signalled(["solve.py", "--workload", "bert-base", "--topology", "mcm4x4", "--time-limit",
                                    "60", "--plan-out", str(plan)], signal.SIGTERM, "built in", 0.5, ROOT)
    assert_clean(rc, signal.SIGTERM, out, err)
    assert secs < HANG_S
    assert "interrupted (SIGTERM)" in out and "SIGTERM: stopping with the best plan" in err
    replays(plan)


def test_pareto_stops_with_the_frontier_so_far(tmp_path):
    """Was: 16 s more, then exit 0."""
    rc, out, err, secs = signalled([str(ROOT / "solve.py"), "--pareto", "3", "--time-limit", "12"],
                                   signal.SIGINT, "pareto: fastest plan", 0.5, tmp_path)
    assert_clean(rc, signal.SIGINT, out, err)
    assert secs < HANG_S
    assert "budget" in out and (tmp_path / "pareto.png").is_file()
    assert "interrupted (Ctrl-C): the frontier above has the plans found so far" in err


def test_before_any_plan_nothing_is_written(tmp_path):
    plan = tmp_path / "plan.json"
    rc, out, err, _ = signalled(["solve.py", "--workload", "gpt3-1.3b", "--topology", "a100x64", "--mode",
                                 "training", "--time-limit", "60", "--plan-out", str(plan)],
                                signal.SIGTERM, "cluster space:", 0.0, ROOT)
    assert_clean(rc, signal.SIGTERM, out, err)
    assert "interrupted (SIGTERM): no plan to keep yet, nothing written" in err
    assert not plan.exists()


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_signal_while_starting_is_one_line(tmp_path, sig):
    """Ctrl-C 0.4 s after start (during the imports) was a KeyboardInterrupt traceback."""
    rc, out, err, _ = signalled(["solve.py", "--time-limit", "5", "--plan-out", str(tmp_path / "p.json")],
                                sig, None, 0.4, ROOT)
    assert_clean(rc, sig, out, err)
    assert "interrupted" in err


@pytest.fixture(scope="module")
def long_plan(tmp_path_factory) -> Path:
    """A plan whose replay simulates for ~5 s here: gpt3-1.3b dp 2 x tp 4 x pp 8 on 64
    A100, 2,048 microbatches (built without simulating it)."""
    import distplan
    from distplan.costs.megatron import megatron_plan

    p = distplan.problem("gpt3-1.3b", "a100x64", batch_size=1, mode="training", precisions="bf16",
                         microbatches=2048)
    plan = megatron_plan(p, 2, 4, 8, "bf16", None, "none", False, 0, "ring", False)
    path = tmp_path_factory.mktemp("replay") / "plan.json"
    distplan.save_plan(plan, p, path)
    return path


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_a_long_replay_is_dropped_with_one_line(tmp_path, long_plan, sig):
    """Was a KeyboardInterrupt traceback (SIGTERM: killed silently)."""
    trace = tmp_path / "trace.json"
    rc, out, err, secs = signalled(["-m", "distplan.sim", str(long_plan), "--trace", str(trace)], sig, None, 3.0,
                                   ROOT)
    assert_clean(rc, sig, out, err)
    assert secs < HANG_S
    assert "the simulation was not finished; nothing written" in err, err
    assert not trace.exists()


def test_a_run_past_its_deadline_is_left_to_finish_alone():
    """HiGHS 1.16 can overrun its own time limit in root cut separation, which calls no
    callback (19.3 s asked, 117.7 s taken on a stage MILP): the watched run is left at
    ``abandon_at`` and the caller goes on; the run still finishes on its own."""
    from distplan.model.highs_watch import abandoned_alive, run_watched

    class Slow:
        def run(self) -> None:
            time.sleep(1.0)

    t0 = time.perf_counter()
    finished, left = run_watched(Slow(), None, t0 + 0.2)
    assert not finished and left is not None and time.perf_counter() - t0 < 0.9
    assert abandoned_alive() >= 1
    left.join()
    finished, left = run_watched(Slow(), None, time.perf_counter() + 5.0)
    assert finished and left is None
