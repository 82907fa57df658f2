"""Grid baseline speed: configurations scored per second through the simulator.

The whole grid (``baselines.grid``) of mlp-small training on a100x16 (765 points, 510
distinct plans; "fastest" is bf16 there) searched to the end with the default scorer
(``baselines.scoring.MemoScorer``: ``sim.memo``, each distinct event run once, no longer
run for the period a training step's score does not read; tp 16 simulates one node's
eight ranks, ``sim.symmetry`` rank groups), and with ``--before`` also
with ``simulated_throughput`` (one full ``sim.simulate`` per plan), checking both give
the same best plan and score. A configuration is a plan the scorer ran on (the search's
``candidates``). The machine is shared: per wall second and per CPU second are both
printed, with the load average (wall figures fall as other jobs load the cores).
``--profile`` prints where the time goes (cProfile). Not a test: no assertion on speed.
Target: >= 100 configurations per second.

    python bench/grid_bench.py [--before] [--profile] [--json bench/results/grid_bench.json]
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from distplan import api  # noqa: E402
from distplan.baselines import grid  # noqa: E402
from distplan.baselines.scoring import MemoScorer, simulated_throughput  # noqa: E402

TARGET_PER_S = 100.0


def measure(problem, scorer, name: str) -> dict:
    t0, c0 = time.perf_counter(), time.process_time()
    r = grid.search(problem, 3600.0, seed=0, scorer=scorer)
    wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    row = {"scorer": name, "points": len(grid.grid_points(problem)), "candidates": r.candidates,
           "rejected": r.rejected, "seconds": wall, "cpu_seconds": cpu, "per_s": r.candidates / wall,
           "per_cpu_s": r.candidates / cpu, "best_samples_per_s": r.throughput_per_s, "stopped_by": r.stopped_by}
    memo = getattr(scorer, "memo", None)
    if memo is not None:
        row.update(runs=memo.runs, shared=memo.hits)
    print(f"{name:<8} {r.candidates} configurations in {wall:6.2f} s ({cpu:6.2f} CPU s): {row['per_s']:6.1f}/s "
          f"({row['per_cpu_s']:6.1f} per CPU s); best {r.throughput_per_s:,.0f} samples/s"
          + (f"; {memo.runs} event runs, {memo.hits} shared" if memo is not None else "")
          + ("" if row["per_s"] >= TARGET_PER_S else "  (below target)"))
    return row


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workload", default="mlp-small")
    ap.add_argument("--topology", default="a100x16")
    ap.add_argument("--before", action="store_true", help="also score with simulated_throughput (slow)")
    ap.add_argument("--profile", action="store_true", help="cProfile the memo run instead")
    ap.add_argument("--json", help="write the figures here")
    args = ap.parse_args()
    pb = api.problem(args.workload, args.topology, mode="training")
    if args.profile:
        import cProfile
        import pstats

        cProfile.runctx("grid.search(pb, 3600.0, seed=0, scorer=MemoScorer())", globals(), locals(), "/tmp/grid.prof")
        pstats.Stats("/tmp/grid.prof").sort_stats("cumulative").print_stats(30)
        return 0
    rows = [measure(pb, MemoScorer(), "memo")]
    if args.before:
        rows.append(measure(pb, simulated_throughput, "simulate"))
        assert rows[0]["best_samples_per_s"] == rows[1]["best_samples_per_s"], rows
    if args.json:
        doc = {"target_per_s": TARGET_PER_S, "workload": args.workload, "topology": args.topology,
               "mode": "training", "load_average_1min": os.getloadavg()[0], "cpus": os.cpu_count(), "rows": rows}
        Path(args.json).write_text(json.dumps(doc, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
