"""The stage-level MILP for GPU training (issue 23): for a fixed pipeline depth ``K``
and microbatch size, which contiguous layer units form each stage and which
configuration (``model.stage_terms.StageConfig``) each stage takes, minimising the
linearised 1F1B iteration: fill and drain plus each stage's own (n_k - 1) x t_k,
the exposed gradient reduction of a flat ring overlapped with the backward (its
buckets streamed at the busiest link's rate, a lower bound of their transfer-by-transfer
timing, and the first op's bucket one ring chain after the backward) and the
optimizer step,
under per-stage memory with its in-flight microbatches, a device budget and
non-increasing dp along the pipeline. Cumulative stage encoding ``y[u,k]`` (stage(u)
>= k), stage binaries ``s[k,c]``, disaggregated ``z[u,k,c]`` (unit u on stage k at c)
and ``g[u,k,c]`` (u starts stage k); no products of binaries. Solved by HiGHS
(highspy; the model is matrices, so building it costs milliseconds). The algebra and
where it approximates ``costs.iteration``: docs/concepts/stage-milp.md.
"""
from __future__ import annotations

import math
import time
from dataclasses import dataclass

import highspy
import numpy as np

from distplan.core.errors import InternalError
from distplan.model.highs_watch import interrupt_on_stop, run_watched
from distplan.model.stage_terms import StageTerms

#: model units: milliseconds and GiB keep HiGHS's absolute tolerances meaningful
TIME_SCALE = 1e3
BYTE_SCALE = 2.0 ** -30


@dataclass(frozen=True)
class StageSolution:
    """A stage assignment: each unit's stage, each stage's config index, the model's
    objective (seconds) and, from a solve, its bound and status."""

    split: tuple[int, ...]
    configs: tuple[int, ...]
    objective_s: float
    bound_s: float = -math.inf
    status: str = ""


def in_flight(K: int, k: int, n: float) -> float:
    """1F1B microbatches stage k of K holds at once: min(K - k, n)."""
    return float(min(K - k, n))


def model_objective_s(t: StageTerms, K: int, split, configs) -> float:
    """The MILP's objective of one assignment, evaluated directly (no solver)."""
    split = np.asarray(split)
    w = t.fwd + t.bwd
    tk = np.array([w[configs[k], split == k].sum() for k in range(K)])
    bk = np.array([t.bwd[configs[k], split == k].sum() for k in range(K)])
    starts = [int(np.argmax(split == k)) for k in range(K)]
    ck = np.array([0.0] + [t.cut_s[configs[k], starts[k]] for k in range(1, K)])
    pipe = tk.sum() + 2 * ck.sum() + max((t.n[configs[k]] - 1) * tk[k] for k in range(K))
    before = np.concatenate(([0.0], np.cumsum(bk + np.append(ck[1:], 0.0))[:-1]))
    red = np.array([t.red_s[configs[k], split == k].sum() + t.red0_s[configs[k]] for k in range(K)])
    first = np.array([t.red_first_s[configs[k], starts[k]] + t.red_first0_s[configs[k]] for k in range(K)])
    opt = max(t.opt_s[configs[k], split == k].sum() + t.opt0_s[configs[k]] for k in range(K))
    exposed = np.maximum(red - bk, first) - before
    return float(pipe + max(0.0, float(exposed.max())) + opt)


def model_memory_bytes(t: StageTerms, K: int, split, configs) -> np.ndarray:
    """Each stage's memory row (bytes per rank) of one assignment, evaluated directly."""
    split = np.asarray(split)
    out = np.zeros(K)
    for k in range(K):
        c, mine = configs[k], split == k
        i = int(np.argmax(mine))
        n = in_flight(K, k, t.n[c])
        held = t.act[c, mine].sum() + (t.first[c, i] if k > 0 else 0.0)
        # n - 1 stashes and the microbatch under way: its stash, or its transient (the
        # stash freed unit by unit makes room for what recomputation remakes), not both
        out[k] = t.static[c, mine].sum() + (n - 1) * held + max(held, t.transient[c, mine].max())
    return out


def _unit_shares(t: StageTerms, n_devices: int) -> tuple[np.ndarray, np.ndarray, dict[int, np.ndarray]]:
    """The pieces of ``objective_lb_s``: per (config, unit) the unit's share (inf where the
    unit alone overflows the config's memory rows); per config c0 a lower bound of the
    objective over the assignments whose first used stage (unit 0's) takes c0; per dp D
    each unit's least share among the configs of dp <= D (the later stages' configs when
    the first has dp D: dp never increases along the pipeline)."""
    d = np.array([c.devices for c in t.configs], dtype=float)[:, None]
    dp = np.array([c.dp for c in t.configs])
    fits = t.static + np.maximum(t.act, t.transient) <= t.cap_bytes
    share = np.where(fits, (t.fwd + t.bwd) * (1 + d * (t.n[:, None] - 1) / n_devices) + t.opt_s * d / n_devices,
                     np.inf)
    least = {int(D): np.where((dp <= D)[:, None], share, np.inf).min(axis=0, initial=np.inf) for D in set(dp.tolist())}
    # the intercepts: sum_k (d_k / N) o0_k >= (d_0 / N) o0_0 + (1 - d_0 / N) min(0, min_c o0_c)
    low = min(0.0, float(t.opt0_s.min(initial=0.0)))
    o0 = d[:, 0] / n_devices * t.opt0_s + (1 - d[:, 0] / n_devices) * low
    if not share.shape[1]:
        return share, o0, least
    # E >= the first used stage's first bucket (before_k = 0 there)
    first = share[:, 0] + np.maximum(0.0, t.red_first_s[:, 0] + t.red_first0_s)
    rest = np.array([least[int(D)][1:].sum() for D in dp])
    return share, first + rest + o0, least


def objective_lb_s(t: StageTerms, n_devices: int) -> float:
    """A lower bound of the MILP's objective over every assignment of every depth, from
    its rows: each unit at the config that minimises its share of the device-weighted P
    row (``w (1 + d (n - 1) / N)``, the boundaries >= 0) plus its share of O's
    device-weighted mean (``o d / N``; O >= O_k for every k, sum_k d_k <= N), among the
    configs whose memory rows it fits alone (static + max(act, transient) <= cap) and, for
    the units after unit 0, whose dp is at most unit 0's config's (dp non-increasing);
    E >= the first used stage's first bucket (``red_first``, at unit 0's config), else
    >= 0; O's intercepts: unit 0's config's weighted, the others' at least min(0, least).
    Minimised over unit 0's config; inf when a unit fits none."""
    return float(_unit_shares(t, n_devices)[1].min(initial=np.inf))


def config_lb_s(t: StageTerms, n_devices: int) -> np.ndarray:
    """Per config c, a lower bound of the MILP's objective over the assignments where some
    stage takes c (so c may be left out of a MILP whose cutoff it reaches): the greater
    of two. (a) ``objective_lb_s`` with c on unit 0, or on another unit u while unit 0's
    config has dp D >= c's (u's share at c instead of its least among dp <= D). (b) The
    stage k at c holding some unit u: P >= sum_j t_j + (n_c - 1) t_k, sum_j t_j >= every
    unit at its fastest config (u at c), t_k >= u's time at c, O >= O_k >= u's optimizer
    slope at c plus c's intercept, E >= 0."""
    share, by_first, least = _unit_shares(t, n_devices)
    C, U = share.shape
    if not U:
        return by_first
    dp = np.array([c.dp for c in t.configs])
    a = by_first.copy()
    if U > 1:
        for D, low in least.items():
            lead = by_first[dp == D].min(initial=np.inf)   # unit 0's config has dp D
            later = dp <= D
            a[later] = np.minimum(a[later], lead + (share[later, 1:] - low[1:]).min(axis=1))
    fits = np.isfinite(share)
    w = t.fwd + t.bwd
    fastest = np.where(fits, w, np.inf).min(axis=0)
    with np.errstate(invalid="ignore"):
        at_c = np.nan_to_num(np.where(fits, t.n[:, None] * w - fastest + t.opt_s, np.inf), nan=np.inf).min(axis=1)
    return np.maximum(a, float(fastest.sum()) + at_c + t.opt0_s)


class _Builder:
    """Columns and rows of a MILP in HiGHS's form."""

    def __init__(self) -> None:
        self.lb: list[float] = []
        self.ub: list[float] = []
        self.cost: list[float] = []
        self.integer: list[int] = []
        self.rows: list[tuple[list[int], list[float], float, float]] = []

    def col(self, lb: float = 0.0, ub: float = math.inf, cost: float = 0.0, integer: bool = False) -> int:
        self.lb.append(lb)
        self.ub.append(ub)
        self.cost.append(cost)
        if integer:
            self.integer.append(len(self.lb) - 1)
        return len(self.lb) - 1

    def row(self, terms: dict[int, float], lo: float = -math.inf, hi: float = math.inf) -> None:
        idx = [i for i, v in terms.items() if v != 0.0]
        self.rows.append((idx, [terms[i] for i in idx], lo, hi))

    def highs(self) -> highspy.Highs:
        h = highspy.Highs()
        h.setOptionValue("output_flag", False)
        inf = highspy.kHighsInf
        n = len(self.lb)
        clip = lambda xs: np.array([min(max(x, -inf), inf) for x in xs], dtype=np.float64)
        h.addVars(n, clip(self.lb), clip(self.ub))
        h.changeColsCost(n, np.arange(n, dtype=np.int32), np.array(self.cost, dtype=np.float64))
        if self.integer:
            h.changeColsIntegrality(len(self.integer), np.array(self.integer, dtype=np.int32),
                                    np.array([highspy.HighsVarType.kInteger] * len(self.integer)))
        starts, index, value = [], [], []
        for idx, val, _, _ in self.rows:
            starts.append(len(index))
            index += idx
            value += val
        h.addRows(len(self.rows), clip([r[2] for r in self.rows]), clip([r[3] for r in self.rows]), len(index),
                  np.array(starts, dtype=np.int32), np.array(index, dtype=np.int32), np.array(value, dtype=np.float64))
        return h


#: the coefficient arrays of ``StageTerms`` per (config, unit), in the order ``unit_runs`` compares
UNIT_TERMS = ("fwd", "bwd", "static", "act", "transient", "first", "red_s", "red_first_s", "opt_s", "cut_s")


def unit_runs(t: StageTerms) -> list[range]:
    """Maximal runs of consecutive units whose every coefficient under every config is
    equal (a model's identical layers), unit 0 alone: the MILP's config-dependent
    variables are per run, not per unit (their sums over a run's units)."""
    U = t.fwd.shape[1]
    cols = np.vstack([getattr(t, k) for k in UNIT_TERMS])
    out, at = [], 0
    for u in range(1, U + 1):
        if u == U or u == 1 or not np.array_equal(cols[:, u], cols[:, u - 1]):
            out.append(range(at, u))
            at = u
    return out


#: seconds a MILP may run past its time limit before it is left to finish alone
OVERRUN_S = 2.0


class StageMilp:
    """The MILP of at most ``K`` stages over ``terms`` (module docstring) with
    ``n_devices``: stages 0..K-1 along the pipeline, the leading ones may be empty
    (so one model covers every depth <= K; a stage's in-flight count min(K - k, n)
    depends only on its distance from the last stage, which is never empty). The
    config-dependent variables are per run of identical units (``unit_runs``): ``z[r,k,c]``
    how many of run r's units stage k holds at c, ``g[r,k,c]`` stage k starts in run r
    at c, ``v[r,k,c]`` stage k holds some of run r at c (its transient peak)."""

    def __init__(self, t: StageTerms, K: int, n_devices: int):
        self.t, self.K = t, K
        self.presolve = "off"
        self.status, self.bound_s = "", -math.inf   # the last solve's
        C, U = t.fwd.shape
        self.U, self.C = U, C
        self.runs = runs = unit_runs(t)
        b = _Builder()
        ts, bs = TIME_SCALE, BYTE_SCALE
        w = (t.fwd + t.bwd) * ts
        # y[u, k], k = 1..K-1: stage(u) >= k; 1 where a later stage would be left empty
        self.y = {(u, k): b.col(1.0 if u >= U - (K - k) else 0.0, 1.0, integer=True)
                  for k in range(1, K) for u in range(U)}

        def y_terms(u: int, k: int, sign: float, out: dict, rhs: list) -> None:
            if k <= 0:
                rhs[0] -= sign
            elif k < K and 0 <= u < U:
                out[self.y[u, k]] = out.get(self.y[u, k], 0.0) + sign

        self.s = {(k, c): b.col(0, 1, integer=True) for k in range(K) for c in range(C)}
        self.P, self.E, self.O = b.col(cost=1.0), b.col(cost=1.0), b.col(cost=1.0)
        span = {k: range(0, U - (K - 1 - k)) for k in range(K)}   # the units stage k may hold
        # per stage, the runs it may hold (with how many of their units) and start in
        held = {k: [(r, len(range(max(run.start, 0), min(run.stop, span[k].stop)))) for r, run in enumerate(runs)
                    if run.start < span[k].stop] for k in range(K)}
        begins = {k: [r for r, run in enumerate(runs) if k > 0 and run.stop > 1 and run.start < span[k].stop]
                  for k in range(K)}
        self.z = {(r, k, c): b.col(0, n) for k in range(K) for r, n in held[k] for c in range(C)}
        self.v = {(r, k, c): b.col(0, 1) for k in range(K) for r, _ in held[k] for c in range(C)}
        self.g = {(r, k, c): b.col(0, 1) for k in range(1, K) for r in begins[k] for c in range(C)}
        pres = {(r, k): b.col(0, 1) for k in range(K) for r, _ in held[k]}
        col = [run.start for run in runs]   # a run's coefficients: its first unit's
        tk = [b.col() for _ in range(K)]     # stage seconds per microbatch (model units)
        bk = [b.col() for _ in range(K)]     # its backward
        ck = [b.col() for _ in range(K)]     # the boundary into it (0 for the first stage)
        rk = [b.col() for _ in range(K)]     # its transient peak
        for k in range(1, K):
            for u in range(U - 1):
                b.row({self.y[u, k]: 1.0, self.y[u + 1, k]: -1.0}, hi=0.0)   # contiguous
        for k in range(1, K - 1):
            for u in range(U):
                b.row({self.y[u, k + 1]: 1.0, self.y[u, k]: -1.0}, hi=0.0)

        def empty(k: int, sign: float, out: dict, rhs: list) -> None:   # stage k empty: y[0, k+1]
            y_terms(0, k + 1, sign, out, rhs)

        for k in range(K):
            terms, rhs = {self.s[k, c]: 1.0 for c in range(C)}, [1.0]   # one config, or empty
            empty(k, 1.0, terms, rhs)
            b.row(terms, lo=rhs[0], hi=rhs[0])
            terms, rhs = {}, [1.0]   # used (unit 0 at stage <= k) => at least one unit
            for u in range(U):
                y_terms(u, k, 1.0, terms, rhs)
                y_terms(u, k + 1, -1.0, terms, rhs)
            empty(k, 1.0, terms, rhs)
            b.row(terms, lo=rhs[0])
            for r, n in held[k]:
                # sum_c z[r,k,c] = sum_{u in r} (y[u,k] - y[u,k+1]), z[r,k,c] <= |r| s[k,c]
                terms, rhs = {self.z[r, k, c]: 1.0 for c in range(C)}, [0.0]
                for u in runs[r]:
                    y_terms(u, k, -1.0, terms, rhs)
                    y_terms(u, k + 1, 1.0, terms, rhs)
                b.row(terms, lo=rhs[0], hi=rhs[0])
                for c in range(C):
                    b.row({self.z[r, k, c]: 1.0, self.s[k, c]: -float(n)}, hi=0.0)
                # present: pres[r,k] >= y[u,k] - y[u,k+1] for u in r, spread over the configs as v
                for u in runs[r]:
                    if u < span[k].stop:
                        terms, rhs = {pres[r, k]: 1.0}, [0.0]
                        y_terms(u, k, -1.0, terms, rhs)
                        y_terms(u, k + 1, 1.0, terms, rhs)
                        b.row(terms, lo=rhs[0])
                b.row({**{self.v[r, k, c]: 1.0 for c in range(C)}, pres[r, k]: -1.0}, lo=0.0, hi=0.0)
                for c in range(C):
                    b.row({self.v[r, k, c]: 1.0, self.s[k, c]: -1.0}, hi=0.0)
                # transient peak: the largest of the stage's runs
                b.row({rk[k]: 1.0, **{self.v[r, k, c]: -t.transient[c, col[r]] * bs for c in range(C)}}, lo=0.0)
            zs = [(r, c) for r, _ in held[k] for c in range(C)]
            b.row({tk[k]: 1.0, **{self.z[r, k, c]: -w[c, col[r]] for r, c in zs}}, lo=0.0, hi=0.0)
            b.row({bk[k]: 1.0, **{self.z[r, k, c]: -t.bwd[c, col[r]] * ts for r, c in zs}}, lo=0.0, hi=0.0)
            for r in begins[k]:   # sum_c g[r,k,c] = sum_{u in r, u >= 1} (y[u,k] - y[u-1,k]), telescoped
                terms, rhs = {self.g[r, k, c]: 1.0 for c in range(C)}, [0.0]
                y_terms(runs[r].stop - 1, k, -1.0, terms, rhs)
                y_terms(max(runs[r].start, 1) - 1, k, 1.0, terms, rhs)
                b.row(terms, lo=rhs[0], hi=rhs[0])
            if k > 0:
                for c in range(C):   # at most one start a stage: the start takes the stage's config
                    b.row({**{self.g[r, k, c]: 1.0 for r in begins[k]}, self.s[k, c]: -1.0}, hi=0.0)
            b.row({ck[k]: 1.0, **{self.g[r, k, c]: -t.cut_s[c, col[r]] * ts for r in begins[k] for c in range(C)}},
                  lo=0.0, hi=0.0)
            # n in flight: n - 1 stashes and the one under way, at least its stash and at
            # least the transient, not both (model_memory_bytes): two rows. The first one
            # per config, its cap times s[k,c] (the same integer points: a config not taken
            # holds nothing; in the LP a fractional config holds only its share of the cap:
            # llama3-8b on h100x16 at microbatch 1, the LP bound 2.334 -> 2.586 s against
            # the optimum's 2.668 s); their sum over c is the aggregated row
            for c in range(C):
                n = in_flight(K, k, t.n[c])
                mem = {self.z[r, k, c]: (t.static[c, col[r]] + n * t.act[c, col[r]]) * bs for r, _ in held[k]}
                for r in begins[k]:
                    mem[self.g[r, k, c]] = n * t.first[c, col[r]] * bs
                mem[self.s[k, c]] = -t.cap_bytes * bs
                b.row(mem, hi=0.0)
            mem = {rk[k]: 1.0}
            for r, c in zs:
                n = in_flight(K, k, t.n[c]) - 1
                mem[self.z[r, k, c]] = (t.static[c, col[r]] + n * t.act[c, col[r]]) * bs
                if (r, k, c) in self.g:
                    mem[self.g[r, k, c]] = n * t.first[c, col[r]] * bs
            b.row(mem, hi=t.cap_bytes * bs)
        for k in range(K):
            zs = [(r, c) for r, _ in held[k] for c in range(C)]
            # P >= sum_j t_j + 2 sum_j c_j + (n_k - 1) t_k
            row = {self.P: 1.0, **{tk[j]: -1.0 for j in range(K)}, **{ck[j]: -2.0 for j in range(K)}}
            for r, c in zs:
                row[self.z[r, k, c]] = -(t.n[c] - 1) * w[c, col[r]]
            b.row(row, lo=0.0)
            # overlapped buckets: E >= red_k - B_k - before_k, and E >= the reduction of the
            # stage's first op with parameters (ready at its end) - before_k, where
            # before_k = sum_{j<k} (B_j + c_{j+1}) (stage k's last backward ends that early)
            before = {}
            for j in range(k):
                before[bk[j]] = before.get(bk[j], 0.0) + 1.0
                before[ck[j + 1]] = before.get(ck[j + 1], 0.0) + 1.0
            row = {self.E: 1.0, bk[k]: 1.0, **before, **{self.s[k, c]: -t.red0_s[c] * ts for c in range(C)}}
            for r, c in zs:
                row[self.z[r, k, c]] = -t.red_s[c, col[r]] * ts
            b.row(row, lo=0.0)
            row = {self.E: 1.0, **before, **{self.s[k, c]: -t.red_first0_s[c] * ts for c in range(C)}}
            for c in range(C):
                row[self.z[0, k, c]] = -t.red_first_s[c, 0] * ts   # unit 0 (run 0) starts the first used stage
                for r in begins[k]:
                    row[self.g[r, k, c]] = -t.red_first_s[c, col[r]] * ts
            b.row(row, lo=0.0)
            row = {self.O: 1.0, **{self.s[k, c]: -t.opt0_s[c] * ts for c in range(C)}}
            for r, c in zs:
                row[self.z[r, k, c]] = -t.opt_s[c, col[r]] * ts
            b.row(row, lo=0.0)
        devices = np.array([cfg.devices for cfg in t.configs], dtype=float)
        # valid for every integer point (the slowest stage's (n_k - 1) t_k is at least the
        # device-weighted mean, sum_k d_k <= N) and much tighter in the LP, which spreads
        # fractional configs over the stages
        row = {self.P: 1.0, **{tk[j]: -1.0 for j in range(K)}, **{ck[j]: -2.0 for j in range(K)}}
        for (r, k, c), i in self.z.items():
            row[i] = -(t.n[c] - 1) * w[c, col[r]] * devices[c] / n_devices
        b.row(row, lo=0.0)
        dp = np.array([cfg.dp for cfg in t.configs], dtype=float)
        b.row({self.s[k, c]: devices[c] for k in range(K) for c in range(C)}, hi=float(n_devices))
        big = float(dp.max(initial=1.0))
        for k in range(K - 1):   # dp non-increasing along the pipeline (the 1F1B window never binds)
            terms, rhs = {**{self.s[k, c]: dp[c] for c in range(C)}, **{self.s[k + 1, c]: -dp[c] for c in range(C)}}, [0.0]
            empty(k, big, terms, rhs)   # an empty stage counts as the widest
            b.row(terms, lo=rhs[0])
        self.builder = b
        self.h = b.highs()
        self.stop = None       # a core.interrupt.Stop: Ctrl-C interrupts HiGHS (``solve``)
        self.abandoned = False  # a stop left a run going: the instance is not used again
        interrupt_on_stop(self.h, lambda: self.stop)
        self.n_binaries = len(b.integer)
        self.n_rows = len(b.rows)

    def _padded(self, split, configs) -> tuple[list[int], dict[int, int]]:
        """A compact assignment (stages 0..len(configs)-1) as this model's stages: the
        leading ones empty."""
        off = self.K - len(configs)
        return [int(k) + off for k in split], {k + off: c for k, c in enumerate(configs)}

    def forbid(self, split, configs) -> None:
        """A no-good cut: this (split, configs) projection is not taken again."""
        split, configs = self._padded(split, configs)
        ones = [self.s[k, c] for k, c in configs.items()]
        ones += [self.y[u, k] for (u, k) in self.y if split[u] >= k]
        zeros = [self.y[u, k] for (u, k) in self.y if split[u] < k]
        self.h.addRow(-highspy.kHighsInf, float(len(ones) - 1), len(ones) + len(zeros),
                      np.array(ones + zeros, dtype=np.int32),
                      np.array([1.0] * len(ones) + [-1.0] * len(zeros), dtype=np.float64))

    def start(self, split, configs) -> None:
        """Hand HiGHS the binaries of a known (compact) assignment as a start."""
        split, configs = self._padded(split, configs)
        idx = [self.s[k, c] for k in range(self.K) for c in range(self.C)]
        val = [1.0 if configs.get(k) == c else 0.0 for k in range(self.K) for c in range(self.C)]
        idx += list(self.y.values())
        val += [1.0 if split[u] >= k else 0.0 for (u, k) in self.y]
        self.h.setSolution(len(idx), np.array(idx, dtype=np.int32), np.array(val, dtype=np.float64))

    def solve(self, time_limit_s: float, rel_gap: float = 1e-4, cutoff_s: float = math.inf,
              threads: int = 1) -> StageSolution | None:
        """The best assignment within the limit (None: none found, or none below
        ``cutoff_s``, the model's objective an incumbent already reaches: HiGHS prunes every
        node whose bound reaches it). ``status`` and ``bound_s`` keep the run's model status
        and its bound (``cutoff_s`` when it proved nothing lies below it)."""
        if self.abandoned:   # still running after a Ctrl-C: never touched again
            return None
        h = self.h
        h.setOptionValue("time_limit", float(max(time_limit_s, 0.05)))
        h.setOptionValue("mip_rel_gap", float(rel_gap))
        h.setOptionValue("threads", int(threads))
        h.setOptionValue("random_seed", 0)
        h.setOptionValue("presolve", self.presolve)
        h.setOptionValue("objective_bound", float(cutoff_s * TIME_SCALE) if math.isfinite(cutoff_s)
                         else highspy.kHighsInf)
        # watched: a Ctrl-C reaches HiGHS, and a run past its limit (root cut separation
        # calls no callback) is left after OVERRUN_S (model.highs_watch)
        t0 = time.perf_counter()
        if not run_watched(h, self.stop, t0 + max(time_limit_s, 0.05) + OVERRUN_S)[0]:
            stopped = self.stop is not None and self.stop.requested
            self.abandoned, self.bound_s = True, -math.inf
            self.status = "kInterrupt" if stopped else "kTimeLimit"
            return None
        info, sol = h.getInfo(), h.getSolution()
        self.status = status = h.getModelStatus().name
        bound = float(info.mip_dual_bound) / TIME_SCALE
        if math.isfinite(cutoff_s):
            # the nodes at or above the cutoff were pruned unexplored, so what is proven is the
            # least of the two; HiGHS may still return a solution above the cutoff (its own
            # heuristics' incumbent), with a dual bound of that solution's objective
            bound = cutoff_s if status == "kInfeasible" else min(bound, cutoff_s)
        self.bound_s = bound
        if not (sol.value_valid and info.primal_solution_status >= 2):
            return None
        x = np.array(sol.col_value)
        split = [0] * self.U
        for (u, k), i in self.y.items():
            if x[i] > 0.5:
                split[u] = max(split[u], k)
        configs = []
        used = sorted(set(split))
        for k in range(self.K):
            got = [c for c in range(self.C) if x[self.s[k, c]] > 0.5]
            if len(got) != (k in used):
                raise InternalError(f"stage {k} took {len(got)} configurations in HiGHS's solution")
            configs += got
        split = [used.index(k) for k in split]   # compact: the used stages only
        obj = float(info.objective_function_value) / TIME_SCALE
        return StageSolution(tuple(split), tuple(configs), obj, bound if math.isfinite(bound) else obj, status)
