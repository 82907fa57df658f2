"""ZeRO / FSDP: what a training stage shards over its data-parallel replicas (``Stage.zero``).

- 0: nothing; 1 (ZeRO-1, Megatron's distributed optimizer): the fp32 optimizer state;
  2 (ZeRO-2): the gradients too (the same communication as ZeRO-1: gradients
  reduce-scattered, parameters all-gathered after the step); 3 (ZeRO-3, FSDP): the
  parameters as well. A ZeRO-3 stage gathers each *unit* (a contiguous run of its ops of
  one ``l<i>.`` layer, or of unnamed ops such as the embedding) before the unit's forward
  and again before its backward, prefetching the next unit once a unit starts, and
  reduce-scatters the unit's gradients after its backward; its resident bytes are 1/r of
  its static bytes plus the gathered units and gradients in flight (``gather_buffer_bytes``).
Tied parameters read on another stage are held whole (unsharded) at every level.

With expert parallelism (``Stage.expert_parallel`` = ep) the routed experts' parameters
(``Operator.expert_param_elems``) are reduced, sharded and, under ZeRO-3, gathered over
their expert-data-parallel group only (``fsdp_rings``): the r / ep replicas that hold the same experts (Megatron-Core's expert data
parallel size, world / (ep x etp x pp)); the rest of the model over all r replicas.
"""
from __future__ import annotations

from collections.abc import Sequence

from distplan.costs.memory import OPTIMIZER_BYTES_PER_PARAM
from distplan.workloads.graph import layer_index

ZERO_LEVELS = (0, 1, 2, 3)
ZERO_HELP = "0 (none), 1 (optimizer state sharded), 2 (and gradients) or 3 (and parameters: FSDP)"


def zero_saved_fraction(zero: int, replicas: int) -> float:
    """The part of the sharded bytes a device does not hold: 1 - 1/r (0 without ZeRO or r < 2)."""
    return (1.0 - 1.0 / replicas) if zero and replicas > 1 else 0.0


def zero_saved_elem_bytes(zero: int, static_per_param: float, grad_per_param: float) -> float:
    """Sharded bytes per parameter at a ZeRO level: the optimizer state (1), with the
    gradients (2), everything static (3)."""
    if zero >= 3:
        return static_per_param
    if zero == 2:
        return OPTIMIZER_BYTES_PER_PARAM + grad_per_param
    return float(OPTIMIZER_BYTES_PER_PARAM) if zero == 1 else 0.0


def expert_data_groups(st) -> list[tuple[int, ...]]:
    """The stage's expert-data-parallel groups (``replica_groups_by_expert``)."""
    return replica_groups_by_expert(st.replicas, st.expert_parallel, st.expert_stride)


def replica_groups_by_expert(replicas: int, ep: int, stride: int) -> list[tuple[int, ...]]:
    """The expert-data-parallel groups of ``replicas`` in expert-parallel blocks of ``ep``
    members ``stride`` replicas apart (module docstring): for each position e of a block,
    the replicas i with ``(i // stride) % ep == e``, which hold the same experts; one
    group of every replica at ep 1."""
    return [tuple(i for i in range(replicas) if (i // stride) % ep == e) for e in range(ep)]


def expert_reduces(st) -> bool:
    """Does the stage reduce expert gradients over groups that are not all its replicas
    (ep > 1 and at least 2 replicas a group)?"""
    return st.expert_parallel > 1 and st.replicas // st.expert_parallel >= 2


def dense_elems(st, op) -> int:
    """``op``'s parameters reduced over all the stage's replicas: all but its routed
    experts' under expert parallelism (ep > 1)."""
    return op.param_elems - (op.expert_param_elems if st.expert_parallel > 1 else 0)


def gradient_reductions(st, total_bytes: float, expert_bytes: float) -> list[tuple[tuple[int, ...], float]]:
    """The data-parallel reductions of ``total_bytes`` of a stage's gradients, of which
    ``expert_bytes`` are routed experts': (replicas, bytes) pairs, everything over all
    replicas at ep 1, else the dense rest over all and the experts' over each
    expert-data-parallel group; pairs of fewer than 2 replicas or no bytes left out."""
    if st.expert_parallel == 1:
        parts = [(tuple(range(st.replicas)), total_bytes)]
    else:
        parts = [(tuple(range(st.replicas)), total_bytes - expert_bytes)] + \
            [(g, expert_bytes) for g in expert_data_groups(st)]
    return [(g, b) for g, b in parts if len(g) >= 2 and b > 0]


def zero_saved_bytes(problem, plan, v: int, q: int | None = None) -> float:
    """Static bytes per device op ``v``'s stage does not hold under its ZeRO level (split
    over its replicas; its routed experts over their r / ep), per tensor-parallel rank;
    ``q``: v's precision index (needed for levels 2 and 3; the plan's precision when
    None). 0 without ZeRO or in inference."""
    st = plan.stages[plan.op_stage[v]]
    frac = zero_saved_fraction(st.zero, st.replicas)
    if not problem.training or frac == 0.0:
        return 0.0
    op = problem.graph.ops[v]
    param = op.param_elems
    if param <= 0:
        return 0.0
    if q is None:
        q = problem.q_index(plan.op_precision[v])
    per = zero_saved_elem_bytes(st.zero, float(problem.static_bytes[v, q]) / param,
                                float(problem.bytes_per_elem[q]))
    if st.expert_parallel == 1 or not op.expert_param_elems:
        return param * per * frac / st.tensor_parallel
    expert_frac = zero_saved_fraction(st.zero, st.replicas // st.expert_parallel)
    sharded = (param - op.expert_param_elems) * frac + op.expert_param_elems * expert_frac
    return sharded * per / st.tensor_parallel


def fsdp_units(problem, ops: Sequence[int]) -> list[list[int]]:
    """A ZeRO-3 stage's gather units: maximal runs of ``ops`` (ascending) of one layer name
    (``layer_index``; unnamed ops form runs of their own) that hold parameters, their own
    or tied ones whose owner is among ``ops`` (a tied LM head gathers the embedding's
    table again)."""
    units: list[list[int]] = []
    last = object()
    for v in ops:
        li = layer_index(problem.graph.ops[v].name)
        if not units or li != last:
            units.append([])
            last = li
        units[-1].append(int(v))
    mine = {int(v) for v in ops}
    return [u for u in units if any(gathered_elems(problem, v, mine) > 0 for v in u)]


def gathered_elems(problem, v: int, ops: set[int]) -> float:
    """Parameters op v's unit gathers for it: its own, and the tied ones it reads when their
    owner is on its stage (``ops``; elsewhere they are held whole on v's devices)."""
    op = problem.graph.ops[v]
    o = int(problem.tied_owner[v])
    return float(op.param_elems) + (float(op.tied_elems) if o >= 0 and o in ops else 0.0)


def unit_param_bytes(problem, unit: Sequence[int], qs: Sequence[int], tp: int, ops: set[int] | None = None) -> float:
    """One rank's gathered parameters of a unit (``gathered_elems`` at each op's precision,
    / tp); ``ops``: the stage's ops (the unit alone when None)."""
    mine = set(unit) if ops is None else ops
    return sum(gathered_elems(problem, v, mine) * float(problem.bytes_per_elem[qs[v]]) for v in unit) / tp


def unit_expert_bytes(problem, unit: Sequence[int], qs: Sequence[int], tp: int) -> float:
    """One rank's routed-expert parameters of a unit (``Operator.expert_param_elems`` at
    each op's precision, / tp): the part a ZeRO-3 stage with ep > 1 gathers over its
    expert-data-parallel group instead of all its replicas."""
    return sum(float(problem.graph.ops[v].expert_param_elems) * float(problem.bytes_per_elem[qs[v]])
               for v in unit) / tp


def fsdp_rings(st, problem, unit: Sequence[int], qs: Sequence[int], ops: set[int]) -> list[tuple[tuple[int, ...], float]]:
    """The rings a ZeRO-3 unit is gathered (and its gradients reduce-scattered) on, one
    rank's bytes each: (replicas in ring order, bytes) as ``gradient_reductions`` splits
    them (at ep > 1 the dense part over all replicas, the routed experts' over each
    expert-data-parallel group; a device runs the rings whose group holds its replica,
    one after the other)."""
    total = unit_param_bytes(problem, unit, qs, st.tensor_parallel, ops)
    expert = unit_expert_bytes(problem, unit, qs, st.tensor_parallel) if st.expert_parallel > 1 else 0.0
    return gradient_reductions(st, total, expert)


def gather_buffer_bytes(unit_bytes: Sequence[float]) -> float:
    """What a ZeRO-3 rank holds beyond its shards at most (docs/concepts/simulator.md,
    "ZeRO and FSDP"), ``unit_bytes`` its units' gathered parameters (their full gradients
    as large): while unit i's backward runs, unit i gathered, unit i-1 prefetched, unit
    i's gradients and unit i+1's still being reduce-scattered; the forward's unit and its
    prefetch are fewer. The most over i of b[i-1] + 2 b[i] + b[i+1]."""
    b = [0.0, *unit_bytes, 0.0]
    return max((b[i - 1] + 2 * b[i] + b[i + 1] for i in range(1, len(b) - 1)), default=0.0)


def gather_memory_bytes(problem, plan) -> "np.ndarray":
    """(D,) the ZeRO-3 buffers each device may hold (``gather_buffer_bytes``) per stage it
    runs, each replica's units at its own precisions; zeros without ZeRO-3."""
    import numpy as np
    mem = np.zeros(problem.n_devices)
    if not problem.training:
        return mem
    for k, st in enumerate(plan.stages):
        if st.zero < 3 or st.replicas < 2:
            continue
        ops = plan.ops_in_stage(k)
        units, mine = fsdp_units(problem, ops), set(ops)
        for i in range(st.replicas):
            qs = [problem.q_index(p) for p in plan.replica_precisions(k, i)]
            per = gather_buffer_bytes([unit_param_bytes(problem, u, qs, st.tensor_parallel, mine) for u in units])
            mem[list(st.replica_group(i))] += per
    return mem


def check_zero(zero, dp: int | None = None, flag: str = "--zero") -> None:
    """``zero`` is a ZeRO level (0-3) and, above 0, has replicas to shard over (``dp`` >= 2
    when given). Raises DistplanError naming ``flag``."""
    from distplan.core.errors import DistplanError
    if isinstance(zero, bool) or not isinstance(zero, int) or zero not in ZERO_LEVELS:
        raise DistplanError(f"{flag} must be {ZERO_HELP}, got {zero!r}")
    if zero and dp is not None and dp < 2:
        raise DistplanError(f"{flag} {zero} shards over the data-parallel replicas: it needs --dp >= 2, got --dp {dp}")


def searched_zero_levels(dp: int, tp: int, pp: int, vp: int = 1, problem=None) -> tuple[int, ...]:
    """The ZeRO levels the cluster space and the grid baseline search at a point: none
    without replicas; ZeRO-3 only with one stage and no tensor parallelism, or tensor
    parallelism on links the gathers never use (``fsdp_links_apart``, given ``problem``):
    there the analytic iteration is the simulator's to rounding (with shared links the
    gathers contend with the all-reduces, with pp they unbalance the 1F1B closed form,
    up to 20 % off either way; the what-if simulates those)."""
    if dp < 2:
        return (0,)
    if pp == 1 and vp == 1 and (tp == 1 or (problem is not None and fsdp_links_apart(problem, dp, tp))):
        return ZERO_LEVELS
    return ZERO_LEVELS[:3]


def fsdp_links_apart(problem, dp: int, tp: int) -> bool:
    """On Megatron's layout of one stage (replica i's rank j on device i*tp + j): does no
    link carry two hops of the ZeRO-3 rings (rank j's over the replicas, into each device
    from its predecessor) nor a hop of a ring and one of a tensor-parallel group's ring?"""
    topo = problem.topology
    ring = [l for j in range(tp) for i in range(dp) for l in topo.route(((i - 1) % dp) * tp + j, i * tp + j)]
    group = {l for i in range(dp) for j in range(tp) for l in topo.route(i * tp + j, i * tp + (j + 1) % tp)}
    return len(set(ring)) == len(ring) and not set(ring) & group
