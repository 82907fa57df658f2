"""Plan files that identify their problem exactly (``distplan-plan`` version 2).

A version-2 plan file embeds the graph and the topology it was made for (their own
file documents, ``distplan-graph`` and the topology file format) with a SHA-256 of
each, and the problem options (precisions, microbatches, schedule). Replaying it needs
nothing else, and a replay against another graph or topology is refused: a custom graph
called ``gpt2`` can never be mistaken for the zoo's. Version-1 files named their problem
only; they are read only against a workload and topology given explicitly.
"""
from __future__ import annotations

import hashlib
import json
import math
from decimal import Decimal
from pathlib import Path
from typing import Any

from distplan.core.atomic import write_json_atomic
from distplan.core.errors import DistplanError
from distplan.core.plan import Plan, _whole, plan_from_dict, plan_to_dict, read_plan_json
from distplan.core.schedules import SCHEDULES
from distplan.core.validate import check_instance, check_path
from distplan.costs.problem import Problem, ProblemOptions, build_problem
from distplan.topologies.io import topology_from_dict, topology_to_dict
from distplan.topologies.textformat import dump_json
from distplan.topologies.topology import Topology
from distplan.workloads.graph import Graph
from distplan.workloads.io import graph_from_dict, graph_to_dict

VERSION = 2


def _sha(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def graph_sha256(graph: Graph) -> str:
    """Content hash of a graph (its canonical JSON document)."""
    return _sha(json.dumps(graph_to_dict(graph), sort_keys=True))


def topology_sha256(topology: Topology) -> str:
    """Content hash of a topology (its file document, exact decimals)."""
    return _sha(dump_json(topology_to_dict(topology)))


def plan_document(plan: Plan, problem: Problem) -> dict[str, Any]:
    """The version-2 document: the plan, and its problem embedded with hashes."""
    d = plan_to_dict(plan, problem)
    d["version"] = VERSION
    d["predicted"] = {k: None if isinstance(v, float) and not math.isfinite(v) else v
                      for k, v in d["predicted"].items()}   # strict JSON: no nan or infinity
    topo = json.loads(dump_json(topology_to_dict(problem.topology)))
    d["problem"].update(
        microbatches=problem.microbatches, schedule=problem.schedule,
        graph_sha256=graph_sha256(problem.graph), topology_sha256=embedded_topology_sha256(problem.topology, topo),
        graph=graph_to_dict(problem.graph), topology=topo)
    return d


def embedded_topology_sha256(topology: Topology, doc: dict) -> str:
    """The hash a plan file records for its embedded topology ``doc``: the topology's own
    (``topology_sha256``), unless the document does not hold it exactly, then the hash
    of the topology the document holds (what a replay rebuilds and checks). A value in
    a human unit (latency_us) is written with up to 17 digits and the JSON float read
    back keeps only its shortest text, so an API-built topology whose latencies are
    arbitrary floats could come back an ulp apart: its plan file was refused by its
    own replay as 'edited' (issue 26's contract test, random topologies). Topology files
    and presets hold their values exactly: their hash is unchanged."""
    own = topology_sha256(topology)
    back = topology_from_dict(_decimals(doc), default_name=topology.name)
    held = topology_sha256(back)
    return own if held == own else held


def save_plan(plan: Plan, problem: Problem, path: str | Path) -> None:
    """Write ``plan`` for ``problem`` as a self-contained version-2 plan file, atomically
    (core.atomic: a failed write leaves the file there before intact) and as strict JSON
    (no nan or infinity: a non-finite predicted figure is written as null)."""
    check_instance("plan", plan, Plan, "take one from a report (report.best.plan) or distplan.load_plan")
    check_instance("problem", problem, Problem, "build one with distplan.problem(workload, topology, ...)")
    check_path("path", path)
    indent = 1 if problem.n_ops <= COMPACT_ABOVE_OPS else None   # json's C encoder only writes compact JSON
    write_json_atomic(path, plan_document(plan, problem), "plan file", indent=indent, default=float)


#: plan files of graphs with more operators are written without indentation: with it,
#: ``json`` encodes in Python (a 100,000-op plan took 10 s to write, 1.5 s compact)
COMPACT_ABOVE_OPS = 5_000


def _decimals(x: Any) -> Any:
    """Floats back to the exact decimals the topology document was written with."""
    if isinstance(x, float):
        return Decimal(repr(x))
    if isinstance(x, dict):
        return {k: _decimals(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_decimals(v) for v in x]
    return x


def _problem_block(d: Any, source: str) -> dict[str, Any]:
    blk = d.get("problem") if isinstance(d, dict) else None
    if not isinstance(blk, dict):
        raise DistplanError(f"{source}: no 'problem' block; this is not a plan file written by distplan")
    return blk


def problem_from_document(d: Any, source: str = "plan", graph: Graph | None = None,
                          topology: Topology | None = None) -> Problem:
    """Rebuild the problem a plan document was made for.

    Version 2: from the embedded graph and topology; a ``graph`` or ``topology`` given
    too must have the recorded hash (else a DistplanError says which differs).
    Version 1: only with both ``graph`` and ``topology`` given."""
    blk = _problem_block(d, source)
    version = d.get("version")
    try:
        if version == VERSION:
            emb_g = graph_from_dict(blk["graph"], source=f"{source}: embedded graph")
            emb_t = topology_from_dict(_decimals(blk["topology"]), default_name=str(blk.get("topology_name", "t")))
            for what, emb, want in (("graph", emb_g, blk.get("graph_sha256")),
                                    ("topology", emb_t, blk.get("topology_sha256"))):
                got = graph_sha256(emb) if what == "graph" else topology_sha256(emb)
                if got != want:
                    raise DistplanError(f"{source}: the embedded {what} does not match its recorded sha256 "
                                        "(the file was edited); re-solve to write a new plan file")
            for what, given, want in (("graph", graph, blk.get("graph_sha256")),
                                      ("topology", topology, blk.get("topology_sha256"))):
                if given is None:
                    continue
                got = graph_sha256(given) if what == "graph" else topology_sha256(given)
                if got != want:
                    raise DistplanError(
                        f"{source}: the plan was made for another {what} than the one given "
                        f"({given.name!r}, sha256 {got[:12]} vs the plan's {str(want)[:12]}); "
                        f"leave out the {what} to replay the plan on its own, embedded {what}")
            graph, topology = emb_g, emb_t
        elif version == 1:
            if graph is None or topology is None:
                raise DistplanError(f"{source}: a version-1 plan file names its workload and topology without "
                                    "identifying them; give both (--workload and --topology) or re-solve to "
                                    "write a self-contained version-2 file")
        else:
            raise DistplanError(f"{source}: plan file version {version!r} unknown; this distplan reads 1 and {VERSION}")
        mode = blk.get("mode", graph.mode)
        if graph.mode != mode:
            graph = graph.with_mode(mode)
        sched = blk.get("schedule", d.get("schedule"))
        microbatches = _whole(blk.get("microbatches", d["microbatches"]), f"{source}: microbatches")
        if microbatches < 1:
            raise DistplanError(f"{source}: microbatches must be >= 1, got {microbatches}")
        return build_problem(graph, topology, ProblemOptions(
            precisions=tuple(blk["precisions"]),
            low_bit_ops=str(blk.get("low_bit_ops", "all")),   # files from before the policy: any op at int8
            comm=str(blk.get("comm", "overlapped")),
            microbatches=microbatches, schedule=sched if sched in SCHEDULES else None))
    except (KeyError, TypeError, ValueError, AttributeError) as e:
        raise DistplanError(f"{source}: malformed problem block ({type(e).__name__}: {e})") from None


def load_plan_file(path: str | Path, graph: Graph | Problem | None = None,
                   topology: Topology | None = None) -> tuple[Plan, Problem]:
    """Read a plan file and the problem it identifies (see :func:`problem_from_document`).
    ``graph`` may be a Problem: the file must be for its graph and topology, and the plan
    is read against it (its precisions, microbatches and schedule); that Problem is returned."""
    check_path("path", path, "a plan file's name")
    if graph is not None and not isinstance(graph, (Graph, Problem)):
        raise DistplanError(f"graph must be a Problem, a Graph or None, got {type(graph).__name__}; give "
                            "load_plan the Problem the plan is for, or nothing (the file embeds its problem)")
    if topology is not None:
        check_instance("topology", topology, Topology)
    d = read_plan_json(path)
    if isinstance(graph, Problem):
        if topology is not None:
            raise DistplanError("load_plan: give a Problem, or a graph and a topology, not both")
        problem_from_document(d, str(path), graph.graph, graph.topology)   # the file is for them
        return plan_from_dict(d, graph, source=str(path)), graph
    problem = problem_from_document(d, str(path), graph, topology)
    return plan_from_dict(d, problem, source=str(path)), problem
