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
from distplan.testing.cluster_oracle import layer_groups  # noqa: E402
from distplan.topologies import kinds as K  # noqa: E402
from distplan.topologies.builders import rail_cluster  # noqa: E402

RECOMPUTE = ("none", "selective", "full")


def tiny_problem(nodes: int = 2, cap_bytes: float = 2.0e9, microbatches: int = 8):
    """tests/test_heterogeneity.py's cases: gpt3-1024x8x8, seq 1,024, bf16, on ``nodes``
    A100 nodes of 1 GPU at ``cap_bytes`` (2 at 2 GB, 8 microbatches; 4 at 1.25 GB, 16)."""
    kind = dataclasses.replace(K.A100, mem_capacity_bytes=cap_bytes)
    topo = rail_cluster(f"a100-{nodes}x1", nodes, 1, kind, K.NVLINK3_BW_BYTES_PER_S, K.NVLINK_LATENCY_S,
                        K.IB_HDR_PORT_BW_BYTES_PER_S, K.IB_LATENCY_S)
    return make_problem("gpt3-1024x8x8", topo, batch_size=1, seq_len=1024, mode="training",
                        precisions=("bf16",), microbatches=microbatches)


def zoo_problem(workload: str, topology: str, microbatches: int, seq_len: int | None):
    kw = {"seq_len": seq_len} if seq_len else {}
    return distplan.problem(workload, topology, batch_size=1, mode="training", microbatches=microbatches, **kw)


#: (name, problem factory, stage-space microbatch sizes, interleaving degrees, search the
#: cluster space with them (else only its best 1F1B plan is interleaved), why it is here)
CASES = [
    ("gpt3-1024x8x8 M8 seq1024 2x1 A100 2GB", tiny_problem, (1,), (2, 4), True,
     "memory-tight 2-stage pipeline: stage 0 holds 2 microbatches, the head's stage 1"),
    ("gpt3-1024x8x8 M16 seq1024 4x1 A100 1.25GB", lambda: tiny_problem(4, 1.25e9, 16), (1,), (2, 4), True,
     "memory-tight 4-stage pipeline on small devices: stage k holds 4 - k microbatches"),
    ("llama3-70b M32 seq4096 h100x32", lambda: zoo_problem("llama3-70b", "h100x32", 32, 4096), (1,), (2, 4, 5), True,
     "memory-tight 4-stage pipeline: stage k holds 4 - k microbatches"),
    ("llama3-70b M128 seq4096 h100x32", lambda: zoo_problem("llama3-70b", "h100x32", 128, 4096), (1,), (2, 4, 5),
     False, "the same at a 4x global batch: a smaller bubble for interleaving to remove"),
    ("llama3-70b M32 seq4096 h100x16", lambda: zoo_problem("llama3-70b", "h100x16", 32, 4096), (1,), (2, 4, 5), True,
     "tighter: the uniform plan recomputes fully"),
    ("llama3-8b M32 seq8192 h100x16", lambda: zoo_problem("llama3-8b", "h100x16", 32, None), (1,), (), False,
     "the 128k-vocabulary head (issue 23's example)"),
]


def rate(pb, iteration_s: float) -> float:
    """Samples per optimizer step per second: the asked problem's global batch (whole
    sequences, whatever microbatch size or context-parallel rank's problem a plan
    runs) over the iteration."""
    return pb.microbatches * pb.graph.batch_size / iteration_s


def solve(pb, **options) -> dict:
    t0 = time.perf_counter()
    rep = distplan.solve(pb, SolveOptions(top_k=5, **options))
    wall = time.perf_counter() - t0
    used = rep.problem
    b = rep.best
    sim = b.sim if b.sim is not None else simulate(used, b.plan)   # the limit left no simulation: run it here
    return {"per_step_per_s": rate(pb, sim.iteration_s), "sim_iteration_s": sim.iteration_s,
            "simulated_after_the_limit": b.sim is None,
            "model_iteration_s": b.plan.predicted.get("model_iteration_s"),
            "plan": b.plan.predicted.get("cluster_point", ""), "microbatch_size": used.graph.batch_size,
            "peak_gib": float(sim.peak_memory_bytes.max()) / 2 ** 30, "wall_s": wall,
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
    return [timed_row(pb, dataclasses.replace(plan, stages=stages), {"variant": label}) for label, stages in variants]


def timed_row(pb, plan, row: dict) -> dict:
    """``row`` with whether ``plan`` fits the checker and, if it does, its analytic and
    simulated iteration (else the checker's first refusal)."""
    bad = plan_violations(pb, plan)
    row["fits"] = not bad
    if bad:
        row["refused"] = str(bad[0])[:160]
    else:
        row["model_iteration_s"] = estimate_iteration(pb, plan).iteration_s
        row["sim_iteration_s"] = simulate(pb, plan).iteration_s
    return row


def interleaved(pb, plan, vp: int):
    """The 1F1B ``plan`` interleaved at ``vp`` (as the cluster space builds it: pp x vp
    equal chunks of layers, chunk c on stage c mod pp), None where it does not apply."""
    groups = layer_groups(pb)
    pp, L = plan.n_stages, len(groups)
    if pp < 2 or L % (pp * vp) or (plan.microbatches // plan.stages[0].replicas) % pp:
        return None
    size, op_stage = L // (pp * vp), [0] * pb.n_ops
    for c in range(pp * vp):
        for g in groups[c * size:(c + 1) * size]:
            for v in g:
                op_stage[v] = c
    return dataclasses.replace(plan, op_stage=tuple(op_stage), stages=tuple(plan.stages[c % pp] for c in range(pp * vp)),
                               schedule="interleaved")


def interleave_all(pb, plan, vps) -> list[dict]:
    """The best 1F1B uniform plan interleaved at each of ``vps``: fits, analytic, simulated."""
    out = []
    for vp in vps:
        p = interleaved(pb, plan, vp)
        if p is None:
            out.append({"vp": vp, "applies": False})
            continue
        out.append(timed_row(pb, p, {"vp": vp, "applies": True}))
    return out


def case(name: str, make, sizes, vps, search_vp: bool, why: str, limit_s: float) -> dict:
    """One GPU case (module docstring); ``search_vp``: also search the cluster space with
    interleaving at ``vps`` (else only the best 1F1B plan is interleaved)."""
    pb = make()
    row: dict = {"case": name, "why_tried": why}
    try:
        cl = solve(pb, space="cluster", time_limit_s=limit_s)
        cv = solve(pb, space="cluster", time_limit_s=limit_s, virtual_stages=vps) if search_vp else None
        st = solve(pb, space="stage", time_limit_s=limit_s, microbatch_sizes=sizes)
    except DistplanError as e:
        row["error"] = str(e)
        print(f"{name}: {e}", flush=True)
        return row
    row["cluster"] = {k: v for k, v in cl.items() if k != "_rep"}
    if cv is not None:
        row["cluster_interleaved"] = {k: v for k, v in cv.items() if k != "_rep"}
    row["stage"] = {k: v for k, v in st.items() if k != "_rep"}
    urep, rep = cl["_rep"], st["_rep"]
    row["cluster_best_interleaved"] = interleave_all(urep.problem, urep.best.plan, vps)
    row["stage_best_interleaved"] = interleave_all(rep.problem, rep.best.plan, vps)
    uniform = [("cluster 1F1B", cl["sim_iteration_s"])] + ([("cluster interleaved", cv["sim_iteration_s"])] if cv else [])
    uniform += [(f"cluster best at vp {r['vp']}", r["sim_iteration_s"]) for r in row["cluster_best_interleaved"]
                if r.get("fits")]
    row["best_uniform"], best_s = min(uniform, key=lambda u: u[1])
    row["best_uniform_per_step_per_s"] = rate(pb, best_s)
    row["margin"] = st["per_step_per_s"] / row["best_uniform_per_step_per_s"] - 1
    row["stage_ablation"] = ablate(rep.problem, rep.best.plan)
    row["uniform_ablation"] = ablate(urep.problem, urep.best.plan)
    print(f"{name}: best uniform {row['best_uniform_per_step_per_s']:.3f}/step ({row['best_uniform']}; 1F1B "
          f"{cl['per_step_per_s']:.3f}/step {cl['plan']}, {cl['wall_s']:.1f} s, {cl['status']}), stage "
          f"{st['per_step_per_s']:.3f}/step ({st['plan']}, {st['wall_s']:.1f} s): {row['margin']:+.2%}", flush=True)
    if cv is not None:
        print(f"    cluster interleaved search: {cv['per_step_per_s']:.3f}/step {cv['plan']} ({cv['wall_s']:.1f} s, "
              f"{cv['status']})", flush=True)
    for r in st["milp_rows"]:
        print(f"    MILP mb {r.get('microbatch_size')}: {r.get('status')} objective {r.get('objective_s')} "
              f"bound {r.get('bound_s')} refused {r.get('refused')} in {r.get('seconds', 0):.1f} s: {r.get('plan')}",
              flush=True)
    for tag in ("cluster_best_interleaved", "stage_best_interleaved"):
        for r in row[tag]:
            print(f"    {tag} vp {r['vp']}: " + ("n/a" if not r["applies"] else f"sim {r['sim_iteration_s']:.6g} s"
                                                 if r["fits"] else f"refused: {r['refused'][:90]}"), flush=True)
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
    out: dict = json.loads(a.json.read_text()) if a.only and a.json.exists() else {}   # --only: merged in
    out.update(date=time.strftime("%Y-%m-%d"), limit_s=a.limit)
    rows = {r["case"]: r for r in out.get("rows", [])}
    for c in CASES:
        if a.only is None or a.only in c[0]:
            rows[c[0]] = case(*c, a.limit)
    out["rows"] = [rows[c[0]] for c in CASES if c[0] in rows]
    if a.only is None or a.only == "fleet":
        out["fleet"] = fleet_case()
    a.json.parent.mkdir(parents=True, exist_ok=True)
    a.json.write_text(json.dumps(out, indent=1, default=str))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
