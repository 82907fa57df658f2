"""ZeRO 0-3 (FSDP) in the what-if (issue 22): per level, the simulated and analytic
iteration, the simulated peak and the checker's bound, on gpt3-1.3b (a100x16) and
llama3-8b (h100x16). ``python bench/zero_levels_bench.py [--json out.json]``."""
from __future__ import annotations

import argparse
import json
import time

from distplan.api.configs import whatif
from distplan.costs.evaluate import plan_memory_bytes
from distplan.costs.iteration import estimate_iteration

GIB = 2.0 ** 30
#: (workload, topology, dp, tp, microbatch size, global batch, recompute)
CASES = [("gpt3-1.3b", "a100x16", 16, 1, 1, 128, "none"), ("gpt3-1.3b", "a100x16", 16, 1, 4, 128, "none"),
         ("gpt3-1.3b", "a100x16", 8, 2, 1, 64, "none"), ("llama3-8b", "h100x16", 16, 1, 1, 64, "full"),
         ("llama3-8b", "h100x16", 8, 2, 1, 64, "full")]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--json", help="write the rows here")
    args = ap.parse_args()
    rows = []
    for w, t, dp, tp, mb, gb, rc in CASES:
        for zero in (0, 1, 2, 3):
            t0 = time.perf_counter()
            r = whatif(w, t, dp, tp, 1, mb, gb, recompute=rc, zero=zero, check_memory=False, breakdown=False)
            est = estimate_iteration(r.problem, r.plan).iteration_s
            used = sorted({d for s in r.plan.stages for d in s.devices})
            bound = float(plan_memory_bytes(r.problem, r.plan)[used].max())
            row = dict(workload=w, topology=t, dp=dp, tp=tp, microbatch=mb, global_batch=gb, recompute=rc, zero=zero,
                       sim_s=r.iteration_s, analytic_s=est, peak_gib=r.peak_memory_bytes / GIB,
                       bound_gib=bound / GIB, wall_s=time.perf_counter() - t0)
            rows.append(row)
            print(f"{w} {t} dp {dp} tp {tp} mb {mb} gb {gb} {rc}: ZeRO-{zero} sim {row['sim_s']:.4f} s, analytic "
                  f"{est:.4f} s, peak {row['peak_gib']:.2f} GiB, checker {row['bound_gib']:.2f} GiB "
                  f"({row['wall_s']:.1f} s)", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
