"""Report plots (matplotlib, Agg): stage placement on the device grid and a timeline of
the simulated schedule, read back from the Chrome trace the simulator writes."""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from distplan.costs.problem import Problem


def _device_xy(problem: Problem) -> list[tuple[float, float]]:
    topo = problem.topology
    if all(d.pos is not None for d in topo.devices):
        return [(d.pos[1], -d.pos[0]) for d in topo.devices]
    per_node: dict[int, int] = {}
    out = []
    for d in topo.devices:
        i = per_node.get(d.node, 0)
        per_node[d.node] = i + 1
        out.append((i, -d.node))
    return out


def plot_placement(problem: Problem, plan, path: str | Path) -> None:
    """Each device drawn as a box coloured by its stage, with the op count and precisions."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    xy = _device_xy(problem)
    fig, ax = plt.subplots(figsize=(6, 6))
    cmap = plt.get_cmap("viridis", max(plan.n_stages, 2))
    stage_of_dev: dict[int, int] = {}
    for k, st in enumerate(plan.stages):
        for d in st.devices:
            stage_of_dev[d] = k
    centres = {}
    for d, (x, y) in enumerate(xy):
        k = stage_of_dev.get(d)
        ops = plan.ops_in_stage(k) if k is not None else []
        colour = cmap(k) if ops else "lightgrey"
        ax.add_patch(plt.Rectangle((x - 0.4, y - 0.4), 0.8, 0.8, color=colour, alpha=0.85))
        label = problem.topology.devices[d].name
        if k is not None:
            precs = sorted({plan.op_precision[v] for v in ops})
            label += f"\nstage {k}\n{len(ops)} ops\n{'/'.join(precs) or 'relay'}"
        ax.text(x, y, label, ha="center", va="center", fontsize=7, zorder=3,
                bbox=dict(boxstyle="round,pad=0.2", fc="white", ec="none", alpha=0.8))
        centres[d] = (x, y)
    path_devs = [st.devices[0] for st in plan.stages]
    for a, b in zip(path_devs, path_devs[1:]):
        (x0, y0), (x1, y1) = centres[a], centres[b]
        ax.annotate("", xy=(x1, y1), xytext=(x0, y0), arrowprops=dict(arrowstyle="->", color="red", lw=1.5, shrinkA=22, shrinkB=22), zorder=4)
    xs = [p[0] for p in xy]
    ys = [p[1] for p in xy]
    ax.set_xlim(min(xs) - 0.6, max(xs) + 0.6)
    ax.set_ylim(min(ys) - 0.6, max(ys) + 0.6)
    ax.set_aspect("equal")
    ax.axis("off")
    ax.set_title(f"{problem.graph.name} on {problem.topology.name}: stage placement")
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)


def plot_timeline(trace_path: str | Path, path: str | Path, max_events: int = 20000) -> None:
    """Gantt chart of the complete ('X') events of a Chrome trace, one row per track."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    doc: Any = json.loads(Path(trace_path).read_text())
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    names = {}
    for e in events:
        if e.get("ph") == "M" and e.get("name") in ("thread_name", "process_name"):
            names[(e.get("pid"), e.get("tid") if e["name"] == "thread_name" else None)] = e["args"]["name"]
    spans = [e for e in events if e.get("ph") == "X"][:max_events]
    tracks = sorted({(e.get("pid"), e.get("tid")) for e in spans})
    row = {t: i for i, t in enumerate(tracks)}
    fig, ax = plt.subplots(figsize=(10, max(3, 0.25 * len(tracks))))
    for e in spans:
        r = row[(e.get("pid"), e.get("tid"))]
        ax.broken_barh([(e["ts"], max(e.get("dur", 0), 1e-3))], (r - 0.4, 0.8),
                       color="tab:blue" if e.get("cat", "") != "transfer" else "tab:orange")
    ax.set_yticks(range(len(tracks)))
    ax.set_yticklabels([names.get((p, t), names.get((p, None), f"{p}/{t}")) for p, t in tracks], fontsize=6)
    ax.set_xlabel("time (us)")
    ax.set_title("simulated schedule")
    fig.savefig(path, dpi=120, bbox_inches="tight")
    plt.close(fig)


def write_report(problem: Problem, best, folder: str | Path) -> list[Path]:
    """placement.png, trace.json and timeline.png for a ranked plan; returns the paths."""
    from distplan.sim.trace import write_chrome_trace

    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    plot_placement(problem, best.plan, out / "placement.png")
    write_chrome_trace(best.sim, problem, out / "trace.json")
    plot_timeline(out / "trace.json", out / "timeline.png",
                  title=f"{problem.graph.name} on {problem.topology.name}: simulated schedule")
    return [out / "placement.png", out / "trace.json", out / "timeline.png"]
