"""The corpus: planning instances with proven optima, one self-contained JSON file each.

``load_corpus(names=None) -> list[CorpusInstance]``; an instance gives ``problem()``,
``plan()`` (one optimal plan), ``optimum_s``, ``bound_s`` (seconds) and ``proof``
(``"brute-force"`` or ``"milp gap 0"``). Files are ``distplan-corpus-instance`` version 1,
keys checked strictly. The objective ``throughput`` minimises
``costs.evaluate.plan_cost(problem, plan).period_s`` over the pipeline planner's space
(``SolveOptions(space="pipeline")``). Guarantee: ``bound_s`` is a proven lower bound on
every plan of that space and ``optimum_s`` the stored plan's period, so
``bound_s <= optimum_s``, equal up to the proof's gap (zero for brute force, the
solver's tolerance for the MILP).

File format and space: docs/guides/testing.md, "The corpus file format".
"""
from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

from distplan.core.gap import gap as relative_gap
from distplan.core.atomic import write_atomic
from distplan.core.errors import DistplanError
from distplan.core.plan import Plan, plan_from_dict, plan_to_dict
from distplan.costs.problem import Problem, ProblemOptions, build_problem
from distplan.topologies.io import topology_from_dict, topology_to_dict
from distplan.topologies.textformat import dump_json
from distplan.topologies.topology import Topology
from distplan.workloads.graph import Graph
from distplan.workloads.io import graph_from_dict, graph_to_dict

__all__ = ["FORMAT", "VERSION", "PROOFS", "CorpusInstance", "corpus_dir", "corpus_names", "load_corpus",
           "read_instance", "save_instance", "instance_to_dict", "instance_from_dict", "make_instance"]

FORMAT = "distplan-corpus-instance"
VERSION = 1
PROOF_BRUTE_FORCE = "brute-force"
PROOF_MILP = "milp gap 0"
PROOFS = (PROOF_BRUTE_FORCE, PROOF_MILP)
OBJECTIVES = ("throughput",)
_KEYS = ("format", "version", "name", "description", "source", "graph", "topology", "options", "objective",
         "optimum_s", "bound_s", "proof", "proof_detail", "plan")
_OPTION_KEYS = ("precisions", "microbatches", "schedule")


@dataclass(frozen=True, eq=False)
class CorpusInstance:
    """One corpus instance (see the module docstring for the meaning of each figure)."""

    name: str
    description: str
    graph: Graph
    topology: Topology
    options: ProblemOptions
    objective: str
    optimum_s: float
    bound_s: float
    proof: str
    proof_detail: Mapping[str, Any]
    plan_doc: Mapping[str, Any]
    source: Mapping[str, Any]
    path: Path | None = None
    _cache: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def problem(self) -> Problem:
        """The costed Problem (built once per instance object)."""
        if "problem" not in self._cache:
            self._cache["problem"] = build_problem(self.graph, self.topology, self.options)
        return self._cache["problem"]

    def plan(self) -> Plan:
        """The stored optimal plan."""
        return plan_from_dict(dict(self.plan_doc), self.problem(), source=f"corpus instance {self.name!r}")

    @property
    def gap(self) -> float:
        """(optimum - bound) / optimum: 0 for brute force, the solver's tolerance for the MILP."""
        return relative_gap(self.optimum_s, self.bound_s)

    @property
    def n_ops(self) -> int:
        return len(self.graph.ops)

    @property
    def n_devices(self) -> int:
        return self.topology.n_devices

    def __repr__(self) -> str:
        return (f"CorpusInstance({self.name!r}, {self.n_ops} ops, {self.n_devices} devices, "
                f"optimum {self.optimum_s:.6g} s, {self.proof})")


def corpus_dir() -> Path:
    """The folder of the corpus shipped with distplan."""
    return Path(__file__).resolve().parent / "corpus"


def corpus_names(directory: str | Path | None = None) -> list[str]:
    """Instance names (file stems) in ``directory`` (default: the shipped corpus), sorted."""
    return sorted(p.stem for p in Path(directory or corpus_dir()).glob("*.json"))


def load_corpus(names: Iterable[str] | None = None, directory: str | Path | None = None) -> list[CorpusInstance]:
    """Read the instances ``names`` (default: all) from ``directory`` (default: the shipped
    corpus), sorted by name; an unknown name is a DistplanError listing the known ones."""
    folder = Path(directory or corpus_dir())
    known = corpus_names(folder)
    wanted = known if names is None else list(names)
    missing = [n for n in wanted if n not in known]
    if missing:
        raise DistplanError(f"no corpus instance {missing[0]!r} in {folder}; known: {', '.join(known) or 'none'}")
    return sorted((read_instance(folder / f"{n}.json") for n in wanted), key=lambda i: i.name)


# --- reading and writing ---------------------------------------------------------------
def _floats(x: Any) -> Any:
    """Decimals (from exact JSON parsing) back to floats, recursively (exact for any float
    written by ``json``: its text is the shortest round-trip form)."""
    if isinstance(x, Decimal):
        return float(x)
    if isinstance(x, dict):
        return {k: _floats(v) for k, v in x.items()}
    if isinstance(x, list):
        return [_floats(v) for v in x]
    return x


def _require(d: Any, keys: tuple[str, ...], where: str) -> None:
    if not isinstance(d, dict):
        raise DistplanError(f"{where}: expected a JSON object")
    unknown, missing = set(d) - set(keys), set(keys) - set(d)
    if unknown or missing:
        raise DistplanError(f"{where}: unknown keys {sorted(unknown)}, missing keys {sorted(missing)}; "
                            f"a {FORMAT} v{VERSION} document has exactly {list(keys)}")


def instance_from_dict(doc: Any, source: str = "corpus instance", path: Path | None = None) -> CorpusInstance:
    """Build a CorpusInstance from a parsed document whose non-integer numbers are
    ``Decimal`` (the topology keeps them exact; everything else becomes float)."""
    _require(doc, _KEYS, source)
    if doc["format"] != FORMAT or doc["version"] != VERSION:
        raise DistplanError(f"{source}: format {doc['format']!r} v{doc['version']} unsupported; "
                            f"expected {FORMAT} v{VERSION}")
    rest = _floats({k: v for k, v in doc.items() if k != "topology"})
    # "low_bit_ops" is optional: instances proved before the policy existed let every op
    # use int8 ("all"); the file says so by leaving the key out
    _require({k: v for k, v in rest["options"].items() if k != "low_bit_ops"}, _OPTION_KEYS, f"{source}: options")
    if rest["proof"] not in PROOFS:
        raise DistplanError(f"{source}: proof {rest['proof']!r} unknown; use one of {PROOFS}")
    if rest["objective"] not in OBJECTIVES:
        raise DistplanError(f"{source}: objective {rest['objective']!r} unknown; use one of {OBJECTIVES}")
    opts = rest["options"]
    return CorpusInstance(
        name=rest["name"], description=rest["description"],
        graph=graph_from_dict(rest["graph"], source=f"{source}: graph"),
        topology=topology_from_dict(doc["topology"], default_name=rest["name"]),
        options=ProblemOptions(precisions=tuple(opts["precisions"]), microbatches=int(opts["microbatches"]),
                               schedule=opts["schedule"], low_bit_ops=str(opts.get("low_bit_ops", "all"))),
        objective=rest["objective"], optimum_s=float(rest["optimum_s"]), bound_s=float(rest["bound_s"]),
        proof=rest["proof"], proof_detail=dict(rest["proof_detail"]), plan_doc=rest["plan"],
        source=dict(rest["source"]), path=path)


def read_instance(path: str | Path) -> CorpusInstance:
    """Read one corpus file; every error names the file."""
    p = Path(path)
    try:
        doc = json.loads(p.read_text(encoding="utf-8"), parse_float=Decimal)
    except FileNotFoundError:
        raise DistplanError(f"corpus file {str(p)!r} not found") from None
    except json.JSONDecodeError as e:
        raise DistplanError(f"corpus file {str(p)!r} is not valid JSON: {e}") from None
    return instance_from_dict(doc, source=f"corpus file {str(p)!r}", path=p)


def make_instance(name: str, description: str, problem: Problem, plan: Plan, optimum_s: float, bound_s: float,
                  proof: str, proof_detail: Mapping[str, Any], source: Mapping[str, Any],
                  objective: str = "throughput") -> CorpusInstance:
    """A CorpusInstance for ``problem`` with ``plan`` as its optimal plan."""
    opts = ProblemOptions(precisions=tuple(problem.precisions), microbatches=problem.microbatches,
                          schedule=problem.schedule, low_bit_ops=problem.low_bit_ops)
    return CorpusInstance(name, description, problem.graph, problem.topology, opts, objective, float(optimum_s),
                          float(bound_s), proof, dict(proof_detail), plan_to_dict(plan, problem), dict(source))


def instance_to_dict(inst: CorpusInstance) -> dict[str, Any]:
    """The file document of ``inst`` (topology numbers as exact ``Decimal``)."""
    return {
        "format": FORMAT, "version": VERSION, "name": inst.name, "description": inst.description,
        "source": dict(inst.source), "graph": graph_to_dict(inst.graph), "topology": topology_to_dict(inst.topology),
        "options": {"precisions": list(inst.options.precisions), "microbatches": inst.options.microbatches,
                    "schedule": inst.options.schedule,
                    **({"low_bit_ops": inst.options.low_bit_ops} if inst.options.low_bit_ops != "all" else {})},
        "objective": inst.objective, "optimum_s": inst.optimum_s, "bound_s": inst.bound_s, "proof": inst.proof,
        "proof_detail": dict(inst.proof_detail), "plan": dict(inst.plan_doc),
    }


def save_instance(inst: CorpusInstance, directory: str | Path) -> Path:
    """Write ``inst`` to ``directory/<name>.json`` and return the path."""
    path = Path(directory) / f"{inst.name}.json"
    write_atomic(path, dump_json(instance_to_dict(inst)), "corpus instance")
    return path
