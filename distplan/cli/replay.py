"""python -m distplan.sim PLAN.json [--trace trace.json] [--ideal] [--link-model fifo|fair|free]

Replays a plan file: rebuilds the problem from the plan's "problem" block (workload and
topology by name, or by file with --workload / --topology), checks the plan, simulates
it and prints a summary. Errors print one line and exit with status 2.
"""
from __future__ import annotations

import argparse
import sys

from distplan.api.resolve import resolve_topology, resolve_workload
from distplan.core.errors import DistplanError
from distplan.core.plan import plan_from_dict, read_plan_json
from distplan.core.schedules import SCHEDULES
from distplan.costs.check import check_plan
from distplan.costs.problem import ProblemOptions, build_problem
from distplan.sim import SimOptions, simulate
from distplan.sim.trace import write_chrome_trace


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m distplan.sim", description="Replay a distplan plan file in the simulator.")
    ap.add_argument("plan", help="plan JSON file (distplan-plan v1)")
    ap.add_argument("--trace", help="write a Chrome/Perfetto trace here")
    ap.add_argument("--ideal", action="store_true", help="ideal mode (no latency, static link order)")
    ap.add_argument("--link-model", default="fifo", choices=("fifo", "fair", "free"))
    ap.add_argument("--workload", help="graph file or zoo name overriding the plan's workload")
    ap.add_argument("--topology", help="topology file or preset overriding the plan's topology")
    args = ap.parse_args(argv)
    try:
        res, problem = replay(args)
        print(res.summary())
        if args.trace:
            write_chrome_trace(res, problem, args.trace)
            print(f"trace written to {args.trace}")
    except DistplanError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


def replay(args):
    d = read_plan_json(args.plan)
    blk = d.get("problem") if isinstance(d, dict) else None
    if not isinstance(blk, dict):
        raise DistplanError(f"plan file {args.plan!r} has no 'problem' block naming workload and topology")
    try:
        mode = blk.get("mode", "inference")
        graph = resolve_workload(args.workload or blk["workload"], batch_size=blk.get("batch_size"),
                                 seq_len=blk.get("seq_len"), mode=mode)
        topo = resolve_topology(args.topology or blk["topology"])
        sched = d.get("schedule")
        problem = build_problem(graph, topo, ProblemOptions(
            precisions=tuple(blk["precisions"]), microbatches=int(d["microbatches"]),
            schedule=sched if sched in SCHEDULES else None))
    except (KeyError, TypeError, ValueError) as e:
        raise DistplanError(f"plan file {args.plan!r}: malformed problem block ({e!r})") from None
    plan = plan_from_dict(d, problem, source=args.plan)
    check_plan(problem, plan)
    res = simulate(problem, plan, SimOptions(ideal=args.ideal, link_model=args.link_model, trace=bool(args.trace)))
    return res, problem
