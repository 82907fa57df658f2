"""simulate(problem, plan, options) -> SimResult: build the program, run it, measure."""
from __future__ import annotations

import numpy as np

from distplan.costs.check import interleaved_violations
from distplan.costs.problem import Problem
from distplan.core.errors import DistplanError
from distplan.core.schedules import INFERENCE_SCHEDULES, TRAINING_PLAN_SCHEDULES, TRAINING_SCHEDULES
from distplan.core.plan import Plan
from distplan.sim.execute import expand, run
from distplan.sim.memory import peak_memory
from distplan.sim.options import SimOptions
from distplan.sim.period import MAX_CYCLICITY, steady_period
from distplan.sim.program import build_program
from distplan.sim.schedule import repeats
from distplan.sim.stream_runs import server_work_s, unmerged_types
from distplan.sim.symmetry import Symmetry, find_symmetry
from distplan.sim.taskgraph import K_B, K_F, K_XFER, KIND_NAMES
from distplan.sim.iteration import iteration_s
from distplan.sim.result import SimResult


def simulate(problem: Problem, plan: Plan, options: SimOptions | None = None) -> SimResult:
    """Replay ``plan`` exactly on ``problem``'s hardware (see ``sim`` package docs)."""
    opts = options or SimOptions()
    _validate(problem, plan)
    # interleaved: devices follow Megatron's order, links serve in arrival order (sim.schedule)
    static_links = opts.ideal and opts.link_model == "fifo" and plan.schedule != "interleaved"
    sym = find_symmetry(problem, plan, opts.ideal, opts.trace) if opts.symmetry else None
    _check_size(problem, plan, sym)
    prog = build_program(problem, plan, ideal=opts.ideal, static_links=static_links, sym=sym, merge=merges(opts))
    net = expand(prog, plan if sym is None else sym.reduced)
    r = run(net, prog, opts.link_model)
    return _measure(problem, plan, opts, prog, net, r, sym)


def merges(opts: SimOptions) -> bool:
    """Whether a run under ``opts`` merges uncontended ZeRO-3 chains (``sim.stream_runs``)."""
    return opts.merge_chains and not opts.trace and opts.link_model in ("fifo", "free")


def _validate(problem: Problem, plan: Plan) -> None:
    if len(plan.op_stage) != problem.n_ops:
        raise DistplanError(f"plan covers {len(plan.op_stage)} ops but the graph has {problem.n_ops}")
    if plan.schedule in INFERENCE_SCHEDULES and problem.training:
        raise DistplanError(f"schedule {plan.schedule!r} is for inference; use {_either(TRAINING_SCHEDULES)} "
                            "for a training graph")
    if plan.schedule in TRAINING_PLAN_SCHEDULES and not problem.training:
        raise DistplanError(f"schedule {plan.schedule!r} needs a training graph; use "
                            f"{_either(INFERENCE_SCHEDULES)} for inference")
    if plan.schedule == "explicit" and plan.device_order is None:
        raise DistplanError("schedule 'explicit' needs a device_order")
    if plan.schedule == "interleaved":
        bad = interleaved_violations(problem, plan) if plan.stages else []
        if bad:
            raise DistplanError("; ".join(bad[:3]))
    if plan.microbatches < 1:
        raise DistplanError(f"microbatches must be >= 1, got {plan.microbatches}")
    if not plan.stages:
        raise DistplanError("the plan has no stages")
    for v, k in enumerate(plan.op_stage):
        if not 0 <= k < plan.n_stages:
            raise DistplanError(f"op {problem.graph.ops[v].name!r}: stage {k} outside 0..{plan.n_stages - 1}")
    for k, st in enumerate(plan.stages):
        if not st.devices or st.tensor_parallel < 1 or len(st.devices) % st.tensor_parallel:
            raise DistplanError(f"stage {k}: {len(st.devices)} devices is not a positive multiple of "
                                f"tensor_parallel {st.tensor_parallel}")
        bad = [d for d in st.devices if not 0 <= d < problem.n_devices]
        if bad:
            raise DistplanError(f"stage {k}: device index {bad[0]} outside 0..{problem.n_devices - 1}")
        if st.shares is not None and (len(st.shares) != st.replicas or min(st.shares) < 1
                                      or sum(st.shares) != plan.microbatches):
            raise DistplanError(f"stage {k}: shares {list(st.shares)} must give each of its {st.replicas} replicas "
                                f">= 1 microbatch and sum to the plan's {plan.microbatches}")
        if st.replica_precision is not None and len(st.replica_precision) != st.replicas:
            raise DistplanError(f"stage {k}: replica_precision lists {len(st.replica_precision)} replicas, "
                                f"the stage has {st.replicas}")


#: a run expected to expand to more nodes than this is refused (about 150 bytes a node:
#: 80 M nodes is ~12 GiB, half of a 24 GiB machine)
MAX_NODES = 80_000_000


def expected_nodes(problem: Problem, plan: Plan, copies: int = 1) -> float:
    """A rough count of the nodes a run expands to (operator tasks, and per tensor-parallel
    op its ring all-reduce's 2(t-1) steps on t devices over about two hops), divided by
    the identical copies a symmetry reduction merges."""
    per_micro = 0.0
    for k, st in enumerate(plan.stages):
        t = st.tensor_parallel
        n = sum(1 for x in plan.op_stage if x == k)
        per_micro += n * t * (1 + (4 * (t - 1) * 0.35 if t > 1 else 0.0))
    return per_micro * plan.microbatches * (2 if problem.training else 1) / copies


def _check_size(problem: Problem, plan: Plan, sym) -> None:
    n = expected_nodes(problem, plan, sym.factor if sym is not None else 1)
    if n > MAX_NODES:
        why = ("identical replicas are merged only for realistic 1F1B training runs without a trace"
               if sym is None else "even after merging identical replicas and ranks")
        raise DistplanError(f"this run expands to about {n:,.0f} simulation nodes ({why}), more than the "
                            f"{MAX_NODES:,} this machine's memory allows (~150 bytes each); simulate fewer "
                            "microbatches, or drop --trace / ideal mode for a symmetric training plan")


def _either(names: tuple[str, ...]) -> str:
    return " or ".join(repr(n) for n in names)


def _measure(problem: Problem, plan: Plan, opts: SimOptions, prog, net, r, sym: Symmetry | None,
             settle: bool = True) -> SimResult:
    """The run's figures; under a symmetry reduction, the full run's (every device and
    link repeats its representative's timeline, microbatch m completes with the copy's
    microbatch it repeats, ``Symmetry.copy_microbatch``). ``settle=False``: no longer
    run for the period (``sim.memo``; period and steady are then this run's)."""
    rr = sym.replicas if sym is not None else 1
    factor = sym.factor if sym is not None else 1
    D, L = prog.D, prog.L
    T, U, units = net.T, net.U, net.units
    beg, fin = r.beg, r.fin
    dur = _per_node(prog.dur, prog.x_dur, U, float)
    server = _per_node(prog.server, prog.x_server, U, np.int64)
    ran = beg >= 0
    end = np.where(ran, beg + dur, 0.0)
    if opts.link_model == "fair":  # shared links: a hop ends when its last byte leaves
        lat = np.asarray(prog.server_latency)[server]
        end = np.where(ran & (server >= D), fin - lat, end)
    makespan = float(fin[ran].max(initial=0.0))
    M = plan.microbatches
    done = _full_run_done(_completions(prog, net, fin), M, sym)
    period, steady = _period(plan, prog, done, makespan, opts.link_model, rr)
    if settle and not steady and repeats(plan.schedule):
        period, steady = _period_from_longer_run(plan, prog, opts, period, sym)
    if not period > 0:
        period = makespan / M if makespan > 0 else 0.0
    thr = problem.graph.batch_size / period if period > 0 else float("inf")
    dev_mask = ran & (server < D)
    dev_busy = np.bincount(server[dev_mask], weights=dur[dev_mask], minlength=D)[:D]
    link_mask = ran & (server >= D)
    if r.link_busy_s is not None:
        link_busy = np.asarray(r.link_busy_s[D:], dtype=float)
    else:
        link_busy = np.bincount(server[link_mask] - D, weights=dur[link_mask], minlength=L)[:L]
    node_bytes = _per_node(prog.nbytes, prog.x_nbytes, U, float)
    link_bytes = np.bincount(server[link_mask] - D, weights=node_bytes[link_mask], minlength=L)[:L]
    kind = np.tile(np.asarray(prog.kind), U)
    n_tasks = factor * int(np.count_nonzero(net.valid & ((kind == K_F) | (kind == K_B))))
    extra_nodes = _unmerge(prog, ran[:net.N0].reshape(U, T), link_busy, link_bytes, r.link_busy_s is None)
    peak_all, peak_own = peak_memory(prog, units, T, beg, end, fin, net.micro)
    if sym is not None:   # every device / link repeats its representative
        dev_busy, peak_all, peak_own = dev_busy[sym.device_rep], peak_all[sym.device_rep], peak_own[sym.device_rep]
        link_busy, link_bytes = link_busy[sym.link_rep], link_bytes[sym.link_rep]
    span = makespan if makespan > 0 else 1.0
    events = _events(problem, prog, net, beg, end - beg, ran) if opts.trace else None
    it_s, opt_s = iteration_s(problem, plan, makespan)
    return SimResult(
        makespan_s=makespan, period_s=float(period), throughput_per_s=float(thr), steady=bool(steady),
        device_busy_s=dev_busy, device_busy_fraction=dev_busy / span,
        link_busy_s=link_busy, link_busy_fraction=link_busy / span, link_bytes=link_bytes,
        peak_memory_bytes=peak_all, peak_own_memory_bytes=peak_own, microbatch_done_s=done,
        n_tasks=n_tasks, n_nodes=factor * (int(ran.sum()) + extra_nodes), schedule=plan.schedule, microbatches=M, events=events,
        iteration_s=it_s, optimizer_s=opt_s,
        step_throughput_per_s=M * problem.graph.batch_size / it_s if it_s > 0 else float("inf"),
    )


def _unmerge(prog, ran_units: np.ndarray, link_busy: np.ndarray, link_bytes: np.ndarray, busy_from_dur: bool) -> int:
    """Put each merged ZeRO-3 chain's seconds and bytes back on the links its transfers
    used (``Program.spread``, sim.stream_runs), in place; returns the nodes it stands
    for beyond itself, over the units it ran in."""
    D, extra = prog.D, 0
    for t, (steps, hops) in prog.spread.items():
        n = int(np.count_nonzero(ran_units[:, t]))
        if not n:
            continue
        if busy_from_dur:
            link_busy[prog.server[t] - D] -= n * prog.dur[t]
        link_bytes[prog.server[t] - D] -= n * prog.nbytes[t]
        for s, dur, nbytes in hops:
            if busy_from_dur:
                link_busy[s - D] += n * steps * dur
            link_bytes[s - D] += n * steps * nbytes
        extra += n * (steps * len(hops) - 1)
    return extra


def _full_run_done(done: np.ndarray, microbatches: int, sym: Symmetry | None) -> np.ndarray:
    """Each of the full run's microbatches' completion: the reduced run's microbatch it
    repeats (``Symmetry.copy_microbatch``), or ``done`` itself without a reduction."""
    return done if sym is None else done[sym.copy_microbatch(microbatches)]


def _per_node(per_type: list, extra: list, units: int, dtype) -> np.ndarray:
    """A per-type list repeated unit after unit, then the collective nodes' values."""
    return np.concatenate((np.tile(np.asarray(per_type, dtype=dtype), units), np.asarray(extra, dtype=dtype)))


def _completions(prog, net, fin: np.ndarray) -> np.ndarray:
    """Completion time of each microbatch: the last of its nodes."""
    T, U, units = net.T, net.U, net.units
    fin_u = np.where(net.valid, fin[:net.N0], -np.inf).reshape(U, T)[:units]
    pat = np.asarray(prog.pat)
    done = np.full(units * prog.C, -np.inf)
    for p in range(prog.C):
        cols = np.nonzero(pat == p)[0]
        if len(cols):
            done[p::prog.C][:units] = fin_u[:, cols].max(axis=1)
    return done[:prog.M]


def _period(plan: Plan, prog, done: np.ndarray, makespan: float, link_model: str,
            replicas: int = 1) -> tuple[float, bool]:
    """(period, steady); never below the busiest server's work per microbatch. ``prog``
    may be a reduced program of ``replicas`` identical copies (its rounds and work per
    microbatch then count one copy's microbatches; ``done`` is the full run's)."""
    M = len(done)
    floor = work_per_microbatch(prog, link_model) / replicas
    if plan.schedule == "gpipe" or not np.all(np.isfinite(done)):
        return max(makespan / M, floor), False
    off = prog.offset
    tail = replicas * (max(off) - min(off)) if off and plan.schedule not in ("explicit", "interleaved") else M // 4
    if any(s.shares is not None and len(set(s.shares)) > 1 for s in plan.stages):
        # uneven shares repeat per cycle: a period must hold over one at least
        return steady_period(done, tail, floor, max(MAX_CYCLICITY, plan.cycle), plan.cycle)
    return steady_period(done, tail, floor)


def work_per_microbatch(prog, link_model: str) -> float:
    """The busiest server's seconds of work per microbatch (over one replica cycle; a
    device with s slots counts 1/s): every task, TP share, cast and link hop of the
    pattern, TP all-reduce steps included; links count unless they are contention-free.
    No steady state has a shorter period."""
    work = server_work_s(prog) / prog.C
    work /= np.asarray(prog.concurrency, dtype=float)
    if link_model == "free":
        work = work[:prog.D]
    return float(work.max(initial=0.0))


#: a longer run for the period may hold at most this many nodes (about 2 s)
PERIOD_NODE_BUDGET = 1_000_000


def _period_from_longer_run(plan: Plan, prog, opts: SimOptions, period: float,
                            sym: Symmetry | None = None) -> tuple[float, bool]:
    """The steady-state period does not depend on the microbatch count. When the plan's
    run is too short to reach it (pipeline fill, or two servers whose loads nearly tie
    and take long to settle which one paces the pipeline), run the same program with
    4 x (rounds of fill) + 64 microbatches (rounded up to whole replica cycles), then 4
    times more each time, within PERIOD_NODE_BUDGET nodes of the full run; the longest
    run's estimate stands if none settles. A reduced program (``sym``) runs its copy's
    share of those microbatches."""
    import dataclasses

    rr = sym.replicas if sym is not None else 1
    factor = sym.factor if sym is not None else 1
    run_plan = plan if sym is None else sym.reduced
    off = prog.offset
    C = prog.C * rr
    M2 = max(4 * rr * ((max(off) - min(off)) if off else 0) + 64, 2 * plan.microbatches)
    M2 = -(-M2 // C) * C
    best = (period, False)
    while M2 * unmerged_types(prog) * factor <= PERIOD_NODE_BUDGET:
        prog2 = dataclasses.replace(prog, M=M2 // rr)
        plan2 = dataclasses.replace(run_plan, microbatches=M2 // rr)
        net2 = expand(prog2, plan2)
        r2 = run(net2, prog2, opts.link_model)
        fin2 = r2.fin
        done2 = _full_run_done(_completions(prog2, net2, fin2), M2, sym)
        best = _period(dataclasses.replace(plan, microbatches=M2), prog2, done2, float(fin2.max(initial=0.0)),
                       opts.link_model, rr)
        if best[1]:
            break
        M2 *= 4
    return best


def _events(problem: Problem, prog, net, beg, dur, ran) -> tuple:
    """(server, start_s, duration_s, name, category) per executed node."""
    ops = problem.graph.ops
    out = []
    T, C = net.T, prog.C
    for nid in np.nonzero(ran)[0].tolist():
        if nid >= net.N0:
            i = nid - net.N0
            s = prog.x_server[i]
            out.append((s, float(beg[nid]), float(dur[nid]), f"allreduce stage {prog.x_stage[i]}", "allreduce"))
            continue
        t = nid % T
        m = (nid // T) * C + prog.pat[t]
        k = prog.kind[t]
        name = f"{KIND_NAMES[k]} {ops[prog.op[t]].name} m{m}"
        cat = "transfer" if k == K_XFER else ("backward" if prog.phase[t] else "forward")
        out.append((prog.server[t], float(beg[nid]), float(dur[nid]), name, cat))
    out.sort(key=lambda e: (e[0], e[1]))
    return tuple(out)
