"""Plots of a study CSV (matplotlib, Agg backend), written as PNG files:

- ``gap_vs_time.png``: the MILP's proven relative gap against its wall seconds, one
  marker series per workload/topology; with several time limits, the mean per limit is
  joined by a line;
- ``ratio_vs_baselines.png``: per workload/topology, MILP simulated throughput divided
  by each baseline's (mean over seeds and the min..max range), with the 1.0 and 1.10
  lines; a ratio above 1 means the MILP plan is faster;
- ``solve_time_vs_size.png``: the MILP's wall seconds against the graph's operator
  count, one series per topology.

Titles name the workloads, topologies and modes the CSV covers; legends sit beside the
axes (at most ``MAX_LEGEND_ENTRIES`` series). Built without pyplot
(:func:`study_figures` returns them; :func:`make_plots` writes them).
"""
from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path

from distplan.core.atomic import save_figure
from distplan.studies.store import read_rows, row_key


def _f(x: str) -> float:
    try:
        return float(x)
    except (TypeError, ValueError):
        return math.nan


#: (width, height) cap of every figure, inches (as distplan.api.plots).
MAX_FIG_IN = (14.0, 12.0)
#: Legend entries shown before the rest are summarised as '+N more'.
MAX_LEGEND_ENTRIES = 24
PLOT_NAMES = ("gap_vs_time.png", "ratio_vs_baselines.png", "solve_time_vs_size.png")


def _figure(width_in: float, height_in: float):
    from matplotlib.figure import Figure

    return Figure(figsize=(min(max(width_in, 4.0), MAX_FIG_IN[0]), min(max(height_in, 3.0), MAX_FIG_IN[1])),
                  layout="constrained")


def _suptitle(fig, text: str, fontsize: float = 10) -> None:
    """A figure title wrapped to the figure's width (a character about 0.55 x fontsize points wide)."""
    import textwrap

    width = max(30, int(fig.get_size_inches()[0] * 72 / (0.55 * fontsize)))
    fig.suptitle(textwrap.fill(text, width, break_on_hyphens=False, break_long_words=False), fontsize=fontsize)


def _names(values, most: int = 6) -> str:
    vals = sorted(set(values))
    shown = ", ".join(vals[:most])
    return shown + (f" +{len(vals) - most} more" if len(vals) > most else "")


def scope(rows: list[dict[str, str]]) -> str:
    """``bert-base, gpt2 on mcm4x4, h100x1024 (inference)``: what a study plot covers."""
    if not rows:
        return "no finished runs"
    return (f"{_names(r['workload'] for r in rows)} on {_names(r['topology'] for r in rows)} "
            f"({_names(r['mode'] or '?' for r in rows)})")


def _series_key(r: dict[str, str], modes: int) -> tuple[str, ...]:
    return (r["workload"], r["topology"], r["mode"]) if modes > 1 else (r["workload"], r["topology"])


def _legend(ax, handles=None, labels=None) -> None:
    """A legend outside the axes on the right, at most MAX_LEGEND_ENTRIES entries."""
    h, lab = ax.get_legend_handles_labels() if handles is None else (handles, labels)
    if len(h) > MAX_LEGEND_ENTRIES:
        extra = len(h) - MAX_LEGEND_ENTRIES + 1
        h, lab = h[:MAX_LEGEND_ENTRIES - 1], lab[:MAX_LEGEND_ENTRIES - 1]
        from matplotlib.patches import Patch

        h.append(Patch(color="none"))
        lab.append(f"+{extra} more series")
    ax.legend(h, lab, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0,
              frameon=False)


def study_figures(csv_path: str | Path) -> dict[str, object]:
    """The three plots of ``csv_path`` as matplotlib Figures, by file name (module
    docstring); each title names the workloads, topologies and modes it covers."""
    rows = [r for r in read_rows(csv_path) if r["status"] != "error"]
    milp = [r for r in rows if r["method"] == "milp"]
    n_modes = len({r["mode"] for r in rows})
    figs: dict[str, object] = {}

    # gap vs time
    fig = _figure(9, 5)
    ax = fig.add_subplot()
    groups = defaultdict(list)
    for r in milp:
        groups[_series_key(r, n_modes)].append(r)
    for key, rs in sorted(groups.items()):
        xs, ys = [_f(r["seconds"]) for r in rs], [100 * _f(r["gap"]) for r in rs]
        pts = ax.plot(xs, ys, "o", alpha=0.6, label="/".join(key))
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
    ax.set_title("markers: runs; lines: mean per time limit", fontsize=8)
    ax.grid(alpha=0.3)
    if groups:
        _legend(ax)
    else:
        ax.text(0.5, 0.5, "no MILP rows", ha="center", va="center", transform=ax.transAxes)
    _suptitle(fig, f"MILP optimality gap vs time: {scope(milp)}")
    figs[PLOT_NAMES[0]] = fig

    # throughput ratio vs baselines
    methods = sorted({r["method"] for r in rows} - {"milp"})
    keys = sorted(groups)
    fig = _figure(max(7, 0.5 * len(keys) * max(1, len(methods)) + 3), 5)
    ax = fig.add_subplot()
    width = 0.8 / max(1, len(methods))
    milp_by_run = {row_key(r): _f(r["throughput_per_s"]) for r in milp}
    for j, m in enumerate(methods):
        means, lo, hi = [], [], []
        for key in keys:
            vals = []
            for r in rows:
                if r["method"] == m and _series_key(r, n_modes) == key:
                    mt = milp_by_run.get(row_key(r), math.nan)
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
    rot = 30 if len(keys) > 6 else 0
    ax.set_xticklabels(["\n".join(k) for k in keys], fontsize=7 if len(keys) > 6 else 8, rotation=rot,
                       ha="right" if rot else "center")
    ax.set_ylabel("MILP throughput / baseline throughput")
    ax.set_title("bars: mean over seeds, whiskers: min..max; above 1: the MILP plan is faster", fontsize=8)
    _legend(ax)
    ax.grid(axis="y", alpha=0.3)
    _suptitle(fig, f"Simulated throughput, MILP plan vs baselines at equal budget: {scope(rows)}")
    figs[PLOT_NAMES[1]] = fig

    # solve time vs graph size
    fig = _figure(9, 5)
    ax = fig.add_subplot()
    by_topo = defaultdict(list)
    for r in milp:
        by_topo[r["topology"] if n_modes <= 1 else f"{r['topology']} ({r['mode']})"].append(
            (_f(r["n_ops"]), _f(r["seconds"])))
    for t, pts in sorted(by_topo.items()):
        ax.plot([a for a, _ in pts], [b for _, b in pts], "o", alpha=0.7, label=t)
    ax.set_xlabel("operators in the graph")
    ax.set_ylabel("MILP wall seconds")
    ax.set_yscale("log")
    ax.set_title("one series per topology", fontsize=8)
    ax.grid(alpha=0.3)
    if by_topo:
        _legend(ax)
    _suptitle(fig, f"MILP solve time vs graph size: {scope(milp)}")
    figs[PLOT_NAMES[2]] = fig
    return figs


def make_plots(csv_path: str | Path, out_dir: str | Path) -> list[Path]:
    """Write the three plots from ``csv_path`` into ``out_dir``; returns their paths."""
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, fig in study_figures(csv_path).items():
        save_figure(fig, out / name, "study plot", dpi=110)
        paths.append(out / name)
    return paths
