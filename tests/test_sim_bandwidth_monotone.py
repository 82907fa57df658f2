"""More bandwidth is never slower (issue 11): scaling every link's bandwidth up never
lengthens a run, on random plans (replicas, tensor parallelism, training and inference)
and on the cluster presets."""
from __future__ import annotations

import dataclasses

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from distplan.api.configs import megatron_plan
from distplan.api.problem import problem as make_problem
from distplan.sim import SimOptions, simulate
from distplan.testing.strategies import problem_and_plan


def _faster(p, factor: float):
    return dataclasses.replace(p, link_bw_bytes_per_s=np.asarray(p.link_bw_bytes_per_s, dtype=float) * factor)


@settings(max_examples=60, deadline=None)
@given(problem_and_plan(mode=st.sampled_from(["inference", "training"]), microbatches=st.integers(1, 6),
                        replicas=True, max_tp=2),
       st.floats(1.0, 64.0), st.sampled_from(["free", "ideal", "fifo", "fair"]))
def test_more_bandwidth_is_never_slower(case, factor, model):
    """Links without an arrival order (``free``, or ``ideal``: a static order) make the run a
    max-plus system, monotone in every duration. FIFO and fair links serve in arrival order,
    where list-scheduling anomalies are possible in principle; none has been found (300
    random plans checked when this was written), so they are held to it too."""
    p, plan = case
    opts = SimOptions(ideal=True) if model == "ideal" else SimOptions(link_model=model)
    slow, fast = simulate(p, plan, opts), simulate(_faster(p, factor), plan, opts)
    assert fast.makespan_s <= slow.makespan_s * (1 + 1e-12)


def test_more_bandwidth_is_never_slower_on_a_cluster():
    """FIFO links on gpt3 dp x tp x pp layouts of a100x32: 1x, 2x, 8x the bandwidth."""
    p = make_problem("gpt3-256x4x4", "a100x32", batch_size=1, seq_len=64, mode="training",
                     precisions=("bf16",), microbatches=8)
    for dp, tp, pp in ((2, 4, 4), (4, 8, 1), (8, 1, 4), (1, 8, 4)):
        plan = megatron_plan(p, dp, tp, pp, "bf16", None, "none", False, 0, "ring", False)
        times = [simulate(_faster(p, f), plan).iteration_s for f in (1.0, 2.0, 8.0)]
        assert times == sorted(times, reverse=True), (dp, tp, pp, times)
