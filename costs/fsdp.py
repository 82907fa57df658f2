"""The analytic ZeRO-3 (FSDP) timeline of one stage's microbatch (``costs.sharding``).

The simulator's rules (``sim.fsdp_nodes``) in closed form, without contention: one
stream per device; a unit's all-gather or reduce-scatter takes ``a_i`` = (r-1) steps
of bytes/r over the slowest neighbour route of the ring (``all_gather_s``); with expert
parallelism its dense part so and then its routed experts' over their group's ring
(``unit_gather_s``). Forward:
the first gather starts with the pass, unit i+1's when unit i starts, unit i starts
once its gather is done. Backward (units last to first): unit i-1's gather starts when
unit i starts and the stream is free, unit i's reduce-scatter after its backward and
that gather; the pass ends when its last reduce-scatter does. A unit's start marker
runs once its gather is done, even while its first op still waits for its input, so a
pass that waits (the fill's forwards past stage 0, the drain's backwards before the last
stage) hides its first gathers in that wait (``fsdp_hidden_s``).

"Without contention" holds where a device's rings share no link, or where every hop of
them runs at one speed (a device then sends as fast as it receives, and its chunks are
gone when its gather is done; the hops' latencies may differ). With expert parallelism across nodes neither holds: the
dense ring's node-crossing hop is slower than its NVLink hops, so a device's outgoing
chunks lag its gather, and the next unit's expert-data ring queues behind them on the
same rail (llama-style MoE, dp 16 x ep 8 on two H100 nodes: 8.4 % faster than the
simulator). ``rings_contend`` says so and ``estimate_iteration`` refuses such plans.
"""
from __future__ import annotations

from collections.abc import Sequence

from distplan.costs.collectives import all_gather_s, rings_share_links
from distplan.costs.sharding import expert_reduces, fsdp_rings, fsdp_units, gradient_reductions


def unit_gather_s(problem, st, unit: Sequence[int], qs: Sequence[int], ops: set[int]) -> float:
    """``a_i``: a unit's all-gather on rank 0's rings (``sharding.fsdp_rings``), one after
    the other; the expert-data-parallel groups' rings run side by side, the slowest
    counted."""
    by_kind: dict[bool, float] = {}
    for members, nbytes in fsdp_rings(st, problem, unit, qs, ops):
        ring = [st.devices[i * st.tensor_parallel] for i in members]
        dense = len(members) == st.replicas
        by_kind[dense] = max(by_kind.get(dense, 0.0), all_gather_s(problem, ring, nbytes))
    return sum(by_kind.values())


def rings_contend(problem, st) -> bool:
    """Whether the ZeRO-3 rings of stage ``st`` (every tensor-parallel rank's dense and
    expert-data rings) can queue behind one another (module docstring): expert
    parallelism with groups of 2 or more, the rings sharing a link, and their hops'
    routes not all of one bottleneck bandwidth (hops of one speed but different
    latencies, as on a ring of equal links, stay exact: tests/test_expert_parallel.py)."""
    if st.zero < 3 or st.replicas < 2 or not expert_reduces(st):
        return False
    topo, tp = problem.topology, st.tensor_parallel
    rings = [[st.devices[i * tp + j] for i in members] for j in range(tp)
             for members, _ in gradient_reductions(st, 2.0, 1.0)]
    if not rings_share_links(topo, rings):
        return False
    speeds = {topo.route_bw_bytes_per_s(a, b) for ring in rings for a, b in zip(ring, ring[1:] + ring[:1])}
    return len(speeds) > 1


def fsdp_stage_times(problem, plan, k: int, ops: Sequence[int], f_op, b_op, qs: Sequence[int],
                     wait_s: float = 0.0) -> tuple[float, float] | None:
    """(forward, backward) seconds of stage k's microbatch with its ZeRO-3 traffic, the
    ops' own times ``f_op``/``b_op`` (aligned with ``ops``) run back to back; None when the
    stage does not gather (ZeRO < 3, one replica, no parameters). ``wait_s``: the pass's
    first op (the forward's first, the backward's last op) waits this long for its input
    after the pass starts, while the stream gathers ahead."""
    st = plan.stages[k]
    if not problem.training or st.zero < 3 or st.replicas < 2:
        return None
    units = fsdp_units(problem, ops)
    if not units:
        return None
    mine = set(ops)
    a = [unit_gather_s(problem, st, u, qs, mine) for u in units]
    first = {u[0]: i for i, u in enumerate(units)}
    last = {u[-1]: i for i, u in enumerate(units)}
    n = len(units)
    # forward: a unit's start marker runs once its gather is done, and starts the next gather
    t, done = 0.0, [0.0] * n
    done[0] = a[0]
    for j, (v, f) in enumerate(zip(ops, f_op)):
        i = first.get(v)
        if i is not None:
            t = max(t, done[i])
            if i + 1 < n:
                done[i + 1] = t + a[i + 1]
        t = (max(t, wait_s) if j == 0 else t) + float(f)
    fwd = t
    # backward, ops last to first; ``free``: when the device's stream is idle
    t, free = 0.0, a[n - 1]
    done = [0.0] * n
    done[n - 1] = free
    for j, (v, b) in enumerate(zip(reversed(list(ops)), reversed(list(b_op)))):
        i = last.get(v)
        if i is not None:
            t = max(t, done[i])
            if i > 0:
                free = done[i - 1] = max(t, free) + a[i - 1]
        t = (max(t, wait_s) if j == 0 else t) + float(b)
        i = first.get(v)
        if i is not None:   # the unit's backward is over: reduce-scatter its gradients
            free = max(t, free) + a[i]
    return fwd, max(t, free)


def fsdp_hidden_s(problem, plan, k: int, ops: Sequence[int], f_op, b_op, qs: Sequence[int]) -> tuple[float, float]:
    """(forward, backward) seconds of stage k's gathers that a pass waiting long for its
    input hides (its times less those after the input arrives; 0, 0 without ZeRO-3)."""
    now = fsdp_stage_times(problem, plan, k, ops, f_op, b_op, qs)
    if now is None:
        return 0.0, 0.0
    w = 2.0 * (now[0] + now[1])   # longer than any pass: every gather that can run ahead has
    late = fsdp_stage_times(problem, plan, k, ops, f_op, b_op, qs, wait_s=w)
    return now[0] - (late[0] - w), now[1] - (late[1] - w)
