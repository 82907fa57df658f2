"""The time limit covers loading (issue 26): large graph files and a large ``--pareto``,
each run as ``python solve.py ... --time-limit S``, wall time of the whole process
against ``S x 1.1 + 5 s`` (the acceptance bound), and what came back (a plan, or one
``error:`` line and exit 2 naming the size and the limit).

Cases (graph files generated into ``--dir``): chain100k (100,000 ops in a chain),
star100k (one op feeding 99,999), dense20k (20,000 ops, 200,000 random forward
tensors), all at --time-limit 20; chain2k-c0 (2,000 ops, --coarsen 0, --time-limit 10);
pareto1m (bert-base, --pareto 1000000, --time-limit 5). Not a test: no assertion on time.

    python bench/load_limit_bench.py [--cases chain100k,...] [--dir /tmp/distplan-load]
                                     [--json bench/results/load_limit_bench.json]
"""
from __future__ import annotations

import argparse
import json
import random
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _op(i: int) -> dict:
    return {"name": f"o{i}", "kind": "matmul" if i % 3 == 0 else "activation", "fwd_flops": 2.0e8 + 1e5 * (i % 7),
            "bwd_flops": 4.0e8, "param_elems": 4096 if i % 3 == 0 else 0, "out_elems": 4096,
            "touched_elems": 12288}


def graph_doc(name: str, n_ops: int, edges: list[tuple[int, int]]) -> dict:
    """A distplan-graph v1 document with ``n_ops`` ops and one 4,096-element tensor per edge."""
    return {"format": "distplan-graph", "version": 1, "name": name, "mode": "inference", "batch_size": 1,
            "ops": [_op(i) for i in range(n_ops)],
            "tensors": [{"src": f"o{a}", "dst": f"o{b}", "elems": 4096} for a, b in edges]}


def chain(n: int) -> list[tuple[int, int]]:
    return [(i, i + 1) for i in range(n - 1)]


def star(n: int) -> list[tuple[int, int]]:
    return [(0, i) for i in range(1, n)]


def dense(n: int, m: int, seed: int = 0) -> list[tuple[int, int]]:
    """A chain (so the graph is connected) plus random forward edges, ``m`` distinct in all."""
    rng = random.Random(seed)
    edges = set(chain(n))
    while len(edges) < m:
        a, b = sorted(rng.sample(range(n), 2))
        edges.add((a, b))
    return sorted(edges)


GRAPHS = {"chain100k": lambda: graph_doc("chain100k", 100_000, chain(100_000)),
          "star100k": lambda: graph_doc("star100k", 100_000, star(100_000)),
          "dense20k": lambda: graph_doc("dense20k", 20_000, dense(20_000, 200_000)),
          "chain2k": lambda: graph_doc("chain2k", 2_000, chain(2_000))}

#: case -> (graph file or None, extra flags, time limit in seconds)
CASES = {"chain100k": ("chain100k", (), 20.0),
         "star100k": ("star100k", (), 20.0),
         "dense20k": ("dense20k", (), 20.0),
         "chain2k-c0": ("chain2k", ("--coarsen", "0"), 10.0),
         "pareto1m": (None, ("--workload", "bert-base", "--pareto", "1000000", "--report", "{dir}/pareto"), 5.0)}


def write_graph(name: str, folder: Path) -> Path:
    path = folder / f"{name}.json"
    if not path.exists():
        path.write_text(json.dumps(GRAPHS[name]()))
    return path


def one(case: str, folder: Path, kill_after_s: float = 300.0) -> dict:
    """One run of a case: wall seconds, exit status, the last stderr line."""
    graph, extra, limit_s = CASES[case]
    argv = [sys.executable, "solve.py", "--topology", "mcm4x4", "--time-limit", f"{limit_s:g}", "--quiet"]
    if graph is not None:
        argv += ["--workload", str(write_graph(graph, folder)), "--plan-out", str(folder / f"{case}-plan.json")]
    argv += [a.format(dir=folder) for a in extra]
    t0 = time.perf_counter()
    try:
        r = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, timeout=kill_after_s)
        rc, err = r.returncode, r.stderr.strip().splitlines()[-1:] or [""]
    except subprocess.TimeoutExpired:
        rc, err = None, [f"killed after {kill_after_s:g} s"]
    wall = time.perf_counter() - t0
    bound = limit_s * 1.1 + 5.0
    return {"case": case, "limit_s": limit_s, "wall_s": round(wall, 2), "bound_s": bound, "within": wall <= bound,
            "returncode": rc, "last_stderr": err[0][:300]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cases", default=",".join(CASES))
    ap.add_argument("--dir", default="/tmp/distplan-load")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    folder = Path(args.dir)
    folder.mkdir(parents=True, exist_ok=True)
    rows = []
    for case in args.cases.split(","):
        row = one(case, folder)
        rows.append(row)
        print(f"{case}: {row['wall_s']:.1f} s wall (limit {row['limit_s']:g} s, bound {row['bound_s']:g} s, "
              f"{'within' if row['within'] else 'OVER'}), exit {row['returncode']}: {row['last_stderr']}", flush=True)
    if args.json:
        Path(args.json).write_text(json.dumps(rows, indent=1) + "\n")


if __name__ == "__main__":
    main()
