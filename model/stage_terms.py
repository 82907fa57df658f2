"""The numbers the stage-level MILP reads (``model.stage_milp``): per stage configuration
(``StageConfig``: tp, dp, recomputation, ZeRO, sequence parallelism) and per layer unit
the per-microbatch forward and backward seconds on one rank, the bytes a rank holds,
the gradient reduction and optimizer step as affine functions of the stage's bytes,
and the boundary transfer into a stage that starts at a unit. All from ``costs`` and
``model.cluster``'s per-unit work, as the analytic iteration charges a plan whose every
stage sits at device 0 (the representative layout). The algebra: docs/concepts/stage-milp.md.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from distplan.costs.collectives import all_gather_s, gradient_reduction_parts
from distplan.costs.compute import optimizer_step_s
from distplan.costs.iteration import op_rank_times
from distplan.costs.problem import Problem
from distplan.costs.routes import route_s
from distplan.model.cluster import RECOMPUTE_CHOICES, _recomputed_ops, _Space

#: a byte count large enough that the affine fit of a reduction is not rounding
_PROBE_BYTES = 2.0 ** 30


@dataclass(frozen=True, order=True)
class StageConfig:
    """One stage's own configuration (``tp`` ranks inside a node, ``dp`` replicas)."""

    tp: int
    dp: int
    recompute: str = "none"
    zero: int = 0
    sequence_parallel: bool = False

    @property
    def devices(self) -> int:
        return self.tp * self.dp

    def label(self) -> str:
        extra = [f"recompute {self.recompute}"] * (self.recompute != "none")
        extra += [f"ZeRO-{self.zero}"] * bool(self.zero) + ["sp"] * self.sequence_parallel
        return f"tp {self.tp} x dp {self.dp}" + (f" ({', '.join(extra)})" if extra else "")


def node_size(problem: Problem) -> int:
    """Devices on the first node (every node of a GPU cluster has as many)."""
    nodes = [d.node for d in problem.topology.devices]
    return nodes.count(nodes[0])


def tp_chain(problem: Problem) -> list[int]:
    """Tensor-parallel degrees: divisors of the node size each dividing the next (and the
    heads, ``Graph.tp_fits``), so stages laid out by decreasing tp keep every tp group
    inside one node."""
    g, out = node_size(problem), []
    for d in range(1, g + 1):
        if g % d == 0 and problem.graph.tp_fits(d) and (not out or d % out[-1] == 0):
            out.append(d)
    return out


def stage_configs(problem: Problem, max_devices: int | None = None) -> list[StageConfig]:
    """Every configuration a stage may take: tp in ``tp_chain``, dp dividing the
    microbatch count, tp x dp <= ``max_devices``, recomputation none/selective/full,
    ZeRO 0-2 (dp > 1), sequence parallelism (tp > 1) on or off."""
    N = problem.n_devices if max_devices is None else max_devices
    M = problem.microbatches
    out = []
    for tp in tp_chain(problem):
        for dp in (d for d in range(1, M + 1) if M % d == 0 and d * tp <= N):
            for rc in RECOMPUTE_CHOICES:
                for zero in ((0, 1, 2) if dp > 1 else (0,)):
                    for sp in ((False, True) if tp > 1 else (False,)):
                        out.append(StageConfig(tp, dp, rc, zero, sp))
    return out


@dataclass(frozen=True)
class StageTerms:
    """Per config c (rows) and unit u (columns): ``fwd``/``bwd`` seconds of one
    microbatch, ``static`` and ``act`` bytes per rank, ``transient`` and ``first`` bytes
    (``model.cluster._Work``), ``red_s`` and ``opt_s`` the unit's slope of the stage's
    reduction and optimizer step (``red_first_s``: of its first op with parameters), ``cut_s`` the boundary into a stage starting at u;
    per config ``red0_s`` and ``opt0_s`` the intercepts, ``n`` microbatches a replica."""

    configs: tuple[StageConfig, ...]
    fwd: np.ndarray
    bwd: np.ndarray
    static: np.ndarray
    act: np.ndarray
    transient: np.ndarray
    first: np.ndarray
    red_s: np.ndarray
    red_first_s: np.ndarray
    red0_s: np.ndarray
    opt_s: np.ndarray
    opt0_s: np.ndarray
    cut_s: np.ndarray
    n: np.ndarray
    cap_bytes: float


def _affine(f, x: float) -> tuple[float, float]:
    """(intercept, slope) of an affine f on (0, inf): f(x) and f(2x)."""
    a, b = f(x), f(2 * x)
    return 2 * a - b, (b - a) / x


def cut_bytes(problem: Problem, space: _Space) -> np.ndarray:
    """Per unit u, one microbatch's bytes on edges from units before u to u or later."""
    unit_of = np.empty(problem.n_ops, dtype=np.int64)
    for i, unit in enumerate(space.units):
        unit_of[unit] = i
    out = np.zeros(len(space.units))
    for e, (a, b) in enumerate(problem.edges.tolist()):
        nb = float(problem.edge_elems[e] * problem.bytes_per_elem[space.qs[a]])
        out[unit_of[a] + 1:unit_of[b] + 1] += nb
    return out


def stage_terms(problem: Problem, space: _Space, configs: list[StageConfig]) -> StageTerms:
    """The coefficient arrays of ``configs`` (module docstring)."""
    U, C = len(space.units), len(configs)
    arr = {k: np.zeros((C, U)) for k in ("fwd", "bwd", "static", "act", "transient", "first", "red_s", "red_first_s",
                                          "opt_s", "cut_s")}
    red0, opt0 = np.zeros(C), np.zeros(C)
    kind = problem.topology.kind_of(0)
    far = node_size(problem) if problem.n_devices > node_size(problem) else min(1, problem.n_devices - 1)
    cuts = cut_bytes(problem, space)
    firsts = np.array([next((problem.graph.ops[v].param_elems * float(problem.bytes_per_elem[space.qs[v]])
                             for v in u if problem.graph.ops[v].param_elems > 0), 0.0) for u in space.units])
    again = {rc: _recomputed_ops(problem, rc) for rc in RECOMPUTE_CHOICES}
    times: dict[tuple[int, bool, str], tuple[np.ndarray, np.ndarray]] = {}
    for i, c in enumerate(configs):
        sp = c.sequence_parallel and c.tp > 1
        key = (c.tp, sp, c.recompute)
        if key not in times:
            fb = [op_rank_times(problem, list(range(c.tp)), space.qs, u, sp, again[c.recompute])
                  for u in space.units]
            times[key] = (np.array([f.sum() for f, _ in fb]), np.array([b.sum() for _, b in fb]))
        arr["fwd"][i], arr["bwd"][i] = times[key]
        wk = space.work(c.tp, sp, c.recompute)
        arr["act"][i], arr["transient"][i], arr["first"][i] = wk.act, wk.transient, wk.first
        arr["static"][i] = space.static_per_rank(c.tp, c.dp, c.zero)
        share = c.dp if c.zero and c.dp > 1 else 1
        elems = space.params / (c.tp * share)
        launch, slope = _affine(lambda x: optimizer_step_s(x, 0, kind), _PROBE_BYTES)   # Adam per parameter
        arr["opt_s"][i] = elems * slope + space.grads / (c.tp * share) * 2 / kind.mem_bw_bytes_per_s
        opt0[i] = launch
        ring = [j * c.tp for j in range(c.dp)]
        if c.dp > 1:
            a, s = _affine(lambda x: gradient_reduction_parts(problem, ring, x, False, c.zero)[0], _PROBE_BYTES)
            red0[i], arr["red_s"][i] = a, s * space.grads / c.tp
            arr["red_first_s"][i] = s * firsts / c.tp
            if c.zero:   # ZeRO-1/2: the parameters' all-gather after the step
                a, s = _affine(lambda x: all_gather_s(problem, ring, x), _PROBE_BYTES)
                opt0[i] += a
                arr["opt_s"][i] += s * space.grads / c.tp
        arr["cut_s"][i] = [route_s(problem, 0, far, x / c.tp) if x > 0 else 0.0 for x in cuts]
    n = np.array([problem.microbatches // c.dp for c in configs], dtype=float)
    return StageTerms(tuple(configs), **arr, red0_s=red0, opt0_s=opt0, n=n, cap_bytes=space.cap)


def undominated(t: StageTerms) -> tuple[StageTerms, dict[StageConfig, int]]:
    """``t`` without the configs another one dominates: the same dp, no more devices,
    and every coefficient (all enter the MILP's rows and objective with a positive
    sign) no larger; ties keep the first. The optimum is unchanged. Also: each config
    of ``t`` -> the index of a kept one at least as good (itself when kept)."""
    C = len(t.configs)
    rows = [np.concatenate([getattr(t, k)[c] for k in ("fwd", "bwd", "static", "act", "transient", "first", "red_s",
                                                       "red_first_s", "opt_s", "cut_s")] + [[t.red0_s[c], t.opt0_s[c]]])
            for c in range(C)]
    def beats(o: int, c: int) -> bool:
        return (o != c and t.configs[o].dp == t.configs[c].dp and t.configs[o].devices <= t.configs[c].devices
                and bool((rows[o] <= rows[c]).all()) and (bool((rows[o] < rows[c]).any()) or o < c))

    keep = [c for c in range(C) if not any(beats(o, c) for o in range(C))]
    pos = {c: i for i, c in enumerate(keep)}
    best = {cfg: pos.get(c, next((pos[o] for o in keep if beats(o, c)), -1)) for c, cfg in enumerate(t.configs)}
    pick = {k: getattr(t, k)[keep] for k in ("fwd", "bwd", "static", "act", "transient", "first", "red_s", "red_first_s",
                                              "opt_s", "cut_s", "red0_s", "opt0_s", "n")}
    return StageTerms(tuple(t.configs[c] for c in keep), **pick, cap_bytes=t.cap_bytes), best
