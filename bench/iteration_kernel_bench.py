"""The analytic iteration on the replay kernel (issue 21): its figures and CPU time on
nine zoo plans, and with ``--against DIR`` the same against another revision's
``costs/iteration.py`` and ``costs/collectives.py`` (e.g. ``git archive <rev> | tar -x
-C DIR``), loaded into this process and run alternately with this one, so that the
load of a shared machine falls on both alike; every figure must be identical.

Measured against 531ba7b's engine (before the kernel, issue 21), 20 rounds, load ~3 on
2 cores: every figure identical; sum of the per-plan minima 205.4 -> 209.8 ms (+2 %),
at most +8 % on one plan (bert-base on hybrid-v100-t4, dp 8 overlapped: the joint run),
-4 % on the transfer-heavy overlapped gpt3 ones. Not a test: no assertion on speed.

    python bench/iteration_kernel_bench.py [--rounds 15] [--against DIR]
"""
from __future__ import annotations

import argparse
import dataclasses
import importlib.util
import statistics
import sys
import time

from distplan.api.configs import make_problem
from distplan.costs.iteration import estimate_iteration
from distplan.costs.megatron import megatron_plan

#: name -> (workload, topology, dp, tp, pp, options)
CASES = {
    "gpt3-1.3b a100x8 dp8 overlap": ("gpt3-1.3b", "a100x8", 8, 1, 1, dict(overlap=True)),
    "gpt3-1.3b a100x64 dp8 tp4 pp2 hier overlap": ("gpt3-1.3b", "a100x64", 8, 4, 2,
                                                   dict(overlap=True, dp_allreduce="hierarchical")),
    "gpt3-1.3b a100x64 dp4 tp2 pp4": ("gpt3-1.3b", "a100x64", 4, 2, 4, {}),
    "gpt3-1.3b a100x64 dp16 tp2 pp2 zero overlap": ("gpt3-1.3b", "a100x64", 16, 2, 2, dict(zero=1, overlap=True)),
    "gpt3-1.3b a100x64 dp2 tp2 pp4 vp2": ("gpt3-1.3b", "a100x64", 2, 2, 4, dict(vp=2, global_batch=32)),
    "gpt3-1.3b a100x16 dp2 pp4 shares overlap": ("gpt3-1.3b", "a100x16", 2, 1, 4,
                                                 dict(shares=(6, 10), overlap=True, global_batch=16)),
    "bert-base hybrid dp8 overlap": ("bert-base", "hybrid-v100-t4", 8, 1, 1, dict(overlap=True)),
    "bert-base hybrid dp4 pp2": ("bert-base", "hybrid-v100-t4", 4, 1, 2, {}),
    "bert-base hybrid dp2 pp4 hier overlap": ("bert-base", "hybrid-v100-t4", 2, 1, 4,
                                              dict(overlap=True, dp_allreduce="hierarchical")),
}


def case(workload: str, topology: str, dp: int, tp: int, pp: int, opts: dict):
    """(problem, plan) of one case: Megatron's layout, 8 microbatches of 1 per replica."""
    prec = "fp16" if topology.startswith("hybrid") else "bf16"
    gb = opts.get("global_batch", dp * 8)
    p = make_problem(workload, topology, batch_size=1, mode="training", precisions=(prec,), microbatches=gb)
    plan = megatron_plan(p, dp, tp, pp, prec, None, "none", False, opts.get("zero", 0),
                         opts.get("dp_allreduce", "ring"), opts.get("overlap", False), opts.get("vp", 1))
    if "shares" in opts:
        plan = dataclasses.replace(plan, stages=tuple(dataclasses.replace(s, shares=opts["shares"])
                                                      for s in plan.stages))
    return p, plan


def older(folder: str):
    """``estimate_iteration`` of the revision in ``folder``, on its own ``Transfers``."""
    def load(name: str, path: str):
        spec = importlib.util.spec_from_file_location(name, path)
        m = importlib.util.module_from_spec(spec)
        sys.modules[name] = m
        spec.loader.exec_module(m)
        return m

    col = load("older_collectives", f"{folder}/costs/collectives.py")
    it = load("older_iteration", f"{folder}/costs/iteration.py")
    it.Transfers, it.reduction_transfers = col.Transfers, col.reduction_transfers
    return it.estimate_iteration


def figures(e) -> tuple:
    return e.iteration_s, e.pipeline_s, e.exposed_allreduce_s, tuple(e.allreduce_s.tolist())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--against", help="a folder holding another revision's tree")
    args = ap.parse_args()
    other = older(args.against) if args.against else None
    total = [0.0, 0.0]
    for name, c in CASES.items():
        p, plan = case(*c)
        mine = estimate_iteration(p, plan)
        same = other is None or figures(other(p, plan)) == figures(mine)
        runs: list[list[float]] = [[], []]
        for _ in range(args.rounds):
            for i, f in enumerate((estimate_iteration, other) if other else (estimate_iteration,)):
                t0 = time.process_time()
                f(p, plan)
                runs[i].append(time.process_time() - t0)
        line = f"{name:46s} iteration {mine.iteration_s:.9g} s  {min(runs[0]) * 1e3:6.1f} ms"
        total[0] += min(runs[0])
        if other:
            total[1] += min(runs[1])
            line += (f"  against {min(runs[1]) * 1e3:6.1f} ms ({100 * (min(runs[0]) / min(runs[1]) - 1):+.0f} %, "
                     f"medians {statistics.median(runs[0]) * 1e3:.1f} / {statistics.median(runs[1]) * 1e3:.1f})"
                     f"  {'identical' if same else 'DIFFERENT'}")
        print(line, flush=True)
    print(f"sum of minima {total[0] * 1e3:.1f} ms" + (f", against {total[1] * 1e3:.1f} ms" if other else ""))


if __name__ == "__main__":
    main()
