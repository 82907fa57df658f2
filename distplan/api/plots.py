"""Report plots: the stage placement on the device grid and a timeline of the simulated
schedule, read back from the Chrome trace the simulator writes (``sim.trace``).

Both name the workload, its mode and the topology in the title, carry a legend, and stay
readable from a handful of devices to 1,024. Placement: one cell per device coloured by
stage (grey: unused), laid out by ``pos`` on meshes, by node on clusters, else a
near-square grid; labels and arrows up to ``LABEL_DEVICES_UP_TO`` devices. Timeline: one
row per busy device or link track, folded (by node, else by runs) beyond ``max_rows``
with the subtitle saying how; colours for forward, backward, casts, transfers and
gradient all-reduce. Figures are built without pyplot (no global backend, nothing left
open): each function writes the PNG and returns its ``Figure``, at most ``MAX_FIG_IN``
inches. Written by ``SolveReport.write_report`` (``solve.py --report DIR``):
docs/guides/chiplets.md.
"""
from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from distplan.core.atomic import save_figure
from distplan.core.plan import Plan
from distplan.costs.problem import Problem

#: (width, height) cap of every figure, inches.
MAX_FIG_IN = (14.0, 12.0)
#: Placement: per-device text labels and pipeline arrows up to this many devices.
LABEL_DEVICES_UP_TO = 64
#: Placement: a legend entry per stage up to this many stages, a colour bar beyond.
LEGEND_STAGES_UP_TO = 18
#: Timeline: most rows drawn before tracks are folded.
MAX_TIMELINE_ROWS = 40
#: Cluster placement: a node's devices side by side up to this many, else wrapped.
NODE_ROW_CELLS = 16

UNUSED_COLOUR = "#d9d9d9"

#: Timeline classes: (key, legend label, colour), in legend order.
EVENT_CLASSES: tuple[tuple[str, str, str], ...] = (
    ("forward", "compute, forward", "tab:blue"),
    ("backward", "compute, backward", "tab:green"),
    ("cast", "precision cast", "tab:olive"),
    ("transfer", "transfer (link)", "tab:orange"),
    ("allreduce", "gradient all-reduce", "tab:red"),
    ("other", "other", "tab:gray"),
)


def _lanes(plan: Plan) -> int:
    """Replicas of the pipeline (as api.report.lanes; not imported: report imports this
    module, and sibling modules stay acyclic)."""
    return max((s.replicas for s in plan.stages), default=1)


def _precision_mix(plan: Plan) -> str:
    """``int8:120 fp16:26``: op count per precision, most used first."""
    counts: dict[str, int] = {}
    for p in plan.op_precision:
        counts[p] = counts.get(p, 0) + 1
    return " ".join(f"{k}:{v}" for k, v in sorted(counts.items(), key=lambda kv: -kv[1]))


def problem_title(problem: Problem, what: str) -> str:
    """``bert-base (inference) on mcm4x4, 16 devices: <what>``."""
    g, t = problem.graph, problem.topology
    return f"{g.name} ({g.mode}) on {t.name}, {t.n_devices} devices: {what}"


def _figure(width_in: float, height_in: float):
    from matplotlib.figure import Figure

    w = min(max(width_in, 4.0), MAX_FIG_IN[0])
    h = min(max(height_in, 2.5), MAX_FIG_IN[1])
    return Figure(figsize=(w, h), layout="constrained")


def _suptitle(fig, text: str, fontsize: float = 11) -> None:
    """The figure title, wrapped to the figure's width (a character ~0.55 x fontsize pt)."""
    import textwrap

    width = max(30, int(fig.get_size_inches()[0] * 72 / (0.55 * fontsize)))
    fig.suptitle(textwrap.fill(text, width, break_on_hyphens=False, break_long_words=False), fontsize=fontsize)


def _save(fig, path: str | Path, dpi: int = 110):
    save_figure(fig, path, "plot", dpi=dpi)
    return fig


# --------------------------------------------------------------------------- placement
@dataclass(frozen=True)
class DeviceGrid:
    """Where each device sits: ``cell[row, col]`` = device index, -1 for an empty cell.

    ``blocks``: (row0, col0, rows, cols, label) rectangles grouping devices (one per
    node of a cluster); ``how``: the layout in words."""

    cell: np.ndarray
    blocks: tuple[tuple[int, int, int, int, str], ...]
    how: str


def device_grid(topology) -> DeviceGrid:
    """The placement layout of ``topology`` (module docstring)."""
    devs = topology.devices
    D = len(devs)
    if D and all(d.pos is not None for d in devs):
        rows = max(d.pos[0] for d in devs) + 1
        cols = max(d.pos[1] for d in devs) + 1
        cell = np.full((rows, cols), -1)
        for i, d in enumerate(devs):
            cell[d.pos] = i
        return DeviceGrid(cell, (), f"{rows} x {cols} mesh (device pos)")
    nodes: dict[int, list[int]] = {}
    for i, d in enumerate(devs):
        nodes.setdefault(d.node, []).append(i)
    if len(nodes) > 1:
        per = max(len(v) for v in nodes.values())
        w = min(per, NODE_ROW_CELLS)
        h = math.ceil(per / w)
        n = len(nodes)
        # node blocks (h x w, one empty column between blocks) tiled about square
        bc = max(1, min(n, round(math.sqrt(n * h / w))))
        br = math.ceil(n / bc)
        gap_r = 1 if h > 1 else 0
        cell = np.full((br * (h + gap_r) - gap_r, bc * (w + 1) - 1), -1)
        blocks = []
        for j, (node, members) in enumerate(sorted(nodes.items())):
            r0, c0 = (j // bc) * (h + gap_r), (j % bc) * (w + 1)
            for k, dev in enumerate(members):
                cell[r0 + k // w, c0 + k % w] = dev
            blocks.append((r0, c0, h, w, f"node {node}"))
        return DeviceGrid(cell, tuple(blocks), f"{n} nodes of up to {per} devices, one block per node")
    cols = max(1, math.ceil(math.sqrt(2 * D)))   # about twice as wide as tall
    rows = max(1, math.ceil(D / cols))
    cell = np.full((rows, cols), -1)
    for i in range(D):
        cell[i // cols, i % cols] = i
    return DeviceGrid(cell, (), "devices in index order")


def _stage_colours(n_stages: int) -> list:
    """Distinct colours per stage, never grey (grey marks unused devices): tab10 / tab20
    without their greys while they last, a viridis ramp beyond."""
    from matplotlib import colormaps

    if n_stages <= 9:
        base = colormaps["tab10"]
        return [base(k) for k in (0, 1, 2, 3, 4, 5, 6, 8, 9)[:n_stages]]
    if n_stages <= LEGEND_STAGES_UP_TO:
        base = colormaps["tab20"]
        return [base(k) for k in (*range(14), 16, 17, 18, 19)[:n_stages]]
    base = colormaps["viridis"]
    return [base(k / max(n_stages - 1, 1)) for k in range(n_stages)]


def plot_placement(problem: Problem, plan: Plan, path: str | Path, *, title: str | None = None):
    """Draw the devices coloured by the stage they run; write a PNG to ``path`` and
    return the Figure. Small topologies get per-device labels and pipeline arrows."""
    from matplotlib.colors import BoundaryNorm, ListedColormap
    from matplotlib.patches import FancyArrowPatch, Patch, Rectangle

    topo = problem.topology
    D, K = topo.n_devices, plan.n_stages
    grid = device_grid(topo)
    rows, cols = grid.cell.shape
    stage_of = np.full(D, -1)
    for k, st in enumerate(plan.stages):
        for d in st.devices:
            stage_of[d] = k
    ops_of = [plan.ops_in_stage(k) for k in range(K)]
    labelled = D <= LABEL_DEVICES_UP_TO

    # value per cell: -2 empty, -1 unused device, k stage
    val = np.where(grid.cell >= 0, stage_of[np.maximum(grid.cell, 0)], -2)
    colours = _stage_colours(K)
    cmap = ListedColormap(["white", UNUSED_COLOUR] + colours)
    norm = BoundaryNorm(np.arange(-2.5, K + 0.5), cmap.N)

    cell_in = 1.0 if labelled else min(0.5, max(0.12, 9.0 / max(rows, cols)))
    legend_w = 2.6 if K <= LEGEND_STAGES_UP_TO else 1.6
    fig = _figure(cols * cell_in + legend_w + 0.8, rows * cell_in + 1.3)
    fig_w, fig_h = fig.get_size_inches()
    cell_in = min((fig_w - legend_w - 0.8) / cols, (fig_h - 1.3) / rows)   # after the size cap
    ax = fig.add_subplot()
    # aspect 'auto' (the figure size keeps cells about square): constrained layout
    # mis-places the labels of a fixed-aspect image beside a tall legend
    ax.imshow(val, cmap=cmap, norm=norm, interpolation="nearest", aspect="auto")
    if rows * cols <= 4096:   # cell borders (thin white lines) while they stay visible
        ax.set_xticks(np.arange(-0.5, cols, 1), minor=True)
        ax.set_yticks(np.arange(-0.5, rows, 1), minor=True)
        ax.grid(which="minor", color="white", lw=0.6 if labelled else 0.3)
        ax.tick_params(which="minor", length=0)
    for (r0, c0, h, w, _) in grid.blocks:
        ax.add_patch(Rectangle((c0 - 0.5, r0 - 0.5), w, h, fill=False, ec="0.25",
                               lw=0.8 if len(grid.blocks) <= 64 else 0.4))
    _placement_ticks(ax, grid, labelled)

    if labelled:
        fs = min(8.0, max(4.5, 7.0 * cell_in))
        for (r, c), d in np.ndenumerate(grid.cell):
            if d < 0:
                continue
            k = int(stage_of[d])
            text = topo.devices[d].name
            if k >= 0:
                precs = "/".join(sorted({plan.op_precision[v] for v in ops_of[k]})) or "relay"
                text += f"\nstage {k}\n{len(ops_of[k])} ops\n{precs}"
            ax.text(c, r, text, ha="center", va="center", fontsize=fs, zorder=3,
                    bbox=dict(boxstyle="round,pad=0.15", fc="white", ec="none", alpha=0.75))
        if K <= 32:
            where = {int(d): (c, r) for (r, c), d in np.ndenumerate(grid.cell) if d >= 0}
            firsts = [st.devices[0] for st in plan.stages]
            for a, b in zip(firsts, firsts[1:]):
                if a != b:
                    ax.add_patch(FancyArrowPatch(where[a], where[b], arrowstyle="-|>", mutation_scale=10,
                                                 color="red", lw=1.2, shrinkA=14, shrinkB=14, zorder=4))

    used = [k for k in range(K) if ops_of[k]]
    handles = []
    if K <= LEGEND_STAGES_UP_TO:
        for k in range(K):
            precs = "/".join(sorted({plan.op_precision[v] for v in ops_of[k]}))
            what = f"{len(ops_of[k])} ops {precs}" if ops_of[k] else "relay"
            devs = len(plan.stages[k].devices)
            handles.append(Patch(color=colours[k], label=f"stage {k}: {what}"
                                 + (f", {devs} dev" if devs > 1 else "")))
    else:
        from matplotlib.cm import ScalarMappable
        from matplotlib.colors import Normalize

        sm = ScalarMappable(norm=Normalize(-0.5, K - 0.5), cmap=ListedColormap(colours))
        cb = fig.colorbar(sm, ax=ax, shrink=0.8, pad=0.02)
        cb.set_label(f"pipeline stage (0..{K - 1})")
    if (stage_of < 0).any():
        handles.append(Patch(color=UNUSED_COLOUR, label=f"unused ({int((stage_of < 0).sum())} devices)"))
    if labelled and K <= 32 and K > 1:
        from matplotlib.lines import Line2D

        handles.append(Line2D([], [], color="red", marker=">", lw=1.2, label="pipeline order"))
    if not handles:   # every device in a stage, stages on a colour bar: still say what the colours are
        handles.append(Patch(color=colours[0], label="coloured by stage (colour bar)"))
    ax.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0,
              fontsize=7, title="stages", title_fontsize=8, frameon=False)
    _suptitle(fig, title or problem_title(problem, "stage placement"))
    ax.set_title(f"{len(used)} of {K} stages hold ops, {_lanes(plan)} lane(s), "
                 f"{int((stage_of >= 0).sum())}/{D} devices used; {_precision_mix(plan)}\n"
                 f"layout: {grid.how}", fontsize=8)
    return _save(fig, path)


def _placement_ticks(ax, grid: DeviceGrid, labelled: bool) -> None:
    rows, cols = grid.cell.shape
    if grid.blocks:
        # label block rows with the nodes they hold, at most ~32 labels
        starts = sorted({r0 for r0, *_ in grid.blocks})
        step = max(1, math.ceil(len(starts) / 32))
        ticks, labels = [], []
        for r0 in starts[::step]:
            names = [lab.split()[-1] for (r, _, _, _, lab) in grid.blocks if r == r0]
            h = next(b[2] for b in grid.blocks if b[0] == r0)
            ticks.append(r0 + (h - 1) / 2)
            labels.append(f"node {names[0]}" if len(names) == 1 else f"nodes {names[0]}-{names[-1]}")
        ax.set_yticks(ticks, labels, fontsize=6 if len(ticks) > 16 else 7)
        ax.set_xticks([])
        return
    if labelled:
        ax.set_xticks([])
        ax.set_yticks([])
        return
    step_r = max(1, math.ceil(rows / 16))
    step_c = max(1, math.ceil(cols / 16))
    ax.set_yticks(range(0, rows, step_r))
    ax.set_xticks(range(0, cols, step_c))
    ax.tick_params(labelsize=7)
    ax.set_xlabel("column", fontsize=8)
    ax.set_ylabel("row", fontsize=8)


# --------------------------------------------------------------------------- timeline
def event_class(cat: str, name: str) -> str:
    """Legend class of a trace event: forward/backward compute, cast, transfer,
    all-reduce (``sim.simulate`` names casts 'cast ...' / 'cast_grad ...')."""
    if name.startswith("cast"):
        return "cast"
    if cat in ("forward", "backward", "transfer", "allreduce"):
        return cat
    return "other"


@dataclass(frozen=True)
class _Track:
    pid: int
    tid: int
    name: str


def read_trace(trace_path: str | Path) -> tuple[dict[tuple[int, int], str], list[dict[str, Any]]]:
    """(track -> thread name, complete 'X' events) of a Chrome trace file."""
    doc: Any = json.loads(Path(trace_path).read_text())
    events = doc["traceEvents"] if isinstance(doc, dict) else doc
    names: dict[tuple[int, int], str] = {}
    for e in events:
        if e.get("ph") == "M" and e.get("name") == "thread_name":
            names[(e.get("pid"), e.get("tid"))] = e["args"]["name"]
    spans = [e for e in events if e.get("ph") == "X"]
    return names, spans


def _group_key(track: _Track, problem: Problem | None) -> str:
    """The node a track belongs to (for folding): a device's node, a link's device end's
    node, 'fabric' for switch-to-switch links; without a problem, the name's prefix
    before '.' (preset cluster devices are ``n<i>.gpu<j>``)."""
    from distplan.sim.trace import PID_DEVICES, PID_LINKS

    if problem is not None:
        topo = problem.topology
        if track.pid == PID_DEVICES and 0 <= track.tid < topo.n_devices:
            return f"node {topo.devices[track.tid].node}"
        if track.pid == PID_LINKS and 0 <= track.tid < len(topo.links):
            link = topo.links[track.tid]
            names = {d.name: d.node for d in topo.devices}
            for end in (link.src, link.dst):
                if end in names:
                    return f"node {names[end]}"
            return "fabric"
        return "?"
    base = track.name.split(" (")[0].split("->")
    prefixes = {b.split(".")[0] for b in base if "." in b}
    return f"node {sorted(prefixes)[0]}" if len(prefixes) == 1 else ("fabric" if len(base) > 1 else "?")


def _node_sort(key: str) -> tuple:
    tail = key.split()[-1]
    return (0, int(tail), "") if key.startswith("node ") and tail.isdigit() else (1, 0, key)


def _fold(tracks: list[_Track], budget: int, problem: Problem | None, what: str) -> tuple[list[list[_Track]], list[str], str]:
    """Rows (lists of tracks) and their labels: one per track while they fit ``budget``,
    else grouped by node (when that helps; switch-to-switch links keep a row of their
    own), then runs of consecutive nodes merged."""
    if len(tracks) <= budget:
        return [[t] for t in tracks], [t.name for t in tracks], ""
    unit = "dev" if what == "device" else "links"
    groups: dict[str, list[_Track]] = {}
    for t in tracks:
        groups.setdefault(_group_key(t, problem), []).append(t)
    nodes = sorted((k for k in groups if k.startswith("node ")), key=_node_sort)
    if len(nodes) <= 1 or len(groups) == len(tracks):   # no node structure: runs of tracks
        size = math.ceil(len(tracks) / budget)
        rows = [tracks[i:i + size] for i in range(0, len(tracks), size)]
        labels = [(f"{what}s {r[0].tid}-{r[-1].tid} ({len(r)})" if len(r) > 1 else r[0].name) for r in rows]
        return rows, labels, f"{len(tracks)} {what} tracks folded into {len(rows)} rows of consecutive tracks"
    rest = [k for k in groups if not k.startswith("node ")]
    size = math.ceil(len(nodes) / max(1, budget - len(rest)))
    rows, labels = [], []
    for i in range(0, len(nodes), size):
        chunk = nodes[i:i + size]
        members = [t for k in chunk for t in groups[k]]
        first, last = chunk[0].split()[-1], chunk[-1].split()[-1]
        rows.append(members)
        labels.append(f"node {first} ({len(members)} {unit})" if len(chunk) == 1
                      else f"nodes {first}-{last} ({len(members)} {unit})")
    for k in rest:
        rows.append(groups[k])
        labels.append(f"{'inter-node fabric' if k == 'fabric' else k} ({len(groups[k])} {unit})")
    return rows, labels, f"{len(tracks)} {what} tracks folded into {len(rows)} rows by node"


def _merge(intervals: list[tuple[float, float]], eps: float) -> list[tuple[float, float]]:
    """Union of (start, end) intervals, closing gaps shorter than ``eps``."""
    out: list[list[float]] = []
    for a, b in sorted(intervals):
        if out and a <= out[-1][1] + eps:
            out[-1][1] = max(out[-1][1], b)
        else:
            out.append([a, b])
    return [(a, b) for a, b in out]


def _microbatch(name: str) -> int:
    """The microbatch of a trace event named '... m<k>' (``sim.simulate``), else 0."""
    tail = name.rsplit(" ", 1)[-1]
    return int(tail[1:]) if tail[:1] == "m" and tail[1:].isdigit() else 0


def _time_unit(span_us: float) -> tuple[float, str]:
    if span_us >= 1e6:
        return 1e-6, "s"
    if span_us >= 1e3:
        return 1e-3, "ms"
    return 1.0, "us"


def plot_timeline(trace_path: str | Path, path: str | Path, *, title: str | None = None,
                  problem: Problem | None = None, plan: Plan | None = None,
                  max_rows: int = MAX_TIMELINE_ROWS):
    """Gantt chart of a Chrome trace (devices above, links below), coloured by event
    class; write a PNG to ``path`` and return the Figure.

    ``problem`` (optional) names the workload/topology in the default title and lets
    rows fold by node; ``plan`` (optional) adds each device's stage to its row label.
    At most ``max_rows`` rows are drawn (module docstring)."""
    from matplotlib.patches import Patch
    from matplotlib.ticker import MaxNLocator

    from distplan.sim.trace import PID_DEVICES

    names, spans = read_trace(trace_path)
    by_track: dict[tuple[int, int], list[dict[str, Any]]] = {}
    for e in spans:
        by_track.setdefault((e.get("pid"), e.get("tid")), []).append(e)
    keys = sorted(by_track)
    stage_of: dict[int, int] = {}
    if plan is not None:
        for k, st in enumerate(plan.stages):
            for d in st.devices:
                stage_of.setdefault(d, k)

    def name_of(pid, tid) -> str:
        n = names.get((pid, tid), f"{pid}/{tid}")
        if pid == PID_DEVICES and tid in stage_of:
            n += f" s{stage_of[tid]}"
        return n
    dev_tracks = [_Track(p, t, name_of(p, t)) for p, t in keys if p == PID_DEVICES]
    link_tracks = [_Track(p, t, name_of(p, t)) for p, t in keys if p != PID_DEVICES]
    n_tracks = len(dev_tracks) + len(link_tracks)
    if n_tracks <= max_rows:
        dev_budget, link_budget = len(dev_tracks), len(link_tracks)
    else:
        link_budget = min(len(link_tracks), max(1, max_rows // 3)) if link_tracks else 0
        dev_budget = max(1, max_rows - link_budget)
    panels = []
    notes = []
    for tracks, budget, what in ((dev_tracks, dev_budget, "device"), (link_tracks, link_budget, "link")):
        if not tracks:
            continue
        rows, labels, note = _fold(tracks, budget, problem, what)
        panels.append((what, rows, labels))
        if note:
            notes.append(note)

    t0 = min((e["ts"] for e in spans), default=0.0)
    t1 = max((e["ts"] + e.get("dur", 0.0) for e in spans), default=1.0)
    scale, unit = _time_unit(t1 - t0)
    eps = (t1 - t0) / 2000.0      # gaps below about a pixel are merged
    min_w = (t1 - t0) / 700.0     # and every bar is drawn at least ~1.5 pixels wide

    n_rows = sum(len(r) for _, r, _ in panels) or 1
    fig = _figure(12.0, 1.6 + 0.22 * n_rows + 0.5 * len(panels))
    if panels:
        axes = fig.subplots(len(panels), 1, sharex=True, squeeze=False,
                            height_ratios=[max(len(r), 1) for _, r, _ in panels])[:, 0]
    else:
        axes = [fig.add_subplot()]
        axes[0].text(0.5, 0.5, "no events in the trace", ha="center", va="center", transform=axes[0].transAxes)
    seen: set[str] = set()
    shaded = False
    colour = {k: c for k, _, c in EVENT_CLASSES}
    for ax, (what, rows, labels) in zip(axes, panels):
        for i, members in enumerate(rows):
            folded = len(members) > 1
            # (class, odd) -> intervals; a single track shades every other microbatch it
            # runs lighter, so back-to-back microbatches stay apart
            per_class: dict[tuple[str, bool], list[tuple[float, float]]] = {}
            for t in members:
                order: dict[int, int] = {}   # microbatch -> its rank on this track
                for e in sorted(by_track[(t.pid, t.tid)], key=lambda e: e["ts"]):
                    a = (e["ts"] - t0) * scale
                    b = a + max(e.get("dur", 0.0), 0.0) * scale
                    name = e.get("name", "")
                    odd = not folded and order.setdefault(_microbatch(name), len(order)) % 2 == 1
                    per_class.setdefault((event_class(e.get("cat", ""), name), odd), []).append((a, b))
            classes = [k for k, _, _ in EVENT_CLASSES if (k, False) in per_class or (k, True) in per_class]
            for j, k in enumerate(classes):
                if folded:   # one sub-lane per class: overlapping tracks stay visible
                    h = 0.8 / len(classes)
                    y0 = i - 0.4 + j * h
                else:
                    h, y0 = 0.8, i - 0.4
                for odd in (False, True):
                    iv = _merge(per_class.get((k, odd), []), eps * scale)
                    if iv:
                        ax.broken_barh([(a, max(b - a, min_w * scale)) for a, b in iv], (y0, h),
                                       facecolors=colour[k], alpha=0.55 if odd else 1.0, linewidth=0)
                        shaded = shaded or odd
                seen.add(k)
        ax.set_yticks(range(len(rows)), labels, fontsize=7 if len(rows) <= 24 else 6)
        ax.set_ylim(len(rows) - 0.5, -0.5)
        ax.set_ylabel("devices" if what == "device" else "links", fontsize=8)
        ax.grid(axis="x", alpha=0.3)
        ax.tick_params(axis="x", labelsize=8)
        ax.xaxis.set_major_locator(MaxNLocator(nbins=12))
    axes[-1].set_xlabel(f"time ({unit}) from the first event", fontsize=9)
    handles = [Patch(color=c, label=lab) for k, lab, c in EVENT_CLASSES if k in seen]
    if not handles:
        handles = [Patch(color=c, label=lab) for k, lab, c in EVENT_CLASSES[:4]]
    fig.legend(handles=handles, loc="outside lower center", ncols=len(handles), fontsize=8, frameon=False)
    if title is None:
        title = problem_title(problem, "simulated schedule") if problem is not None \
            else f"simulated schedule ({Path(trace_path).name})"
    _suptitle(fig, title)
    sub = f"{len(dev_tracks)} device and {len(link_tracks)} link tracks, {len(spans)} events"
    if shaded:
        sub += "; lighter shade: every other microbatch on a track"
    if notes:
        sub += "; " + "; ".join(notes) + "\na folded row shows, per event class, when any of its tracks was busy"
    axes[0].set_title(sub, fontsize=8)
    return _save(fig, path)


# --------------------------------------------------------------------------- report
def write_report(problem: Problem, best, folder: str | Path) -> list[Path]:
    """placement.png, trace.json and timeline.png for a ranked plan; returns the paths."""
    from distplan.sim.trace import write_chrome_trace

    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    plot_placement(problem, best.plan, out / "placement.png")
    write_chrome_trace(best.sim, problem, out / "trace.json")
    plot_timeline(out / "trace.json", out / "timeline.png",
                  title=problem_title(problem, "simulated schedule"), problem=problem, plan=best.plan)
    return [out / "placement.png", out / "trace.json", out / "timeline.png"]


__all__: Sequence[str] = ("plot_placement", "plot_timeline", "write_report", "device_grid", "problem_title",
                          "event_class", "read_trace")
