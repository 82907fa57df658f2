"""Speed of the cluster plan space (issue 22): wall and CPU seconds of the search
(``model.cluster.plan_cluster``, as ``solve.py --mode training`` runs it: top 5,
microbatch sizes 1, 2, 4, 8), points visited and pruned, status and gap.

Targets: llama-7b on h100x64 proven optimal in <= 10 s; gpt3-175b on a100x1024 planned
within 60 s (its gap reported). Two more <= 64-GPU cases for the spread. The machine is
shared: each row records ``uptime``'s load and the CPU seconds beside the wall time.
``--plans`` also writes each case's plans (point, iteration repr, reduction, split), the
figures a speed change must leave identical. Not a test: no assertion on time.

    python bench/cluster_speed_bench.py [--only NAME] [--json bench/results/cluster_speed_bench.json]
"""
from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import distplan  # noqa: E402
from distplan.core.clock import Clock  # noqa: E402
from distplan.model.cluster import plan_cluster  # noqa: E402
from distplan.model.options import DEFAULT_MICROBATCH_SIZES, SolveOptions  # noqa: E402

#: (name, workload, topology, microbatches or None for the zoo default, limit s, target s, target kind)
CASES = [
    ("llama-7b/h100x64", "llama-7b", "h100x64", None, 120.0, 10.0, "optimal"),
    ("gpt3-13b/a100x64", "gpt3-13b", "a100x64", 64, 120.0, 10.0, "optimal"),
    ("llama-13b/h100x64", "llama-13b", "h100x64", 64, 120.0, 10.0, "optimal"),
    ("gpt3-2.7b/a100x32", "gpt3-2.7b", "a100x32", 32, 120.0, 10.0, "optimal"),
    ("gpt3-175b/a100x1024", "gpt3-175b", "a100x1024", 1536, 50.0, 60.0, "planned"),
]


def load() -> float:
    """The 1-minute load average (what ``uptime`` prints first)."""
    return os.getloadavg()[0]


def fingerprint(c) -> dict:
    """What a speed change must not move: the point, the iteration, the reduction and the split."""
    split = hashlib.sha1(repr(c.plan.op_stage).encode()).hexdigest()[:12]
    return {"point": c.point.label(), "iteration_s": repr(c.iteration_s), "allreduce": c.plan.dp_allreduce,
            "overlap": c.plan.overlap_grad_reduce, "split": split}


def run_case(name: str, workload: str, topology: str, microbatches, limit_s: float, target_s: float,
             kind: str) -> dict:
    kw = {"batch_size": 1, "microbatches": microbatches} if microbatches else {}
    p = distplan.problem(workload, topology, mode="training", **kw)
    before = load()
    t0, c0 = time.perf_counter(), time.process_time()
    r = plan_cluster(p, top_k=5, microbatch_sizes=DEFAULT_MICROBATCH_SIZES, clock=Clock.until(t0 + limit_s))
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    status = "time_limit" if r.cut_short else ("optimal" if r.gap <= SolveOptions().rel_gap else "searched")
    met = wall <= target_s and (status == "optimal" if kind == "optimal" else bool(r.plans))
    return {"case": name, "gpus": p.n_devices, "microbatches": p.microbatches, "limit_s": limit_s,
            "wall_s": round(wall, 2), "cpu_s": round(cpu, 2), "load_before": round(before, 2),
            "load_after": round(load(), 2), "points": r.points, "visited": r.solved, "pruned": r.pruned,
            "infeasible": r.infeasible, "not_visited": r.points - r.solved - r.pruned, "status": status,
            "best_s": r.plans[0].iteration_s, "bound_s": r.bound_s, "gap": r.gap, "best": r.plans[0].point.label(),
            "target": f"{kind} in <= {target_s:g} s", "met": met, "plans": [fingerprint(c) for c in r.plans]}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--only", action="append", help="run only these cases (by name; repeatable)")
    ap.add_argument("--limit", type=float, help="override every case's time limit (seconds)")
    ap.add_argument("--json", type=Path, help="write the figures here")
    a = ap.parse_args(argv)
    rows = []
    for name, *rest in CASES:
        if a.only and name not in a.only:
            continue
        if a.limit:
            rest[3] = a.limit
        row = run_case(name, *rest)
        rows.append(row)
        print(f"{name:22s} {row['wall_s']:7.2f} s wall {row['cpu_s']:7.2f} s CPU (load {row['load_before']:.2f}) "
              f"{row['visited']:,} visited / {row['pruned']:,} pruned / {row['not_visited']:,} not visited of "
              f"{row['points']:,}; {row['status']}, gap {row['gap']:.2%}; best {row['best_s']:.6g} s "
              f"({row['best']}); target {row['target']}: {'met' if row['met'] else 'MISSED'}", flush=True)
    if a.json:
        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(json.dumps({"rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
