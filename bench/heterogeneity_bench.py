"""Where heterogeneity pays (issue 23): the stage space (``--space stage``: the cluster
search plus the stage MILP's pipelines whose every stage has its own tp, dp,
recomputation, ZeRO level and sequence parallelism) against the best uniform plan,
both simulated; and the mixed fleet, where the fleet space's per-op precision per
device kind is set against one precision policy per kind.

Per GPU case: the cluster space at microbatch sizes 1, 2, 4, 8 (1F1B), the cluster
space with interleaving (``virtual_stages``), and the stage space at the microbatch
size named (its MILP one size: the time limit is spent on one problem). Then the
winner's recomputation ablated: each stage of the best plan set to every other
recomputation mode, one at a time, and every stage at one mode: does it fit the memory
checker, and its simulated iteration. That says why a case pays (a stage-local
recomputation the uniform plans cannot have) or why it does not (no stage can drop
its recomputation and still fit).

    python bench/heterogeneity_bench.py [--limit 120] [--only NAME] [--json bench/results/heterogeneity_bench.json]

Figures: samples per optimizer step in the realistic simulator (global batch /
simulated iteration). Not a test (tests/test_heterogeneity.py is the small case).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import distplan  # noqa: E402
from distplan.api.problem import problem as make_problem  # noqa: E402
from distplan.core.errors import DistplanError  # noqa: E402
from distplan.costs.check import plan_violations  # noqa: E402
from distplan.costs.iteration import estimate_iteration  # noqa: E402
from distplan.model import SolveOptions  # noqa: E402
from distplan.sim import simulate  # noqa: E402
from distplan.topologies import kinds as K  # noqa: E402
from distplan.topologies.builders import rail_cluster  # noqa: E402

RECOMPUTE = ("none", "selective", "full")


def tiny_problem():
    """tests/test_heterogeneity.py's case: gpt3-1024x8x8, seq 1,024, 8 microbatches, bf16,
    on 2 A100 nodes of 1 GPU at 2 GB."""
    kind = dataclasses.replace(K.A100, mem_capacity_bytes=2.0e9)
    topo = rail_cluster("a100-2gb-2x1", 2, 1, kind, K.NVLINK3_BW_BYTES_PER_S, K.NVLINK_LATENCY_S,
                        K.IB_HDR_PORT_BW_BYTES_PER_S, K.IB_LATENCY_S)
    return make_problem("gpt3-1024x8x8", topo, batch_size=1, seq_len=1024, mode="training",
                        precisions=("bf16",), microbatches=8)


def zoo_problem(workload: str, topology: str, microbatches: int, seq_len: int | None):
    kw = {"seq_len": seq_len} if seq_len else {}
    return distplan.problem(workload, topology, batch_size=1, mode="training", microbatches=microbatches, **kw)


#: (name, problem factory, stage-space microbatch sizes, interleaving degrees, why it is here)
CASES = [
    ("gpt3-1024x8x8 M8 seq1024 2x1 A100 2GB", tiny_problem, (1,), (2, 4),
     "memory-tight 2-stage pipeline: stage 0 holds 2 microbatches, the head's stage 1"),
    ("llama3-70b M32 seq4096 h100x32", lambda: zoo_problem("llama3-70b", "h100x32", 32, 4096), (1,), (2, 4, 5),
     "memory-tight 4-stage pipeline: stage k holds 4 - k microbatches"),
    ("llama3-70b M32 seq4096 h100x16", lambda: zoo_problem("llama3-70b", "h100x16", 32, 4096), (1,), (2, 4, 5),
     "tighter: the uniform plan recomputes fully"),
    ("llama3-8b M32 seq8192 h100x16", lambda: zoo_problem("llama3-8b", "h100x16", 32, None), (1,), (),
     "the 128k-vocabulary head (issue 23's example)"),
]


def rate(pb, iteration_s: float) -> float:
    """Samples per optimizer step per second: the global batch over the iteration."""
    return pb.microbatches * pb.graph.batch_size / iteration_s


def solve(pb, **options) -> dict:
    t0 = time.perf_counter()
    rep = distplan.solve(pb, SolveOptions(top_k=5, **options))
    wall = time.perf_counter() - t0
    used = rep.problem
    b = rep.best
    return {"per_step_per_s": rate(used, b.sim.iteration_s), "sim_iteration_s": b.sim.iteration_s,
            "model_iteration_s": b.plan.predicted.get("model_iteration_s"),
            "plan": b.plan.predicted.get("cluster_point", ""), "microbatch_size": used.graph.batch_size,
            "peak_gib": float(b.sim.peak_memory_bytes.max()) / 2 ** 30, "wall_s": wall,
            "status": str(rep.solver.status), "gap": rep.solver.gap, "cut_short": list(rep.solver.cut_short),
            "milp_rows": [r for r in rep.solver.explored[1:] if isinstance(r, dict)] if options.get("space") == "stage"
            else [], "_rep": rep}


def ablate(pb, plan) -> list[dict]:
    """The plan with one stage's recomputation changed (each stage, each other mode), and
    with every stage at one mode: fits (the memory checker), analytic and simulated."""
    variants = []
    for k, st in enumerate(plan.stages):
        for rc in RECOMPUTE:
            if rc != st.recompute:
                variants.append((f"stage {k} {rc}", tuple(dataclasses.replace(s, recompute=rc) if j == k else s
                                                          for j, s in enumerate(plan.stages))))
    if len(plan.stages) > 1:
        for rc in RECOMPUTE:
            if any(s.recompute != rc for s in plan.stages):
                variants.append((f"every stage {rc}", tuple(dataclasses.replace(s, recompute=rc) for s in plan.stages)))
    out = []
    for label, stages in variants:
        p = dataclasses.replace(plan, stages=stages)
        bad = plan_violations(pb, p)
        row = {"variant": label, "fits": not bad}
        if bad:
            row["refused"] = str(bad[0])[:160]
        else:
            row["model_iteration_s"] = estimate_iteration(pb, p).iteration_s
            row["sim_iteration_s"] = simulate(pb, p).iteration_s
        out.append(row)
    return out


def case(name: str, make, sizes, vps, why: str, limit_s: float) -> dict:
    pb = make()
    row: dict = {"case": name, "why_tried": why}
    try:
        cl = solve(pb, space="cluster", time_limit_s=limit_s)
        row["cluster"] = {k: v for k, v in cl.items() if k != "_rep"}
        best = cl
        if vps:
            cv = solve(pb, space="cluster", time_limit_s=limit_s, virtual_stages=vps)
            row["cluster_interleaved"] = {k: v for k, v in cv.items() if k != "_rep"}
            best = min((cl, cv), key=lambda r: r["sim_iteration_s"])
        st = solve(pb, space="stage", time_limit_s=limit_s, microbatch_sizes=sizes)
    except DistplanError as e:
        row["error"] = str(e)
        print(f"{name}: {e}", flush=True)
        return row
    row["stage"] = {k: v for k, v in st.items() if k != "_rep"}
    row["margin"] = st["per_step_per_s"] / best["per_step_per_s"] - 1
    row["best_uniform"] = "cluster_interleaved" if best is not cl else "cluster"
    rep = st["_rep"]
    row["stage_ablation"] = ablate(rep.problem, rep.best.plan)
    urep = best["_rep"]
    row["uniform_ablation"] = ablate(urep.problem, urep.best.plan) if urep.best.plan.schedule == "1f1b" else []
    print(f"{name}: best uniform {best['per_step_per_s']:.3f}/step ({best['plan']}, {best['wall_s']:.1f} s, "
          f"{best['status']}), stage {st['per_step_per_s']:.3f}/step ({st['plan']}, {st['wall_s']:.1f} s): "
          f"{row['margin']:+.2%}", flush=True)
    for r in st["milp_rows"]:
        print(f"    MILP mb {r.get('microbatch_size')}: {r.get('status')} objective {r.get('objective_s')} "
              f"bound {r.get('bound_s')} refused {r.get('refused')} in {r.get('seconds', 0):.1f} s: {r.get('plan')}",
              flush=True)
    for tag in ("stage_ablation", "uniform_ablation"):
        for r in row[tag]:
            print(f"    {tag} {r['variant']}: " + (f"sim {r['sim_iteration_s']:.6g} s" if r["fits"]
                                                     else f"refused: {r['refused'][:90]}"), flush=True)
    return row


def fleet_case() -> dict:
    """hybrid-v100-t4: the stage space refuses a mixed fleet; the fleet space's per-op
    precision per kind against one policy per kind at fleet_precision_bench's budget
    277.25 (microbatch 4 x 32)."""
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from fleet_precision_bench import _problem, best_simulated
    pb = _problem("bert-base")
    row: dict = {"case": "bert-base 8 x 16 hybrid-v100-t4 (fp16, int8)"}
    try:
        distplan.solve(pb, SolveOptions(space="stage", time_limit_s=10))
    except DistplanError as e:
        row["stage_space"] = str(e)
    budget = 277.25
    row["budget"] = budget
    row["one_policy_per_kind"] = best_simulated(pb, False, sensitivity_budget=budget, microbatch_sizes=(4,))
    row["per_op_per_kind"] = best_simulated(pb, True, sensitivity_budget=budget, microbatch_sizes=(4,))
    row["margin"] = row["per_op_per_kind"]["per_step_per_s"] / row["one_policy_per_kind"]["per_step_per_s"] - 1
    print(f"{row['case']}: stage space: {row.get('stage_space')}; budget {budget}: per-op "
          f"{row['per_op_per_kind']['per_step_per_s']}/s ({row['per_op_per_kind']['configuration']}) vs one policy "
          f"{row['one_policy_per_kind']['per_step_per_s']}/s ({row['one_policy_per_kind']['configuration']}): "
          f"{row['margin']:+.2%}", flush=True)
    return row


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limit", type=float, default=120.0, help="seconds for each search")
    ap.add_argument("--only", help="run the cases whose name contains this ('fleet': the mixed fleet)")
    ap.add_argument("--json", type=Path, default=Path(__file__).parent / "results" / "heterogeneity_bench.json")
    a = ap.parse_args(argv)
    out: dict = {"date": time.strftime("%Y-%m-%d"), "limit_s": a.limit, "rows": []}
    for c in CASES:
        if a.only is None or a.only in c[0]:
            out["rows"].append(case(*c, a.limit))
    if a.only is None or a.only == "fleet":
        out["fleet"] = fleet_case()
    a.json.parent.mkdir(parents=True, exist_ok=True)
    a.json.write_text(json.dumps(out, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
