"""Per-op precision per device kind in the fleet space (model.fleet_precision) against
the three per-kind policies alone, on hybrid-v100-t4 (training, batch 8 x 16, fp16 and
int8; every plan simulated per optimizer step).

1. The fleet benchmark table's cases (bench/README.md "Mixed fleets against the other
   planners"): the whole fleet search, policies alone and with the per-op MILP, best
   simulated plan of each; ``--timing``: their wall seconds, alternated twice.
2. Heterogeneity under a sensitivity budget (microbatch 4 x 32, the table's size):
   the best simulated plan with per-op precision per kind against the best with one
   policy per kind, the same budget (fractions of the fastest plan's sensitivity).
3. ``--pareto 8``: the frontier's points, each simulated, and how many are distinct.

    python bench/fleet_precision_bench.py [--no-pareto | --pareto-only | --timing] [WORKLOAD ...]
writes bench/results/fleet_precision_bench.json; ``--table``: the guide's tables from it
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import distplan
from distplan.api.pareto import pareto
from distplan.baselines.scoring import sim_rate
from distplan.core.clock import Clock
from distplan.costs.evaluate import plan_sensitivity
from distplan.model import SolveOptions
from distplan.model.fleet_solve import search_fleet
from distplan.sim import simulate

OUT = Path(__file__).parent / "results" / "fleet_precision_bench.json"
#: budgets of part 2, as fractions of the fastest per-op plan's sensitivity
FRACTIONS = (0.1, 0.25, 0.5)
SIMULATED = 5


def _problem(wl: str):
    return distplan.problem(wl, "hybrid-v100-t4", mode="training", batch_size=8, microbatches=16,
                            precisions="fp16,int8")


def best_simulated(pb, per_op: bool, **options) -> dict:
    """Search the fleet space, simulate its best plans (as ``solve`` ranks them), the best."""
    t0 = time.perf_counter()
    res = search_fleet(pb, SolveOptions(time_limit_s=600, top_k=SIMULATED, **options), Clock(600), per_op=per_op)
    used = res.problem or pb
    rows = [(sim_rate(used, simulate(used, p)), p) for p in res.plans[:SIMULATED]]
    rate, plan = max(rows, key=lambda r: r[0])
    return {"per_step_per_s": round(rate, 2), "sensitivity": round(plan_sensitivity(used, plan), 3),
            "configuration": plan.predicted.get("cluster_point", ""), "microbatch_size": used.graph.batch_size,
            "model_iteration_s": plan.predicted.get("model_iteration_s"), "seconds": round(time.perf_counter() - t0, 2)}


def main(workloads: list[str], parts: set[str]) -> dict:
    """Run ``parts`` ("table" with "budgets", "pareto") and merge them into the stored results."""
    out: dict = json.loads(OUT.read_text()) if OUT.exists() else {}
    out.update({"topology": "hybrid-v100-t4", "batch": "8 x 16", "precisions": "fp16,int8"})
    for wl in workloads:
        pb = _problem(wl)
        row: dict = out.setdefault(wl, {})
        if "timing" in parts:
            parts_timing(pb, wl, row)
        if "table" not in parts:
            if "pareto" in parts:
                parts_pareto(pb, wl, row)
            continue
        for name, per_op in (("policies", False), ("per_op", True)):
            row[name] = best_simulated(pb, per_op)
            print(f"{wl} table case, {name}: {row[name]}", flush=True)
        top_s = row["per_op"]["sensitivity"]
        row["budgets"] = []
        for f in FRACTIONS:
            b = round(f * top_s, 3)
            cmp = {k: best_simulated(pb, p, sensitivity_budget=b, microbatch_sizes=(4,))
                   for k, p in (("policies", False), ("per_op", True))}
            cmp["budget"], cmp["margin"] = b, round(cmp["per_op"]["per_step_per_s"] / cmp["policies"]["per_step_per_s"] - 1, 4)
            row["budgets"].append(cmp)
            print(f"{wl} budget {b}: per-op {cmp['per_op']['per_step_per_s']}/s ({cmp['per_op']['configuration']}) "
                  f"vs policies {cmp['policies']['per_step_per_s']}/s ({cmp['policies']['configuration']}): "
                  f"{cmp['margin']:+.2%}", flush=True)
        if "pareto" in parts:
            parts_pareto(pb, wl, row)
    return out


def parts_timing(pb, wl: str, row: dict, rounds: int = 2) -> None:
    """Wall seconds of the whole search + simulation, policies alone and with the per-op
    MILP, alternated ``rounds`` times (the machine is shared): the least of each."""
    runs: dict[str, list[float]] = {"policies": [], "per_op": []}
    for _ in range(rounds):
        for name, per_op in (("policies", False), ("per_op", True)):
            runs[name].append(best_simulated(pb, per_op)["seconds"])
    row["timing"] = {k: {"runs_s": v, "least_s": min(v)} for k, v in runs.items()}
    row["timing"]["ratio"] = round(min(runs["per_op"]) / min(runs["policies"]), 3)
    print(f"{wl} timing: {row['timing']}", flush=True)


def parts_pareto(pb, wl: str, row: dict) -> None:
    """``--pareto 8`` on ``pb``: each point's budget, sensitivity, simulated rate."""
    t0 = time.perf_counter()
    pts = pareto(pb, 8, SolveOptions(time_limit_s=2400))
    row["pareto"] = {"seconds": round(time.perf_counter() - t0, 1),
                     "points": [{"budget": round(p.budget, 3), "sensitivity": round(p.sensitivity, 3),
                                 "per_step_per_s": round(p.throughput_per_s, 2)} for p in pts],
                     "distinct": len({(round(p.sensitivity, 6), round(p.throughput_per_s, 4)) for p in pts})}
    print(f"{wl} pareto 8: {row['pareto']}", flush=True)


def markdown(res: dict) -> str:
    """The mixed-fleets guide's tables from a results document (``--table``)."""
    wls = [w for w in ("bert-base", "bert-large") if w in res]
    out = ["| workload | budget | per-op precision per kind | one policy per kind | margin |", "|---|---|---|---|---|"]
    for wl in wls:
        for b in res[wl]["budgets"]:
            out.append(f"| {wl} | {b['budget']:g} | {b['per_op']['per_step_per_s']:,.1f}/s "
                       f"({b['per_op']['configuration']}) | {b['policies']['per_step_per_s']:,.1f}/s "
                       f"({b['policies']['configuration']}) | {b['margin'] * 100:+.2f} % |")
    out += ["", "| workload | policies alone | with the per-op MILP |", "|---|---|---|"]
    for wl in wls:
        a, b, t = res[wl]["policies"], res[wl]["per_op"], res[wl]["timing"]
        out.append(f"| {wl} | {a['per_step_per_s']:,.1f}/s in {t['policies']['least_s']:.1f} s | "
                   f"{b['per_step_per_s']:,.1f}/s in {t['per_op']['least_s']:.1f} s ({t['ratio']:.2f}x) |")
    if all("pareto" in res[wl] for wl in wls):
        out += ["", "| workload | `--pareto 8`: samples/s per step (sensitivity) | distinct | seconds |", "|---|---|---|---|"]
        for wl in wls:
            pr = res[wl]["pareto"]
            pts = ", ".join(f"{p['per_step_per_s']:,.1f} ({p['sensitivity']:,.1f})" for p in pr["points"])
            out.append(f"| {wl} | {pts} | {pr['distinct']} | {pr['seconds']:.0f} |")
    return "\n".join(out)


if __name__ == "__main__":
    args = sys.argv[1:]
    if "--table" in args:
        print(markdown(json.loads(OUT.read_text())))
        sys.exit(0)
    parts = ({"table"} if "--no-pareto" in args else {"pareto"} if "--pareto-only" in args
             else {"timing"} if "--timing" in args else {"table", "pareto", "timing"})
    res = main([a for a in args if not a.startswith("--")] or ["bert-base", "bert-large"], parts)
    now = json.loads(OUT.read_text()) if OUT.exists() else {}   # another run's parts, stored meanwhile
    for k, v in res.items():
        now[k] = {**now.get(k, {}), **v} if isinstance(v, dict) else v
    res = now
    OUT.write_text(json.dumps(res, indent=1) + "\n")
    print(f"wrote {OUT}")
    print(markdown(res))
