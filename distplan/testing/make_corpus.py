"""Generate the corpus: ``python -m distplan.testing.make_corpus --out DIR [--only NAME ...]``.

Deterministic: tiny instances come from seeded generators (``random.Random(seed)``),
zoo instances from ``distplan.workloads.zoo`` and ``distplan.topologies.presets``, and
both are embedded in the files, so a corpus never changes when the zoo does. Tiny
instances (2-6 ops, 1-4 devices) are proved by exhaustive enumeration and cross-checked
against the MILP solved per layout; zoo instances are proved by the MILP at gap 0 on
every layout (``distplan.testing.proofs``). Each written file is read back and compared.
"""
from __future__ import annotations

import argparse
import math
import random
import sys
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from distplan.core.errors import DistplanError
from distplan.costs.problem import Problem, ProblemOptions, build_problem
from distplan.costs.evaluate import plan_memory_bytes
from distplan.core.plan import Plan, Stage
from distplan.testing.brute_force import count_candidates
from distplan.testing.corpus import CorpusInstance, corpus_dir, make_instance, read_instance, save_instance
from distplan.testing.proofs import Proof, prove_brute_force, prove_milp
from distplan.topologies.builders import duplex, mesh
from distplan.topologies.presets import get_topology
from distplan.topologies.topology import Device, DeviceKind, Topology
from distplan.workloads.graph import Graph, Operator, Tensor
from distplan.workloads.zoo import get_workload

#: Largest brute-force search a tiny spec may ask for (keeps the slow test short).
MAX_TINY_CANDIDATES = 30_000
REL_AGREE = 1e-6


# --- tiny instances --------------------------------------------------------------------
@dataclass(frozen=True)
class TinySpec:
    """A seeded tiny instance. ``graph``: chain | fork | random; ``shape``: line | ring |
    mesh (2x2, XY routing) | star (devices around one switch); ``kinds``: fast (fp16,
    int8) | mixed (also slow devices running fp16 only); ``memory``: roomy | tight (a
    fraction of what the whole graph needs on one device, raised until a plan fits)."""

    name: str
    seed: int
    n_ops: int
    n_devices: int
    mode: str = "inference"
    graph: str = "random"
    shape: str = "line"
    kinds: str = "fast"
    precisions: tuple[str, ...] = ("fp16", "int8")
    memory: str = "roomy"
    tied: bool = False
    microbatches: int | None = None


def _kind(name: str, mem_bytes: float) -> DeviceKind:
    if name == "fast":
        return DeviceKind("fast", {"fp16": 2e12, "int8": 4e12}, mem_bytes, 1e11, 0.8, 1e-6)
    return DeviceKind("slow", {"fp16": 1e12}, mem_bytes, 5e10, 0.7, 2e-6)


def _log_uniform(rng: random.Random, lo: float, hi: float) -> float:
    return 10 ** rng.uniform(math.log10(lo), math.log10(hi))


def tiny_graph(spec: TinySpec, rng: random.Random) -> Graph:
    """Ops v0..v{n-1} with seeded work and sizes, wired as ``spec.graph`` says."""
    n = spec.n_ops
    ops = [Operator(f"v{i}", rng.choice(["matmul", "softmax", "add", "layernorm"]), _log_uniform(rng, 1e7, 1e10),
                    0.0, rng.randint(0, 4 * 10**5), rng.randint(10**3, 10**6), rng.uniform(0, 1e6))
           for i in range(n)]
    ops = [replace(op, bwd_flops=op.fwd_flops * rng.uniform(1.0, 3.0)) for op in ops]
    if spec.tied:
        ops[-1] = replace(ops[-1], tied_to="v0", tied_elems=rng.randint(10**4, 10**6))
    if spec.graph == "chain":
        pairs = [(i, i + 1) for i in range(n - 1)]
    elif spec.graph == "fork":
        pairs = [(0, j) for j in range(1, n - 1)] + [(j, n - 1) for j in range(1, n - 1)] if n > 2 else [(0, 1)]
    else:
        pairs = [(i, j) for j in range(1, n) for i in sorted(rng.sample(range(j), rng.randint(1, min(j, 2))))]
    # a tensor is (part of) its producer's output (the graph file format's rule)
    tensors = [Tensor(f"v{i}", f"v{j}", rng.randint(ops[i].out_elems // 10, ops[i].out_elems)) for i, j in pairs]
    return Graph(spec.name, tuple(ops), tuple(tensors), mode=spec.mode)


def tiny_topology(spec: TinySpec, rng: random.Random, mem_bytes: float) -> Topology:
    """``spec.n_devices`` devices shaped as ``spec.shape`` with seeded kinds and links."""
    n = spec.n_devices
    bw = [_log_uniform(rng, 1e8, 1e11) for _ in range(n + 1)]
    lat = rng.choice([0.0, 1e-6])
    if spec.shape == "mesh":
        if n != 4:
            raise ValueError("a tiny mesh is 2x2")
        return mesh(spec.name, 2, 2, _kind("fast", mem_bytes), bw[0], lat)
    names = [rng.choice(["fast", "fast", "slow"]) if spec.kinds == "mixed" else "fast" for _ in range(n)]
    if spec.kinds == "mixed" and len(set(names)) == 1 and n > 1:
        names[-1] = "slow" if names[0] == "fast" else "fast"
    devices = tuple(Device(f"d{i}", k) for i, k in enumerate(names))
    links, switches = [], ()
    if spec.shape == "star":
        switches = ("sw",)
        for i in range(n):
            links += duplex(f"d{i}", "sw", bw[i], lat)
    else:
        pairs = [(i, i + 1) for i in range(n - 1)] + ([(n - 1, 0)] if spec.shape == "ring" and n > 2 else [])
        for i, (a, b) in enumerate(pairs):
            links += duplex(f"d{a}", f"d{b}", bw[i], lat)
    kinds = {k: _kind(k, mem_bytes) for k in sorted(set(names))}
    return Topology(spec.name, kinds, devices, tuple(links), switches)


def _tiny_problem(spec: TinySpec, mem_bytes: float) -> Problem:
    rng = random.Random(spec.seed)
    g = tiny_graph(spec, rng)
    topo = tiny_topology(spec, rng, mem_bytes)
    mb = spec.microbatches or rng.randint(1, 8)
    return build_problem(g, topo, ProblemOptions(precisions=spec.precisions, microbatches=mb,
                                                 schedule="stream" if spec.mode == "inference" else "1f1b",
                                                 low_bit_ops="all"))   # the tiny instances' rule: int8 on any op


def tiny_problem(spec: TinySpec) -> tuple[Problem, float]:
    """The spec's Problem and its device memory. 'tight' memory starts at 45 % of what
    every op needs on one device at the lowest precision and grows by 25 % until some
    plan of the space fits."""
    if spec.memory == "roomy":
        return _tiny_problem(spec, 1e12), 1e12
    probe = _tiny_problem(spec, 1e15)
    if count_candidates(probe) > MAX_TINY_CANDIDATES:
        raise DistplanError(f"{spec.name}: {count_candidates(probe)} candidate plans, more than {MAX_TINY_CANDIDATES}")
    low = probe.precisions[-1]
    whole = Plan((0,) * probe.n_ops, (low,) * probe.n_ops, (Stage((0,)),), probe.microbatches, probe.schedule)
    mem = float(round(0.45 * plan_memory_bytes(probe, whole)[0]))
    for _ in range(40):
        pb = _tiny_problem(spec, mem)
        try:
            prove_brute_force(pb, max_candidates=MAX_TINY_CANDIDATES)
            return pb, mem
        except DistplanError:
            mem = float(round(mem * 1.25))
    raise DistplanError(f"{spec.name}: no memory size makes a plan fit")


TINY: tuple[TinySpec, ...] = (
    TinySpec("tiny-01-pair-single", 1, 2, 1, precisions=("fp16",)),
    TinySpec("tiny-02-pair-line2", 2, 2, 2),
    TinySpec("tiny-03-chain3-line2", 3, 3, 2, graph="chain", precisions=("fp16",)),
    TinySpec("tiny-04-chain3-line3-mixed", 4, 3, 3, graph="chain", kinds="mixed"),
    TinySpec("tiny-05-fork4-mesh2x2-tight", 5, 4, 4, graph="fork", shape="mesh", precisions=("fp16",), memory="tight"),
    TinySpec("tiny-06-rand4-ring4-tight", 6, 4, 4, shape="ring", precisions=("int8",), memory="tight"),
    TinySpec("tiny-07-rand5-line3-tight", 7, 5, 3, memory="tight"),
    TinySpec("tiny-08-chain6-line4-tight", 8, 6, 4, graph="chain", memory="tight"),
    TinySpec("tiny-09-rand3-star3", 9, 3, 3, shape="star"),
    TinySpec("tiny-10-chain5-star4-tight", 10, 5, 4, graph="chain", shape="star", precisions=("fp16",), memory="tight"),
    TinySpec("tiny-11-rand4-line2-tied", 11, 4, 2, tied=True, memory="tight"),
    TinySpec("tiny-12-rand6-line3-mixed-tight", 12, 6, 3, kinds="mixed", precisions=("fp16",), memory="tight"),
    TinySpec("tiny-13-fork5-ring3-mixed", 13, 5, 3, graph="fork", shape="ring", kinds="mixed"),
    TinySpec("tiny-14-chain4-mesh2x2-tight", 14, 4, 4, graph="chain", shape="mesh", memory="tight"),
    TinySpec("tiny-15-rand6-line2-tight", 15, 6, 2, memory="tight"),
    TinySpec("tiny-16-chain2-line4-train", 16, 2, 4, mode="training", graph="chain"),
    TinySpec("tiny-17-chain4-line3-train", 17, 4, 3, mode="training", graph="chain", memory="tight"),
    TinySpec("tiny-18-rand5-ring4-train", 18, 5, 4, mode="training", shape="ring", precisions=("fp16",)),
    TinySpec("tiny-19-fork4-line3-mixed-train", 19, 4, 3, mode="training", graph="fork", kinds="mixed"),
    TinySpec("tiny-20-rand6-star4-train", 20, 6, 4, mode="training", shape="star", precisions=("fp16",),
             memory="tight"),
    TinySpec("tiny-21-chain3-line3-tied-train", 21, 3, 3, mode="training", graph="chain", tied=True,
             memory="tight"),
    TinySpec("tiny-22-rand3-line3-mixed", 22, 3, 3, kinds="mixed"),
    TinySpec("tiny-23-rand6-line3-mixed", 23, 6, 3, kinds="mixed"),
    TinySpec("tiny-24-rand5-line4-mixed", 24, 5, 4, kinds="mixed", precisions=("fp16",)),
    TinySpec("tiny-25-chain6-ring4-tight", 25, 6, 4, graph="chain", shape="ring", precisions=("fp16",),
             memory="tight"),
    TinySpec("tiny-26-rand4-mesh2x2-train", 26, 4, 4, mode="training", shape="mesh"),
    TinySpec("tiny-27-rand4-line3-mixed", 136, 4, 3, kinds="mixed"),
    TinySpec("tiny-28-rand5-line3-mixed-train", 111, 5, 3, mode="training", kinds="mixed"),
)


# --- zoo instances ---------------------------------------------------------------------
@dataclass(frozen=True)
class ZooSpec:
    """A zoo workload on a preset topology (both embedded in the file)."""

    name: str
    workload: str
    topology: str
    mode: str = "inference"
    precisions: tuple[str, ...] = ("fp16", "int8")
    microbatches: int = 16
    batch_size: int | None = None
    seq_len: int | None = None


ZOO: tuple[ZooSpec, ...] = (
    ZooSpec("zoo-mlp-xs-mcm2x2", "mlp-xs", "mcm2x2"),
    ZooSpec("zoo-mlp-xs-dgx-a100-train", "mlp-xs", "dgx-a100", mode="training"),
    ZooSpec("zoo-mlp-xs-hybrid-v100-t4", "mlp-xs", "hybrid-v100-t4"),
    ZooSpec("zoo-mlp-xs-hybrid-v100-t4-train", "mlp-xs", "hybrid-v100-t4", mode="training"),
    ZooSpec("zoo-gpt2-s128-ring4", "gpt2", "ring4", seq_len=128),
    ZooSpec("zoo-gpt2-s128-mcm2x2", "gpt2", "mcm2x2", seq_len=128),
    ZooSpec("zoo-bert-base-mcm2x2", "bert-base", "mcm2x2"),
    ZooSpec("zoo-bert-base-mcm2x4", "bert-base", "mcm2x4"),
    ZooSpec("zoo-bert-base-mcm4x4", "bert-base", "mcm4x4"),
)


def zoo_problem(spec: ZooSpec) -> Problem:
    g = get_workload(spec.workload, batch_size=spec.batch_size, seq_len=spec.seq_len, mode=spec.mode)
    return build_problem(g, get_topology(spec.topology),
                         ProblemOptions(precisions=spec.precisions, microbatches=spec.microbatches))


# --- building and writing --------------------------------------------------------------
def _agree(a: float, b: float) -> bool:
    return abs(a - b) <= REL_AGREE * max(abs(a), abs(b))


def build_tiny(spec: TinySpec) -> tuple[CorpusInstance, Proof]:
    """Prove a tiny instance by brute force and confirm the per-layout MILP agrees."""
    pb, mem = tiny_problem(spec)
    n = count_candidates(pb)
    if n > MAX_TINY_CANDIDATES:
        raise DistplanError(f"{spec.name}: {n} candidate plans, more than {MAX_TINY_CANDIDATES}")
    proof = prove_brute_force(pb)
    milp = prove_milp(pb, time_limit_s=60)
    if not _agree(milp.optimum_s, proof.optimum_s) or milp.bound_s > proof.optimum_s * (1 + REL_AGREE):
        raise DistplanError(f"{spec.name}: MILP per layout {milp.optimum_s!r} (bound {milp.bound_s!r}) disagrees "
                            f"with brute force {proof.optimum_s!r}")
    desc = (f"{spec.n_ops} seeded ops ({spec.graph}) on {spec.n_devices} {spec.kinds} devices ({spec.shape}), "
            f"{spec.mode}, {'/'.join(pb.precisions)}, {pb.microbatches} microbatches, {spec.memory} memory")
    source = {"generator": "distplan.testing.make_corpus", "spec": {**asdict(spec), "precisions":
                                                                    list(spec.precisions)},
              "device_memory_bytes": mem}
    return make_instance(spec.name, desc, pb, proof.plan, proof.optimum_s, proof.bound_s, proof.method,
                         proof.detail, source), proof


def build_zoo(spec: ZooSpec) -> tuple[CorpusInstance, Proof]:
    """Prove a zoo instance with the MILP at gap 0 on every layout."""
    pb = zoo_problem(spec)
    proof = prove_milp(pb)
    desc = (f"{spec.workload} ({spec.mode}, batch {pb.graph.batch_size}, seq {pb.graph.seq_len}) on "
            f"{spec.topology}, {'/'.join(pb.precisions)}, {pb.microbatches} microbatches")
    source = {"workload": spec.workload, "batch_size": spec.batch_size, "seq_len": spec.seq_len, "mode": spec.mode,
              "topology": spec.topology, "note": "graph and topology embedded; the name is for reference only"}
    return make_instance(spec.name, desc, pb, proof.plan, proof.optimum_s, proof.bound_s, proof.method,
                         proof.detail, source), proof


def _check_round_trip(inst: CorpusInstance, path: Path) -> None:
    back = read_instance(path)
    same = (back.graph == inst.graph and back.topology == inst.topology and back.options == inst.options
            and back.optimum_s == inst.optimum_s and back.bound_s == inst.bound_s and back.plan() == inst.plan())
    if not same:
        raise DistplanError(f"{path}: does not read back as written")


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m distplan.testing.make_corpus", description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=corpus_dir(), help="folder to write (default: the shipped corpus)")
    ap.add_argument("--only", nargs="*", default=None, help="instance names to (re)build")
    ap.add_argument("--list", action="store_true", help="list the instance names and exit")
    args = ap.parse_args(argv)
    specs = list(TINY) + list(ZOO)
    if args.list:
        print("\n".join(s.name for s in specs))
        return 0
    if args.only is not None:
        unknown = sorted(set(args.only) - {s.name for s in specs})
        if unknown:
            print(f"error: unknown instance {unknown[0]!r}; see --list", file=sys.stderr)
            return 2
        specs = [s for s in specs if s.name in args.only]
    args.out.mkdir(parents=True, exist_ok=True)
    for spec in specs:
        t0 = time.perf_counter()
        inst, proof = build_tiny(spec) if isinstance(spec, TinySpec) else build_zoo(spec)
        path = save_instance(inst, args.out)
        _check_round_trip(inst, path)
        print(f"{inst.name:36s} {inst.n_ops:4d} ops {inst.n_devices:3d} dev  {inst.proof:12s} "
              f"optimum {inst.optimum_s:.9g} s  gap {inst.gap:.1e}  ({time.perf_counter() - t0:.1f} s)", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
