"""distplan command line: load a workload and a topology, build the problem, solve the
MILP, re-rank the plans in the simulator, report and write the winner.

    python solve.py --topology mcm4x4            # bert-base inference, the defaults
    python solve.py --list | --describe
"""
from __future__ import annotations

import argparse
import sys

from distplan.errors import DistplanError


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="solve.py", description=__doc__.splitlines()[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--list", action="store_true", help="list workloads and topology presets, then exit")
    ap.add_argument("--describe", action="store_true", help="summarise the workload on the topology, then exit")
    w = ap.add_argument_group("problem")
    w.add_argument("--workload", default="bert-base", help="zoo name, graph .json or .onnx file")
    w.add_argument("--topology", default="mcm4x4", help="preset name or topology .yaml/.json file")
    w.add_argument("--batch-size", type=int, default=None, help="samples per microbatch (zoo default if unset)")
    w.add_argument("--seq-len", type=int, default=None, help="sequence length (zoo default if unset)")
    w.add_argument("--input-shape", action="append", default=[], metavar="NAME=D1xD2",
                   help="static shape of a symbolic ONNX input, e.g. input_ids=1x128 (repeat per input)")
    w.add_argument("--mode", choices=("inference", "training"), default="inference")
    w.add_argument("--precisions", default="fp16,int8", help="precisions the planner may choose from")
    w.add_argument("--microbatches", type=int, default=16)
    w.add_argument("--schedule", choices=("stream", "gpipe", "1f1b"), default=None,
                   help="pipeline schedule (default: stream for inference, 1f1b for training)")
    s = ap.add_argument_group("solver")
    s.add_argument("--objective", choices=("throughput", "latency"), default="throughput")
    s.add_argument("--sensitivity-budget", default=None,
                   help="upper bound on the summed numerical-sensitivity proxy: a number, or a share of the "
                        "all-lowest-precision total such as 10%%")
    s.add_argument("--sensitivity-weight", type=float, default=0.0,
                   help="seconds of period traded per unit of sensitivity (weighted objective)")
    s.add_argument("--coarsen", type=int, default=None,
                   help="solve on a graph coarsened to this many ops (default: 150 when the graph has > 300; 0: never)")
    s.add_argument("--stages", type=int, default=None, help="pipeline stages (default: up to the device count)")
    s.add_argument("--top-k", type=int, default=5)
    s.add_argument("--time-limit", type=float, default=60.0, help="MILP time limit in seconds")
    s.add_argument("--gap", type=float, default=0.01, help="relative optimality gap to stop at")
    s.add_argument("--threads", type=int, default=None, help="solver threads (default: all cores)")
    s.add_argument("--seed", type=int, default=0)
    o = ap.add_argument_group("output")
    o.add_argument("--plan-out", default="plan.json", help="where to write the winning plan")
    o.add_argument("--trace", default=None, help="write a Chrome/Perfetto trace of the winner")
    o.add_argument("--report", default=None, help="folder for plots (placement, timeline)")
    o.add_argument("--json", action="store_true", help="print one JSON document instead of the table")
    o.add_argument("--quiet", action="store_true", help="no progress output")
    c = ap.add_argument_group("baselines")
    c.add_argument("--compare", default=None, help="baselines to run at equal budget: random,sa,dp,grid")
    c.add_argument("--budget", type=float, default=None, help="wall-clock seconds per method for --compare")
    return ap.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        if args.list:
            from distplan.describe import listing

            print(listing())
            return 0
        from costs import ProblemOptions, build_problem
        from distplan.resolve import parse_input_shape, resolve_topology, resolve_workload

        shapes = dict(parse_input_shape(x) for x in args.input_shape)
        graph = resolve_workload(args.workload, args.batch_size, args.seq_len, args.mode, shapes or None)
        topology = resolve_topology(args.topology)
        problem = build_problem(graph, topology, ProblemOptions(
            precisions=tuple(args.precisions.split(",")), microbatches=args.microbatches, schedule=args.schedule))
        if args.describe:
            from distplan.describe import describe

            print(describe(problem))
            return 0
        from distplan.run import run_main

        return run_main(problem, args)
    except DistplanError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
