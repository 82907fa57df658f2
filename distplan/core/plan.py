"""A Plan: what runs where, when and at which precision; a versioned JSON document.

Stages are positions along a pipeline; stage k runs on ``stages[k].devices``, replica i
on devices ``[i*tp:(i+1)*tp]``. A tensor from stage a to stage b > a is relayed hop by
hop through the devices of stages a+1..b-1 (a stage may hold no operators and act only
as a relay), each hop on the topology's route. Replica groups: ``Stage.shares``
(microbatches per step of each replica, assigned by :func:`weighted_round_robin`; every
part of distplan asks :meth:`Stage.replica_of`) and ``Stage.replica_precision`` (per
replica, op -> precision overriding ``Plan.op_precision``; read through
:meth:`Plan.precision_of`). Plans are frozen; ``plan_to_dict`` / ``plan_from_dict``
round-trip, and keys left out when ``None`` keep older plan files meaning the same.

The plan space: docs/concepts/plan-space.md; replica groups, what a replica's precision
changes and the JSON keys: docs/guides/mixed-fleets.md, "Replica groups in a plan".
"""
from __future__ import annotations

import dataclasses
import functools
import json
import math
from collections.abc import Iterable, Mapping
from types import MappingProxyType
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from distplan.core.errors import DistplanError
from distplan.core.jsonfile import read_json_file
from distplan.core.schedules import PLAN_SCHEDULES

FORMAT = "distplan-plan"
VERSION = 1          # this module writes the plan itself; costs.plan_file adds the problem (v2)
READ_VERSIONS = (1, 2)
PHASES = ("F", "B")
#: activation recomputation of a training stage: none; selective (the attention core:
#: scores and softmax are not stashed, recomputed in the backward); full (only each
#: layer's output and what leaves the stage are stashed, the rest recomputed)
RECOMPUTE = ("none", "selective", "full")
#: how a stage's data-parallel replicas reduce their gradients
DP_ALLREDUCE = ("ring", "hierarchical")
#: what a training stage keeps in host memory instead (``costs.offload``): its layers'
#: saved activations between their forward and backward; the optimizer (fp32 master
#: weights and Adam moments, the step on the host CPU)
OFFLOAD = ("activations", "optimizer")


@functools.lru_cache(maxsize=256)
def weighted_round_robin(shares: tuple[int, ...]) -> tuple[int, ...]:
    """The replica of each microbatch of one cycle, for replicas with these ``shares``
    (smooth weighted round-robin; module docstring). The cycle is ``sum(shares) /
    gcd(shares)`` long and replica i appears ``shares[i] / gcd(shares)`` times in it;
    microbatch m runs on ``cycle[m % len(cycle)]``."""
    g = math.gcd(*shares)
    w = [s // g for s in shares]
    total = sum(w)
    credit = [0] * len(w)
    out = []
    for _ in range(total):
        for i, x in enumerate(w):
            credit[i] += x
        best = max(range(len(w)), key=lambda i: (credit[i], -i))
        credit[best] -= total
        out.append(best)
    return tuple(out)


def round_robin_shares(replicas: int, microbatches: int) -> tuple[int, ...]:
    """The microbatches each replica gets round-robin (``m % replicas``)."""
    return tuple(microbatches // replicas + (1 if i < microbatches % replicas else 0) for i in range(replicas))


def balanced_shares(seconds_per_microbatch: Iterable[float], microbatches: int) -> tuple[int, ...]:
    """Shares (each >= 1, summing to ``microbatches``) that follow the replicas' speeds:
    the integer shares with the least ``max_i n_i t_i`` (``t_i`` replica i's seconds per
    microbatch), found greedily (each further microbatch to the replica that would
    finish it first, the lowest index on a tie; optimal for this min-max). Proportional
    to speed up to rounding, but rounded so that no replica straggles."""
    t = [float(x) for x in seconds_per_microbatch]
    if not t or microbatches < len(t) or min(t) <= 0:
        raise DistplanError(f"cannot give {len(t)} replicas >= 1 of {microbatches} microbatches "
                            f"(seconds per microbatch {t})"[:200])
    n = [1] * len(t)
    for _ in range(microbatches - len(t)):
        i = min(range(len(t)), key=lambda i: ((n[i] + 1) * t[i], i))
        n[i] += 1
    return tuple(n)


Overrides = tuple[tuple[int, str], ...]


def _overrides(x: Mapping[int, str] | Iterable[tuple[int, str]]) -> Overrides:
    items = x.items() if isinstance(x, Mapping) else x
    return tuple(sorted((int(v), str(p)) for v, p in items))


@dataclass(frozen=True)
class Stage:
    """Devices of one pipeline stage: ``replicas`` groups of ``tensor_parallel`` devices.

    Training options: ``recompute`` (``RECOMPUTE``); ``sequence_parallel`` (norms and
    residual adds sharded along the sequence over the tensor-parallel group, with
    reduce-scatter/all-gather in place of its all-reduces); ``zero`` = 1 shards the
    optimizer state over the data-parallel replicas (ZeRO-1: gradients reduce-scattered,
    each replica updates its shard, parameters all-gathered), 2 the gradients too
    (ZeRO-2), 3 the parameters as well (ZeRO-3/FSDP: gathered layer by layer;
    ``costs.sharding``). ``expert_parallel`` (ep): the replicas hold the routed experts
    (``Operator.expert_param_elems``) in blocks of ep members ``expert_stride`` replicas
    apart (the context-parallel ranks inside); replicas holding the same experts form
    the expert-data-parallel group that reduces, and under ZeRO shards, them.
    ``offload``: what the stage keeps in host memory (``OFFLOAD``, ``costs.offload``),
    stored sorted and without repeats. ``tp_comm_overlap``: each linear layer's
    tensor-parallel collective split into chunks and pipelined with its own GEMM
    (Megatron-Core's ``--tp-comm-overlap``; ``costs.tp_overlap``: the rule, the chunks
    ASSUMED, the checker's refusals).

    Replica groups (module docstring): ``shares`` (microbatches per step of each
    replica; ``None``: round-robin) and ``replica_precision`` (per replica, op index ->
    precision overrides; given as mappings, stored as sorted ``(op, precision)`` pairs
    so a Stage stays hashable; ``None``: none)."""

    devices: tuple[int, ...]
    tensor_parallel: int = 1
    recompute: str = "none"
    sequence_parallel: bool = False
    zero: int = 0
    shares: tuple[int, ...] | None = None
    replica_precision: tuple[Overrides, ...] | None = None
    expert_parallel: int = 1
    expert_stride: int = 1
    offload: tuple[str, ...] = ()
    tp_comm_overlap: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "offload", tuple(sorted(set(self.offload))))
        if self.shares is not None:
            object.__setattr__(self, "shares", tuple(int(s) for s in self.shares))
        if self.replica_precision is not None:
            rp = tuple(_overrides(x) for x in self.replica_precision)
            object.__setattr__(self, "replica_precision", rp if any(rp) else None)

    @property
    def replicas(self) -> int:
        return len(self.devices) // self.tensor_parallel

    def _weighted(self) -> bool:
        s = self.shares
        return s is not None and len(s) == self.replicas and min(s, default=0) >= 1

    @property
    def cycle(self) -> int:
        """Microbatches after which the assignment to replicas repeats."""
        return len(weighted_round_robin(self.shares)) if self._weighted() else max(self.replicas, 1)

    def replica_of(self, microbatch: int) -> int:
        """The replica that runs ``microbatch`` (module docstring: round-robin without
        shares, else smooth weighted round-robin over the shares; shares the checker
        would refuse count as none)."""
        if not self._weighted():
            return microbatch % self.replicas
        seq = weighted_round_robin(self.shares)
        return seq[microbatch % len(seq)]

    def replica_counts(self, microbatches: int) -> tuple[int, ...]:
        """Microbatches per step of each replica (``shares``, or round-robin's)."""
        return self.shares if self.shares is not None else round_robin_shares(self.replicas, microbatches)

    def replica_group(self, replica: int) -> tuple[int, ...]:
        """The devices of ``replica``."""
        return self.devices[replica * self.tensor_parallel:(replica + 1) * self.tensor_parallel]

    def replica_devices(self, microbatch: int) -> tuple[int, ...]:
        return self.replica_group(self.replica_of(microbatch))

    def overrides(self, replica: int) -> dict[int, str]:
        """op index -> precision on ``replica`` (empty: the plan's op precisions)."""
        if self.replica_precision is None or replica >= len(self.replica_precision):
            return {}
        return dict(self.replica_precision[replica])

    def even(self) -> bool:
        """Round-robin: every replica sees every r-th microbatch (no shares, or equal)."""
        return self.shares is None or len(set(self.shares)) <= 1

    def rounds_per_microbatch(self) -> int:
        """Microbatches between two of the least-served replica's (the replica count with
        round-robin; the longest gap of the weighted sequence otherwise)."""
        if self.even():
            return self.replicas
        seq = [self.replica_of(m) for m in range(self.cycle)]
        return max(-(-len(seq) // seq.count(i)) for i in range(self.replicas))

    @property
    def uniform(self) -> bool:
        """Every replica gets the same work at the same precisions (no groups: shares
        round-robin or all equal, no precision overrides or the same on every replica)."""
        rp = self.replica_precision
        return (self.shares is None or len(set(self.shares)) <= 1) and (rp is None or len(set(rp)) <= 1)


@dataclass(frozen=True)
class Plan:
    """op index (topological) -> stage and precision; stage -> devices; schedule.

    Schedule ``interleaved`` (Megatron's virtual pipeline stages, ``core.schedules``):
    ``stages`` are the ``pp x vp`` model chunks in model order, chunk c on the devices of
    chunk ``c mod pp`` (``pipeline_ranks`` pp, ``virtual_stages`` vp); a plan file
    states it by its schedule name and its chunks' devices, nothing else. Other fields:
    their docstrings below.
    """

    op_stage: tuple[int, ...]
    op_precision: tuple[str, ...]
    stages: tuple[Stage, ...]
    microbatches: int
    schedule: str
    device_order: dict[int, tuple[tuple[int, int, str], ...]] | None = None
    """Schedule 'explicit' only: device index -> sequence of (microbatch, op index, phase
    'F'/'B') the device executes in that order."""
    predicted: Mapping[str, Any] = field(default_factory=dict, compare=False)
    """The planner's own figures (e.g. ``milp_period_s``), a read-only mapping (a Plan is
    frozen): :meth:`with_predicted` returns a new Plan."""
    dp_allreduce: str = "ring"
    """The data-parallel gradient reduction (``DP_ALLREDUCE``): a ring over the replicas or
    hierarchical (reduce-scatter inside each node, all-reduce across nodes, all-gather
    inside)."""
    overlap_grad_reduce: bool = False
    """Reduce each operator's gradients as soon as its last backward is done, overlapping
    the rest of the backward (Megatron's bucketed overlap, one bucket per operator),
    instead of after the stage's last task."""

    def __post_init__(self) -> None:
        object.__setattr__(self, "predicted", MappingProxyType(dict(self.predicted)))

    def with_predicted(self, **figures: Any) -> "Plan":
        """A copy whose ``predicted`` also holds ``figures`` (they win on a clash)."""
        return dataclasses.replace(self, predicted={**self.predicted, **figures})

    @property
    def n_stages(self) -> int:
        return len(self.stages)

    def used_stages(self) -> list[int]:
        """Stages that hold at least one operator."""
        return sorted(set(self.op_stage))

    def ops_in_stage(self, k: int) -> list[int]:
        return [v for v, s in enumerate(self.op_stage) if s == k]

    @property
    def pipeline_ranks(self) -> int:
        """Pipeline ranks (device groups) the stages cycle over: the smallest p dividing
        the stage count with stage c on the devices (and tensor-parallel degree) of stage
        ``c mod p`` under the ``interleaved`` schedule (``core.schedules``), the stage
        count otherwise."""
        K = self.n_stages
        if self.schedule != "interleaved":
            return K
        for p in range(1, K + 1):
            if K % p == 0 and all(self.stages[c].devices == self.stages[c % p].devices and
                                  self.stages[c].tensor_parallel == self.stages[c % p].tensor_parallel
                                  for c in range(p, K)):
                return p
        return K

    @property
    def virtual_stages(self) -> int:
        """Model chunks per pipeline rank (Megatron's virtual pipeline size ``vp``): 1
        unless the schedule is ``interleaved``; stage (chunk) c runs on rank ``c mod
        pipeline_ranks`` as its virtual chunk ``c // pipeline_ranks``."""
        return self.n_stages // self.pipeline_ranks if self.stages else 1

    @property
    def cycle(self) -> int:
        """Microbatches after which every stage's assignment to replicas repeats."""
        return math.lcm(*(s.cycle for s in self.stages)) if self.stages else 1

    @property
    def has_replica_groups(self) -> bool:
        """Some stage has shares or precision overrides (module docstring)."""
        return any(s.shares is not None or s.replica_precision is not None for s in self.stages)

    def window_offsets(self) -> list[int]:
        """1F1B: the round offset of each stage's backwards (``sim.schedule.window_1f1b``
        documents the rule; the analytic iteration replays the same order)."""
        K, out, prev = self.n_stages, [], None
        for k, st in enumerate(self.stages):
            o = (K - 1 - k) * st.rounds_per_microbatch()
            if o and not st.even():   # uneven gaps: a forward due in the same round goes first
                o += 1
            prev = o if prev is None else min(o, prev)
            out.append(prev)
        return out

    def precision_of(self, v: int, replica: int) -> str:
        """Op v's precision on ``replica`` of its stage."""
        return self.stages[self.op_stage[v]].overrides(replica).get(v, self.op_precision[v])

    def replica_precisions(self, k: int, replica: int) -> tuple[str, ...]:
        """Every op's precision, stage k's ops as ``replica`` of stage k runs them."""
        over = self.stages[k].overrides(replica)
        if not over:
            return self.op_precision
        return tuple(over.get(v, p) if self.op_stage[v] == k else p for v, p in enumerate(self.op_precision))

    def microbatch_precisions(self, microbatch: int) -> tuple[str, ...]:
        """Every op's precision for ``microbatch``: as the replica of its stage that runs
        the microbatch computes it."""
        if all(s.replica_precision is None for s in self.stages):
            return self.op_precision
        over = [s.overrides(s.replica_of(microbatch)) for s in self.stages]
        return tuple(over[k].get(v, p) for v, (k, p) in enumerate(zip(self.op_stage, self.op_precision)))

    def widest_precisions(self, k: int, bytes_of) -> dict[int, str]:
        """For each op of stage k, the widest precision (``bytes_of(precision)`` the
        largest; the first replica on a tie) any replica of the stage computes it in: the
        precision its gradients are reduced in (module docstring)."""
        st = self.stages[k]
        out: dict[int, str] = {}
        for v in self.ops_in_stage(k):
            precs = [self.precision_of(v, i) for i in range(st.replicas)] or [self.op_precision[v]]
            out[v] = max(precs, key=bytes_of)
        return out


def _stage_doc(s: Stage, topo, ops=None) -> dict[str, Any]:
    d: dict[str, Any] = {"devices": [topo.devices[i].name for i in s.devices], "tensor_parallel": s.tensor_parallel}
    if s.recompute != "none":
        d["recompute"] = s.recompute
    if s.sequence_parallel:
        d["sequence_parallel"] = True
    if s.zero:
        d["zero"] = s.zero
    if s.expert_parallel > 1:
        d["expert_parallel"], d["expert_stride"] = s.expert_parallel, s.expert_stride
    if s.offload:
        d["offload"] = list(s.offload)
    if s.tp_comm_overlap:
        d["tp_comm_overlap"] = True
    if s.shares is not None:
        d["shares"] = list(s.shares)
    if s.replica_precision is not None:
        d["replica_precision"] = [{(ops[v].name if ops is not None else str(v)): p for v, p in over}
                                  for over in s.replica_precision]
    return d


def _stage_from_doc(s: Any, topo, where: str, graph=None) -> Stage:
    if not isinstance(s, dict):
        raise DistplanError(f"{where} must be a mapping (devices, tensor_parallel, ...), got "
                            f"{type(s).__name__}")
    shares = s.get("shares")
    if shares is not None:
        if not isinstance(shares, list):
            raise DistplanError(f"{where}: shares must be a list of whole numbers, one per replica")
        shares = tuple(_whole(x, f"{where}: a share") for x in shares)
    off = s.get("offload", [])
    if not isinstance(off, list) or not all(isinstance(x, str) for x in off):
        raise DistplanError(f"{where}: offload must be a list of names ({', '.join(OFFLOAD)})")
    rp = s.get("replica_precision")
    if rp is not None:
        if not isinstance(rp, list) or not all(isinstance(x, dict) for x in rp):
            raise DistplanError(f"{where}: replica_precision must be a list of {{op name: precision}}, one per replica")
        rp = tuple({(graph.index(n) if graph is not None else int(n)): str(p) for n, p in x.items()} for x in rp)
    st = Stage(tuple(topo.device_index(n) for n in s["devices"]), _whole(s.get("tensor_parallel", 1), where),
               str(s.get("recompute", "none")), bool(s.get("sequence_parallel", False)),
               _whole(s.get("zero", 0), where), shares, rp, _whole(s.get("expert_parallel", 1), where),
               _whole(s.get("expert_stride", 1), where), tuple(off), _flag(s.get("tp_comm_overlap", False), where))
    ep, stride = st.expert_parallel, st.expert_stride
    # a tensor_parallel below 1 is the checker's to name (costs.check); no replicas to divide then
    if ep < 1 or stride < 1 or (st.tensor_parallel >= 1 and st.replicas % (ep * stride)):
        raise DistplanError(f"{where}: expert_parallel {ep} x expert_stride {stride} must be positive and divide "
                            f"the stage's {st.replicas} replicas")
    return st


def plan_to_dict(plan: Plan, problem) -> dict[str, Any]:
    """JSON-ready form naming ops and devices (``problem`` supplies the names)."""
    g, topo = problem.graph, problem.topology
    d: dict[str, Any] = {
        "format": FORMAT, "version": VERSION,
        "problem": {
            "workload": g.name, "mode": g.mode, "batch_size": g.batch_size, "seq_len": g.seq_len,
            "topology": topo.name, "precisions": list(problem.precisions),
            "low_bit_ops": problem.low_bit_ops,
            **({"comm": problem.comm} if getattr(problem, "comm", "overlapped") != "overlapped" else {}),
        },
        "microbatches": plan.microbatches, "schedule": plan.schedule,
        "stages": [_stage_doc(s, topo, g.ops) for s in plan.stages],
        "ops": {op.name: {"stage": plan.op_stage[v], "precision": plan.op_precision[v]}
                for v, op in enumerate(g.ops)},
        "predicted": dict(plan.predicted),
    }
    if plan.dp_allreduce != "ring":
        d["dp_allreduce"] = plan.dp_allreduce
    if plan.overlap_grad_reduce:
        d["overlap_grad_reduce"] = True
    if plan.device_order is not None:
        d["device_order"] = {topo.devices[dev].name: [[m, g.ops[v].name, ph] for m, v, ph in seq]
                             for dev, seq in plan.device_order.items()}
    return d


def _flag(x: Any, where: str) -> bool:
    """A stage's switch written in a plan file: true or false, nothing else."""
    if not isinstance(x, bool):
        raise DistplanError(f"{where}: tp_comm_overlap must be true or false, got {x!r}"[:200])
    return x


def _whole(x: Any, what: str) -> int:
    """An index written in a plan file: a whole number (``2`` or ``2.0``), nothing else."""
    if isinstance(x, bool) or not isinstance(x, (int, float)) or (isinstance(x, float) and not x.is_integer()):
        raise DistplanError(f"{what} must be a whole number, got {x!r}"[:200])
    return int(x)


def plan_from_dict(d: Any, problem, source: str = "plan") -> Plan:
    """Inverse of :func:`plan_to_dict`; every name must exist in ``problem``."""
    if not isinstance(d, dict) or d.get("format") != FORMAT or d.get("version") not in READ_VERSIONS:
        raise DistplanError(f"{source}: not a {FORMAT} document of version {' or '.join(map(str, READ_VERSIONS))}")
    if not isinstance(d.get("ops"), dict) or not isinstance(d.get("stages"), list):
        raise DistplanError(f"{source}: a plan needs 'ops' (op name -> stage, precision) and 'stages' (a list)")
    g, topo = problem.graph, problem.topology
    missing = [op.name for op in g.ops if op.name not in d["ops"]]
    extra = [n for n in d["ops"] if n not in {op.name for op in g.ops}]
    if missing or extra:
        raise DistplanError(f"{source}: ops missing {missing[:4]} / unknown {extra[:4]} for graph {g.name!r}")
    try:
        stages = tuple(_stage_from_doc(s, topo, f"{source}: stage {k}", g) for k, s in enumerate(d["stages"]))
        order = None
        if "device_order" in d:
            if not isinstance(d["device_order"], dict):
                raise DistplanError(f"{source}: device_order must map device names to lists of "
                                    f"[microbatch, op, phase], got {type(d['device_order']).__name__}")
            order = {topo.device_index(dev): tuple((_whole(m, f"{source}: a microbatch of device_order"), g.index(v),
                                                    str(ph)) for m, v, ph in seq)
                     for dev, seq in d["device_order"].items()}
        return Plan(
            op_stage=tuple(_whole(d["ops"][op.name]["stage"], f"{source}: stage of op {op.name!r}") for op in g.ops),
            op_precision=tuple(str(d["ops"][op.name]["precision"]) for op in g.ops),
            stages=stages, microbatches=_whole(d["microbatches"], f"{source}: microbatches"),
            schedule=str(d["schedule"]),
            device_order=order, predicted=dict(d.get("predicted", {})),
            dp_allreduce=str(d.get("dp_allreduce", "ring")), overlap_grad_reduce=bool(d.get("overlap_grad_reduce", False)),
        )
    except (KeyError, TypeError, ValueError) as e:
        raise DistplanError(f"{source}: malformed plan ({e!r})") from None


def read_plan_json(path: str | Path) -> dict[str, Any]:
    """Parse a plan file; any read or syntax problem is a DistplanError naming the file."""
    return read_json_file(path, "plan file")
