"""``problem(workload, topology, ...)``: names or objects in, a costed Problem out."""
from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from distplan.api.resolve import resolve_topology, resolve_workload
from distplan.core.errors import DistplanError
from distplan.core.schedules import SCHEDULES
from distplan.core.validate import check_choice, check_int, check_ints, check_str
from distplan.costs.problem import COMM_MODES, LOW_BIT_OPS, Problem, ProblemOptions, build_problem
from distplan.topologies.topology import Topology
from distplan.workloads.graph import Graph
from distplan.workloads.zoo.attention import ATTENTION
from distplan.workloads.profile import Profile, apply_profile, as_profile, check_kinds


def problem(workload: str | Graph = "bert-base", topology: str | Topology = "mcm4x4", *,
            batch_size: int | None = None, seq_len: int | None = None, mode: str | None = None,
            input_shapes: dict[str, tuple[int, ...]] | None = None,
            precisions: Sequence[str] | str | None = None, microbatches: int = 16,
            schedule: str | None = None, low_bit_ops: str = "matmul",
            profile: "str | Path | dict | Profile | None" = None, comm: str = "overlapped",
            attention: str | None = None) -> Problem:
    """Build the Problem both the planner and the simulator read.

    ``workload``: a zoo name, a graph ``.json``, an ``.onnx`` file (``input_shapes`` fixes
    symbolic dimensions) or a Graph; ``topology``: a preset name, a ``.yaml``/``.json``
    file (str or Path) or a Topology. ``mode``: "inference" or "training" (default: a
    Graph's own; inference for a name or file). ``precisions``: the formats to choose from
    (None: ``default_precisions``). ``low_bit_ops``: "matmul" (int8/fp8 on matrix products
    only) or "all". ``profile``: measured per-op times replacing the roofline
    (workloads/profile.py). ``comm``: "overlapped" (transfers load links only) or
    "exposed" (also the sending and receiving devices; costs.exposed). ``attention``: a zoo
    transformer's attention core, "explicit" (scores and softmax as ops; the default) or
    "flash" (one fused FlashAttention op). Every argument is checked first
    (:func:`check_problem_arguments`). Details and examples:
    docs/reference/api.md, docs/guides/own-model.md.
    """
    # a pathlib.Path names a file as a str does (it was refused: 'got PosixPath')
    workload = os.fspath(workload) if isinstance(workload, os.PathLike) else workload
    topology = os.fspath(topology) if isinstance(topology, os.PathLike) else topology
    check_problem_arguments(workload, batch_size=batch_size, seq_len=seq_len, mode=mode,
                            input_shapes=input_shapes, precisions=precisions, microbatches=microbatches,
                            schedule=schedule, low_bit_ops=low_bit_ops, comm=comm, attention=attention)
    if isinstance(workload, Graph):
        if batch_size is not None or seq_len is not None or input_shapes or attention is not None:
            raise DistplanError("batch_size, seq_len, input_shapes and attention apply to a workload name or "
                                "file, not to a Graph object; build the Graph with them instead")
        graph = workload if mode in (None, workload.mode) else workload.with_mode(mode)
    elif isinstance(workload, str):
        graph = resolve_workload(workload, batch_size, seq_len, mode or "inference", input_shapes or None,
                                 attention)
    else:
        raise DistplanError(f"workload must be a name, a file path or a Graph, got {type(workload).__name__}")
    if isinstance(topology, Topology):
        topo = topology
    elif isinstance(topology, str):
        topo = resolve_topology(topology)
    else:
        raise DistplanError(f"topology must be a name, a file path or a Topology, got {type(topology).__name__}")
    if profile is not None:
        prof = as_profile(profile)
        graph = apply_profile(graph, prof)
        check_kinds(prof, sorted({d.kind for d in topo.devices}), topo.name)
    if precisions is None:
        precs = default_precisions(graph.mode == "training", topo)
    else:
        precs = tuple(p.strip() for p in precisions.split(",")) if isinstance(precisions, str) else tuple(precisions)
    return build_problem(graph, topo, ProblemOptions(precisions=precs, microbatches=microbatches,
                                                     schedule=schedule, low_bit_ops=low_bit_ops, comm=comm))


def check_problem_arguments(workload: object, *, batch_size: object, seq_len: object, mode: object,
                            input_shapes: object, precisions: object, microbatches: object, schedule: object,
                            low_bit_ops: object, comm: object = "overlapped", attention: object = None) -> None:
    """:func:`problem`'s arguments, each of its type and range, or a DistplanError naming
    it: counts are positive ints (not "16", 2.5 or True), names are strings, and a graph
    file (.json, .onnx) fixes its own batch and sequence."""
    check_int("batch_size", batch_size, optional=True)
    check_int("seq_len", seq_len, optional=True)
    check_choice("mode", mode, ("inference", "training"), optional=True)
    check_int("microbatches", microbatches)
    check_choice("schedule", schedule, SCHEDULES, optional=True)
    check_choice("low_bit_ops", low_bit_ops, LOW_BIT_OPS)
    check_choice("comm", comm, COMM_MODES)
    check_choice("attention", attention, ATTENTION, optional=True)
    if precisions is not None and not isinstance(precisions, str) and not (
            isinstance(precisions, (list, tuple)) and precisions and all(isinstance(p, str) for p in precisions)):
        raise DistplanError(f"precisions must be a string such as 'fp16,int8' or a list of precision names, "
                            f"or None (the defaults), got {precisions!r} ({type(precisions).__name__})"[:300])
    if input_shapes is not None:
        if not isinstance(input_shapes, dict):
            raise DistplanError(f"input_shapes must be a dict of input name -> shape (a tuple of positive whole "
                                f"numbers), got {type(input_shapes).__name__}")
        for k, v in input_shapes.items():
            check_str("input_shapes key", k)
            check_ints(f"input_shapes[{k!r}]", v)
    if isinstance(workload, str) and Path(workload).suffix.lower() in (".json", ".onnx") and (
            batch_size is not None or seq_len is not None or attention is not None):
        what = "batch_size" if batch_size is not None else "seq_len" if seq_len is not None else "attention"
        raise DistplanError(f"{what} applies to a zoo workload, not to the graph file {workload!r}, which fixes "
                            "its own batch and sequence" + (" (give an ONNX model's symbolic inputs a shape with "
                                                           "input_shapes)" if workload.lower().endswith(".onnx")
                                                           else ""))


#: the planner's default formats: inference trades precision for speed (int8 matrix
#: products where the sensitivity allows, ``ProblemOptions.low_bit_ops``); training computes in 16 bits with fp32 master weights and
#: optimizer state (mixed precision, the static bytes of costs.memory)
INFERENCE_PRECISIONS = ("fp16", "int8")
TRAINING_PRECISIONS = ("bf16", "fp16")


def default_precisions(training: bool, topology: Topology) -> tuple[str, ...]:
    """The default precisions for a mode on a topology: inference fp16 and int8;
    training bf16 and fp16, those some device runs (fp32 when neither)."""
    if not training:
        return INFERENCE_PRECISIONS
    runs = {p for k in topology.kinds.values() for p in k.peak_flops_per_s}
    return tuple(p for p in TRAINING_PRECISIONS if p in runs) or ("fp32",)
