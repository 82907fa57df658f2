"""``python -m distplan.studies``: run an optimality study and plot it.

    python -m distplan.studies --workloads bert-base,gpt2,mlp-small --topologies mcm4x4,dgx-a100 \\
        --seeds 0,1,2 --time-limits 10 --out studies/out
    python -m distplan.studies ... --scheduler tcp://host:8786     # on an existing Dask cluster
    python -m distplan.studies --plot-only --out studies/out       # re-plot an existing CSV
"""
from __future__ import annotations

import argparse
import sys

from distplan.cli.args import Parser, check_distinct, check_output_folder, finite_float
from distplan.core.errors import DistplanError
from distplan.core.validate import check_int


def _list(text: str) -> list[str]:
    return [t.strip() for t in text.split(",") if t.strip()]


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = Parser(prog="python -m distplan.studies", description=__doc__.splitlines()[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("--workloads", default="bert-base,gpt2,mlp-small", help="comma-separated zoo names or files")
    ap.add_argument("--topologies", default="mcm4x4,dgx-a100", help="comma-separated presets or files")
    ap.add_argument("--precisions", nargs="+", default=["fp16,int8"],
                    help="precision sets, each comma-separated (several sets: --precisions fp16,int8 fp16)")
    ap.add_argument("--seeds", default="0,1,2")
    ap.add_argument("--time-limits", default="10", help="comma-separated seconds; every method gets this budget")
    ap.add_argument("--methods", default="random,sa,dp,grid", help="baselines to run beside the MILP")
    ap.add_argument("--mode", choices=("inference", "training"), default="inference")
    ap.add_argument("--batch-size", type=int, default=None)
    ap.add_argument("--seq-len", type=int, default=None)
    ap.add_argument("--microbatches", type=int, default=16)
    ap.add_argument("--candidates", type=int, default=None,
                    help="deterministic baseline budget: plans each baseline scores (the time limit is then a "
                         "safety cap); with --seeds every run reproduces exactly")
    ap.add_argument("--top-k", type=int, default=1, help="MILP plans simulated per run")
    ap.add_argument("--gap", type=finite_float, default=0.01, help="MILP relative gap to stop at")
    ap.add_argument("--threads", type=int, default=1, help="HiGHS threads per run (baselines use one core)")
    ap.add_argument("--workers", type=int, default=None, help="local processes (default: cores / threads)")
    ap.add_argument("--scheduler", default=None, help="Dask scheduler address, e.g. tcp://host:8786")
    ap.add_argument("--out", default="studies/out", help="folder for results.csv and the plots")
    ap.add_argument("--plot-only", action="store_true", help="only re-plot the CSV in --out")
    ap.add_argument("--quiet", action="store_true", help="no progress lines")
    return ap.parse_args(argv)


def check_names(workloads: list[str], topologies: list[str], args: argparse.Namespace) -> None:
    """Resolve every workload and topology once, before any run: a typo is one error."""
    from distplan.api.resolve import resolve_topology, resolve_workload

    if not workloads or not topologies:
        raise DistplanError("study: --workloads and --topologies need at least one name each")
    for w in workloads:
        resolve_workload(w, args.batch_size, args.seq_len, args.mode)
    for t in topologies:
        resolve_topology(t)


def main(argv: list[str] | None = None) -> int:
    import os
    from pathlib import Path

    from distplan.baselines import parse_methods
    from distplan.studies.plots import PLOT_NAMES, make_plots
    from distplan.studies.spec import expand
    from distplan.studies.sweep import run_sweep, stderr_progress

    args = parse_args(argv)
    out = Path(args.out)
    csv_path = out / "results.csv"
    say = (lambda m: None) if args.quiet else stderr_progress
    try:
        check_output_folder(args.out, "--out")
        check_distinct([(f"--workloads {w}", w) for w in _list(args.workloads)]
                       + [(f"--topologies {t}", t) for t in _list(args.topologies)],
                       [("--out", str(csv_path))] + [("--out", str(out / name)) for name in PLOT_NAMES])
        if not args.plot_only:
            try:
                seeds = [int(s) for s in _list(args.seeds)]
                limits = [float(t) for t in _list(args.time_limits)]
            except ValueError as e:
                raise DistplanError(f"study: --seeds and --time-limits take comma-separated numbers ({e})") from None
            if args.threads < 1:
                raise DistplanError(f"--threads must be >= 1, got {args.threads}")
            check_int("--workers", args.workers, optional=True)   # 0 was read as "the default"
            check_names(_list(args.workloads), _list(args.topologies), args)
            specs = expand(_list(args.workloads), _list(args.topologies), args.precisions, seeds, limits,
                           mode=args.mode, batch_size=args.batch_size, seq_len=args.seq_len,
                           microbatches=args.microbatches, methods=tuple(parse_methods(args.methods)),
                           threads=args.threads, top_k=args.top_k, rel_gap=args.gap,
                           candidate_budget=args.candidates)
            workers = args.workers or max(1, (os.cpu_count() or 1) // args.threads)
            rep = run_sweep(specs, csv_path, scheduler=args.scheduler, workers=workers, progress=say)
            print(f"study: {rep.ran} runs done, {rep.skipped} skipped (already in the CSV), "
                  f"{rep.seconds:.0f} s; results in {csv_path}")
        if not csv_path.exists():
            raise DistplanError(f"no study results at {csv_path}; run a study first")
        for p in make_plots(csv_path, out):
            print(f"wrote {p}")
        return 0
    except DistplanError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("interrupted; rerun the same command to resume", file=sys.stderr)
        return 130
