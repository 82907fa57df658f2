"""The GPU-cluster plan space: Megatron-style data x tensor x pipeline parallel training
plans, searched exactly under the analytic iteration (``costs.iteration``).

Declared space (``ClusterPoint``): one ``dp`` and ``tp`` for every stage, ``pp`` stages
laid out as Megatron does (``costs.megatron``), any contiguous layer split,
recomputation (``recompute_choices``), ZeRO 0-2 (ZeRO-3 at pp 1 with tp 1 or apart), sequence parallelism,
flat or hierarchical (overlapped) gradient reduction, one precision recipe per point,
1F1B or interleaved 1F1B (``virtual_stages``).
Points are visited in increasing lower bound (``LB0`` plus the unhideable reduction,
``exposure_lb_s``) until it reaches the K-th best iteration; small points have every
memory-feasible split evaluated, large ones the min-max split by bisection. Guarantee:
the reported bound (seconds per iteration) holds over the whole declared space under the
analytic model, and is the optimum when every visited point was solved exactly. The
clock (``core.clock.Clock``) stops between points, splits and options; ``cut_short`` says
what was skipped. Space, search and clock: docs/guides/gpu-training.md.
"""
from __future__ import annotations

import dataclasses
import heapq
import itertools
import math
import time
from collections.abc import Callable, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property

import numpy as np

from distplan.core.clock import Clock
from distplan.core.gap import gap
from distplan.core.errors import DistplanError, TimeUp
from distplan.core.plan import Plan, Stage
from distplan.costs.collectives import all_gather_s, gradient_reduction_parts, hierarchical_groups
from distplan.costs.evaluate import plan_memory_bytes
from distplan.costs.memory import held_per_op_bytes, remat_per_op_bytes
from distplan.costs.compute import optimizer_step_s
from distplan.costs.iteration import (Exceeds, estimate_iteration, estimate_latency, estimate_transfers,
                                      op_rank_times)
from distplan.costs.expert_parallel import expert_plan
from distplan.costs.megatron import fp8_training_precisions, megatron_plan, stage_of_ops
from distplan.costs.memory import OPTIMIZER_BYTES_PER_PARAM
from distplan.costs.problem import Problem
from distplan.costs.recompute import recomputed
from distplan.costs.sharding import (fsdp_units, replica_groups_by_expert, searched_zero_levels, unit_expert_bytes,
                                    unit_param_bytes, zero_saved_fraction)
from distplan.costs.tensor_parallel import tp_output_share
from distplan.model.cluster_ranks import bare_problem, cp_degrees, ep_degrees, timed_problem, zoo_origin
from distplan.workloads.colocate import index_groups
from distplan.workloads.graph import layer_index

RECOMPUTE_CHOICES = ("none", "selective", "full")
TRAINING_PRECISIONS = ("bf16", "fp16", "fp32")
#: a point's splits are all searched when there are at most this many (else the min-max split)
INNER_ENUM_MAX = 64
#: the largest tensor-parallel degree in the space (Megatron splits attention heads)
MAX_TP = 64
#: seconds per transfer the analytic iteration times one by one, and per op of a plan
#: (``estimate_s``; measured 5-8 us and ~0.02-0.08 s per 1,155-op gpt3-175b plan on one core)
ESTIMATE_S_PER_TRANSFER = 1e-5
ESTIMATE_S_PER_OP = 5e-5
#: relative slack on bounds summed in another order than the estimate sums the same terms
BOUND_SLACK = 1e-12


@dataclass(frozen=True, order=True)
class ClusterPoint:
    """One outer point: the degrees and the options that change the work per layer."""

    dp: int
    tp: int
    pp: int
    recompute: str
    zero: int
    sequence_parallel: bool
    precision: str = ""   # inference: the point's one precision; training: "" (the space's) or "fp8" (training_recipes)
    microbatch_size: int = 0   # samples per microbatch (0: the problem's own)
    vp: int = 1   # interleaved 1F1B: virtual stages per pipeline rank (equal layer chunks)
    cp: int = 1   # context parallelism: each sequence split over cp consecutive replicas (model.cluster_ranks)
    ep: int = 1   # expert parallelism: routed experts over ep data-parallel replicas (model.cluster_ranks)
    tp_comm_overlap: bool = False   # tp collectives pipelined with their GEMMs (costs.tp_overlap; tp > 1 with sp)

    @property
    def parallel_ranks(self) -> tuple[int, int]:
        """(cp, ep): on a tie in time the search prefers the point with fewer (the plain
        data-parallel plan over one that splits its sequences or experts for nothing)."""
        return self.cp, self.ep

    @property
    def replicas(self) -> int:
        """The plan's replicas a stage: dp x cp (a context rank counts as a replica)."""
        return self.dp * self.cp

    def label(self) -> str:
        extra = [f"recompute {self.recompute}"] if self.recompute != "none" else []
        extra += [f"ZeRO-{self.zero}"] * bool(self.zero) + ["sequence parallel"] * self.sequence_parallel
        extra += ["tp overlap"] * self.tp_comm_overlap
        extra += [self.precision] if self.precision else []
        extra += [f"microbatch {self.microbatch_size}"] if self.microbatch_size else []
        vp = f" x vp {self.vp}" if self.vp > 1 else ""
        cpep = (f" x cp {self.cp}" if self.cp > 1 else "") + (f" x ep {self.ep}" if self.ep > 1 else "")
        return f"dp {self.dp}{cpep} x tp {self.tp} x pp {self.pp}{vp}" + (f" ({', '.join(extra)})" if extra else "")


@dataclass(frozen=True)
class ClusterPlan:
    point: ClusterPoint
    plan: Plan
    iteration_s: float      # the analytic iteration (costs.iteration), or the simulated one where that refuses
    bound_s: float          # the point's lower bound
    problem: Problem | None = None   # the plan's problem (its microbatch size), when not the caller's
    simulated: bool = False  # iteration_s is the simulator's (an ep plan the analytic iteration refuses)


@dataclass(frozen=True)
class ClusterResult:
    """Best plans first; ``bound_s`` holds over the declared space (module docstring)."""

    plans: list[ClusterPlan]
    bound_s: float
    gap: float
    points: int             # outer points in the space
    solved: int             # visited: split and estimated
    pruned: int             # never visited: their bound reached the best plan (or the K-th)
    infeasible: int         # visited, no split fits the memory
    seconds: float
    cut_short: list[str] = field(default_factory=list)
    precision: str = ""
    #: training: (microbatch size, 0 the problem's own; recipe) -> its space (cp = ep = 1),
    #: the work tables the search filled (the stage space reads them again)
    spaces: dict = field(default_factory=dict)


def training_precision(problem: Problem) -> str:
    """The compute precision of the cluster space: bf16, else fp16, else fp32, among the
    problem's precisions that every device runs (int8/fp8 are not used in training)."""
    for p in TRAINING_PRECISIONS:
        if p in problem.precisions and bool(problem.supported[problem.q_index(p)].all()):
            return p
    raise DistplanError(f"training on {problem.topology.name!r} needs one of {', '.join(TRAINING_PRECISIONS)} "
                        f"among the allowed precisions (got {', '.join(problem.precisions)})")


def training_recipes(problem: Problem) -> list[str]:
    """The precision recipes the training space tries: ``""`` (every op at
    ``training_precision``) and ``"fp8"`` where fp8 is allowed, every device runs it and
    some linear layer may use it (``costs.megatron.fp8_training_precisions``: fp8 linear
    layers, the rest at ``training_precision``, as Transformer Engine trains)."""
    out = [""]
    if "fp8" in problem.precisions:
        q = problem.q_index("fp8")
        if bool(problem.supported[q].all()) and "fp8" in fp8_training_precisions(problem, "bf16"):
            out.append("fp8")
    return out


def _divisors(n: int) -> list[int]:
    return [d for d in range(1, n + 1) if n % d == 0]


def tp_degrees(problem: Problem) -> list[int]:
    """The tensor-parallel degrees of the space: divisors of the device count up to
    ``MAX_TP`` that divide the graph's heads (``Graph.tp_divides``; tp 8 split gpt2's 12)."""
    return [t for t in _divisors(problem.n_devices) if t <= MAX_TP and problem.graph.tp_fits(t)]


def _layer_units(problem: Problem) -> list[list[int]]:
    """Ops grouped by layer (ops before the first layer join it, after the last join it),
    or single ops when the graph has no layer names."""
    layer = [layer_index(op.name) for op in problem.graph.ops]
    known = sorted({x for x in layer if x is not None})
    if not known:
        return [[v] for v in range(problem.n_ops)]
    pos = {x: i for i, x in enumerate(known)}
    units: list[list[int]] = [[] for _ in known]
    cur = 0
    for v, x in enumerate(layer):
        if x is not None:
            cur = pos[x]
        units[cur].append(v)
    return units


def units_hold_groups(problem: Problem) -> bool:
    """Does every colocate group (``Graph.colocate``) lie inside one layer unit? Then the
    layers stay the units; else ``_units`` merges the layers a group spans (no split of
    the cluster or fleet space, which cut between units only, separates it)."""
    unit_of = {v: i for i, unit in enumerate(_layer_units(problem)) for v in unit}
    return all(len({unit_of[v] for v in grp}) == 1 for grp in index_groups(problem.graph))


def _units(problem: Problem) -> list[list[int]]:
    """The units a split moves: layers (``_layer_units``), those a colocate group spans
    merged into one."""
    layers = _layer_units(problem)
    groups = index_groups(problem.graph)
    if not groups:
        return layers
    unit_of = {v: i for i, unit in enumerate(layers) for v in unit}
    top = list(range(len(layers)))   # top[i]: the last layer merged with layer i
    for grp in groups:
        lo, hi = min(unit_of[v] for v in grp), max(unit_of[v] for v in grp)
        for i in range(lo, hi + 1):
            top[i] = max(top[i], hi)
    out: list[list[int]] = []
    i = 0
    while i < len(layers):   # layers i..reach form one unit, reach growing with each layer taken
        j, reach = i, top[i]
        while j <= reach:
            reach = max(reach, top[j])
            j += 1
        out.append(sorted(v for unit in layers[i:j] for v in unit))
        i = j
    return out


@dataclass(frozen=True)
class _Work:
    """Per unit, for one (tp, sequence parallel, recomputation): seconds of work per
    microbatch on one rank, activation bytes held per microbatch (costs.memory), a
    transient peak (what recomputation makes again), and the change in held bytes when
    the unit is first on its stage (its inputs then arrive as 1/tp copies)."""

    w: np.ndarray
    act: np.ndarray
    transient: np.ndarray
    first: np.ndarray

    @cached_property
    def total_s(self) -> float:
        return float(self.w.sum())

    @cached_property
    def largest_s(self) -> float:
        return float(self.w.max())


class _Space:
    """One problem's bounds and work tables (a rank's graph under cp / ep: model.cluster_ranks).
    At ``ep`` > 1 the gradient reductions the bounds charge leave the routed experts out
    (those run over expert-data-parallel groups, after the dense part: never less); the
    ZeRO-3 gathers count them, each device's own group's ring after the dense one, as
    ``costs.fsdp`` runs them on the device's one stream (``expert_gathers_s``)."""

    def __init__(self, problem: Problem, precision: str, wide: str | None = None, ep: int = 1):
        self.pb = problem
        self.ep = ep
        self.q = problem.q_index(precision)
        self.precision = precision
        if wide is not None:   # a training recipe: fp8 linear layers, ``wide`` elsewhere
            self.qs = [problem.q_index(p) for p in fp8_training_precisions(problem, wide)]
        else:   # per op: the point's precision where the op may use it (int8 on matrix products)
            self.qs = [problem.fallback_q(v, self.q) for v in range(problem.n_ops)]
        self.op_precision = tuple(problem.precisions[q] for q in self.qs)
        self.units = _units(problem)
        self.static = np.array([sum(float(problem.static_bytes[v, self.qs[v]]) for v in u) for u in self.units])
        self.params = np.array([sum(problem.graph.ops[v].param_elems for v in u) for u in self.units], float)
        self.grads = np.array([sum(problem.graph.ops[v].param_elems * float(problem.bytes_per_elem[self.qs[v]])
                                   for v in u) for u in self.units])   # bytes of their gradients
        self.total_params = float(self.params.sum())
        self.total_bytes = float(self.grads.sum())
        self.dense_grads = self.grads - (np.array([sum(problem.graph.ops[v].expert_param_elems
                                                       * float(problem.bytes_per_elem[self.qs[v]]) for v in u)
                                                   for u in self.units]) if ep > 1 else 0.0)
        self.dense_bytes = float(self.dense_grads.sum())   # the gathers over all replicas
        self.cap = float(np.min(problem.device_mem_bytes))
        self._work: dict[tuple[int, bool, str], _Work] = {}
        self._exposure: dict[tuple[int, int, int, int], float] = {}
        self._gather: dict[tuple[int, int, int], tuple[float, float]] = {}   # (dp, tp, pp): gather_line
        self._traffic: dict[tuple[int, int, int], float] = {}   # (dp, tp, cp): fsdp_traffic_s
        self._expert_gathers: dict[tuple[int, int, int], np.ndarray] = {}   # (dp, tp, cp): expert_gathers_s
        self._units_bytes: np.ndarray | None = None   # each ZeRO-3 unit's parameter bytes (tp 1)
        self._rings: dict[tuple[int, int, int], tuple[np.ndarray, np.ndarray]] = {}   # _ring_hops
        self._hops: dict[tuple[int, int], tuple[float, float]] = {}   # (a, b): its route's latency, s/byte
        self._again: dict[str, np.ndarray] = {}   # the ops each recomputation mode runs again
        self._ranks: dict[tuple[int, int], np.ndarray] = {}   # (pp, vp): each unit's chunk
        unit_of = np.empty(problem.n_ops, dtype=np.int64)
        for i, u in enumerate(self.units):
            unit_of[u] = i
        self._outside = (unit_of[problem.edges[:, 0]] != unit_of[problem.edges[:, 1]]) if len(problem.edges) else \
            np.zeros(0, dtype=bool)   # a tensor from an earlier unit: received when its unit starts a stage

    def work(self, tp: int, sp: bool, recompute: str, tp_overlap: bool = False) -> _Work:
        key = (tp, sp, recompute, tp_overlap)
        if key not in self._work:
            pb = self.pb
            G = list(range(tp))    # Megatron layout: tp consecutive devices
            if recompute not in self._again:
                self._again[recompute] = _recomputed_ops(pb, recompute)
            again = self._again[recompute]
            qs = self.qs
            w, act, tr, first = [], [], [], []
            if pb.training:   # the one memory model (costs.memory): what each op keeps, what recomputation remakes
                held = held_per_op_bytes(pb, qs, tp, sp and tp > 1, again)
                remat = remat_per_op_bytes(pb, qs, tp, sp and tp > 1, again)
                recv = held_per_op_bytes(pb, qs, tp, sp and tp > 1, again, outside=self._outside)
            else:
                held = np.array([float(pb.act_bytes[v, qs[v]]) * (tp_output_share(pb.graph.ops[v], tp, sp) if tp > 1
                                                                   else 1.0) for v in range(pb.n_ops)])
                remat = recv = None
            for u in self.units:
                f, b = op_rank_times(pb, G, qs, u, sp and tp > 1, again, tp_overlap)
                w.append(float(f.sum() + b.sum()))
                if remat is not None:
                    act.append(float(held[u].sum()))
                    tr.append(float(remat[u].sum()))
                    first.append(float(recv[u].sum()) - act[-1])
                else:
                    act.append(float(sum(held[v] for v in u if not again[v])))
                    tr.append(float(sum(held[v] for v in u if again[v])))
                    first.append(0.0)
            self._work[key] = _Work(np.array(w), np.array(act), np.array(tr), np.array(first))
        return self._work[key]

    def interleaved_lb_s(self, wk: _Work, pp: int, vp: int, m: int) -> float:
        """A lower bound on the pipeline of Megatron's interleaving (pp x vp equal layer
        chunks, ``costs.megatron.stage_of_ops``, chunk c on rank c mod pp) over m
        microbatches: rank d's first task, chunk d's forward of the first microbatch,
        waits for chunks 0..d-1 to forward it, and its last, chunk d's backward of the
        last microbatch, precedes their backward of it; in between it runs all its
        chunks m times: max over d of m W_d + sum of w over chunks 0..d-1."""
        key = (pp, vp)
        if key not in self._ranks:
            chunk = stage_of_ops(self.pb, pp * vp)
            self._ranks[key] = np.array([chunk[u[0]] for u in self.units], dtype=np.int64)
        c = self._ranks[key]
        per_chunk = np.bincount(c, weights=wk.w, minlength=pp * vp)
        per_rank = np.bincount(np.arange(pp * vp) % pp, weights=per_chunk, minlength=pp)
        before = np.concatenate(([0.0], np.cumsum(per_chunk)))[:pp]
        return float((m * per_rank + before).max())

    def microbatches_per_replica(self, pt: ClusterPoint) -> int:
        return (self.pb.microbatches if self.pb.training else 1) // pt.replicas

    def point_lb_s(self, pt: ClusterPoint) -> float:
        """The point's first bound, over every split (module docstring): the pipeline's
        (all the work + (m - 1) x max(work / pp, largest layer); interleaved:
        ``interleaved_lb_s``), ``optimizer_lb_s`` and ``exposure_lb_s``."""
        wk = self.work(pt.tp, pt.sequence_parallel, pt.recompute, pt.tp_comm_overlap)
        m = self.microbatches_per_replica(pt)
        if pt.vp > 1:
            run = self.interleaved_lb_s(wk, pt.pp, pt.vp, m)
        else:
            run = wk.total_s + (m - 1) * max(wk.total_s / pt.pp, wk.largest_s)
        return self._with_reduction_s(pt, run) + self.optimizer_lb_s(pt)

    def _with_reduction_s(self, pt: ClusterPoint, run_s: float) -> float:
        """A pipeline bound ``run_s`` with ``exposure_lb_s`` after it; under ZeRO-3 (one
        stage) at least the stream's traffic too: per microbatch each unit's gather in
        the forward, again in the backward, and its reduce-scatter, one after another on
        the device's one stream (``costs.fsdp``)."""
        out = run_s + self.exposure_lb_s(pt)
        if gathers(pt):
            out = max(out, self.microbatches_per_replica(pt) * 3 * self.fsdp_traffic_s(pt))
        return out

    def fsdp_traffic_s(self, pt: ClusterPoint) -> float:
        """Every ZeRO-3 unit's all-gather, summed (one stage: ``costs.fsdp``'s ``a_i``):
        the dense part over all replicas, then at ep > 1 the routed experts' over the
        device's expert-data-parallel group (the most over the groups of their sums:
        every device runs its own group's rings on its one stream)."""
        key = (pt.replicas, pt.tp, pt.cp)
        if key not in self._traffic:
            if self._units_bytes is None:
                mine = set(range(self.pb.n_ops))
                self._units_bytes = np.array([self._gathered_bytes(u, 1, mine)
                                              for u in fsdp_units(self.pb, range(self.pb.n_ops))])
            lat, spb = self._ring_hops(0, pt.replicas, pt.tp)   # all_gather_s: dp - 1 steps of the slowest hop
            x = self._units_bytes / pt.tp / pt.replicas
            steps = (lat[None, :] + x[:, None] * spb[None, :]).max(axis=1) if len(x) else np.zeros(0)
            experts = self.expert_gathers_s(pt.replicas, pt.tp, pt.cp)
            total = (pt.replicas - 1) * float(steps.sum()) + float(experts.sum(axis=1).max(initial=0.0))
            self._traffic[key] = total * (1 - BOUND_SLACK)
        return self._traffic[key]

    def expert_gathers_s(self, replicas: int, tp: int, stride: int) -> np.ndarray:
        """(groups, units): each ZeRO-3 unit's routed-expert all-gather on each
        expert-data-parallel group's ring (``costs.sharding.replica_groups_by_expert``;
        replica i's rank 0 on device i x tp, the cluster space's layout;
        ``costs.fsdp.unit_gather_s``); empty at ep 1 or groups of 1."""
        key = (replicas, tp, stride)
        if key not in self._expert_gathers:
            ep = self.ep
            if ep <= 1 or replicas // ep < 2:
                out = np.zeros((0, 0))
            else:
                units = fsdp_units(self.pb, range(self.pb.n_ops))
                groups = replica_groups_by_expert(replicas, ep, stride)
                nbytes = [unit_expert_bytes(self.pb, u, self.qs, tp) for u in units]
                out = np.array([[all_gather_s(self.pb, [i * tp for i in g], b) if b > 0 else 0.0 for b in nbytes]
                                for g in groups])
            self._expert_gathers[key] = out
        return self._expert_gathers[key]

    def split_lb_s(self, pt: ClusterPoint, edges: tuple[int, ...]) -> float:
        """The bound of one 1F1B split (stage k: units edges[k]..edges[k+1]-1): all the
        work + (m - 1) x its slowest stage, its ``split_optimizer_s`` and ``exposure_lb_s``."""
        wk = self.work(pt.tp, pt.sequence_parallel, pt.recompute, pt.tp_comm_overlap)
        split = [k for k, (a, b) in enumerate(zip(edges, edges[1:])) for _ in range(a, b)]
        tau = float(np.bincount(split, weights=wk.w, minlength=pt.pp).max())
        run = float(wk.w.sum()) + (self.microbatches_per_replica(pt) - 1) * tau
        return self._with_reduction_s(pt, run) + self.split_optimizer_s(pt, edges)

    def static_per_rank(self, tp: int, dp: int, zero: int) -> np.ndarray:
        """Each unit's static bytes per rank less its ZeRO shares (costs.sharding; without
        ZeRO-3's gathered buffers, so at most the checker's charge)."""
        frac = zero_saved_fraction(zero, dp)
        if zero >= 3:
            saved = self.static * frac
        else:
            saved = (self.params * OPTIMIZER_BYTES_PER_PARAM + (self.grads if zero == 2 else 0.0)) * frac
        return (self.static - saved) / tp

    def exposure_lb_s(self, pt: ClusterPoint) -> float:
        """The gradient reduction no split hides: the first parameter op's (always on
        stage 0, whose last backward ends the pipeline): reduced after the run, or, when
        overlapped, after that op's backward, the run's very last task. The least over
        the flat and hierarchical rings. ZeRO-3 (one stage): per microbatch the first
        unit's gather before the forward, the last unit's before the backward and the
        first unit's reduce-scatter after it, which nothing overlaps (costs.fsdp)."""
        if pt.replicas < 2:
            return 0.0
        key = (pt.replicas, pt.tp, pt.zero, pt.cp)   # the same for every pp, recomputation and split
        if key not in self._exposure:
            self._exposure[key] = self._fsdp_exposure_s(pt) if gathers(pt) else self._exposure_s(pt)
        return self._exposure[key]

    def _fsdp_exposure_s(self, pt: ClusterPoint) -> float:
        units, mine = fsdp_units(self.pb, range(self.pb.n_ops)), set(range(self.pb.n_ops))
        if not units:
            return 0.0
        ring = [i * pt.tp for i in range(pt.replicas)]
        first, last = (all_gather_s(self.pb, ring, self._gathered_bytes(u, pt.tp, mine))
                       for u in (units[0], units[-1]))
        experts = self.expert_gathers_s(pt.replicas, pt.tp, pt.cp)   # then each device's group's
        mine_first, mine_last = (experts[:, 0], experts[:, -1]) if len(experts) else (0.0, 0.0)
        return self.pb.microbatches // pt.replicas * float(np.max(2 * (first + mine_first) + last + mine_last))

    def _gathered_bytes(self, unit, tp: int, mine: set[int]) -> float:
        """A ZeRO-3 unit's bytes gathered over all replicas (at ep > 1 its dense part)."""
        out = unit_param_bytes(self.pb, unit, self.qs, tp, mine)
        return out - (unit_expert_bytes(self.pb, unit, self.qs, tp) if self.ep > 1 else 0.0)

    def _exposure_s(self, pt: ClusterPoint) -> float:
        first = next((v for u in self.units for v in u if self.pb.graph.ops[v].param_elems > 0), None)
        if first is None:
            return 0.0
        op = self.pb.graph.ops[first]
        elems = op.param_elems - (op.expert_param_elems if self.ep > 1 else 0)   # reduced over all replicas
        nbytes = elems * float(self.pb.bytes_per_elem[self.qs[first]]) / pt.tp
        devs = [i * pt.tp for i in range(pt.replicas)]
        return min(gradient_reduction_parts(self.pb, devs, nbytes, h, pt.zero)[0] for h in (False, True))

    def optimizer_lb_s(self, pt: ClusterPoint) -> float:
        """A lower bound over every split on the optimizer step (``costs.iteration.
        optimizer_step_per_device_s``): the update of the mean rank's parameters (1/(tp pp),
        1/dp more under ZeRO) and, under ZeRO-1/2 over >= 2 replicas, the all-gather of the
        mean chunk's parameters (1/(pp vp) of their bytes) on ``gather_line``. Each term
        grows with a rank's share, the update and the line affinely, so the largest rank
        pays at least the mean's; fp8's weight casts are left out."""
        if not self.pb.training or self.total_params <= 0:
            return 0.0
        share = pt.replicas if pt.zero and pt.replicas > 1 else 1
        t = self._step_s(self.total_params / (pt.tp * pt.pp * share), self.total_bytes / (pt.tp * pt.pp * share))
        if gathers_after_step(pt):
            a, b = self.gather_line(pt.replicas, pt.tp, pt.pp)
            t += a + b * self.dense_bytes / (pt.tp * pt.pp * pt.vp)
        return t * (1 - BOUND_SLACK)

    def split_optimizer_s(self, pt: ClusterPoint, edges: tuple[int, ...]) -> float:
        """``optimizer_lb_s`` of one split (stage k: units edges[k]..edges[k+1]-1, 1F1B):
        the slowest stage's update and (ZeRO-1/2) its rank-0 ring's all-gather, exactly
        as ``optimizer_step_per_device_s`` charges them (fp8's weight casts left out)."""
        if not self.pb.training or self.total_params <= 0:
            return 0.0
        share = pt.replicas if pt.zero and pt.replicas > 1 else 1
        n = pt.replicas * pt.tp
        worst = 0.0
        for k, (a, b) in enumerate(zip(edges, edges[1:])):
            e, nbytes = float(self.params[a:b].sum()), float(self.grads[a:b].sum())
            t = self._step_s(e / (pt.tp * share), nbytes / (pt.tp * share)) if e > 0 else 0.0
            dense = float(self.dense_grads[a:b].sum())
            if gathers_after_step(pt) and dense > 0:
                t += all_gather_s(self.pb, [k * n + i * pt.tp for i in range(pt.replicas)], dense / pt.tp)
            worst = max(worst, t)
        return worst * (1 - BOUND_SLACK)

    def _step_s(self, elems: float, nbytes: float) -> float:
        """Adam over ``elems`` parameters of ``nbytes`` on one device (costs.iteration)."""
        kind = self.pb.topology.kind_of(0)
        return optimizer_step_s(elems, 0, kind) + nbytes * 2 / kind.mem_bw_bytes_per_s

    def gather_line(self, dp: int, tp: int, pp: int) -> tuple[float, float]:
        """(a, b) with a + b x <= ``all_gather_s`` of x bytes over every pipeline rank's
        rank-0 ring (rank r's replica i on device r dp tp + i tp): per rank the hop with
        the most seconds per byte bounds a ring step; the least such line over the ranks."""
        key = (dp, tp, pp)
        if key not in self._gather:
            a = b = math.inf
            for r in range(pp):
                lat, spb = self._ring_hops(r * dp * tp, dp, tp)
                i = int(np.lexsort((lat, spb))[-1])   # the most seconds per byte, then the most latency
                a, b = min(a, float(lat[i])), min(b, float(spb[i]))
            self._gather[key] = ((dp - 1) * a, (dp - 1) / dp * b)
        return self._gather[key]

    def _ring_hops(self, first: int, dp: int, tp: int) -> tuple[np.ndarray, np.ndarray]:
        """(latency, seconds per byte) of each hop's route of the ring of devices first +
        i tp, i < dp (``costs.routes``: bytes / bandwidth + latency per link)."""
        key = (first, dp, tp)
        if key not in self._rings:
            ring = [first + i * tp for i in range(dp)]
            prof = [self._hop(d, ring[(i + 1) % dp]) for i, d in enumerate(ring)]
            self._rings[key] = (np.array([x[0] for x in prof]), np.array([x[1] for x in prof]))
        return self._rings[key]

    def _hop(self, a: int, b: int) -> tuple[float, float]:
        if (a, b) not in self._hops:
            route = self.pb.topology.route(a, b)
            self._hops[(a, b)] = (sum(float(self.pb.link_latency_s[l]) for l in route),
                                  sum(1.0 / float(self.pb.link_bw_bytes_per_s[l]) for l in route))
        return self._hops[(a, b)]


def gathers_after_step(pt: ClusterPoint) -> bool:
    """Does the point all-gather its updated parameters after the optimizer step (ZeRO-1
    and 2 over >= 2 replicas; ``costs.iteration.optimizer_step_per_device_s``)?"""
    return pt.zero in (1, 2) and pt.replicas > 1


def gathers(pt: ClusterPoint) -> bool:
    """Does the point gather its parameters per unit (ZeRO-3 over >= 2 replicas; the
    space has it at pp 1 only, ``costs.sharding.searched_zero_levels``, where the usual
    bound holds: its gathers only add to the compute)?"""
    return pt.zero >= 3 and pt.replicas > 1


def _recomputed_ops(problem: Problem, mode: str) -> np.ndarray:
    """Ops recomputed under ``mode`` (``costs.recompute.recomputed``, the simulator's rule)
    when the stages split between layers: read on one stage, where no output crosses a
    stage boundary, so the answer holds for every split between layers (an op whose
    output leaves its layer is never recomputed in full mode)."""
    V = problem.n_ops
    one = Plan((0,) * V, (problem.precisions[0],) * V, (Stage((0,), recompute=mode),), 1, "1f1b")
    return recomputed(problem, one)


def recompute_choices(problem: Problem) -> tuple[str, ...]:
    """The recomputation modes worth searching: ``RECOMPUTE_CHOICES`` less selective where
    it recomputes no op (FlashAttention: the fused attention keeps no score matrix, so
    Megatron's selective recomputation remakes nothing); its plans would equal
    recomputation none's in every time and byte."""
    if not problem.training or _recomputed_ops(problem, "selective").any():
        return RECOMPUTE_CHOICES
    return tuple(rc for rc in RECOMPUTE_CHOICES if rc != "selective")


def _greedy_split(w: np.ndarray, mem_of: Callable[[int, int, int], float], cap: float, tau: float,
                  pp: int) -> tuple[list[int] | None, bool]:
    """(stage index of each unit, exact): each stage takes units while its work stays <=
    tau and its memory <= cap; None when more than pp stages are needed. ``mem_of(k, i,
    j)``: the memory of stage k holding units i..j-1. The answer "none fits" is exact
    unless a single unit was too big for a stage's memory (a later stage, holding fewer
    microbatches, might take it): then ``exact`` is False."""
    L = len(w)
    out: list[int] = []
    i, k = 0, 0
    while i < L:
        if k >= pp:
            return None, True
        j, s = i, 0.0
        while j < L and s + w[j] <= tau * (1 + 1e-12) and mem_of(k, i, j + 1) <= cap:
            s += w[j]
            j += 1
        if j == i:
            return None, not (w[i] <= tau * (1 + 1e-12) and mem_of(k, i, i + 1) > cap)
        out += [k] * (j - i)
        i, k = j, k + 1
    while k < pp:   # fewer stages than pp: split off the last unit of the last multi-unit stage
        counts = np.bincount(out, minlength=k)
        if not (counts > 1).any():
            return None, True
        big = int(np.nonzero(counts > 1)[0][-1])
        last = len(out) - 1 - out[::-1].index(big)   # later stages shift up: work and memory only drop
        out = [x + 1 if idx >= last else x for idx, x in enumerate(out)]
        k += 1
    return out, True


def _best_split(w: np.ndarray, mem_of, cap: float, pp: int) -> tuple[float, list[int] | None, bool]:
    """(tau*, split, exact): the least slowest-stage work over memory-feasible splits into
    pp stages (split None: none fits); ``exact`` False when the greedy check could not
    prove a smaller tau infeasible (then tau* is not a bound)."""
    L = len(w)
    if pp > L:
        return math.inf, None, True
    c = np.concatenate(([0.0], np.cumsum(w)))
    sums = np.unique((c[None, :] - c[:, None])[np.triu_indices(L + 1, 1)])
    lo, hi = int(np.searchsorted(sums, max(w.max(), c[-1] / pp) * (1 - 1e-12))), len(sums) - 1
    exact = True
    top, ok = _greedy_split(w, mem_of, cap, float(sums[hi]), pp)
    if top is None:
        return math.inf, None, ok
    while lo < hi:
        mid = (lo + hi) // 2
        got, ok = _greedy_split(w, mem_of, cap, float(sums[mid]), pp)
        exact = exact and ok
        if got is not None:
            hi = mid
        else:
            lo = mid + 1
    split, _ = _greedy_split(w, mem_of, cap, float(sums[lo]), pp)
    assert split is not None
    return float(np.bincount(split, weights=w, minlength=pp).max()), split, exact


def inference_precisions(problem: Problem) -> list[str]:
    """The precisions every device runs, among the allowed ones (the latency space tries
    each for every op)."""
    return [p for p in problem.precisions if bool(problem.supported[problem.q_index(p)].all())]


def interleave_layers(problem: Problem) -> int:
    """The layer count Megatron's interleaving deals equal chunks of: the units, 0 without
    layer names or where a colocate group spans layers (a chunk would split it)."""
    named = any(layer_index(op.name) is not None for op in problem.graph.ops) and units_hold_groups(problem)
    return len(_units(problem)) if named else 0


def interleave_degrees(virtual_stages, layers: int, pp: int, per_replica: int, ep: int) -> list[int]:
    """1 and each asked vp >= 2 that interleaves a point (Megatron's rule): pp >= 2, pp x vp
    dividing the ``layers`` (``interleave_layers``), pp dividing the ``per_replica``
    microbatches a replica runs, no expert parallelism."""
    if pp < 2 or ep > 1 or per_replica % pp:
        return [1]
    return [1] + [vp for vp in sorted(set(virtual_stages)) if vp >= 2 and layers and layers % (pp * vp) == 0]


def space_points(problem: Problem, microbatch_size: int = 0, virtual_stages=(), cp: int = 1,
                 ep: int = 1, tp_overlap: bool = False) -> list[ClusterPoint]:
    """Every outer point of the declared space (training: module docstring; inference,
    latency: one microbatch, dp 1, tp x pp, sequence parallel, one precision for every op
    among those every device runs); ``microbatch_size``: the training points' field;
    ``virtual_stages``: interleaved points with these vp >= 2 where pp >= 2, pp x vp
    divides the layer count and pp the microbatches a replica runs (Megatron's rule);
    ``cp``, ``ep``: the points of one rank's problem (``model.cluster_ranks``: its
    microbatches x cp), dp x cp x tp x pp devices, ep dividing dp, no interleaving at ep > 1;
    ``tp_overlap``: each sequence-parallel point also with its tensor-parallel collectives
    pipelined with their GEMMs (``costs.tp_overlap``)."""
    N, M = problem.n_devices, problem.microbatches // cp
    L = len(_units(problem))
    if not problem.training:
        return [ClusterPoint(1, tp, pp, "none", 0, sp, q)
                for q in inference_precisions(problem)
                for tp in tp_degrees(problem)
                for pp in range(1, min(L, N // tp) + 1)
                for sp in ((False, True) if tp > 1 else (False,))]
    out = []
    layers = interleave_layers(problem) if virtual_stages else 0
    modes = recompute_choices(problem)
    for tp in tp_degrees(problem):
        for pp in range(1, min(L, N // tp) + 1):
            for dp in _divisors(M):
                if dp * cp * tp * pp > N:
                    break
                if dp % ep:
                    continue
                for vp in interleave_degrees(virtual_stages, layers, pp, M // dp, ep):
                    for rc in modes:
                        for zero in searched_zero_levels(dp * cp, tp, pp, vp, problem):
                            for sp in ((False, True) if tp > 1 else (False,)):
                                for ov in ((False, True) if sp and tp_overlap else (False,)):
                                    out.append(ClusterPoint(dp, tp, pp, rc, zero, sp, "", microbatch_size, vp, cp,
                                                            ep, ov))
    return out


@dataclass
class Skips:
    """The estimates the search's clock (``core.clock.Clock``) did not allow: options of a
    visited split whose forecast (``estimate_s``) exceeded the time left, or that ran
    into the deadline."""

    clock: Clock
    timer: Callable | None = None    # SolveOptions.fallback_timer: times the ep options the analytic one refuses
    skipped: int = 0                 # options not estimated
    points: set = field(default_factory=set)
    worst_s: float = 0.0             # the largest forecast among them
    left_s: float = math.inf         # the least time left when one was skipped
    refused: int = 0                 # ep options the analytic iteration refuses (their bound stands)
    refused_points: set = field(default_factory=set)
    simulated: int = 0               # ep options the analytic iteration refuses, simulated instead

    @property
    def left_out(self) -> int:
        """Options left without a time: skipped by the clock or refused."""
        return self.skipped + self.refused

    def refuse(self, pt: ClusterPoint) -> None:
        self.refused += 1
        self.refused_points.add(pt)

    def left(self) -> float:
        """Seconds to the deadline (0 once a stop was requested)."""
        return self.clock.remaining_s()

    def skip(self, pt: ClusterPoint, need_s: float, left_s: float) -> None:
        self.skipped += 1
        self.points.add(pt)
        self.worst_s, self.left_s = max(self.worst_s, need_s), min(self.left_s, max(left_s, 0.0))

    def line(self) -> str | None:
        """The cut-short line, or None when nothing was skipped (nor refused)."""
        out = []
        if self.skipped:
            n, k = self.skipped, len(self.points)
            out.append(f"{n:,} gradient-reduction option{'s' if n > 1 else ''} of {k:,} visited cluster "
                       f"point{'s' if k > 1 else ''} not estimated (forecast up to {self.worst_s:.1f} s > "
                       f"{self.left_s:.1f} s left)")
        if self.refused:
            n, k = self.refused, len(self.refused_points)
            out.append(f"{n:,} expert-parallel option{'s' if n > 1 else ''} of {k:,} cluster point"
                       f"{'s' if k > 1 else ''} that the analytic iteration cannot time (ZeRO-3 with expert "
                       "groups across nodes) not timed (no fallback timer, or none by the deadline); their bound stands")
        return "; ".join(out) or None


def estimate_s(problem: Problem, plan: Plan) -> float:
    """A forecast of ``_evaluate``'s seconds for one option: the transfers the analytic
    iteration times one by one (overlapped buckets), and a base per op."""
    return ESTIMATE_S_PER_TRANSFER * estimate_transfers(problem, plan) + ESTIMATE_S_PER_OP * problem.n_ops


#: forecast seconds past an option's cheapest sibling from which, while fewer than K plans
#: are known, it is put off (``_Best.deferred``) until the search needs it
DEFER_S = 0.1


class _Best(list):
    """The best ``k`` plans so far, as the search keeps them: by iteration, ties by the
    fewer cp / ep ranks (``ClusterPoint.parallel_ranks``), then by where each option comes
    in the search's order (``seq``: the evaluation, the option), in
    whatever order they were timed; and the options put off (``_Deferred``)."""

    def __init__(self, k: int):
        super().__init__()
        self.k, self.seq, self.calls, self.deferred = k, {}, 0, []

    def kth_s(self) -> float:
        return self[self.k - 1].iteration_s if len(self) >= self.k else math.inf

    def add(self, items) -> None:
        """Keep the best k of these (seq, plan) pairs and the plans held."""
        for seq, c in items:
            self.seq[id(c)] = seq
            self.append(c)
        self.sort(key=lambda c: (c.iteration_s, c.point.parallel_ranks, self.seq[id(c)]))
        for c in self[self.k:]:
            del self.seq[id(c)]
        del self[self.k:]

    def entry_s(self, mine) -> float:
        """The iteration from which an option of the evaluation under way (after every
        plan held) stays out of the best k: the K-th held, or past the K-th of those and
        ``mine``, the evaluation's options already timed (they may come after it)."""
        both = sorted([c.iteration_s for c in self] + list(mine))
        kth = both[self.k - 1] if len(both) >= self.k else math.inf
        return min(self.kth_s(), math.nextafter(kth, math.inf))


@dataclass
class _Deferred:
    """An option put off (``_Best.deferred``: by its own bound, then its place in the
    search's order): its plan, the split's bound, and the split's memory verdict (shared
    with its siblings; empty until asked)."""

    point: ClusterPoint
    plan: Plan
    problem: Problem
    point_bound_s: float
    need_s: float
    memory: dict


def _time_option(problem: Problem, pt: ClusterPoint, plan: Plan, need_s: float, clock: Skips | None,
                 timed: bool, above_s: float, fits: Callable[[], bool] | None = None) -> float | None:
    """One option's analytic iteration, or None: over the time left or stopped (counted
    in ``clock``), or proved at least ``above_s`` (``Exceeds``). An ep plan the analytic
    iteration refuses is simulated where ``fits`` (the checker's memory verdict) holds
    (``_simulated_s``), dropped where it does not, and refused without ``fits``."""
    if timed and need_s > clock.left():
        clock.skip(pt, need_s, clock.left())
        return None
    try:
        with _dropping(clock.clock.stop if timed else None):   # the first option of a search with no plan runs
            return (estimate_iteration(problem, plan, deadline_s=clock.clock.deadline if timed else math.inf,
                                       above_s=above_s).iteration_s
                    if problem.training else estimate_latency(problem, plan))
    except Exceeds:
        return None   # at least the K-th best: never kept
    except (TimeUp, _Dropped):
        clock.skip(pt, need_s, 0.0)
        return None
    except DistplanError:
        if pt.ep == 1 or clock is None:
            raise
        if fits is None:
            clock.refuse(pt)   # an ep plan the analytic iteration does not time: its bound stands
            return None
        # over the checker's memory: no plan to time, and no hole in the bound
        return _simulated_s(problem, pt, plan, clock) if fits() else None


def _simulated_s(problem: Problem, pt: ClusterPoint, plan: Plan, clock: Skips) -> float | None:
    """The iteration of an ep plan the analytic one refuses (ZeRO-3 whose expert-data
    rings cross the nodes: ``costs.fsdp.rings_contend``) by the search's fallback timer
    (``SolveOptions.fallback_timer``: ``distplan.solve`` gives it the simulator), or None,
    counted as refused, without one or where it cannot time the plan by the deadline
    (its bound then stands)."""
    if clock.timer is None:
        clock.refuse(pt)
        return None
    try:
        with _dropping(clock.clock.stop):
            t = clock.timer(problem, plan, clock.clock.deadline)
    except (TimeUp, _Dropped):
        t = None
    if t is None:
        clock.refuse(pt)
        return None
    clock.simulated += 1
    return float(t)


def _fits(problem: Problem, plan: Plan, memory: dict) -> bool:
    """The checker's memory verdict on the split of ``plan`` (asked once per ``memory``)."""
    if "ok" not in memory:
        memory["ok"] = not problem.training or bool(
            (plan_memory_bytes(problem, plan) <= problem.device_mem_bytes * (1 + 1e-12)).all())
    return memory["ok"]


def _evaluate(problem: Problem, space: _Space, pt: ClusterPoint, split: list[int] | None,
              bound_s: float, clock: Skips | None = None, must: bool = False,
              best: _Best | None = None) -> list[tuple[tuple[int, int], ClusterPlan]]:
    """(seq, plan) of ``split`` (None: the interleaved point's equal chunks,
    ``_interleaved``) under each gradient-reduction option, with its analytic iteration: a
    flat ring or (when replicas share nodes) hierarchical, overlapped or not (ZeRO-3
    reduce-scatters unit by unit: one option). With ``clock``, an option whose forecast
    exceeds the time left, or that runs into the deadline, is skipped and counted there
    (``must``: nothing was found yet, the option forecast cheapest runs anyway). Options
    run cheapest forecast first; with ``best``, one proved unable to enter it is dropped
    untimed (``above_s``), one forecast ``DEFER_S`` past the cheapest is put off while
    fewer than K plans are known, and the checker's memory is asked only when some option
    can enter."""
    options = [("ring", False), ("ring", True)] if pt.replicas > 1 and not gathers(pt) else [("ring", False)]
    if pt.replicas > 1 and not gathers(pt) and \
            hierarchical_groups(problem.topology, [i * pt.tp for i in range(pt.replicas)]) is not None:
        options += [("hierarchical", False), ("hierarchical", True)]   # replicas share nodes
    plans = [_plan(problem, space, pt, split, allreduce, overlap) if split is not None
             else _interleaved(problem, space, pt, allreduce, overlap) for allreduce, overlap in options]
    need = [estimate_s(problem, plan) if clock is not None and problem.training else 0.0 for plan in plans]
    first = min(range(len(plans)), key=need.__getitem__) if must or clock is None else -1
    call = best.calls if best is not None else 0
    if best is not None:
        best.calls += 1
    got: dict[int, float] = {}
    put_off: list[tuple[int, float]] = []
    simulated = clock.simulated if clock is not None else 0
    by_sim: set[int] = set()   # options timed by the simulator (the analytic iteration refuses them)
    memory: dict = {}
    for i in sorted(range(len(plans)), key=need.__getitem__):
        entry = best.entry_s(got.values()) if best is not None else math.inf
        if problem.training and best is not None and need[i] > min(need) + DEFER_S:
            try:   # its bound, untimed (an option without overlapped buckets is timed at once)
                got[i] = estimate_iteration(problem, plans[i], above_s=0.0).iteration_s
                continue
            except Exceeds as e:
                if e.bound_s < entry:
                    put_off.append((i, e.bound_s))
                continue
            except DistplanError:
                if pt.ep == 1 or clock is None:
                    raise   # else refused by the analytic iteration: simulated below where it fits
        t = _time_option(problem, pt, plans[i], need[i], clock, clock is not None and i != first, entry,
                         fits=lambda: _fits(problem, plans[0], memory))
        if t is not None:
            got[i] = t
            if clock is not None and clock.simulated > simulated:
                by_sim.add(i)
                simulated = clock.simulated
    kth = best.kth_s() if best is not None else math.inf
    if any(t < kth for t in got.values()) and not _fits(problem, plans[0], memory):
        return []   # over the checker's memory (the split's own bound used its lower bound)
    for i, lb in put_off:
        heapq.heappush(best.deferred, (lb, (call, i), _Deferred(pt, plans[i], problem, bound_s, need[i], memory)))
    return [((call, i), ClusterPlan(pt, plans[i], got[i], bound_s, problem, i in by_sim)) for i in sorted(got)]


def _settle(best: _Best, clock: Skips, below_s: float = math.inf, run: bool = True) -> float:
    """Time the options put off whose bound is below ``below_s`` and can still enter the
    best K, least bound first (each against the K-th held, strictly: it may come before
    plans held); those past the K-th never enter and are dropped. Returns the least bound
    of those the clock left untimed (``run`` False: every one left, counted in ``clock``)."""
    left = math.inf
    while best.deferred and best.deferred[0][0] < below_s:
        lb, seq, d = heapq.heappop(best.deferred)
        kth = best.kth_s()
        if lb > kth:
            best.deferred.clear()   # every bound left is larger
            break
        skipped = clock.left_out
        if not run:
            clock.skip(d.point, d.need_s, clock.left())
        t = _time_option(d.problem, d.point, d.plan, d.need_s, clock, True, math.nextafter(kth, math.inf)) \
            if run else None
        if clock.left_out > skipped:
            left = min(left, lb)
        elif t is not None and _fits(d.problem, d.plan, d.memory):
            best.add([(seq, ClusterPlan(d.point, d.plan, t, d.point_bound_s, d.problem))])
    return left


def _edges(split: list[int]) -> tuple[int, ...]:
    """The unit boundaries of a split (each unit's stage, non-decreasing)."""
    return (0, *[i for i in range(1, len(split)) if split[i] != split[i - 1]], len(split))


class _Dropped(Exception):
    """A signal stopped an estimate whose result the search can do without."""


@contextmanager
def _dropping(stop):
    """Within the block a first SIGINT/SIGTERM, once a plan exists (``stop`` armed),
    raises ``_Dropped`` at once (distplan.core.interrupt: ``Stop.raising``): the estimate
    in progress (seconds at scale) is dropped and the search returns its best plans. A
    second signal still aborts (KeyboardInterrupt)."""
    if stop is None or not getattr(stop, "armed", False) or stop.requested:
        yield
        return
    try:
        with stop.raising():
            yield
    except KeyboardInterrupt:
        if stop.aborted or not stop.requested:
            raise
        raise _Dropped from None


def _interleaved(problem: Problem, space: _Space, pt: ClusterPoint, allreduce: str, overlap: bool) -> Plan:
    """Megatron's interleaved plan of ``pt``: pp x vp equal layer chunks, chunk c on the
    devices of rank c mod pp (``costs.megatron.megatron_plan``), at the space's precisions."""
    plan = megatron_plan(problem, pt.replicas, pt.tp, pt.pp, space.op_precision[0], None, pt.recompute,
                         pt.sequence_parallel, pt.zero, allreduce, overlap, pt.vp)
    return expert_plan(dataclasses.replace(plan, op_precision=space.op_precision), pt.ep, pt.cp)


def _plan(problem: Problem, space: _Space, pt: ClusterPoint, split: list[int], allreduce: str,
          overlap: bool) -> Plan:
    n = pt.replicas * pt.tp
    stages = tuple(Stage(tuple(range(k * n, (k + 1) * n)), pt.tp, pt.recompute, pt.sequence_parallel, pt.zero,
                         tp_comm_overlap=pt.tp_comm_overlap) for k in range(pt.pp))
    op_stage = [0] * problem.n_ops
    for unit, k in zip(space.units, split):
        for v in unit:
            op_stage[v] = k
    if not problem.training:   # latency: one microbatch through the stages
        return Plan(tuple(op_stage), space.op_precision, stages, 1, "stream")
    return expert_plan(Plan(tuple(op_stage), space.op_precision, stages, problem.microbatches, "1f1b",
                            dp_allreduce=allreduce, overlap_grad_reduce=overlap), pt.ep, pt.cp)


class RankSpaces:
    """The cp / ep degrees of a training search and their spaces (``model.cluster_ranks``):
    one bare space per (microbatch size, recipe, cp, ep) for the first bounds, one timed
    space per point's groups (problems shared by the recipes: plans of one problem)."""

    def __init__(self, problem: Problem, precision: str, cps=None, eps=None, dispatcher: str = "alltoall"):
        self.origin = zoo_origin(problem.graph)
        self.precision = precision
        self.dispatcher = dispatcher
        self.cps = cp_degrees(problem, self.origin, cps)
        self.eps = ep_degrees(problem, self.origin, eps)
        self.bounded: set[ClusterPoint] = set()   # points re-queued with their timed bound
        self._problems: dict[tuple, Problem] = {}
        self._spaces: dict[tuple, _Space] = {}

    def bare(self, pb: Problem, cp: int, ep: int) -> Problem | None:
        """The rank's problem of ``pb`` (None where the model cannot split so)."""
        if cp == ep == 1:
            return pb
        try:
            return bare_problem(pb, self.origin, cp, ep)
        except DistplanError:
            return None

    def space(self, pb: Problem, recipe: str, ep: int) -> _Space:
        return _Space(pb, recipe, self.precision, ep=ep) if recipe else _Space(pb, self.precision, ep=ep)

    def timed(self, bare: _Space, pt: ClusterPoint) -> _Space:
        """The space of ``pt``'s timed problem (``cluster_ranks.timed_problem``)."""
        sp = pt.sequence_parallel and pt.tp > 1
        key = (pt.microbatch_size, pt.cp, pt.ep, pt.replicas, pt.tp, pt.pp, sp)
        if key not in self._problems:
            self._problems[key] = timed_problem(bare.pb, self.origin, pt.replicas, pt.tp, pt.pp, sp, pt.cp, pt.ep,
                                                self.dispatcher)
        if key + (pt.precision,) not in self._spaces:
            self._spaces[key + (pt.precision,)] = self.space(self._problems[key], pt.precision, pt.ep)
        return self._spaces[key + (pt.precision,)]


def batch_variants(problem: Problem, sizes) -> dict[int, Problem]:
    """The problem at each microbatch size of ``sizes`` that divides its global batch
    (microbatches x batch size), with the microbatch count that keeps that global batch;
    the problem's own size always included (key 0). A graph with measured times
    (``Graph.measured``) holds them for its own batch size only: only that size."""
    from distplan.costs.problem import ProblemOptions, build_problem

    b0 = problem.graph.batch_size
    gb = problem.microbatches * b0
    out = {0: problem}
    if problem.graph.measured:
        return out
    for b in sorted(set(sizes)):
        if b != b0 and b >= 1 and gb % b == 0:
            out[b] = build_problem(problem.graph.with_batch_size(b), problem.topology, ProblemOptions(
                precisions=problem.precisions, microbatches=gb // b, schedule=problem.schedule,
                low_bit_ops=problem.low_bit_ops, comm=problem.comm))
    return out


def plan_cluster(problem: Problem, time_limit_s: float = 120.0, top_k: int = 5,
                 progress: Callable[[str], None] | None = None, deadline: float | None = None,
                 stop=None, microbatch_sizes=(), virtual_stages=(), clock: Clock | None = None,
                 context_parallel=None, expert_parallel=None, tp_comm_overlap: bool = False,
                 fallback_timer: Callable | None = None, ep_dispatcher: str = "alltoall") -> ClusterResult:
    """The best plans of the declared space under the analytic iteration (module
    docstring); ``clock`` (core.clock: its limit and Ctrl-C) cuts the search short
    (without one: ``deadline``, a perf_counter instant, else ``time_limit_s``, and ``stop``).
    ``microbatch_sizes`` (training): also search these samples per microbatch, at the
    same global batch (an outer dimension of the space, searched exactly like the rest);
    ``virtual_stages`` (training): also Megatron's interleaved 1F1B at these vp
    (``space_points``); ``context_parallel`` / ``expert_parallel``: the cp / ep degrees
    (None: ``model.cluster_ranks``' defaults; a zoo transformer's training only);
    ``tp_comm_overlap`` (training): also the sequence-parallel points with their
    tensor-parallel collectives pipelined with the GEMMs (``space_points``);
    ``fallback_timer`` (``SolveOptions.fallback_timer``): times the expert-parallel
    options the analytic iteration refuses (without one their bound stands); ``ep_dispatcher``:
    how the ep points move tokens (``costs.expert_parallel``; balanced routing)."""
    t0 = time.perf_counter()
    if clock is None:
        clock = Clock.until(deadline if deadline is not None else t0 + time_limit_s, stop)
    stop = clock.stop
    skips = Skips(clock, fallback_timer)

    def expired() -> bool:
        return clock.remaining_s() <= 0

    say = progress or (lambda _: None)
    if problem.training:
        prec = training_precision(problem)
        variants = batch_variants(problem, microbatch_sizes)
        recipes = training_recipes(problem)
        ranks = RankSpaces(problem, prec, context_parallel, expert_parallel, ep_dispatcher)
        spaces, pts = {}, []
        for b, pb in variants.items():
            for cp, ep in itertools.product(ranks.cps, ranks.eps):
                rb = ranks.bare(pb, cp, ep)
                if rb is None:
                    continue
                for r in recipes:
                    spaces[(b, r, cp, ep)] = ranks.space(rb, r, ep)
                pts += [dataclasses.replace(pt, precision=r) if r else pt
                        for pt in space_points(rb, b, virtual_stages, cp, ep, tp_comm_overlap) for r in recipes]
    else:   # latency: one microbatch
        qs = inference_precisions(problem)
        if not qs:
            raise DistplanError(f"no allowed precision ({', '.join(problem.precisions)}) runs on every device")
        spaces = {(0, q, 1, 1): _Space(problem, q) for q in qs}
        pts = space_points(problem)
        ranks = None
    space = next(iter(spaces.values()))
    what = ("dp x tp x pp, recomputation, ZeRO 0-3, sequence parallel" if problem.training
            else "latency of one microbatch: tp x pp, sequence parallel, precision")
    if ranks is not None and (len(ranks.cps) > 1 or len(ranks.eps) > 1):
        what += f", cp {'/'.join(map(str, ranks.cps))}, ep {'/'.join(map(str, ranks.eps))}"
    if problem.training and tp_comm_overlap:
        what += ", tp communication overlap"
    sizes = sorted({k[0] or problem.graph.batch_size for k in spaces})
    say(f"cluster space: {len(pts):,} points ({what}), {len(space.units)} layers, "
        f"{', '.join(sorted({k[1] or space.precision for k in spaces}))}, microbatch size {', '.join(map(str, sizes))}")

    def space_of(pt: ClusterPoint) -> _Space:
        key = (pt.microbatch_size, pt.precision, pt.cp, pt.ep)
        return spaces[key] if pt.cp == pt.ep == 1 else ranks.timed(spaces[key], pt)

    heap = []
    for pt in pts:
        heap.append((spaces[(pt.microbatch_size, pt.precision, pt.cp, pt.ep)].point_lb_s(pt), pt.parallel_ranks, pt))
    heapq.heapify(heap)
    best = _Best(top_k)
    incumbent = math.inf
    bound = math.inf
    solved = infeasible = partial = 0
    cut: list[str] = []
    last_say = t0
    while heap:
        lb0, _, pt = heap[0]
        if lb0 >= best.kth_s():   # no point left can enter the top K (nor beat the best)
            break
        if expired() and best:
            cut.append(f"{len(heap):,} cluster points not visited")
            bound = min(bound, lb0)
            break
        if best.deferred and best.deferred[0][0] < lb0:   # an option put off comes first
            bound = min(bound, _settle(best, skips, below_s=lb0))
            continue
        heapq.heappop(heap)
        if (pt.cp > 1 or pt.ep > 1) and pt not in ranks.bounded:   # its own problem's bound, then its turn
            ranks.bounded.add(pt)
            heapq.heappush(heap, (space_of(pt).point_lb_s(pt), pt.parallel_ranks, pt))
            continue
        space = space_of(pt)
        wk = space.work(pt.tp, pt.sequence_parallel, pt.recompute, pt.tp_comm_overlap)
        static = space.static_per_rank(pt.tp, pt.replicas, pt.zero)
        m = (space.pb.microbatches if space.pb.training else 1) // pt.replicas
        cs, ca = np.concatenate(([0.0], np.cumsum(static))), np.concatenate(([0.0], np.cumsum(wk.act)))

        def mem_of(k: int, i: int, j: int, pp=pt.pp, m=m, cs=cs, ca=ca, tr=wk.transient, fi=wk.first) -> float:
            # at most the checker's plan_memory_bytes (which adds the forward, backward and
            # boundary buffers): a split it prunes, the checker refuses too. n in flight hold
            # n - 1 stashes and the one under way, which holds at least its whole stash (at
            # the end of its forward) and at least what recomputation remakes (in its
            # backward), not both at once: a stash freed unit by unit makes room for the
            # remade layer (gpt3-256x1x4 at 1,024 tokens, tp 2, full: 131.5 MB summed
            # against the checker's 116.6)
            held = ca[j] - ca[i] + (fi[i] if i > 0 and i < j else 0.0)
            n = min(pp - k, m)
            return cs[j] - cs[i] + (n - 1) * held + max(held, float(tr[i:j].max(initial=0.0)))

        tot = float(wk.w.sum())
        solved += 1
        if pt.vp > 1:   # Megatron's equal chunks: one plan, its reduction options
            skipped = skips.left_out
            got = _evaluate(space.pb, space, pt, None, lb0, skips, must=not best, best=best)
            if skips.left_out > skipped:
                bound = min(bound, lb0)
            infeasible += not got and skips.left_out == skipped
            best.add(got)
        elif math.comb(len(wk.w) - 1, pt.pp - 1) <= INNER_ENUM_MAX:
            # every split, cheapest slowest stage first, until its bound reaches the K-th plan
            cands = []
            for cut_at in itertools.combinations(range(1, len(wk.w)), pt.pp - 1):
                edges = (0, *cut_at, len(wk.w))
                if all(mem_of(k, a, b) <= space.cap for k, (a, b) in enumerate(zip(edges, edges[1:]))):
                    split = [k for k, (a, b) in enumerate(zip(edges, edges[1:])) for _ in range(a, b)]
                    cands.append((space.split_lb_s(pt, edges), split))
            if not cands:
                infeasible += 1
            for lb_split, split in sorted(cands, key=lambda c: c[0]):
                if lb_split >= best.kth_s():
                    break
                if expired() and best:   # the point's other splits keep their bound
                    bound = min(bound, lb_split)
                    partial += 1
                    break
                skipped = skips.left_out
                best.add(_evaluate(space.pb, space, pt, split, lb_split, skips, must=not best, best=best))
                if skips.left_out > skipped:   # an option of this split not estimated: its bound stands
                    bound = min(bound, lb_split)
        else:
            tau, split, exact = _best_split(wk.w, mem_of, space.cap, pt.pp)
            if split is None:
                infeasible += 1
                if not exact:
                    bound = min(bound, lb0)
                continue
            pb = space._with_reduction_s(pt, tot + (m - 1) * tau) + space.optimizer_lb_s(pt) if exact else lb0
            bound = min(bound, pb)   # the other splits of this point are not searched
            if space.split_lb_s(pt, _edges(split)) < best.kth_s():   # else its plans cannot enter the best K
                best.add(_evaluate(space.pb, space, pt, split, pb, skips, must=not best, best=best))
        if not best:
            continue
        if stop is not None:
            stop.arm()   # a plan exists: a first Ctrl-C/SIGTERM now keeps the best so far
        incumbent = best[0].iteration_s
        if progress is not None and time.perf_counter() - last_say > 2.0:
            last_say = time.perf_counter()
            say(f"  {solved:,} points visited, best {incumbent:.6g} s ({best[0].point.label()}), bound {min(bound, lb0):.6g} s")
    bound = min(bound, _settle(best, skips, run=not cut))   # the options put off that still can enter
    if best:
        incumbent = best[0].iteration_s
    if heap and not cut:
        bound = min(bound, heap[0][0])
    if partial:
        cut.append(f"{partial:,} visited cluster points with splits left unevaluated")
    if skips.line() is not None:
        cut.append(skips.line())
    if not best:
        raise DistplanError(f"no cluster plan fits {problem.topology.name!r}: every dp x tp x pp split "
                            "exceeds the device memory")
    bound = min(bound, incumbent)
    gap_ = gap(incumbent, bound)
    unvisited = len(heap) if cut else 0   # left by the clock, bounded by their first bound
    pruned = len(pts) - solved - unvisited
    say(f"cluster space: {solved:,} visited ({infeasible:,} infeasible by memory), {pruned:,} pruned by bound"
        + (f", {unvisited:,} not visited ({'interrupted' if clock.remaining_s() <= 0 and stop is not None and stop.requested else 'time'})"
           if unvisited else "") + "; "
        f"best {incumbent:.6g} s ({best[0].point.label()}), bound {bound:.6g} s, gap {gap_:.2%}")
    return ClusterResult(best, bound, gap_, len(pts), solved, pruned, infeasible, time.perf_counter() - t0, cut,
                         best[0].point.precision or best[0].plan.op_precision[0],
                         {k[:2]: v for k, v in spaces.items() if k[2:] == (1, 1)} if problem.training else {})
