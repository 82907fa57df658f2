"""The command line (``python solve.py``, ``python -m distplan``, ``distplan``): parse,
call the API, print. Errors a user can cause print one ``error:`` line, exit 2."""
from __future__ import annotations

import argparse
import contextlib
import pathlib
import dataclasses
import os
import re
import sys
import time

from distplan import api
from distplan.core.atomic import dumps_json
from distplan.core.deadline import deadline_at
from distplan.core.errors import DistplanError
from distplan.core.interrupt import current_stop, exit_status, signal_name, stop_on_interrupt
from distplan.cli.args import (Parser, check_distinct, check_output_file, check_output_folder, finite_float,
                               ensure_std_streams, flush_stdout, io_error, process_started_at, refuse_flags)
from distplan.core.schedules import SCHEDULES
from distplan.workloads.zoo.attention import ATTENTION
from distplan.costs.expert_parallel import DISPATCHERS
from distplan.core.validate import check_float
from distplan.model.applies import check_options_apply
from distplan.model.spaces import resolve_space
from distplan.model.highs import abandoned_alive

#: written to stderr when a first Ctrl-C asks the run to stop with what it has
INTERRUPT_NOTICE = "Ctrl-C: stopping with the best plan found so far (a second Ctrl-C aborts)"
#: the files ``--report FOLDER`` writes (distplan.api.plots.write_report)
REPORT_FILES = ("placement.png", "trace.json", "timeline.png")
#: exit status after a Ctrl-C (128 + SIGINT), also when the best plan so far was kept; 143
#: (128 + SIGTERM) after a SIGTERM (distplan.core.interrupt.exit_status)
EXIT_INTERRUPTED = 130

DESCRIPTION = ("Plan placement, pipeline stages and precision of a network on many devices: "
               "solve the MILP, re-rank the plans in the simulator, report and write the winner.")


def parse_args(argv: list[str] | None = None, prog: str = "solve.py") -> argparse.Namespace:
    ap = Parser(prog=prog, description=DESCRIPTION,
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--list", action="store_true", help="list workloads and topology presets, then exit")
    ap.add_argument("--describe", action="store_true", help="summarise the workload on the topology, then exit")
    w = ap.add_argument_group("problem")
    w.add_argument("--workload", default="bert-base", help="zoo name, graph .json or .onnx file")
    w.add_argument("--topology", default="mcm4x4", help="preset name or topology .yaml/.json file")
    w.add_argument("--batch-size", type=int, default=None, help="samples per microbatch (zoo default if unset)")
    w.add_argument("--seq-len", type=int, default=None, help="sequence length (zoo default if unset)")
    w.add_argument("--attention", choices=ATTENTION, default=None,
                   help="a zoo transformer's attention core: explicit (scores and softmax as ops, the default) "
                        "or flash (one fused FlashAttention-2 op: no scores stored, recomputed in the backward)")
    w.add_argument("--input-shape", action="append", default=[], metavar="NAME=D1xD2",
                   help="static shape of a symbolic ONNX input, e.g. input_ids=1x128 (repeat per input)")
    w.add_argument("--profile", default=None, metavar="FILE",
                   help="measured per-op times (a distplan-profile JSON, e.g. from python -m distplan.profile): "
                        "they replace the roofline for the ops, device kinds and precisions it gives")
    w.add_argument("--mode", choices=("inference", "training"), default="inference")
    w.add_argument("--precisions", default=None,
                   help="precisions the planner may choose from (default: fp16,int8 for inference; bf16,fp16 "
                        "for training, those the devices run: mixed precision, fp32 master weights)")
    w.add_argument("--low-bit-ops", choices=("matmul", "all"), default="matmul",
                   help="which operators may compute at int8/fp8: matrix products only (default; norms, softmax, "
                        "activations and residual adds stay in 16 bits, as int8 inference engines run them) or all")
    w.add_argument("--comm", choices=("overlapped", "exposed"), default="overlapped",
                   help="overlapped (default): transfers load the links only, overlapped with compute; exposed: "
                        "each transfer also adds its time to the sending and the receiving device's load (once "
                        "per source op and receiving stage, sent directly)")
    w.add_argument("--microbatches", type=int, default=16)
    w.add_argument("--schedule", choices=SCHEDULES, default=None,
                   help="pipeline schedule (default: stream for inference, 1f1b for training)")
    s = ap.add_argument_group("solver")
    s.add_argument("--objective", choices=("throughput", "latency", "sensitivity"), default="throughput",
                   help="throughput (period; training: the step), latency (one request), or sensitivity: the least "
                        "summed sensitivity meeting --iteration-target (mixed-fleet training, the fleet space)")
    s.add_argument("--microbatch-sizes", default=None, metavar="B1,B2,...",
                   help="cluster space, training: samples per microbatch to search at the same global batch "
                        "(--microbatches x --batch-size); default 1,2,4,8 (those dividing it); 'none': only "
                        "--batch-size")
    s.add_argument("--virtual-stages", default=None, metavar="V1,V2,...",
                   help="cluster space, training: also search Megatron's interleaved 1F1B with these virtual "
                        "stages per pipeline rank (each >= 2; where pp x vp divides the layers); off by default: "
                        "each interleaved estimate replays its order (~1 s)")
    s.add_argument("--cp-degrees", default=None, metavar="C1,C2,...",
                   help="cluster space, training on a zoo transformer: context-parallel degrees to search besides "
                        "1 (each dividing the sequence); default 2,4,8 when the sequence has >= 8,192 tokens, else "
                        "none; 'none': cp 1 only")
    s.add_argument("--ep-degrees", default=None, metavar="E1,E2,...",
                   help="cluster space, training on a zoo mixture-of-experts model: expert-parallel degrees to "
                        "search besides 1 (each dividing the experts and dp); default every divisor of the "
                        "experts; 'none': ep 1 only")
    s.add_argument("--ep-dispatcher", choices=DISPATCHERS, default="alltoall",
                   help="cluster space, training on a zoo mixture-of-experts model: how the expert-parallel points "
                        "move tokens: alltoall (Megatron's: a row per routed expert, the default) or deepep (DeepEP: "
                        "a row per destination rank, across nodes once a node; balanced routing)")
    s.add_argument("--tp-comm-overlap", action="store_true",
                   help="cluster space, training: also search each sequence-parallel point with its tensor-parallel "
                        "collectives pipelined with their GEMMs (Megatron's --tp-comm-overlap); off by default")
    s.add_argument("--space", choices=("auto", "pipeline", "cluster", "fleet", "stage"), default="auto",
                   help="plan space: pipeline (the MILP: stages along device paths, per-op precision), cluster "
                        "(Megatron-style dp x tp x pp for training steps or inference latency), fleet (mixed-fleet "
                        "training: data-parallel stages whose replicas of different kinds get their own shares and "
                        "precisions), stage (training on one kind of GPU: the cluster space plus pipelines whose "
                        "stages each get their own tp, dp, recomputation and ZeRO from the stage MILP), auto (cluster "
                        "for training, or latency, on one kind of GPU; fleet for training on several kinds)")
    s.add_argument("--sensitivity-budget", default=None,
                   help="upper bound on the summed numerical-sensitivity proxy: a number, or a share of the "
                        "all-lowest-precision total such as 10%%")
    s.add_argument("--iteration-target", default=None, metavar="S|P%",
                   help="with --objective sensitivity (mixed-fleet training): the iteration to meet, seconds or a "
                        "share over the fastest plan found (default 0%%: as fast as the fastest, no kind straggling)")
    s.add_argument("--sensitivity-weight", type=finite_float, default=0.0,
                   help="seconds of period traded per unit of sensitivity (weighted objective)")
    s.add_argument("--coarsen", type=int, default=None,
                   help="solve on a graph coarsened to this many ops (default: 150 when the graph has > 300; 0: never)")
    s.add_argument("--stages", type=int, default=None, help="pipeline stages (default: up to the device count)")
    s.add_argument("--top-k", type=int, default=5)
    s.add_argument("--time-limit", type=finite_float, default=60.0,
                   help="time limit of the whole run in seconds (solve, simulation and ranking); what it cuts "
                        "short is listed in the output")
    s.add_argument("--gap", type=finite_float, default=0.01, help="relative optimality gap to stop at")
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
    c.add_argument("--budget", type=finite_float, default=None, help="wall-clock seconds per method for --compare")
    c.add_argument("--candidates", type=int, default=None,
                   help="deterministic budget: each baseline scores this many plans (--budget is then only a "
                        "safety cap); with --seed every method reproduces exactly")
    c.add_argument("--pareto", type=int, default=None, metavar="N",
                   help="print (and plot to pareto.png, or --report's folder) N points of the sensitivity / "
                        "throughput frontier, every point a simulated plan; --time-limit bounds the whole frontier")
    return ap.parse_args(argv)




#: the SolveOptions fields, problem() and compare() arguments the flags set: an error that
#: starts with one ("SolveOptions.n_stages must be ...") is printed naming the flag
FLAG_OF = {"objective": "--objective", "space": "--space", "sensitivity_budget": "--sensitivity-budget",
           "sensitivity_weight": "--sensitivity-weight", "iteration_target": "--iteration-target",
           "top_k": "--top-k", "time_limit_s": "--time-limit", "rel_gap": "--gap", "threads": "--threads",
           "seed": "--seed", "n_stages": "--stages", "coarsen_ops": "--coarsen",
           "microbatch_sizes": "--microbatch-sizes", "virtual_stages": "--virtual-stages",
           "context_parallel": "--cp-degrees", "expert_parallel": "--ep-degrees", "ep_dispatcher": "--ep-dispatcher",
           "tp_comm_overlap": "--tp-comm-overlap",
           "batch_size": "--batch-size", "seq_len": "--seq-len", "attention": "--attention", "microbatches": "--microbatches",
           "precisions": "--precisions", "schedule": "--schedule", "low_bit_ops": "--low-bit-ops",
           "mode": "--mode", "profile": "--profile", "candidates": "--candidates", "budget_s": "--budget"}
_FIELD_FIRST = re.compile(r"(?:SolveOptions\.|ProblemOptions\.)?(\w+)(?= (?:must be|does not apply))")


def flag_named(message: str) -> str:
    """``message`` with a leading API argument name replaced by its flag
    ("SolveOptions.n_stages must be ..." -> "--stages must be ..."); else unchanged."""
    m = _FIELD_FIRST.match(message)
    if m and m.group(1) in FLAG_OF:
        return FLAG_OF[m.group(1)] + message[m.end():]
    return message


def _say(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _sizes(text: str | None) -> tuple[int, ...] | None:
    """--microbatch-sizes: None (default), () for 'none', else the listed sizes."""
    if text is None:
        return None
    if text.strip().lower() == "none":
        return ()
    try:
        sizes = tuple(int(x) for x in text.split(","))
    except ValueError:
        raise DistplanError(f"--microbatch-sizes takes whole numbers separated by commas (or 'none'), got {text!r}")
    if any(b < 1 for b in sizes):
        raise DistplanError(f"--microbatch-sizes must be >= 1, got {text!r}")
    return sizes


def _virtual_stages(text: str | None) -> tuple[int, ...]:
    """--virtual-stages: () when unset, else the listed counts (each >= 2)."""
    if text is None:
        return ()
    try:
        vps = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise DistplanError(f"--virtual-stages takes whole numbers separated by commas, got {text!r}") from None
    if not vps or any(v < 2 for v in vps):
        raise DistplanError(f"--virtual-stages takes counts >= 2 (1 is plain 1F1B, always searched), got {text!r}")
    return vps


def _degrees(text: str | None, flag: str) -> tuple[int, ...] | None:
    """--cp-degrees / --ep-degrees: None (the default rule), () for 'none', else the listed degrees."""
    if text is None:
        return None
    if text.strip().lower() == "none":
        return ()
    try:
        out = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise DistplanError(f"{flag} takes whole numbers separated by commas (or 'none'), got {text!r}") from None
    if not out or any(d < 1 for d in out):
        raise DistplanError(f"{flag} takes degrees >= 1, got {text!r}")
    return out


def solve_options(args: argparse.Namespace, problem: api.Problem) -> api.SolveOptions:
    """The planner's options from the parsed flags."""
    kw = dict(objective=args.objective, space=args.space, microbatch_sizes=_sizes(args.microbatch_sizes),
              virtual_stages=_virtual_stages(args.virtual_stages),
              context_parallel=_degrees(args.cp_degrees, "--cp-degrees"),
              expert_parallel=_degrees(args.ep_degrees, "--ep-degrees"), ep_dispatcher=args.ep_dispatcher,
              tp_comm_overlap=args.tp_comm_overlap,
              sensitivity_budget=api.sensitivity_budget_value(args.sensitivity_budget, problem),
              sensitivity_weight=args.sensitivity_weight, iteration_target=args.iteration_target,
              top_k=args.top_k, time_limit_s=args.time_limit,
              rel_gap=args.gap, seed=args.seed, n_stages=args.stages, coarsen_ops=args.coarsen,
              progress=None if args.quiet or args.json else _say)
    if args.threads is not None:
        kw["threads"] = args.threads
    opts = api.SolveOptions(**kw)
    # a flag the plan space never reads is an error naming it (the rule model.solve applies)
    check_options_apply(problem, opts, resolve_space(problem, opts).name)
    return opts


def run_compare(problem: api.Problem, args: argparse.Namespace) -> int:
    """``--compare``: the MILP against the baselines at equal budget."""
    budget = args.budget if args.budget is not None else args.time_limit
    if not budget > 0:
        raise DistplanError(f"--budget must be > 0 seconds, got {budget:g}")
    opts = solve_options(args, problem)
    progress = None if args.quiet else _say
    c = api.compare(problem, args.compare, budget, seed=args.seed, solve_options=opts,
                    sensitivity_budget=opts.sensitivity_budget, progress=progress, candidates=args.candidates)
    print(dumps_json(c.to_json(), "the comparison", indent=1, default=float) if args.json else c.table())
    stop = current_stop()
    if stop is not None and stop.requested:
        print(f"interrupted ({stop.name}): the comparison above has what each method found so far", file=sys.stderr)
        return stop.exit_status
    return 0


def run_pareto(problem: api.Problem, args: argparse.Namespace) -> int:
    """``--pareto N``: the frontier table, and its plot."""
    from pathlib import Path

    from distplan.api.pareto import pareto, pareto_table, plot_pareto

    pts = pareto(problem, args.pareto, solve_options(args, problem), progress=None if args.quiet else _say)
    if args.json:
        print(dumps_json([{"budget": p.budget, "sensitivity": p.sensitivity, "throughput_per_s": p.throughput_per_s,
                           "found_at_budget": None if p.from_budget == float("inf") else p.from_budget}
                          for p in pts], "the frontier", indent=1))
    else:
        print(pareto_table(pts))
    out = Path(args.report) if args.report else Path(".")
    out.mkdir(parents=True, exist_ok=True)
    plot_pareto(pts, out / "pareto.png", f"{problem.graph.name} ({problem.graph.mode}) on {problem.topology.name}")
    if not args.json:
        print(f"wrote {out / 'pareto.png'}")
    if getattr(pts, "interrupted", ""):
        left = f"; {pts.unsolved} budget{'s' if pts.unsolved != 1 else ''} not solved" if pts.unsolved else ""
        print(f"interrupted ({pts.interrupted}): the frontier above has the plans found so far{left}",
              file=sys.stderr)
        stop = current_stop()
        return stop.exit_status if stop is not None else EXIT_INTERRUPTED
    return 0


def run_solve(problem: api.Problem, args: argparse.Namespace, started: float | None = None) -> int:
    """Solve, rank, print, write the winner's plan/trace/report. ``started``: when the
    run began (perf_counter); the time limit counts from there. Returns 130 after a
    Ctrl-C that kept the best plan so far."""
    if args.top_k < 1:
        raise DistplanError("--top-k must be >= 1")
    if args.compare:
        return run_compare(problem, args)
    if args.pareto is not None:
        return run_pareto(problem, args)
    opts = solve_options(args, problem)
    if started is not None:   # what the start (imports, loading the workload) took is spent
        opts = dataclasses.replace(opts, time_limit_s=max(opts.time_limit_s - (time.perf_counter() - started),
                                                          0.05))
    report = api.solve(problem, opts, trace=bool(args.trace or args.report))
    if args.plan_out:
        report.write_plan(args.plan_out)
    simulated = report.best.simulated   # a trace and plots need the simulation
    if (args.trace or args.report) and not simulated:
        print("note: no --trace / --report written: the time limit left the winner unsimulated", file=sys.stderr)
    if args.trace and simulated:
        report.write_trace(args.trace)
    if args.report and simulated:
        report.write_report(args.report)
    if args.json:
        print(dumps_json(report.to_json(), "the report", indent=1, default=float))
    else:
        print(report.table())
        outs = [p for p in (args.plan_out, *((args.trace, args.report) if simulated else ())) if p]
        if outs:
            print("wrote " + ", ".join(outs))
    if report.interrupted:
        stop = current_stop()
        kept = f"wrote the best plan found so far to {args.plan_out}" if args.plan_out else \
            "the table above has the best plans found so far"
        print(f"interrupted ({report.interrupted_by or 'Ctrl-C'}): {kept}", file=sys.stderr)
        return stop.exit_status if stop is not None else EXIT_INTERRUPTED
    return 0


def main(argv: list[str] | None = None, prog: str = "solve.py") -> int:
    """The command line; ``argv`` None: the process's own (the time limit then counts
    from the process's start)."""
    started = process_started_at() if argv is None else time.perf_counter()
    ensure_std_streams()
    with stop_on_interrupt(notice=INTERRUPT_NOTICE):   # SIGINT/SIGTERM from the start (loading included)
        try:
            rc = _main(argv, prog, started)
        except KeyboardInterrupt as e:   # past _main's own handler (a second signal while it reported)
            rc = exit_status(e, current_stop())
    failed = flush_stdout()
    if failed:
        print(f"error: {failed}", file=sys.stderr)
        rc = rc or 2
    if argv is None and abandoned_alive():   # a HiGHS run left going after Ctrl-C: do not wait for it
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(rc)
    return rc


#: what --list and --describe refuse: they stop before any solve, so these would be ignored
STOP_REFUSES = ("--compare", "--pareto", "--plan-out", "--trace", "--report", "--budget", "--candidates")


def check_flags(args: argparse.Namespace) -> None:
    """Flags that do not apply to this run are errors (``refuse_flags``: one rule, the
    flag and why); the default ``--plan-out`` is dropped where no plan is written."""
    suffix = pathlib.Path(args.workload).suffix.lower()
    if suffix in (".json", ".onnx"):
        refuse_flags(args, ("--batch-size", "--seq-len", "--attention"),
                     f"to a graph file: {args.workload!r} fixes the batch and sequence"
                     + (" (give symbolic ONNX inputs a shape with --input-shape NAME=D1xD2)" if suffix == ".onnx"
                        else ""))
    if args.compare:
        refuse_flags(args, ("--pareto", "--plan-out", "--trace", "--report"),
                     "with --compare: it prints the comparison of the methods and writes no plan, trace or report")
    else:
        refuse_flags(args, ("--candidates", "--budget"), "without --compare: it budgets the baselines --compare runs")
    if args.pareto is not None:
        refuse_flags(args, ("--plan-out", "--trace"),
                     "with --pareto: it prints the frontier and plots it to pareto.png (in --report's folder), "
                     "and writes no plan or trace")
        refuse_flags(args, ("--sensitivity-budget",), "with --pareto: it sets each frontier point's budget itself")
        if args.objective != "throughput":
            raise DistplanError(f"--objective does not apply with --pareto (got {args.objective}): the frontier "
                                "trades sensitivity for simulated throughput; leave it out")
    if args.mode == "inference":
        refuse_flags(args, ("--iteration-target", "--microbatch-sizes", "--virtual-stages", "--cp-degrees",
                            "--ep-degrees", "--ep-dispatcher"),
                     "in inference: only the training search (--mode training) of the cluster and fleet spaces "
                     "reads it")
    elif args.objective != "sensitivity":
        refuse_flags(args, ("--iteration-target",),
                     "without --objective sensitivity: it is the iteration that objective's plans must meet")
    if args.profile is not None:
        refuse_flags(args, ("--microbatch-sizes",), "with --profile: measured times hold for the batch size they "
                     "were measured at, so only that microbatch size is searched")
    if args.space == "pipeline":
        refuse_flags(args, ("--microbatch-sizes",), "with --space pipeline: the cluster and fleet spaces search them")
        refuse_flags(args, ("--virtual-stages", "--cp-degrees", "--ep-degrees", "--ep-dispatcher"),
                     "with --space pipeline: the cluster space searches them")
    if args.compare or args.pareto is not None:
        args.plan_out = None


def check_outputs(args: argparse.Namespace) -> None:
    """Every output can be written and is a file of its own, no input nor another output
    (compared by device and inode: links count), before any work starts."""
    check_output_file(args.plan_out, "--plan-out")
    check_output_file(args.trace, "--trace")
    check_output_folder(args.report, "--report")
    outs: list[tuple[str, str | None]] = [("--plan-out", args.plan_out), ("--trace", args.trace)]
    if args.pareto is not None:
        plot, label = str(pathlib.Path(args.report or ".") / "pareto.png"), "--pareto's plot"
        if args.report is None or pathlib.Path(args.report).is_dir():
            check_output_file(plot, label)
        outs.append((label, plot))
    elif args.report and not args.compare:
        outs += [("--report", str(pathlib.Path(args.report) / name)) for name in REPORT_FILES]
        for _, path in outs[2:]:
            if pathlib.Path(args.report).is_dir():
                check_output_file(path, "--report")
    check_distinct([("--workload", args.workload), ("--topology", args.topology), ("--profile", args.profile)], outs)


def _main(argv: list[str] | None, prog: str, started: float) -> int:
    args = parse_args(argv, prog)
    try:
        if args.list or args.describe:   # they stop before solving: a flag for the solve or its outputs is an error
            stop, what = ("--list", "lists the presets") if args.list else ("--describe", "describes the problem")
            refuse_flags(args, STOP_REFUSES, f"with {stop}: it {what} and stops before solving, so nothing is "
                         "compared, solved or written")
        else:
            check_float("--time-limit", args.time_limit, 0.0, above=True)   # before loading counts against it
            check_flags(args)
            check_outputs(args)
            if args.pareto is not None and not args.compare:   # before the workload is read: its figures alone
                from distplan.api.pareto import check_points

                check_points(args.pareto, args.time_limit)
        if args.list:
            from distplan.api.describe import listing

            print(listing())
            return 0
        shapes = dict(api.parse_input_shape(x) for x in args.input_shape)
        # the time limit counts from the process's start: reading, checking and costing the workload
        # look at it (core.deadline) and stop with one error naming the size and the limit
        loading = contextlib.nullcontext() if args.describe else deadline_at(started, args.time_limit)
        with loading:
            problem = api.problem(args.workload, args.topology, batch_size=args.batch_size, seq_len=args.seq_len,
                                  mode=args.mode, input_shapes=shapes or None, precisions=args.precisions,
                                  microbatches=args.microbatches, schedule=args.schedule,
                                  low_bit_ops=args.low_bit_ops, profile=args.profile, comm=args.comm,
                                  attention=args.attention)
        if args.describe:
            from distplan.api.describe import describe

            print(describe(problem))
            return 0
        with stop_on_interrupt(notice=INTERRUPT_NOTICE), deadline_at(started, args.time_limit, active=False):
            return run_solve(problem, args, started)   # the solve's coarsening names this limit when it runs out
    except DistplanError as e:
        print(f"error: {flag_named(str(e))}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as e:
        stop = current_stop()
        name = signal_name(stop.signum if stop is not None and stop.signum is not None else getattr(e, "signum", None))
        print(f"interrupted ({name}): no plan to keep yet, nothing written", file=sys.stderr)
        return exit_status(e, stop)
    except BrokenPipeError:  # e.g. `python solve.py --list | head`
        sys.stderr.close()
        return 0
    except OSError as e:   # the table to a full disk (`> /dev/full`); files say their own errors
        flush_stdout()
        print(f"error: {io_error(e)}", file=sys.stderr)
        return 2
