"""The stage space (model.stage_space: the cluster search plus the stage MILP's
heterogeneous stages) against today's cluster space on every case of
bench/cluster_plan_bench.py's table, both simulated, both wall times; and
heterogeneity cases (the 128k-vocabulary Llama 3 8B), where a stage holding the LM head
may want its own tp, dp or recomputation.

    python bench/stage_milp_bench.py [--quick] [--limit 120] [--milp-share 0.5] [--json bench/results/stage_milp_bench.json]

Figures: samples per optimizer step in the realistic simulator, wall and CPU seconds of
each space; per microbatch size the MILP's status (kOptimal; kInfeasible: nothing below
the cutoff, the incumbent across sizes; "pruned by bound": its lower bound reaches the
cutoff, no MILP built; kTimeLimit; "not solved": the MILP phase's budget, ``--milp-share``
x the cluster search's wall, spent), its best start, bound and cutoff, and how many sizes
are proven (kOptimal, kInfeasible or pruned); for each plan the MILP returned, its MILP
objective, analytic iteration and simulated iteration. Not a test.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import distplan  # noqa: E402
from distplan.model import SolveOptions  # noqa: E402

#: (workload, topology, microbatches): cluster_plan_bench.ROWS
ROWS = [("gpt2", "dgx-a100", 16), ("gpt3-1.3b", "a100x16", 32), ("gpt3-2.7b", "a100x32", 32),
        ("gpt3-6.7b", "a100x128", 16)]
#: heterogeneity cases: the 128k-vocabulary head on its own stage
HETERO = [("llama3-8b", "h100x16", 32), ("llama3-8b", "h100x64", 64)]


def run(p, space: str, limit_s: float, share: float | None = None):
    """The report, its wall seconds and this process's CPU seconds (the machine is shared:
    the CPU time moves less with the others' load)."""
    t0, c0 = time.perf_counter(), time.process_time()
    rep = distplan.solve(p, SolveOptions(time_limit_s=limit_s, top_k=5, space=space, stage_milp_share=share))
    return rep, time.perf_counter() - t0, time.process_time() - c0


def rate(rep) -> float:
    pb = rep.problem
    return pb.microbatches * pb.graph.batch_size / rep.best.sim.iteration_s


def proven(status: str) -> bool:
    """Whether a size's row proves nothing of the MILP's lies below the incumbent."""
    return status.startswith(("kOptimal", "kInfeasible", "pruned by bound"))


def _g(x) -> str:
    return "-" if x is None else f"{x:.6g}"


def case(w: str, t: str, M: int, limit_s: float, share: float | None = None) -> dict:
    p = distplan.problem(w, t, batch_size=1, mode="training", microbatches=M)
    cl, cl_wall, cl_cpu = run(p, "cluster", limit_s)
    st, st_wall, st_cpu = run(p, "stage", limit_s, share)
    milp = [{"plan": r.plan.predicted["cluster_point"], "milp_objective_s": r.plan.predicted["stage_milp_objective_s"],
             "model_iteration_s": r.plan.predicted["model_iteration_s"], "sim_iteration_s": r.sim.iteration_s}
            for r in st.plans if "stage_milp_objective_s" in r.plan.predicted]
    row = {"case": f"{w} M{M} {t}", "cluster": rate(cl), "cluster_plan": cl.best.plan.predicted["cluster_point"],
           "cluster_wall_s": cl_wall, "cluster_cpu_s": cl_cpu, "stage": rate(st),
           "stage_plan": st.best.plan.predicted["cluster_point"], "stage_wall_s": st_wall, "stage_cpu_s": st_cpu, "stage_status": st.solver.status, "milp_points": list(st.solver.explored)[1:],
           "milp_plans": milp, "cut_short": list(st.solver.cut_short), "milp_share": share}
    row["proven"] = sum(proven(m["status"]) for m in row["milp_points"])
    print(f"{row['case']:28s} cluster {row['cluster']:8.1f} ({cl_wall:5.1f} s, cpu {cl_cpu:5.1f})  stage "
          f"{row['stage']:8.1f} ({st_wall:5.1f} s, cpu {st_cpu:5.1f}, x{st_wall / cl_wall:.2f})  "
          f"{row['stage']/row['cluster'] - 1:+.2%}  {row['stage_plan']}  proven {row['proven']} of "
          f"{len(row['milp_points'])} sizes", flush=True)
    for m in row["milp_points"]:
        print(f"    microbatch {m['microbatch_size']}: {m['status']}, start {_g(m['start_s'])} s, bound "
              f"{_g(m['bound_s'])} s (cutoff {_g(m['cutoff_s'])} s), {m['seconds']:.2f} s", flush=True)
    for m in milp:
        print(f"    MILP plan: objective {m['milp_objective_s']:.6g} s, analytic {m['model_iteration_s']:.6g} s, "
              f"simulated {m['sim_iteration_s']:.6g} s  {m['plan']}", flush=True)
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="the cluster table's rows only")
    ap.add_argument("--limit", type=float, default=120.0, help="seconds for each space's search")
    ap.add_argument("--milp-share", type=float, default=None,
                    help="the stage MILP phase's budget, a share of the cluster search's wall (default: none)")
    ap.add_argument("--json", type=Path)
    a = ap.parse_args(argv)
    out = {"rows": [case(w, t, M, a.limit, a.milp_share) for w, t, M in ROWS]}
    if not a.quick:
        out["heterogeneity"] = [case(w, t, M, a.limit, a.milp_share) for w, t, M in HETERO]
    if a.json:
        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
