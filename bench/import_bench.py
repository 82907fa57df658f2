"""Benchmark: import and coarsen a ~2,000-operator ONNX graph, then (with model/) solve the
coarse problem on mcm4x4 and map the plan back; optionally compare an ONNX GPT-2-small
with the zoo's ``gpt2``.

    python bench/import_bench.py                     # import + coarsen (+ 120 s solve)
    python bench/import_bench.py --no-solve          # import + coarsen only
    python bench/import_bench.py --gpt2 --seq 512    # the GPT-2 acceptance comparison

Targets (issue 6): import + coarsen < 10 s; proven gap on the coarse problem <= 2 %
within 120 s; the ONNX GPT-2 plan's throughput within 5 % of the zoo gpt2 plan's.
Periods are the analytic steady-state period (costs.evaluate.plan_cost), which the
simulator's ideal mode reproduces.
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from distplan.costs.evaluate import plan_cost  # noqa: E402
from distplan.costs.problem import ProblemOptions, build_problem  # noqa: E402
from distplan.api.resolve import resolve_topology  # noqa: E402
from distplan.costs.check import check_plan  # noqa: E402
from distplan.workloads.coarsen import coarsen, expand_plan  # noqa: E402
from distplan.workloads.graph import Graph  # noqa: E402
from distplan.workloads.onnx_builders import BERT_LARGE, GPT2_SMALL, TransformerShape, transformer_onnx  # noqa: E402
from distplan.workloads.onnx_import import import_onnx  # noqa: E402


def solve_coarse(fine: Graph, target: int, topo_name: str, seconds: float, mode_opts: ProblemOptions) -> dict:
    """Coarsen, solve the coarse problem, expand and re-cost the plan on the fine graph."""
    from distplan.model import SolveOptions, solve  # noqa: PLC0415

    topo = resolve_topology(topo_name)
    c = coarsen(fine, target_ops=target)
    pc, pf = build_problem(c.coarse, topo, mode_opts), build_problem(fine, topo, mode_opts)
    t0 = time.perf_counter()
    r = solve(pc, SolveOptions(time_limit_s=seconds, top_k=1, rel_gap=0.01))
    solve_s = time.perf_counter() - t0
    plan = r.plans[0]
    fine_plan = expand_plan(c, plan)
    check_plan(pf, fine_plan)
    coarse_T, fine_T = plan_cost(pc, plan).period_s, plan_cost(pf, fine_plan).period_s
    return dict(sim_s=_simulate(pf, fine_plan),coarse_ops=len(c.coarse.ops), status=r.status, gap=r.gap, bound_s=r.bound_s,
                fine_lb_s=pf.period_lower_bound_s(),
                objective_s=r.objective_s, solve_s=solve_s, coarse_period_s=coarse_T,
                fine_period_s=fine_T, vs_bound=(fine_T - r.bound_s) / fine_T)


def _simulate(problem, plan) -> float:
    """Simulated steady-state period (default SimOptions), nan if sim/ is unavailable."""
    try:
        from distplan.sim import simulate  # noqa: PLC0415
    except ImportError:
        return float("nan")
    return simulate(problem, plan).period_s


def _have_model() -> bool:
    try:
        import distplan.model  # noqa: F401, PLC0415

        return hasattr(model, "solve")
    except ImportError:
        return False


def bench_2000(args: argparse.Namespace) -> None:
    cfg = TransformerShape(layers=args.layers, hidden=BERT_LARGE.hidden, heads=BERT_LARGE.heads,
                           vocab=BERT_LARGE.vocab, max_positions=BERT_LARGE.max_positions, decoder=False,
                           type_vocab=2)
    model = transformer_onnx(cfg, batch=1, seq=128, fine=True)
    t0 = time.perf_counter()
    g = import_onnx(model, mode=args.mode, name=f"bert-{args.layers}L-fine")
    t1 = time.perf_counter()
    c = coarsen(g, target_ops=args.target)
    t2 = time.perf_counter()
    print(f"graph: {len(model.graph.node)} ONNX nodes -> {len(g.ops)} operators, {len(g.tensors)} tensors, "
          f"{g.param_elems / 1e6:.1f} M params, {g.fwd_flops / 1e9:.1f} GFLOP fwd")
    print(f"import {t1 - t0:.2f} s, coarsen to {len(c.coarse.ops)} ops {t2 - t1:.2f} s, "
          f"total {t2 - t0:.2f} s (target < 10 s)")
    if args.no_solve:
        return
    if not _have_model():
        print("solve: skipped, model/ is not available")
        return
    r = solve_coarse(g, args.target, args.topology, args.solve_s, ProblemOptions())
    print(f"solve on {args.topology} ({r['coarse_ops']} coarse ops): {r['status']} in {r['solve_s']:.1f} s, "
          f"proven gap on the coarse problem {100 * r['gap']:.2f} % (target <= 2 % in 120 s)")
    print(f"  coarse period {r['coarse_period_s']:.6g} s, bound {r['bound_s']:.6g} s; expanded plan on the "
          f"fine graph: period {r['fine_period_s']:.6g} s ({100 * r['vs_bound']:.2f} % above the coarse bound; "
          f"fine-graph lower bound total/devices {r['fine_lb_s']:.6g} s); simulated {r['sim_s']:.6g} s")


def bench_gpt2(args: argparse.Namespace) -> None:
    from distplan.workloads.zoo import get_workload  # noqa: PLC0415

    zoo = get_workload("gpt2", mode=args.mode, seq_len=args.seq)
    B, S = zoo.batch_size, zoo.seq_len
    t0 = time.perf_counter()
    g = import_onnx(transformer_onnx(GPT2_SMALL, B, S), mode=args.mode, name="gpt2-onnx")
    t1 = time.perf_counter()
    print(f"gpt2 ({args.mode}, batch {B}, seq {S}):")
    for label, x in (("zoo gpt2", zoo), ("ONNX gpt2", g)):
        print(f"  {label:10s} ops {len(x.ops):4d}  params {x.param_elems:,}  fwd {x.fwd_flops:.6g} FLOP  "
              f"bwd {x.bwd_flops:.6g} FLOP  touched {sum(o.touched_elems for o in x.ops):.6g}")
    print(f"  ONNX import {t1 - t0:.2f} s")
    if args.no_solve or not _have_model():
        print("  solve: skipped" + ("" if args.no_solve else " (model/ not available)"))
        return
    from distplan.model import SolveOptions, solve  # noqa: PLC0415

    opts = ProblemOptions()
    topo = resolve_topology(args.topology)
    pz = build_problem(zoo, topo, opts)
    rz = solve(pz, SolveOptions(time_limit_s=args.solve_s, top_k=1))
    zoo_T, zoo_sim = rz.objective_s, _simulate(pz, rz.plans[0])
    r = solve_coarse(g, len(zoo.ops), args.topology, args.solve_s, opts)
    print(f"  zoo plan: period {zoo_T:.6g} s (gap {100 * rz.gap:.2f} %), simulated {zoo_sim:.6g} s")
    print(f"  ONNX plan: coarse period {r['coarse_period_s']:.6g} s (gap {100 * r['gap']:.2f} %), expanded on "
          f"the fine graph {r['fine_period_s']:.6g} s, simulated {r['sim_s']:.6g} s")
    print(f"  throughput ONNX / zoo: analytic {zoo_T / r['fine_period_s']:.4f}, simulated "
          f"{zoo_sim / r['sim_s']:.4f} (acceptance: >= 0.95)")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--layers", type=int, default=28,
                    help="encoder layers of the fine BERT-large-wide graph (28: 2,060 operators; 24: 1,768)")
    ap.add_argument("--target", type=int, default=150, help="coarse operator count")
    ap.add_argument("--topology", default="mcm4x4")
    ap.add_argument("--solve-s", type=float, default=120.0)
    ap.add_argument("--no-solve", action="store_true")
    ap.add_argument("--gpt2", action="store_true", help="run the GPT-2 ONNX vs zoo comparison instead")
    ap.add_argument("--mode", default="inference", choices=["inference", "training"],
                    help="training does not fit mcm4x4's 64 MiB chiplets (Adam state of the embeddings)")
    ap.add_argument("--seq", type=int, default=512,
                    help="GPT-2 sequence length (1024 does not fit mcm4x4: the LM head's logits, 49 MiB "
                         "at int8, and the tied word table it reads, 37 MiB, exceed a 64 MiB chiplet)")
    args = ap.parse_args()
    bench_gpt2(args) if args.gpt2 else bench_2000(args)


if __name__ == "__main__":
    main()
