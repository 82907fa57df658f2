"""A Plan: what runs where, when and at which precision; a versioned JSON document.

Stages are positions along a pipeline; stage k runs on ``stages[k].devices``. With
``replicas = len(devices) // tensor_parallel`` > 1 the stage is data-parallel:
microbatch m runs on replica ``m % replicas`` (devices ``[r*tp:(r+1)*tp]``). A tensor
from stage a to stage b > a is relayed hop by hop through the devices of stages
a+1..b-1 (a stage may hold no operators and act only as a relay); each hop follows the
topology's route between the two devices.
"""
from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
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


@dataclass(frozen=True)
class Stage:
    """Devices of one pipeline stage: ``replicas`` groups of ``tensor_parallel`` devices.

    Training options: ``recompute`` (``RECOMPUTE``); ``sequence_parallel`` (norms and
    residual adds sharded along the sequence over the tensor-parallel group, with
    reduce-scatter/all-gather in place of its all-reduces); ``zero`` = 1 shards the
    optimizer state over the data-parallel replicas (ZeRO-1: gradients reduce-scattered,
    each replica updates its shard, parameters all-gathered)."""

    devices: tuple[int, ...]
    tensor_parallel: int = 1
    recompute: str = "none"
    sequence_parallel: bool = False
    zero: int = 0

    @property
    def replicas(self) -> int:
        return len(self.devices) // self.tensor_parallel

    def replica_devices(self, microbatch: int) -> tuple[int, ...]:
        r = microbatch % self.replicas
        return self.devices[r * self.tensor_parallel:(r + 1) * self.tensor_parallel]


@dataclass(frozen=True)
class Plan:
    """op index (topological) -> stage and precision; stage -> devices; schedule.

    ``device_order`` (schedule 'explicit' only): device index -> sequence of
    (microbatch, op index, phase 'F'/'B') the device executes in that order.
    ``dp_allreduce`` (``DP_ALLREDUCE``): the data-parallel gradient reduction, a ring
    over the replicas or hierarchical (reduce-scatter inside each node, all-reduce
    across nodes, all-gather inside); ``overlap_grad_reduce``: each operator's gradients
    are reduced as soon as its last backward is done, overlapping the rest of the
    backward (Megatron's bucketed overlap, one bucket per operator), instead of after
    the stage's last task.
    ``predicted`` carries the planner's own figures (e.g. ``milp_period_s``); it is a
    read-only mapping (a Plan is frozen): :meth:`with_predicted` returns a new Plan.
    """

    op_stage: tuple[int, ...]
    op_precision: tuple[str, ...]
    stages: tuple[Stage, ...]
    microbatches: int
    schedule: str
    device_order: dict[int, tuple[tuple[int, int, str], ...]] | None = None
    predicted: Mapping[str, Any] = field(default_factory=dict, compare=False)
    dp_allreduce: str = "ring"
    overlap_grad_reduce: bool = False

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


def _stage_doc(s: Stage, topo) -> dict[str, Any]:
    d: dict[str, Any] = {"devices": [topo.devices[i].name for i in s.devices], "tensor_parallel": s.tensor_parallel}
    if s.recompute != "none":
        d["recompute"] = s.recompute
    if s.sequence_parallel:
        d["sequence_parallel"] = True
    if s.zero:
        d["zero"] = s.zero
    return d


def _stage_from_doc(s: Any, topo, where: str) -> Stage:
    return Stage(tuple(topo.device_index(n) for n in s["devices"]), _whole(s.get("tensor_parallel", 1), where),
                 str(s.get("recompute", "none")), bool(s.get("sequence_parallel", False)),
                 _whole(s.get("zero", 0), where))


def plan_to_dict(plan: Plan, problem) -> dict[str, Any]:
    """JSON-ready form naming ops and devices (``problem`` supplies the names)."""
    g, topo = problem.graph, problem.topology
    d: dict[str, Any] = {
        "format": FORMAT, "version": VERSION,
        "problem": {
            "workload": g.name, "mode": g.mode, "batch_size": g.batch_size, "seq_len": g.seq_len,
            "topology": topo.name, "precisions": list(problem.precisions),
        },
        "microbatches": plan.microbatches, "schedule": plan.schedule,
        "stages": [_stage_doc(s, topo) for s in plan.stages],
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
        stages = tuple(_stage_from_doc(s, topo, f"{source}: stage {k}") for k, s in enumerate(d["stages"]))
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
