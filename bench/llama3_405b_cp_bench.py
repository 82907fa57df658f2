"""Llama 3 405B at 128k tokens with context parallelism: one training iteration on 16,384
H100s (tp 8, cp 16, pp 16, dp 8, sequence 131,072, 16 sequences per data-parallel rank:
global batch 128 = 16 M tokens; Llama Team 2024, Table 4: 380 TFLOP/s per GPU), simulated
exactly through the symmetry reduction, as ``python -m distplan.sim`` runs it.

Each command runs in a fresh process and is timed (wall and CPU; the 2-core machine is
shared). Flash attention (the default with --cp > 1), full recomputation, sequence
parallelism, ZeRO-1, Llama 3's device order (tp-cp-pp-dp); the headline is plain 1F1B
(as ``llama3_405b_bench.py``), ``--vp`` adds Megatron's interleaved schedule with 2 and 4
chunks per stage (the paper does not give its schedule); ``--all-gather`` adds the
headline with ``--cp-comm all_gather``, Llama 3's K/V exchange (section 3.3.2), beside
the default ring (p2p). Not a test: no assertion on time; the figures go in the results file.

    python bench/llama3_405b_cp_bench.py [--vp] [--all-gather] [--json bench/results/llama3_405b_cp_bench.json]
"""
from __future__ import annotations

import argparse
import json
import os
import re
import resource
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PUBLISHED_TFLOPS = 380.0
COMMAND = ["--workload", "llama3-405b", "--topology", "h100x16384", "--mode", "training", "--dp", "8", "--cp", "16",
           "--tp", "8", "--pp", "16", "--seq-len", "131072", "--microbatch-size", "1", "--global-batch", "128",
           "--recompute", "full", "--sequence-parallel", "--zero", "1", "--order", "tp-pp-dp"]


def _children_cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def timed(vp: int, comm: str = "p2p") -> dict:
    """The command (with ``--vp vp``, ``--cp-comm comm``) in a fresh interpreter: wall and
    CPU seconds and its figures."""
    cmd = COMMAND + (["--vp", str(vp)] if vp > 1 else []) + (["--cp-comm", comm] if comm != "p2p" else [])
    argv = [sys.executable, "-m", "distplan.sim", *cmd]
    before = _children_cpu_s()
    t0 = time.perf_counter()
    proc = subprocess.run(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    wall = time.perf_counter() - t0
    out = proc.stdout
    if proc.returncode:
        raise SystemExit(f"{' '.join(argv)} failed:\n{out}")
    num = r"([0-9.e+-]+)"
    it = re.search(rf"iteration\s+{num} s", out)
    tf = re.search(rf"model TFLOP/s\s+{num} per device \(hardware, with recomputation: {num}\)", out)
    mem = re.search(rf"{num} GiB peak per device \(checker's bound {num} GiB", out)
    ring = re.search(rf"exposed {num} ms forward, {num} ms backward", out)
    return {"command": "python -m distplan.sim " + " ".join(cmd), "vp": vp, "cp_comm": comm, "wall_s": round(wall, 2),
            "cpu_s": round(_children_cpu_s() - before, 2), "iteration_s": float(it[1]),
            "model_tflops_per_gpu": float(tf[1]), "hardware_tflops_per_gpu": float(tf[2]),
            "published_tflops_per_gpu": PUBLISHED_TFLOPS,
            "model_vs_published": round(float(tf[1]) / PUBLISHED_TFLOPS - 1, 4),
            "peak_gib": float(mem[1]), "checker_bound_gib": float(mem[2]),
            "ring_exposed_ms": [float(ring[1]), float(ring[2])], "output": out.strip().splitlines()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--vp", action="store_true", help="also time --vp 2 and --vp 4 (about a minute more)")
    ap.add_argument("--all-gather", action="store_true", help="also time the headline with --cp-comm all_gather")
    ap.add_argument("--json", type=Path, help="write the figures here")
    a = ap.parse_args(argv)
    res: dict = {"cpus": os.cpu_count(), "load_average": os.getloadavg(), "runs": []}
    runs = [(vp, "p2p") for vp in ((1, 2, 4) if a.vp else (1,))] + ([(1, "all_gather")] if a.all_gather else [])
    for vp, comm in runs:
        r = timed(vp, comm)
        res["runs"].append(r)
        print(f"vp {vp}, {comm}: {r['wall_s']:.1f} s wall, {r['cpu_s']:.1f} s CPU; iteration {r['iteration_s']} s, "
              f"{r['model_tflops_per_gpu']} model TFLOP/s per GPU (published {PUBLISHED_TFLOPS:g}: "
              f"{r['model_vs_published']:+.1%}), peak {r['peak_gib']} GiB <= checker {r['checker_bound_gib']} GiB, "
              f"K/V ring exposed {r['ring_exposed_ms']} ms", flush=True)
    if a.json:
        a.json.parent.mkdir(parents=True, exist_ok=True)
        a.json.write_text(json.dumps(res, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
