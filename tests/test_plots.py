"""Report plots (distplan.api.plots, distplan.studies.plots): every figure names what it
shows, has a legend, and keeps a bounded size from a few devices to 1,024.

Plans are built by hand (no MILP); simulations are short. Figures are written with
matplotlib's Agg canvas (the plot modules never touch pyplot)."""
from __future__ import annotations

import struct
from pathlib import Path
from types import SimpleNamespace

import pytest

pytest.importorskip("matplotlib")

from distplan.api import SimOptions, problem, simulate  # noqa: E402
from distplan.api.plots import (MAX_FIG_IN, MAX_TIMELINE_ROWS, device_grid, plot_placement,  # noqa: E402
                                plot_timeline, write_report)
from distplan.core.plan import Plan, Stage  # noqa: E402
from distplan.sim.trace import write_chrome_trace  # noqa: E402

DPI = 110   # what the plot modules save at


def striped_plan(p, n_stages: int, precisions=None) -> Plan:
    """Ops cut into ``n_stages`` equal runs of the topological order; stage k on the k-th
    block of devices (so with more devices than stages each stage has replicas)."""
    V, D = p.n_ops, p.n_devices
    per = D // n_stages
    precs = precisions or (lambda v, k: p.precisions[-1])
    stage = tuple(v * n_stages // V for v in range(V))
    return Plan(op_stage=stage, op_precision=tuple(precs(v, stage[v]) for v in range(V)),
                stages=tuple(Stage(tuple(range(k * per, (k + 1) * per))) for k in range(n_stages)),
                microbatches=p.microbatches, schedule=p.schedule)


def png_size(path: Path) -> tuple[int, int]:
    with open(path, "rb") as f:
        head = f.read(24)
    assert head[:8] == b"\x89PNG\r\n\x1a\n"
    return struct.unpack(">II", head[16:24])


def title_of(fig) -> str:
    return fig.get_suptitle()


def legend_labels(fig) -> list[str]:
    legends = list(fig.legends) + [ax.get_legend() for ax in fig.axes if ax.get_legend() is not None]
    return [t.get_text() for lg in legends for t in lg.get_texts()]


def assert_bounded(fig, path: Path) -> None:
    w, h = fig.get_size_inches()
    assert w <= MAX_FIG_IN[0] + 1e-9 and h <= MAX_FIG_IN[1] + 1e-9
    pw, ph = png_size(path)
    assert pw <= MAX_FIG_IN[0] * DPI + 1 and ph <= MAX_FIG_IN[1] * DPI + 1


def ytick_labels(fig) -> list[str]:
    return [t.get_text() for ax in fig.axes for t in ax.get_yticklabels() if t.get_text()]


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    """bert-base on mcm4x4: 4 stages x 4 lanes, stages alternating int8/fp16 (casts)."""
    p = problem("bert-base", "mcm4x4", microbatches=8, low_bit_ops="all")
    plan = striped_plan(p, 4, lambda v, k: ("int8", "fp16")[k % 2])
    res = simulate(p, plan, SimOptions(trace=True))
    out = tmp_path_factory.mktemp("small")
    write_chrome_trace(res, p, out / "trace.json")
    return p, plan, res, out


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """mlp-xs on 1,024 H100s (128 nodes): 16 stages of 64 devices each."""
    p = problem("mlp-xs", "h100x1024", microbatches=64, low_bit_ops="all")
    plan = striped_plan(p, 16)
    res = simulate(p, plan, SimOptions(trace=True))
    out = tmp_path_factory.mktemp("cluster")
    write_chrome_trace(res, p, out / "trace.json")
    return p, plan, res, out


def test_small_placement(small):
    p, plan, _, out = small
    fig = plot_placement(p, plan, out / "placement.png")
    assert (out / "placement.png").stat().st_size > 1000
    t = title_of(fig)
    assert "bert-base" in t and "mcm4x4" in t and "inference" in t
    labels = legend_labels(fig)
    assert sum(lab.startswith("stage ") for lab in labels) == 4
    assert any("fp16" in lab for lab in labels) and any("int8" in lab for lab in labels)
    # 16 devices: every cell names its device and stage
    texts = [t.get_text() for t in fig.axes[0].texts]
    assert len(texts) == 16 and all("stage" in x for x in texts)
    assert_bounded(fig, out / "placement.png")


def test_small_timeline(small):
    p, plan, res, out = small
    fig = plot_timeline(out / "trace.json", out / "timeline.png", problem=p, plan=plan)
    assert (out / "timeline.png").stat().st_size > 1000
    t = title_of(fig)
    assert "bert-base" in t and "mcm4x4" in t and "inference" in t
    labels = legend_labels(fig)
    assert "compute, forward" in labels and "transfer (link)" in labels and "precision cast" in labels
    rows = ytick_labels(fig)
    assert any(r.startswith("c0_0") and r.endswith("s0") for r in rows)   # device row with its stage
    assert "folded" not in fig.axes[0].get_title()
    assert_bounded(fig, out / "timeline.png")


def test_timeline_title_keyword_and_training_classes(tmp_path):
    """``title=`` (as write_report passes it) wins; training traces show backward and
    the gradient all-reduce in the legend."""
    p = problem("mlp-xs", "dgx-a100", mode="training", microbatches=8, low_bit_ops="all")
    plan = striped_plan(p, 4)
    res = simulate(p, plan, SimOptions(trace=True))
    write_chrome_trace(res, p, tmp_path / "trace.json")
    fig = plot_timeline(tmp_path / "trace.json", tmp_path / "t.png", title="my title: mlp-xs on dgx-a100")
    assert title_of(fig) == "my title: mlp-xs on dgx-a100"
    labels = legend_labels(fig)
    assert {"compute, forward", "compute, backward", "transfer (link)", "gradient all-reduce"} <= set(labels)
    # without a problem the default title still says what was plotted
    fig = plot_timeline(tmp_path / "trace.json", tmp_path / "t2.png")
    assert "trace.json" in title_of(fig)


def test_write_report_writes_three_files(small, tmp_path):
    p, plan, res, _ = small
    paths = write_report(p, SimpleNamespace(plan=plan, sim=res), tmp_path / "rep")
    assert [x.name for x in paths] == ["placement.png", "trace.json", "timeline.png"]
    assert all(x.stat().st_size > 1000 for x in paths)


def test_cluster_placement_is_a_compact_grid(cluster):
    p, plan, _, out = cluster
    grid = device_grid(p.topology)
    assert len(grid.blocks) == 128 and (grid.cell >= 0).sum() == 1024
    fig = plot_placement(p, plan, out / "placement.png")
    t = title_of(fig)
    assert "mlp-xs" in t and "h100x1024" in t and "inference" in t
    assert not fig.axes[0].texts                    # no per-device labels at this scale
    assert sum(lab.startswith("stage ") for lab in legend_labels(fig)) == 16
    assert len(ytick_labels(fig)) <= 32             # node labels, thinned
    assert_bounded(fig, out / "placement.png")


def test_cluster_timeline_folds_rows(cluster):
    p, plan, _, out = cluster
    fig = plot_timeline(out / "trace.json", out / "timeline.png", problem=p, plan=plan)
    t = title_of(fig)
    assert "mlp-xs" in t and "h100x1024" in t
    assert {"compute, forward", "transfer (link)"} <= set(legend_labels(fig))
    rows = ytick_labels(fig)
    assert len(rows) <= MAX_TIMELINE_ROWS
    assert any(r.startswith("nodes ") and "dev)" in r for r in rows)
    assert any(r.startswith("nodes ") and "links)" in r for r in rows)   # rails fold with their GPUs
    assert "folded" in fig.axes[0].get_title()
    assert_bounded(fig, out / "timeline.png")


def test_many_stages_use_a_colour_bar(tmp_path):
    """1,024 one-device stages on a 32x32 mesh: a colour bar instead of 1,024 legend rows."""
    p = problem("mlp-xs", "mcm32x32", low_bit_ops="all")
    V, D = p.n_ops, p.n_devices
    plan = Plan(op_stage=tuple(v * D // V for v in range(V)), op_precision=("int8",) * V,
                stages=tuple(Stage((d,)) for d in range(D)), microbatches=16, schedule="stream")
    fig = plot_placement(p, plan, tmp_path / "placement.png")
    assert "mcm32x32" in title_of(fig)
    assert len(fig.axes) == 2                       # the image and its colour bar
    assert "stage" in fig.axes[1].get_ylabel()
    assert legend_labels(fig)                       # still a legend (unused devices)
    assert_bounded(fig, tmp_path / "placement.png")


def test_study_plots_name_workloads_and_topologies(tmp_path):
    from distplan.studies.plots import study_figures
    from distplan.studies.store import FIELDS, append_rows

    base = {f: "" for f in FIELDS} | {"precisions": "fp16,int8", "mode": "inference", "time_limit_s": "1",
                                      "finished_at": "now", "n_ops": "5"}
    rows = []
    for w, t in (("bert-base", "mcm4x4"), ("gpt2", "h100x1024")):
        for seed in range(2):
            k = base | {"workload": w, "topology": t, "seed": str(seed)}
            rows.append(k | {"method": "milp", "status": "optimal", "gap": "0.01", "seconds": "2",
                             "throughput_per_s": "10"})
            rows.append(k | {"method": "sa", "status": "found", "throughput_per_s": "8", "seconds": "2"})
    append_rows(tmp_path / "r.csv", rows)
    figs = study_figures(tmp_path / "r.csv")
    assert set(figs) == {"gap_vs_time.png", "ratio_vs_baselines.png", "solve_time_vs_size.png"}
    for name, fig in figs.items():
        t = title_of(fig)
        assert all(x in t for x in ("bert-base", "gpt2", "mcm4x4", "h100x1024", "inference")), (name, t)
        assert legend_labels(fig), name
        w, h = fig.get_size_inches()
        assert w <= MAX_FIG_IN[0] and h <= MAX_FIG_IN[1]
