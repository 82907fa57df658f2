"""Cluster-scale simulation speed: one training iteration of a GPT on up to 1,024 GPUs,
end to end (problem, Megatron layout, checker, simulation, free-link breakdown), as
``python -m distplan.sim --workload ... --dp --tp --pp`` runs it.

Headline: gpt3-175b on a100x1024 at dp 16 x tp 8 x pp 8, microbatch 1, global batch
1,536, full recomputation. Target: <= 60 s on a 2-core machine. Then how the cost grows
with GPUs (dp 1..16 at 96 microbatches per replica) and with microbatches (global batch
384..3,072 at dp 16), and the same small configuration with and without the symmetry
reduction (``sim.symmetry``), whose figures must agree. Not a test: no assertion on
time; the figures go in the report.

    python bench/cluster_bench.py [--quick] [--json bench/results/cluster_bench.json]
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from distplan.api.configs import whatif  # noqa: E402
from distplan.sim import SimOptions, simulate  # noqa: E402
from distplan.sim.symmetry import find_symmetry  # noqa: E402

TARGET_S = 60.0
MODEL = "gpt3-175b"


def one(dp: int, tp: int, pp: int, global_batch: int, topology: str | None = None) -> dict:
    topo = topology or f"a100x{max(8, dp * tp * pp)}"
    t0 = time.perf_counter()
    w = whatif(MODEL, topo, dp=dp, tp=tp, pp=pp, microbatch_size=1, global_batch=global_batch, recompute="full")
    wall = time.perf_counter() - t0
    sym = find_symmetry(w.problem, w.plan, ideal=False, trace=False)
    factor = sym.factor if sym is not None else 1
    return {"dp": dp, "tp": tp, "pp": pp, "gpus": dp * tp * pp, "global_batch": global_batch, "wall_s": wall,
            "iteration_s": w.iteration_s, "model_tflops_per_gpu": w.model_tflops_per_device,
            "nodes_full": w.sim.n_nodes, "nodes_run": w.sim.n_nodes // factor, "copies_merged": factor}


def _row(r: dict) -> str:
    return (f"  dp {r['dp']:>2} tp {r['tp']} pp {r['pp']} = {r['gpus']:>5} GPUs, batch {r['global_batch']:>5}: "
            f"{r['wall_s']:6.1f} s wall, iteration {r['iteration_s']:.3f} s, {r['model_tflops_per_gpu']:.1f} "
            f"TFLOP/s/GPU, {r['nodes_full']:,} nodes ({r['nodes_run']:,} run, x{r['copies_merged']})")


def exactness(quick: bool) -> dict:
    """A 128-GPU case simulated with and without the reduction."""
    w = whatif(MODEL, "a100x128", dp=2, tp=8, pp=8, global_batch=16 if quick else 32, recompute="full",
               breakdown=False)
    out = {}
    for flag in (True, False):
        t0 = time.perf_counter()
        r = simulate(w.problem, w.plan, SimOptions(symmetry=flag))
        out["reduced" if flag else "full"] = {"wall_s": time.perf_counter() - t0, "iteration_s": r.iteration_s,
                                              "makespan_s": r.makespan_s}
    out["equal"] = out["reduced"]["makespan_s"] == out["full"]["makespan_s"]
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="headline and a short growth table only")
    ap.add_argument("--json", type=Path, help="write the figures here")
    a = ap.parse_args(argv)
    res: dict = {"target_s": TARGET_S}
    print(f"{MODEL} training, microbatch 1, full recomputation, bf16, a100x<N> (one InfiniBand port per GPU)")
    head = one(16, 8, 8, 1536, "a100x1024")
    res["headline"] = head
    print("headline:\n" + _row(head) + f"   target <= {TARGET_S:g} s: {'met' if head['wall_s'] <= TARGET_S else 'MISSED'}",
          flush=True)
    print("growth with GPUs (96 microbatches per replica):", flush=True)
    res["gpus"] = []
    for dp in ((1, 4, 16) if a.quick else (1, 2, 4, 8, 16)):
        res["gpus"].append(one(dp, 8, 8, 96 * dp))
        print(_row(res["gpus"][-1]), flush=True)
    print("growth with microbatches (dp 16):", flush=True)
    res["microbatches"] = []
    for gb in ((384, 1536) if a.quick else (384, 768, 1536, 3072)):
        res["microbatches"].append(head if gb == 1536 else one(16, 8, 8, gb, "a100x1024"))
        print(_row(res["microbatches"][-1]), flush=True)
    ex = exactness(a.quick)
    res["exactness"] = ex
    print(f"128 GPUs (dp 2 tp 8 pp 8) reduced vs full: {ex['reduced']['wall_s']:.2f} s vs {ex['full']['wall_s']:.2f} s, "
          f"makespan {ex['reduced']['makespan_s']!r} vs {ex['full']['makespan_s']!r} "
          f"({'equal' if ex['equal'] else 'DIFFERENT'})")
    if a.json:
        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(json.dumps(res, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
