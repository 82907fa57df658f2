"""The time limit at cluster scale: ``solve.py --workload gpt3-175b --topology a100x1024
--mode training --batch-size 1 --microbatches 1536 --time-limit S --json`` for each S,
wall time of the whole process (imports and problem build included) against S, and
what came back: the best plan, simulated or with the model's figures only.

Target (README, issue 13's contract): wall <= S + ~1 s. Measured on the 2-core machine
at 05f9235: 10 s -> 9.2 s (unsimulated), 30 s -> 20.3 s and 120 s -> 19.2 s (the search
ends by itself; dp 16 x tp 8 x pp 8, sequence parallel, 73.86 samples per step,
simulated). Not a test: no assertion on time.

    python bench/time_limit_bench.py [--limits 10,30,120] [--json bench/results/time_limit_bench.json]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ARGS = ("--workload", "gpt3-175b", "--topology", "a100x1024", "--mode", "training", "--batch-size", "1",
        "--microbatches", "1536", "--json", "--plan-out", "")


def one(limit_s: float) -> dict:
    """One run of the command line at ``limit_s``: wall seconds and the winner."""
    t0 = time.perf_counter()
    r = subprocess.run([sys.executable, "solve.py", *ARGS, "--time-limit", str(limit_s)], cwd=ROOT,
                       capture_output=True, text=True)
    wall = time.perf_counter() - t0
    out = {"limit_s": limit_s, "wall_s": wall, "returncode": r.returncode}
    if r.returncode != 0:
        return out | {"error": r.stderr.strip().splitlines()[-1:]}
    doc = json.loads(r.stdout)
    best = doc["plans"][0]
    per_step = best["step_throughput_per_s"] if best["simulated"] else \
        doc["microbatches"] / best["model_iteration_s"]
    return out | {"simulated": best["simulated"], "configuration": best["configuration"],
                  "samples_per_step": per_step, "cut_short": doc["solver"]["cut_short"]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--limits", default="10,30,120")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    rows = []
    for s in (float(x) for x in args.limits.split(",")):
        row = one(s)
        rows.append(row)
        print(f"--time-limit {s:g}: {row['wall_s']:.1f} s wall, "
              + (f"{row.get('samples_per_step', float('nan')):.2f} samples/step "
                 f"({'simulated' if row.get('simulated') else 'model'}), {row.get('configuration')}"
                 if row["returncode"] == 0 else f"exit {row['returncode']}: {row.get('error')}"), flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()
