"""Properties of the cost models over random graphs and topologies."""
from __future__ import annotations

import dataclasses

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from distplan.costs import ProblemOptions, build_problem
from distplan.costs.problem import LOW_BIT_KINDS, low_bit
from distplan.costs.collectives import route_s
from distplan.costs.compute import roofline_time_s
from distplan.core.precision import PRECISION_NAMES, precision
from distplan.testing.strategies import device_kinds, graphs, topologies


def _options(topo, data):
    supported = sorted({p for d in topo.devices for p in topo.kinds[d.kind].peak_flops_per_s})
    precs = data.draw(st.sets(st.sampled_from(supported), min_size=1))
    return ProblemOptions(precisions=tuple(precs), microbatches=data.draw(st.integers(1, 8)), low_bit_ops="all")


@settings(max_examples=60, deadline=None)
@given(graphs(), topologies(), st.data())
def test_costs_finite_nonnegative(g, topo, data):
    p = build_problem(g, topo, _options(topo, data))
    t = p.fwd_time_s + p.bwd_time_s
    for q in range(len(p.precisions)):
        for c in range(len(p.kind_names)):
            col = t[:, q, c]
            if p.supported[q, c]:
                assert np.isfinite(col).all() and (col >= 0).all()
            else:
                assert np.isinf(col).all()
    # the "matmul" policy: infinite exactly where an op may not use the precision
    if any(not low_bit(x) for x in p.precisions) or all(op.kind in LOW_BIT_KINDS for op in g.ops):
        m = build_problem(g, topo, dataclasses.replace(p.options, low_bit_ops="matmul"))
        tm = m.fwd_time_s + m.bwd_time_s
        for q in range(len(p.precisions)):
            for c in range(len(p.kind_names)):
                if p.supported[q, c]:
                    assert (np.isinf(tm[:, q, c]) == ~m.op_allowed[:, q]).all()
    for arr in (p.static_bytes, p.act_bytes, p.sensitivity, p.edge_elems, p.cast_s_per_elem):
        assert np.isfinite(arr).all() and (arr >= 0).all()
    assert (p.sensitivity[:, 0] == 0).all()


@settings(max_examples=100, deadline=None)
@given(device_kinds(), st.floats(0, 1e13), st.floats(0, 1e13), st.floats(0, 1e13), st.floats(0, 1e13), st.data())
def test_time_monotone_in_flops_and_bytes(kind, f1, f2, b1, b2, data):
    p = data.draw(st.sampled_from(sorted(kind.peak_flops_per_s)))
    lo_f, hi_f = sorted((f1, f2))
    lo_b, hi_b = sorted((b1, b2))
    assert roofline_time_s(lo_f, lo_b, kind, p) <= roofline_time_s(hi_f, lo_b, kind, p)
    assert roofline_time_s(lo_f, lo_b, kind, p) <= roofline_time_s(lo_f, hi_b, kind, p)


@settings(max_examples=60, deadline=None)
@given(graphs(), topologies(), st.floats(0, 1e10), st.floats(1.01, 100.0), st.data())
def test_transfer_time_anti_monotone_in_bandwidth(g, topo, nbytes, factor, data):
    n = topo.n_devices
    a, b = data.draw(st.integers(0, n - 1)), data.draw(st.integers(0, n - 1))
    faster = dataclasses.replace(topo, links=tuple(dataclasses.replace(l, bw_bytes_per_s=l.bw_bytes_per_s * factor)
                                                   for l in topo.links), _cache={})
    slow, fast = (build_problem(g, x, _options(x, data)) for x in (topo, faster))
    assert route_s(fast, a, b, nbytes) <= route_s(slow, a, b, nbytes)
    # store and forward by hand: per link of the route, its latency + bytes / bandwidth
    assert route_s(slow, a, b, nbytes) == sum(l.latency_s + nbytes / l.bw_bytes_per_s
                                             for l in (topo.links[i] for i in topo.route(a, b)))


@settings(max_examples=60, deadline=None)
@given(graphs(), topologies())
def test_lower_precision_never_costs_more_memory(g, topo):
    supported = sorted({p for d in topo.devices for p in topo.kinds[d.kind].peak_flops_per_s}, key=PRECISION_NAMES.index)
    p = build_problem(g, topo, ProblemOptions(precisions=tuple(supported), low_bit_ops="all"))
    sizes = [precision(q).bytes_per_elem for q in p.precisions]
    params = np.array([op.param_elems for op in g.ops], dtype=float)
    for i in range(len(sizes)):
        if p.training and p.precisions[i] == "fp8":   # keeps 16-bit weights, fp8 copies and gradients
            assert (p.static_bytes[:, i] == 17 * params).all()   # (costs.memory.static_bytes)
        for j in range(len(sizes)):
            if sizes[i] <= sizes[j]:
                if not (p.training and p.precisions[i] == "fp8"):
                    assert (p.static_bytes[:, i] <= p.static_bytes[:, j]).all()
                assert (p.act_bytes[:, i] <= p.act_bytes[:, j]).all()
