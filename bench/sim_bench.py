"""Simulator speed: operator tasks per second, end to end (plan -> SimResult).

BERT-large (zoo) on the mcm4x4 chiplet mesh, a 16-stage pipeline (ops split into 16
contiguous stages, one chiplet each) with 256 microbatches; inference (stream) and
training (1F1B, GPipe), realistic and ideal. Each case is timed ``--repeat`` times and
the best wall time (and, as the machine is shared, the best process CPU time) is reported. Not a test: no assertion, the
figure goes in the report. Target: >= 200,000 tasks/s on a 2-core machine.

    python bench/sim_bench.py [--repeat 3] [--microbatches 256] [--profile] [--json out.json]
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from distplan.costs.problem import ProblemOptions, build_problem  # noqa: E402
from distplan.core.plan import Plan, Stage  # noqa: E402
from distplan.sim import SimOptions, simulate  # noqa: E402
from distplan.topologies.presets import get_topology  # noqa: E402
from distplan.workloads.zoo import get_workload  # noqa: E402

TARGET = 200_000


def contiguous_plan(n_ops: int, stages: int, microbatches: int, schedule: str) -> Plan:
    return Plan(tuple(v * stages // n_ops for v in range(n_ops)), ("fp16",) * n_ops,
                tuple(Stage((k,)) for k in range(stages)), microbatches, schedule)


def cases(microbatches: int):
    topo = get_topology("mcm4x4")
    for mode, schedules in (("inference", ("stream",)), ("training", ("1f1b", "gpipe"))):
        g = get_workload("bert-large", mode=mode)
        for sched in schedules:
            pb = build_problem(g, topo, ProblemOptions(precisions=("fp16", "int8"), microbatches=microbatches,
                                                       schedule=sched))
            plan = contiguous_plan(len(g.ops), 16, microbatches, sched)
            for ideal in (False, True):
                yield f"bert-large {mode} {sched}{' ideal' if ideal else ''}", pb, plan, SimOptions(ideal=ideal)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--microbatches", type=int, default=256)
    ap.add_argument("--profile", action="store_true", help="cProfile the first case instead")
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args()
    rows = []
    for name, pb, plan, opts in cases(args.microbatches):
        if args.profile:
            import cProfile
            import pstats

            cProfile.runctx("simulate(pb, plan, opts)", globals(), locals(), "/tmp/sim.prof")
            pstats.Stats("/tmp/sim.prof").sort_stats("cumulative").print_stats(25)
            return 0
        best = cpu = float("inf")
        for _ in range(args.repeat):
            t0, c0 = time.perf_counter(), time.process_time()
            r = simulate(pb, plan, opts)
            best = min(best, time.perf_counter() - t0)
            cpu = min(cpu, time.process_time() - c0)
        rate = r.n_tasks / best
        rows.append({"case": name, "ops": pb.n_ops, "microbatches": plan.microbatches, "tasks": r.n_tasks,
                     "nodes": r.n_nodes, "seconds": best, "cpu_seconds": cpu, "tasks_per_s": rate,
                     "tasks_per_cpu_s": r.n_tasks / cpu, "period_s": r.period_s, "steady": r.steady})
        print(f"{name:<36} {r.n_tasks:>8} tasks {r.n_nodes:>8} nodes {best:7.3f} s {rate:>10,.0f} tasks/s "
              f"({r.n_tasks / cpu:>9,.0f} per CPU s){'' if rate >= TARGET else '  (below target)'}")
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
