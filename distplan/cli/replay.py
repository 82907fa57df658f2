"""python -m distplan.sim PLAN.json [--trace trace.json] [--ideal] [--link-model fifo|fair|free]

Replays a plan file: rebuilds the problem the plan embeds (graph, topology, options;
``distplan.costs.plan_file``), checks the plan, simulates it and prints a summary.
``--workload``/``--topology`` must be the very graph/topology the plan was made for
(checked by content hash), and are needed for a version-1 file, which only names them.
Errors print one line and exit with status 2.
"""
from __future__ import annotations

import argparse
import sys

from distplan.api.resolve import check_regular_file, resolve_topology, resolve_workload
from distplan.cli.args import (Parser, check_distinct, check_output_file, ensure_std_streams, flush_stdout, io_error,
                               given, refuse_flags)
from distplan.core.atomic import dumps_json, json_safe
from distplan.core.errors import DistplanError
from distplan.core.interrupt import exit_status, signal_name, stop_on_interrupt
from distplan.core.plan import plan_from_dict, read_plan_json
from distplan.api.pipeline import simulated_overflow
from distplan.costs.check import check_plan
from distplan.costs.expert_parallel import DISPATCHERS, ROUTINGS
from distplan.costs.plan_file import problem_from_document
from distplan.costs.sharding import ZERO_LEVELS, check_zero
from distplan.sim import SimOptions, simulate
from distplan.sim.trace import write_chrome_trace


#: the flags of a named configuration (no plan file), refused beside a plan file
WHATIF_FLAGS = ("--dp", "--tp", "--pp", "--vp", "--microbatch-size", "--global-batch", "--precision", "--mode",
                "--seq-len", "--schedule", "--recompute", "--sequence-parallel", "--zero", "--fsdp", "--dp-allreduce",
                "--overlap-grad-reduce", "--order", "--cp", "--attention", "--cp-comm",
                "--ep", "--etp", "--capacity-factor", "--ep-dispatcher", "--routing", "--offload", "--tp-comm-overlap", "--json")
#: the flags of a plan file's replay, refused without one
REPLAY_FLAGS = ("--ideal", "--link-model")


def main(argv: list[str] | None = None) -> int:
    """The replay command line; its exit status (0, or 2 after one ``error:`` line; 130
    after a Ctrl-C, 143 after a SIGTERM: the replay in progress is dropped, with a line
    saying so, and nothing is written)."""
    ensure_std_streams()
    try:
        with stop_on_interrupt():   # SIGTERM too; nothing is armed: a signal stops the replay at once
            rc = _main(argv)
    except KeyboardInterrupt as e:
        flush_stdout()
        print(f"interrupted ({signal_name(getattr(e, 'signum', None))}): the simulation was not finished; "
              "nothing written", file=sys.stderr)
        return exit_status(e)
    except OSError as e:   # the summary to a full disk (`> /dev/full`); files say their own errors
        flush_stdout()
        print(f"error: {io_error(e)}", file=sys.stderr)
        return 2
    failed = flush_stdout()
    if failed:
        print(f"error: {failed}", file=sys.stderr)
        return rc or 2
    return rc


def _main(argv: list[str] | None) -> int:
    ap = Parser(prog="python -m distplan.sim", description="Replay a distplan plan file in the simulator.")
    ap.add_argument("plan", nargs="?", default=None,
                    help="plan JSON file (distplan-plan v2, or v1 with --workload and --topology); leave it out "
                         "and give --dp/--tp/--pp to simulate a named Megatron-style configuration")
    ap.add_argument("--trace", help="write a Chrome/Perfetto trace here")
    ap.add_argument("--ideal", action="store_true", help="ideal mode (no latency, static link order)")
    ap.add_argument("--link-model", default="fifo", choices=("fifo", "fair", "free"))
    ap.add_argument("--workload", help="graph file or zoo name; must be the plan's own graph")
    ap.add_argument("--topology", help="topology file or preset; must be the plan's own topology")
    c = ap.add_argument_group("a named configuration (no plan file): one training step, Megatron layout")
    c.add_argument("--dp", type=int, default=None, help="data-parallel replicas")
    c.add_argument("--tp", type=int, default=1, help="tensor-parallel ranks per replica")
    c.add_argument("--pp", type=int, default=1, help="pipeline stages (equal layer counts)")
    c.add_argument("--vp", type=int, default=1,
                   help="model chunks per pipeline stage: Megatron's interleaved 1F1B (virtual stages) when > 1")
    c.add_argument("--microbatch-size", type=int, default=1, help="samples per microbatch")
    c.add_argument("--global-batch", type=int, default=None, help="samples per optimizer step (default 8 x dp)")
    c.add_argument("--precision", default="bf16", help="one precision for every op; fp8 in training: the Transformer "
                   "Engine recipe, fp8 linear layers and bf16 elsewhere")
    c.add_argument("--mode", choices=("training", "inference"), default="training")
    c.add_argument("--seq-len", type=int, default=None, help="sequence length (zoo default if unset)")
    c.add_argument("--schedule", default=None, help="1f1b (default for training), gpipe, or stream")
    c.add_argument("--recompute", choices=("none", "selective", "full"), default="none",
                   help="activation recomputation on every stage")
    c.add_argument("--sequence-parallel", action="store_true", help="shard norms and adds along the sequence")
    c.add_argument("--zero", type=int, choices=ZERO_LEVELS, default=0,
                   help="sharded over dp: 1 the optimizer state (ZeRO-1), 2 and the gradients (ZeRO-2), 3 and the "
                        "parameters (ZeRO-3/FSDP: each layer gathered before its forward and backward, prefetched, "
                        "its gradients reduce-scattered)")
    c.add_argument("--fsdp", type=int, choices=ZERO_LEVELS, default=None, help="the same as --zero")
    c.add_argument("--dp-allreduce", choices=("ring", "hierarchical"), default="ring",
                   help="gradient reduction over the replicas")
    c.add_argument("--overlap-grad-reduce", action="store_true",
                   help="reduce each op's gradients as soon as its backward is done")
    c.add_argument("--order", choices=("tp-dp-pp", "tp-pp-dp"), default="tp-dp-pp",
                   help="device order, innermost first: tp-dp-pp (Megatron-LM's default: stage k on the next "
                        "dp x tp devices) or tp-pp-dp (data parallelism outermost, as Llama 3 was trained)")
    c.add_argument("--cp", type=int, default=1,
                   help="context-parallel ranks: each sequence split over cp ranks, K/V passed round a ring "
                        "(counted with dp in the device order: tp-cp-dp-pp, or tp-cp-pp-dp)")
    c.add_argument("--attention", choices=("flash", "explicit"), default=None,
                   help="attention core: flash (FlashAttention: scores recomputed, never stored; the default "
                        "with --cp > 1) or explicit (score matrix kept; the default otherwise)")
    c.add_argument("--cp-comm", choices=("p2p", "all_gather"), default="p2p",
                   help="K/V exchange of --cp: p2p (a ring overlapped with attention, Megatron-Core's default) or "
                        "all_gather (K/V gathered before attention, not overlapped: Llama 3's)")
    c.add_argument("--ep", type=int, default=1,
                   help="expert-parallel ranks of a mixture-of-experts model: each of ep data-parallel ranks "
                        "holds E/ep routed experts, tokens dispatched and combined by all-to-alls (ep divides dp); "
                        "the experts' gradients reduced, and --zero 1/2 sharded, over their dp x cp / ep replicas")
    c.add_argument("--etp", type=int, default=None,
                   help="expert-tensor-parallel ranks: each expert split over etp of the tp ranks (default tp)")
    c.add_argument("--capacity-factor", type=float, default=1.0,
                   help="each expert's rows over its even share of the routed tokens (padding; default 1)")
    c.add_argument("--ep-dispatcher", choices=DISPATCHERS, default="alltoall",
                   help="token dispatcher of --ep: alltoall (Megatron's: a row per routed expert, the default) or "
                        "deepep (DeepEP: a row per destination rank, over the network once a destination node, "
                        "forwarded inside it)")
    c.add_argument("--routing", choices=ROUTINGS, default="uniform",
                   help="how tokens pick their experts (what --ep-dispatcher deepep sends): uniform (top-k drawn "
                        "evenly, balanced; the default) or contiguous (token t to experts kt..kt+k-1: NeMo "
                        "AutoModel's fake_balanced_gate)")
    c.add_argument("--offload", default="", metavar="WHAT,...",
                   help="keep in host memory, comma-separated: activations (each layer's saved activations between "
                        "its forward and backward, copied over the host link beside the compute), optimizer (fp32 "
                        "master weights and Adam moments; the step on the host CPU)")
    c.add_argument("--tp-comm-overlap", action="store_true",
                   help="pipeline each linear layer's tensor-parallel collective with its GEMM in tp chunks "
                        "(Megatron's --tp-comm-overlap; needs --tp >= 2 and --sequence-parallel)")
    c.add_argument("--json", action="store_true", help="print a JSON document")
    args = ap.parse_args(argv)
    if args.plan is None:
        return _whatif(args)
    try:
        refuse_flags(args, WHATIF_FLAGS, "beside a plan file: a replay simulates the plan as the file has it "
                     "(leave the plan file out to simulate a named configuration)")
        check_output_file(args.trace, "--trace")
        check_distinct([("the plan file", args.plan), ("--workload", args.workload), ("--topology", args.topology)],
                       [("--trace", args.trace)])
        res, problem, cp = replay(args)
        print(res.summary())
        if cp > 1:
            g = problem.graph
            print(f"note: a context-parallel plan (cp {cp}): the file's problem is one context rank's ({g.seq_len:,} "
                  f"tokens a sequence, {problem.microbatches} microbatches); in whole sequences of "
                  f"{g.seq_len * cp:,} tokens: {res.throughput_per_s / cp:.6g} samples/s, "
                  f"{res.step_throughput_per_s / cp:.6g} samples/s per step")
        if args.trace:
            write_chrome_trace(res, problem, args.trace)
            print(f"trace written to {args.trace}")
        over = simulated_overflow(problem, res)
        if over is not None:
            raise DistplanError(f"the plan does not fit: {over}")
    except DistplanError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


def replay(args):
    """The plan's simulation, the problem it identifies and its context-parallel degree
    (``predicted['context_parallel']``, 1 without); ``--workload``/``--topology`` must match
    a self-contained (v2) file, and are required for a v1 file."""
    check_regular_file(args.plan, "plan file")   # a FIFO or device: refused, never waited on
    d = read_plan_json(args.plan)
    blk = d.get("problem") if isinstance(d, dict) else None
    graph = topo = None
    if args.workload:
        b = blk if isinstance(blk, dict) else {}
        graph = resolve_workload(args.workload, batch_size=b.get("batch_size"), seq_len=b.get("seq_len"),
                                 mode=b.get("mode", "inference"))
    if args.topology:
        topo = resolve_topology(args.topology)
    problem = problem_from_document(d, args.plan, graph, topo)
    plan = plan_from_dict(d, problem, source=args.plan)
    check_plan(problem, plan)
    res = simulate(problem, plan, SimOptions(ideal=args.ideal, link_model=args.link_model, trace=bool(args.trace)))
    cp = plan.predicted.get("context_parallel", 1)
    return res, problem, int(cp) if isinstance(cp, (int, float)) and cp >= 1 else 1


def _whatif(args) -> int:
    """``--workload W --topology T --dp D --tp T --pp P ...``: simulate the configuration."""
    from distplan.api.configs import whatif

    try:
        refuse_flags(args, REPLAY_FLAGS, "to a named configuration: it applies to a plan file's replay")
        if args.dp is None or not args.workload or not args.topology:
            raise DistplanError("give a plan file, or --workload, --topology and --dp (with --tp, --pp ...) to "
                                "simulate a named configuration")
        for flag, v in (("--dp", args.dp), ("--tp", args.tp), ("--pp", args.pp), ("--vp", args.vp), ("--cp", args.cp),
                        ("--ep", args.ep), ("--etp", args.etp),
                        ("--microbatch-size", args.microbatch_size), ("--global-batch", args.global_batch)):
            if v is not None and v < 1:
                raise DistplanError(f"{flag} must be >= 1, got {v}")
        zero = _zero_level(args)
        check_output_file(args.trace, "--trace")
        check_distinct([("--workload", args.workload), ("--topology", args.topology)], [("--trace", args.trace)])
        w = whatif(args.workload, args.topology, args.dp, args.tp, args.pp, args.microbatch_size,
                   args.global_batch, args.precision, args.mode, args.seq_len, args.schedule, args.recompute,
                   args.sequence_parallel, zero, args.dp_allreduce, args.overlap_grad_reduce, vp=args.vp,
                   order=args.order, cp=args.cp, attention=args.attention,
                   cp_comm=args.cp_comm, ep=args.ep, etp=args.etp, capacity_factor=args.capacity_factor,
                   offload=tuple(x.strip() for x in args.offload.split(",") if x.strip()),
                   tp_comm_overlap=args.tp_comm_overlap, dispatcher=args.ep_dispatcher, routing=args.routing)
        print(dumps_json(json_safe(w.to_json()), "the configuration", indent=1) if args.json else w.table())
        if args.trace:
            write_chrome_trace(simulate(w.problem, w.plan, SimOptions(trace=True)), w.problem, args.trace)
    except DistplanError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


def _zero_level(args) -> int:
    """The ZeRO level of ``--zero`` or its alias ``--fsdp`` (given both, they must agree),
    checked against --dp under the flag's own name."""
    zero, flag = args.zero, "--zero"
    if args.fsdp is not None:
        if given(args, "--zero") and args.zero != args.fsdp:
            raise DistplanError(f"--fsdp {args.fsdp} and --zero {args.zero} disagree; --fsdp is another name for "
                                "--zero: give one")
        zero, flag = args.fsdp, "--fsdp"
    check_zero(zero, args.dp * args.cp, flag)   # ZeRO shards over dp x cp replicas
    return zero
