"""Plots of a study CSV (matplotlib, Agg backend), written as PNG files:

- ``gap_vs_time.png``: the MILP's proven relative gap against its wall seconds, one
  marker series per workload/topology; with several time limits, the mean per limit is
  joined by a line;
- ``ratio_vs_baselines.png``: per workload/topology, MILP simulated throughput divided
  by each baseline's (mean over seeds and the min..max range), with the 1.0 and 1.10
  lines; a ratio above 1 means the MILP plan is faster;
- ``solve_time_vs_size.png``: the MILP's wall seconds against the graph's operator
  count, one series per topology.
"""
from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path

from distplan.studies.store import read_rows


def _f(x: str) -> float:
    try:
        return float(x)
    except (TypeError, ValueError):
        return math.nan


def make_plots(csv_path: str | Path, out_dir: str | Path) -> list[Path]:
    """Write the three plots from ``csv_path`` into ``out_dir``; returns their paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in read_rows(csv_path) if r["status"] != "error"]
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    milp = [r for r in rows if r["method"] == "milp"]
    paths = []

    # gap vs time
    fig, ax = plt.subplots(figsize=(7, 4.5))
    groups = defaultdict(list)
    for r in milp:
        groups[(r["workload"], r["topology"])].append(r)
    for (w, t), rs in sorted(groups.items()):
        xs, ys = [_f(r["seconds"]) for r in rs], [100 * _f(r["gap"]) for r in rs]
        pts = ax.plot(xs, ys, "o", alpha=0.6, label=f"{w}/{t}")
        by_limit = defaultdict(list)
        for r in rs:
            by_limit[_f(r["time_limit_s"])].append((_f(r["seconds"]), 100 * _f(r["gap"])))
        if len(by_limit) > 1:
            lim = sorted(by_limit)
            ax.plot([sum(a for a, _ in by_limit[x]) / len(by_limit[x]) for x in lim],
                    [sum(b for _, b in by_limit[x]) / len(by_limit[x]) for x in lim], "-",
                    color=pts[0].get_color())
    ax.set_xlabel("MILP wall seconds (solve + simulation of its plans)")
    ax.set_ylabel("proven relative gap (%)")
    ax.set_title("MILP optimality gap vs time")
    ax.grid(alpha=0.3)
    if groups:
        ax.legend(fontsize=7)
    paths.append(_save(fig, out / "gap_vs_time.png"))

    # throughput ratio vs baselines
    methods = sorted({r["method"] for r in rows} - {"milp"})
    keys = sorted(groups)
    fig, ax = plt.subplots(figsize=(max(6, 1.2 * len(keys) * max(1, len(methods)) / 2), 4.5))
    width = 0.8 / max(1, len(methods))
    milp_by_run = {(r["workload"], r["topology"], r["precisions"], r["seed"], r["time_limit_s"]):
                   _f(r["throughput_per_s"]) for r in milp}
    for j, m in enumerate(methods):
        means, lo, hi = [], [], []
        for (w, t) in keys:
            vals = []
            for r in rows:
                if r["method"] == m and (r["workload"], r["topology"]) == (w, t):
                    mt = milp_by_run.get((w, t, r["precisions"], r["seed"], r["time_limit_s"]), math.nan)
                    b = _f(r["throughput_per_s"])
                    vals.append(mt / b if b > 0 else math.nan)
            vals = [v for v in vals if math.isfinite(v)]
            mean = sum(vals) / len(vals) if vals else math.nan
            means.append(mean)
            lo.append(max(0.0, mean - min(vals)) if vals else 0.0)  # rounding can make these -1e-16
            hi.append(max(0.0, max(vals) - mean) if vals else 0.0)
        xs = [i + (j - (len(methods) - 1) / 2) * width for i in range(len(keys))]
        ax.bar(xs, means, width, yerr=[lo, hi], capsize=2, label=m)
    ax.axhline(1.0, color="k", lw=0.8)
    ax.axhline(1.1, color="r", lw=0.8, ls="--", label="1.10x")
    ax.set_xticks(range(len(keys)))
    ax.set_xticklabels([f"{w}\n{t}" for w, t in keys], fontsize=8)
    ax.set_ylabel("MILP throughput / baseline throughput")
    ax.set_title("Simulated throughput: MILP plan vs baselines at equal budget")
    ax.legend(fontsize=7)
    ax.grid(axis="y", alpha=0.3)
    paths.append(_save(fig, out / "ratio_vs_baselines.png"))

    # solve time vs graph size
    fig, ax = plt.subplots(figsize=(7, 4.5))
    by_topo = defaultdict(list)
    for r in milp:
        by_topo[r["topology"]].append((_f(r["n_ops"]), _f(r["seconds"])))
    for t, pts in sorted(by_topo.items()):
        ax.plot([a for a, _ in pts], [b for _, b in pts], "o", alpha=0.7, label=t)
    ax.set_xlabel("operators in the graph")
    ax.set_ylabel("MILP wall seconds")
    ax.set_yscale("log")
    ax.set_title("MILP solve time vs graph size")
    ax.grid(alpha=0.3)
    if by_topo:
        ax.legend(fontsize=7)
    paths.append(_save(fig, out / "solve_time_vs_size.png"))
    return paths


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    import matplotlib.pyplot as plt

    plt.close(fig)
    return path
