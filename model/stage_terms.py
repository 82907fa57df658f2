"""The numbers the stage-level MILP reads (``model.stage_milp``): per stage configuration
(``StageConfig``: tp, dp, recomputation, ZeRO, sequence parallelism, precision recipe)
and per layer unit
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
from distplan.costs.fp8 import CAST_BYTES_PER_ELEM, CAST_KERNELS, is_fp8_linear
from distplan.costs.iteration import op_rank_times
from distplan.costs.problem import Problem
from distplan.costs.reduction_bound import stage_stream
from distplan.costs.routes import route_s
from distplan.model.cluster import RECOMPUTE_CHOICES, _recomputed_ops, _Space, recompute_choices

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
    precision: str = ""   # "" every op at the training precision; "fp8" the fp8 recipe (model.cluster.training_recipes)

    @property
    def devices(self) -> int:
        return self.tp * self.dp

    def label(self) -> str:
        extra = [f"recompute {self.recompute}"] * (self.recompute != "none")
        extra += [f"ZeRO-{self.zero}"] * bool(self.zero) + ["sp"] * self.sequence_parallel
        extra += [self.precision] * bool(self.precision)
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


def stage_configs(problem: Problem, max_devices: int | None = None, recipes=("",)) -> list[StageConfig]:
    """Every configuration a stage may take: tp in ``tp_chain``, dp dividing the
    microbatch count, tp x dp <= ``max_devices``, recomputation none/selective/full
    (``model.cluster.recompute_choices``: selective only where it remakes some op),
    ZeRO 0-2 (dp > 1), sequence parallelism (tp > 1) on or off, each precision recipe
    of ``recipes`` (``model.cluster.training_recipes``: "" and, where it runs, "fp8")."""
    N = problem.n_devices if max_devices is None else max_devices
    M = problem.microbatches
    out = []
    modes = recompute_choices(problem)
    for tp in tp_chain(problem):
        for dp in (d for d in range(1, M + 1) if M % d == 0 and d * tp <= N):
            for rc in modes:
                for zero in ((0, 1, 2) if dp > 1 else (0,)):
                    for sp in ((False, True) if tp > 1 else (False,)):
                        out += [StageConfig(tp, dp, rc, zero, sp, r) for r in recipes]
    return out


def recipe_spaces(spaces) -> dict[str, _Space]:
    """Recipe -> the cluster space's per-unit work at it (a single ``_Space``: its own)."""
    return {"": spaces} if isinstance(spaces, _Space) else dict(spaces)


@dataclass(frozen=True)
class StageTerms:
    """Per config c (rows) and unit u (columns): ``fwd``/``bwd`` seconds of one
    microbatch, ``static`` and ``act`` bytes per rank, ``transient`` and ``first`` bytes
    (``model.cluster._Work``), ``red_s`` and ``opt_s`` the unit's slope of the stage's
    overlapped reduction (its buckets streamed over the busiest link of the flat ring or
    the hierarchical reduction, ``costs.reduction_bound.stage_stream``) and optimizer step
    (``red_first_s``: that reduction's chain for its first op with parameters,
    ``gradient_reduction_parts``), ``cut_s`` the
    boundary into a stage starting at u; per config ``red0_s``, ``red_first0_s`` and
    ``opt0_s`` the intercepts, ``n`` microbatches a replica."""

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
    red_first0_s: np.ndarray
    opt_s: np.ndarray
    opt0_s: np.ndarray
    cut_s: np.ndarray
    n: np.ndarray
    cap_bytes: float

    def take(self, keep) -> StageTerms:
        """The terms of the configs ``keep`` (indices, in that order)."""
        keep = np.asarray(keep, dtype=np.int64)
        per = {f: getattr(self, f)[keep] for f in _PER_CONFIG}
        return StageTerms(tuple(self.configs[int(c)] for c in keep), **per, cap_bytes=self.cap_bytes)


#: the arrays of ``StageTerms`` with one row (or entry) per config
_PER_CONFIG = ("fwd", "bwd", "static", "act", "transient", "first", "red_s", "red_first_s", "opt_s", "cut_s",
               "red0_s", "red_first0_s", "opt0_s", "n")


def _affine(f, x: float) -> tuple[float, float]:
    """(intercept, slope) of an affine f on (0, inf): f(x) and f(2x)."""
    a, b = f(x), f(2 * x)
    return 2 * a - b, (b - a) / x


def _reduction_fits(problem: Problem, tp: int, dp: int, zero: int) -> tuple[float, float, float, float, float, float]:
    """A stage of ``dp`` replicas at ``tp``: its overlapped reduction's (latency, seconds
    per byte of a rank's gradients), its first bucket's chain (intercept, slope) and, under
    ZeRO, the parameters' all-gather after the step (intercept, slope; else 0, 0).

    Every bucket is streamed over the busiest link (the rings of every tp rank where they
    share links, as costs.iteration times them), a lower bound of the transfer-by-transfer
    timing; the closed form's slope charged each step the whole route, twice the link's on
    two-link hops (tp 8 x dp 8 on a100x128: 0.1062 against 0.0531 s for 14 layers of
    gpt3-6.7b). The flat ring's or the hierarchical reduction's, whichever streams faster
    (costs.reduction_bound.stage_stream; the estimate tries both). The first op's bucket is
    ready when the stage's backward ends: one chain of its phases."""
    ring = [j * tp for j in range(dp)]
    hier, lat, rate = stage_stream(problem, tp, dp, zero)
    a1, s1 = _affine(lambda x: gradient_reduction_parts(problem, ring, x, hier, zero)[0], _PROBE_BYTES)
    ag0, ag = _affine(lambda x: all_gather_s(problem, ring, x), _PROBE_BYTES) if zero else (0.0, 0.0)
    return lat, rate, a1, s1, ag0, ag


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


def stage_terms(problem: Problem, spaces, configs: list[StageConfig]) -> StageTerms:
    """The coefficient arrays of ``configs`` (module docstring), each config's at its
    recipe's space (``spaces``: a ``_Space``, or recipe -> ``_Space`` over the same
    units; a boundary's bytes are its producers', which the recipes must agree on:
    ``mixed_recipes``)."""
    by = recipe_spaces(spaces)
    space = by[""]
    U, C = len(space.units), len(configs)
    arr = {k: np.zeros((C, U)) for k in ("fwd", "bwd", "static", "act", "transient", "first", "red_s", "red_first_s",
                                          "opt_s", "cut_s")}
    red0, red10, opt0 = np.zeros(C), np.zeros(C), np.zeros(C)
    kind = problem.topology.kind_of(0)
    far = node_size(problem) if problem.n_devices > node_size(problem) else min(1, problem.n_devices - 1)
    cuts = {r: cut_bytes(problem, x) for r, x in by.items()}
    firsts = {r: np.array([next((problem.graph.ops[v].param_elems * float(problem.bytes_per_elem[x.qs[v]])
                                 for v in u if problem.graph.ops[v].param_elems > 0), 0.0) for u in x.units])
              for r, x in by.items()}
    again = {rc: _recomputed_ops(problem, rc) for rc in RECOMPUTE_CHOICES}
    # Transformer Engine's weight cast, once a step (costs.iteration.optimizer_step_per_device_s):
    # per unit its fp8 linear layers' elements (seconds, before / tp) and kernels (seconds)
    fused = problem.low_bit_ops == "matmul" and "fp8" in problem.precisions
    casts, launches = {}, {}
    for r, x in by.items():
        w8 = [[v for v in u if fused and problem.precisions[x.qs[v]] == "fp8" and is_fp8_linear(problem.graph.ops[v])]
              for u in x.units]
        casts[r] = np.array([sum(problem.graph.ops[v].param_elems for v in w) * CAST_BYTES_PER_ELEM
                             / kind.mem_bw_bytes_per_s for w in w8])
        launches[r] = np.array([len(w) * CAST_KERNELS * kind.launch_overhead_s for w in w8])
    times: dict[tuple[int, bool, str, str], tuple[np.ndarray, np.ndarray]] = {}
    fits: dict[tuple[int, int, int], tuple[float, ...]] = {}   # (tp, dp, zero) -> _reduction_fits
    cut_at: dict[tuple[int, str], list[float]] = {}            # (tp, recipe) -> the boundaries' seconds
    opt_launch, opt_slope = _affine(lambda x: optimizer_step_s(x, 0, kind), _PROBE_BYTES)   # Adam per parameter
    for i, c in enumerate(configs):
        space = by[c.precision]
        sp = c.sequence_parallel and c.tp > 1
        key = (c.tp, sp, c.recompute, c.precision)
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
        arr["opt_s"][i] = elems * opt_slope + space.grads / (c.tp * share) * 2 / kind.mem_bw_bytes_per_s \
            + casts[c.precision] / c.tp + launches[c.precision]
        opt0[i] = opt_launch
        if c.dp > 1:
            if (c.tp, c.dp, c.zero) not in fits:
                fits[c.tp, c.dp, c.zero] = _reduction_fits(problem, c.tp, c.dp, c.zero)
            lat, rate, a1, s1, ag0, ag = fits[c.tp, c.dp, c.zero]
            red0[i], arr["red_s"][i] = lat, rate * space.grads / c.tp
            red10[i], arr["red_first_s"][i] = a1, s1 * firsts[c.precision] / c.tp
            opt0[i] += ag0
            arr["opt_s"][i] += ag * space.grads / c.tp
        if (c.tp, c.precision) not in cut_at:
            cut_at[c.tp, c.precision] = [route_s(problem, 0, far, x / c.tp) if x > 0 else 0.0
                                         for x in cuts[c.precision]]
        arr["cut_s"][i] = cut_at[c.tp, c.precision]
    n = np.array([problem.microbatches // c.dp for c in configs], dtype=float)
    return StageTerms(tuple(configs), **arr, red0_s=red0, red_first0_s=red10, opt0_s=opt0, n=n, cap_bytes=space.cap)


def mixed_recipes(problem: Problem, spaces) -> bool:
    """Whether stages may take different recipes: every layer boundary carries the same
    bytes under each (its producers, a layer's last ops, stay at the training
    precision under the fp8 recipe), so a boundary's time does not depend on the
    stage before it."""
    by = recipe_spaces(spaces)
    cuts = [cut_bytes(problem, x) for x in by.values()]
    return all(np.array_equal(cuts[0], c) for c in cuts[1:])


def undominated(t: StageTerms) -> tuple[StageTerms, dict[StageConfig, int]]:
    """``t`` without the configs another one dominates: the same dp, no more devices,
    and every coefficient (all enter the MILP's rows and objective with a positive
    sign) no larger; ties keep the first. The optimum is unchanged. Also: each config
    of ``t`` -> the index of a kept one at least as good (itself when kept)."""
    C = len(t.configs)
    rows = np.array([np.concatenate([getattr(t, k)[c] for k in ("fwd", "bwd", "static", "act", "transient", "first",
                                                                "red_s", "red_first_s", "opt_s", "cut_s")]
                                    + [[t.red0_s[c], t.red_first0_s[c], t.opt0_s[c]]]) for c in range(C)]).reshape(C, -1)
    dp = np.array([c.dp for c in t.configs])
    dev = np.array([c.devices for c in t.configs])
    o, c = np.arange(C)[:, None], np.arange(C)[None, :]
    le = np.ones((C, C), dtype=bool)
    lt = np.zeros((C, C), dtype=bool)
    for i in range(C):   # row by row: C x F at a time
        le[i] = (rows[i][None, :] <= rows).all(axis=1)
        lt[i] = (rows[i][None, :] < rows).any(axis=1)
    # beats[o, c]: o dominates c
    beats = (o != c) & (dp[:, None] == dp[None, :]) & (dev[:, None] <= dev[None, :]) & le & (lt | (o < c))
    keep = [k for k in range(C) if not beats[:, k].any()]
    pos = {k: i for i, k in enumerate(keep)}
    best = {cfg: pos.get(k, next((pos[j] for j in keep if beats[j, k]), -1)) for k, cfg in enumerate(t.configs)}
    return t.take(keep), best
