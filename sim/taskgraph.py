"""The task graph a plan induces: every node (operator task, cast, link hop, collective
step) of one *pattern* of microbatches, its server, duration and dependencies, and the
buffers it holds (what ``sim.memory`` counts).

A pattern covers ``C = plan.cycle`` consecutive microbatches (the cycle after which
every stage's assignment of microbatches to replicas repeats: ``lcm(replicas)`` with
round-robin, longer with uneven ``Stage.shares``); node types are defined per pattern and repeat
unit after unit, so node id = ``unit * T + type`` and microbatch = ``unit * C + p[type]``.
Each pattern's ops run at the precisions of the replicas that run its microbatch
(``Plan.microbatch_precisions``: replica groups may override an op's precision), so
durations, bytes and casts are per pattern. Servers are numbered devices first (0..D-1), then links (D..D+L-1). Node types are
created in an order consistent with every dependency. The order each server runs its
nodes in is the schedule's (``sim.schedule``), not this module's.
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from distplan.costs.collectives import ring_allreduce_s
from distplan.costs.compute import tp_shard_time_s
from distplan.costs.tensor_parallel import (TP_ALLREDUCE_KINDS, tp_backward_allreduce, tp_divides,
                                            tp_forward_allreduce, tp_output_share)
from distplan.costs.offload import optimizer_saved_bytes
from distplan.costs.problem import Problem
from distplan.costs.routes import links_s
from distplan.costs.memory import (MASK_BYTES_PER_ELEM, kept_output_elems, remat_groups, remat_per_op_bytes,
                                   saved_elems)
from distplan.costs.recompute import recomputed, zero_saved_bytes
from distplan.costs.sharding import gradient_reductions
from distplan.costs.tp_overlap import bytes_split, gemm_split_s, overlap_chunks, overlaps, slowed_gemm_s
from distplan.core.errors import DistplanError
from distplan.core.plan import Plan
from distplan.sim.comm_nodes import reduction_nodes, ring_nodes, ring_nodes_after
from distplan.sim.fsdp_nodes import FsdpPattern
from distplan.sim.stream_runs import Spread, chain_s, exclusive_routes, expand_runs
from distplan.sim.symmetry import Symmetry

# node kinds
K_F, K_B, K_CAST_F, K_CAST_B, K_XFER, K_COLL = range(6)
KIND_NAMES = ("F", "B", "cast", "cast_grad", "xfer", "allreduce")


@dataclass
class Buffer:
    """Bytes resident on ``device`` from ``alloc`` (node type; its start, or its delivery
    when ``at_arrival``) until the last of ``frees`` (node types) has finished serving."""

    device: int
    nbytes: float
    alloc: int
    at_arrival: bool
    frees: tuple[int, ...]
    own: bool  # an operator's own output activation (the part plan_memory_bytes bounds)


@dataclass
class Program:
    """The node types of one pattern (per-type lists), the collectives after the pipeline
    (``x_`` lists), buffers and servers; ``offset`` and ``backpressure`` are the schedule's
    (filled by ``sim.schedule``)."""

    D: int
    L: int
    C: int
    M: int
    training: bool
    schedule: str
    # per node type
    server: list[int] = field(default_factory=list)
    dur: list[float] = field(default_factory=list)
    kind: list[int] = field(default_factory=list)
    pat: list[int] = field(default_factory=list)
    op: list[int] = field(default_factory=list)
    edge: list[int] = field(default_factory=list)
    nbytes: list[float] = field(default_factory=list)
    preds: list[list[int]] = field(default_factory=list)
    phase: list[int] = field(default_factory=list)
    offset: list[int] = field(default_factory=list)
    buffers: list[Buffer] = field(default_factory=list)
    # (pattern, op, device index in the replica): (F node type, nodes that consume its output)
    outputs: dict[tuple[int, int, int], tuple[int, tuple[int, ...]]] = field(default_factory=dict)
    # (pattern, edge, device index in the consumer's replica): (first and last link node
    # types of the tensor's hops from its producer, the node whose end frees the received copy)
    inputs: dict[tuple[int, int, int], tuple[int, int, int]] = field(default_factory=dict)
    # (release type, target type, unit shift, depth): target(m + depth) waits for release(m)
    backpressure: list[tuple[int, int, int, int]] = field(default_factory=list)
    # collective nodes after the pipeline (absolute, appended after the units)
    x_server: list[int] = field(default_factory=list)
    x_dur: list[float] = field(default_factory=list)
    x_nbytes: list[float] = field(default_factory=list)
    x_preds: list[list[int]] = field(default_factory=list)  # indices into the x_ lists
    x_stage: list[int] = field(default_factory=list)
    # device collective nodes placed right after one pipeline node in the device's order
    # (overlapped gradient reduction): x index -> (node type, microbatch)
    x_after: dict[int, tuple[int, int]] = field(default_factory=dict)
    static_bytes: np.ndarray | None = None
    server_latency: list[float] = field(default_factory=list)
    link_bw: list[float] = field(default_factory=list)
    concurrency: list[int] = field(default_factory=list)
    static_links: bool = False
    # merged ZeRO-3 chain's node type -> (steps, per hop (server, seconds, bytes)) (sim.stream_runs)
    spread: dict[int, Spread] = field(default_factory=dict)

    @property
    def T(self) -> int:
        return len(self.server)

    def add(self, server: int, dur: float, kind: int, p: int, op: int, preds: list[int], phase: int,
            edge: int = -1, nbytes: float = 0.0) -> int:
        if not dur >= 0 or math.isinf(dur):
            raise DistplanError(f"node {KIND_NAMES[kind]} of op {op} has duration {dur!r}; "
                                "check that every op's precision runs on its device")
        self.server.append(server)
        self.dur.append(float(dur))
        self.kind.append(kind)
        self.pat.append(p)
        self.op.append(op)
        self.edge.append(edge)
        self.nbytes.append(float(nbytes))
        self.preds.append(list(preds))
        self.phase.append(phase)
        return len(self.server) - 1


class _Builder:
    def __init__(self, problem: Problem, plan: Plan, ideal: bool, static_links: bool, sym: Symmetry | None = None,
                 merge: bool = False):
        # with a symmetry reduction, ``plan`` is the reduced plan and ``full`` the user's
        self.full = plan
        self.merge = merge   # every ZeRO-3 chain as one node (sim.stream_runs)
        self._chain_s: dict = {}   # Spread -> its merged node's seconds
        self._last: dict[int, dict[int, int]] = {}   # stage -> replica -> its last microbatch
        self.fsdp_runs: list[tuple[int, int, int, tuple[int, ...]]] = []   # (device, pred, node, route's servers)
        self.sym = sym
        if sym is not None:
            plan = sym.reduced
        self.pb, self.plan = problem, plan
        topo = problem.topology
        self.topo = topo
        self.D, self.L = topo.n_devices, len(topo.links)
        C = plan.cycle
        self.prog = Program(self.D, self.L, C, plan.microbatches, problem.training, plan.schedule,
                            static_links=static_links)
        self.qs_of = [[problem.q_index(x) for x in plan.microbatch_precisions(p)] for p in range(C)]
        self.again = recomputed(problem, self.full)
        # what each op keeps for its backward (costs.memory: the checker's rule)
        self.saved = saved_elems(problem.graph, self.again) if problem.training else None
        if self.saved is not None:   # of each op's output, what its stage keeps (its readers there and itself)
            st = np.asarray(plan.op_stage, dtype=np.int64)
            local = st[problem.edges[:, 0]] == st[problem.edges[:, 1]] if len(problem.edges) else np.zeros(0, bool)
            self.kept_elems = kept_output_elems(problem.graph, self.saved[1], self.saved[0], local)
        self._remat: dict[tuple[int, tuple[int, ...]], list[tuple[int, int, float]]] = {}
        self.one_rank = sym is not None and sym.ranks > 1      # simulate ranks 0..rank_group-1 of each group
        self.rank_group = sym.rank_group if self.one_rank else 0
        self.one_replica = sym is not None and sym.replicas > 1
        self.bwd_nodes: dict[int, list[list[int]]] = {}
        self.bw = [float(x) for x in problem.link_bw_bytes_per_s]
        self.lat = [0.0 if ideal else float(x) for x in problem.link_latency_s]
        V = problem.n_ops
        self.in_edges: list[list[int]] = [[] for _ in range(V)]
        self.out_edges: list[list[int]] = [[] for _ in range(V)]
        for e, (u, v) in enumerate(problem.edges.tolist()):
            self.in_edges[v].append(e)
            self.out_edges[u].append(e)
        self.edges = problem.edges.tolist()
        self._routes: dict[tuple[int, int], tuple[int, ...]] = {}

    # --- pieces ---------------------------------------------------------------
    def route(self, a: int, b: int) -> tuple[int, ...]:
        """The links a -> b (representative links under a symmetry reduction), each pair
        looked up once per program (a ring asks for the same hops every step)."""
        r = self._routes.get((a, b))
        if r is None:
            r = self._routes[(a, b)] = self.topo.route(a, b) if self.sym is None else self.sym.route(self.topo, a, b)
        return r

    def ranks(self, G) -> list[tuple[int, int]]:
        """(rank, device) of a group that are simulated: all, or the copy's first ranks
        (rank 0 alone, or one node's under a rank-group reduction)."""
        return list(enumerate(G[:self.rank_group])) if self.one_rank else list(enumerate(G))

    def pipelined(self, k: int, op) -> bool:
        """Does stage k pipeline ``op``'s tensor-parallel collective with its GEMM
        (``Stage.tp_comm_overlap``, ``costs.tp_overlap.overlaps``)?"""
        return self.plan.stages[k].tp_comm_overlap and overlaps(op)

    def slowed(self, G, rest_s: float, nbytes: float) -> float:
        """A pipelined GEMM's rest beside its collective's first chunks, on the SMs that
        collective leaves it (``costs.tp_overlap.slowed_gemm_s``: the collective's
        closed-form time, as the analytic iteration charges it)."""
        first, _ = bytes_split(nbytes, overlap_chunks(len(G)))
        return slowed_gemm_s(rest_s, ring_allreduce_s(self.pb, list(G), first))

    def pipelined_ring(self, G: list[int], heads: list[int], tails: list[int], nbytes: float, p: int, phase: int,
                       op: int) -> list[int]:
        """The collective of a GEMM split into a first chunk (``heads``, per simulated
        rank) and the rest (``tails``): the first n - 1 chunks' bytes reduced after the
        heads, beside the tails, then the last chunk's after both (costs.tp_overlap)."""
        first, last = bytes_split(nbytes, overlap_chunks(len(G)))
        done = ring_nodes(self, G, heads, first, p, phase, op)
        return ring_nodes_after(self, G, done, tails, last, p, phase, op)

    def chain(self, src: int, path: list[int], nbytes: float, p: int, phase: int, e: int, op: int):
        """Link nodes carrying ``nbytes`` along the devices ``path`` (hop by hop, each hop
        on its route). Returns (last node, first link node or None). Relay buffers are
        recorded on intermediate devices."""
        prog, topo = self.prog, self.topo
        last, first = src, None
        first_preds = src if isinstance(src, list) else [src]
        pending_relay = None  # (device, arrival node) waiting for the next hop's first link
        for a, b in zip(path, path[1:]):
            route = self.route(a, b)
            if not route:
                continue
            for i, l in enumerate(route):
                t = prog.add(self.D + l, nbytes / self.bw[l], K_XFER, p, op,
                             first_preds if first is None else [last], phase, e, nbytes)
                if first is None:
                    first = t
                if i == 0 and pending_relay is not None:
                    dev, arr = pending_relay
                    prog.buffers.append(Buffer(dev, nbytes, arr, True, (t,), False))
                    pending_relay = None
                last = t
            pending_relay = (b, last)
        return last, first

    def chain_run(self, preds: list[int], a: int, b: int, nbytes: float, steps: int, p: int, phase: int,
                  op: int) -> int:
        """``steps`` transfers of ``nbytes`` a -> b one after the other as one node on the
        route's last link (``sim.stream_runs``; its per-hop work in ``Program.spread``)."""
        route = self.route(a, b)
        hops = tuple((self.D + l, nbytes / self.bw[l], nbytes) for l in route)
        spread = (steps, hops)
        dur = self._chain_s.get(spread)
        if dur is None:
            lat = self.lat
            dur = self._chain_s[spread] = chain_s(spread, lambda s: lat[s - self.D])
        t = self.prog.add(self.D + route[-1], dur, K_XFER, p, op, preds, phase, -1, steps * nbytes * len(route))
        self.prog.spread[t] = spread
        self.fsdp_runs.append((b, a, t, tuple(s for s, _, _ in hops)))
        return t

    def exposed_xfer(self, preds: list[int], a: int, b: int, nbytes: float, p: int, phase: int, e: int,
                     op_send: int, op_recv: int) -> tuple[int, int]:
        """Exposed communication (costs.exposed): a send task on device a and a receive task
        on device b, each as long as the transfer on the route a -> b (``links_s``), with
        its link hops between. Returns (receive node, send node)."""
        t = links_s(self.pb, self.route(a, b), nbytes) if a != b else 0.0
        send = self.prog.add(a, t, K_XFER, p, op_send, preds, phase, e, nbytes)
        last, _ = self.chain(send, [a, b], nbytes, p, phase, e, op_send)
        return self.prog.add(b, t, K_XFER, p, op_recv, [last], phase, e, nbytes), send

    # --- one microbatch pattern -----------------------------------------------
    def pattern(self, p: int) -> None:
        pb, plan, prog = self.pb, self.plan, self.prog
        kinds = pb.device_kind
        cast_share = 0.5 if pb.training else 1.0
        where = [s.replica_devices(p) for s in plan.stages]
        V = pb.n_ops
        qs, bpe, elems = self.qs_of[p], pb.bytes_per_elem, pb.edge_elems
        Fn: list[list[int]] = [[] for _ in range(V)]
        kept_in: list[tuple[int, int, int]] = []   # (reader, rank, buffer) held until the reader's backward
        out_at: list[list[int]] = [[] for _ in range(V)]
        releases: list[list[list[int]]] = [[] for _ in range(V)]
        sent: dict[tuple[int, int, int], tuple[int, int]] = {}   # exposed: (source, stage, rank) -> (arrival, send)
        fs = FsdpPattern(self, p, where, Buffer, K_COLL)   # ZeRO-3 gathers (none without)
        for v in range(V):
            k = plan.op_stage[v]
            G = where[k]
            tv = len(G)
            gather = fs.before_forward(v, self.ranks(G))
            releases[v] = [[] for _ in G]
            fpreds: list[list[int]] = [[] for _ in G]
            patch_buf: list[list[int]] = [[] for _ in G]  # buffers freed when F[v][j] ends
            patch_rel: list[list[tuple[int, int]]] = [[] for _ in G]  # F[v][j] consumes u's output on ju
            received: list[list[tuple[int, int, int, int | None]]] = [[] for _ in G]  # (edge, hops, cast)
            for e in self.in_edges[v]:
                u = self.edges[e][0]
                ku = plan.op_stage[u]
                Gu = where[ku]
                for j, d in self.ranks(G):
                    first = None
                    if ku == k:
                        ju, src = j, out_at[u][j]
                    elif pb.exposed and elems[e] <= 0 and (u, k, j) not in sent:
                        # a tensor without bytes is no transfer (costs.exposed counts sending
                        # edges only): the reader waits for its producer, nothing more
                        ju = j % len(Gu)
                        nb, src = 0.0, out_at[u][ju]
                    elif pb.exposed:   # one direct transfer per source and receiving stage (costs.exposed)
                        ju = j % len(Gu)
                        nb = float(elems[e] * bpe[qs[u]] / tv)
                        got = sent.get((u, k, j))
                        if got is None:
                            got = sent[u, k, j] = self.exposed_xfer([out_at[u][ju]], Gu[ju], d,
                                                                    float(pb.send_bytes[u, qs[u]]), p, 0, e, u, v)
                            releases[u][ju].append(got[1])
                        src, first = got
                    else:
                        ju = j % len(Gu)
                        path = [Gu[ju]] + [where[b][j % len(where[b])] for b in range(ku + 1, k + 1)]
                        nb = float(elems[e] * bpe[qs[u]] / tv)
                        src, first = self.chain(out_at[u][ju], path, nb, p, 0, e, v)
                        if first is not None:
                            releases[u][ju].append(first)
                    cast = None
                    if qs[u] != qs[v] and not pb.cast_fused[e]:   # a fused cast: no task, no buffer of its own
                        ct = tp_shard_time_s(pb.cast_time_s(e, qs[u], qs[v], int(kinds[d])) * cast_share,
                                            pb.cast_fixed_s[kinds[d]], tv)
                        cast = prog.add(d, ct, K_CAST_F, p, v, [src], 0, e)
                        prog.buffers.append(Buffer(d, float(elems[e] * bpe[qs[v]] / tv), cast, False, (), False))
                        patch_buf[j].append(len(prog.buffers) - 1)
                    if first is not None:
                        received[j].append((e, first, src, cast))
                        prog.buffers.append(Buffer(d, nb, src, True, (cast,) if cast is not None else (), False))
                        if self.saved is not None and self.saved[0][e] > 0:   # kept for v's backward
                            kept_in.append((v, j, len(prog.buffers) - 1))
                        elif cast is None:
                            patch_buf[j].append(len(prog.buffers) - 1)
                    elif cast is not None:
                        releases[u][ju].append(cast)
                    else:
                        patch_rel[j].append((u, ju))
                    fpreds[j].append(cast if cast is not None else src)
            op = pb.graph.ops[v]
            tdiv = tv if tp_divides(op, plan.stages[k].sequence_parallel) else 1
            pipelined = tv > 1 and tp_forward_allreduce(op) and self.pipelined(k, op)
            heads: list[int] = []
            for j, d in self.ranks(G):
                ft = tp_shard_time_s(pb.fwd_time_s[v, qs[v], kinds[d]], pb.cast_fixed_s[kinds[d]], tdiv)
                preds = fpreds[j] + gather.get(d, [])
                if pipelined:   # the GEMM's first chunk, after which its collective starts (costs.tp_overlap)
                    head, ft = gemm_split_s(ft, overlap_chunks(tv))
                    ft = self.slowed(G, ft, pb.collective_bytes(v, qs[v]))
                    heads.append(prog.add(d, head, K_F, p, v, preds, 0))
                    preds = [heads[-1]]
                f = prog.add(d, ft, K_F, p, v, preds, 0)
                Fn[v].append(f)
                for bi in patch_buf[j]:
                    prog.buffers[bi].frees = (f,)
                for u, ju in patch_rel[j]:
                    releases[u][ju].append(f)
                for e, first, last, cast in received[j]:   # the received copy is freed when this ends
                    prog.inputs[(p, e, j)] = (first, last, cast if cast is not None else f)
            fs.after_forward(v, self.ranks(G), Fn[v])
            if pipelined:
                out_at[v] = self.pipelined_ring(list(G), heads, list(Fn[v]), pb.collective_bytes(v, qs[v]), p, 0, v)
            elif tv > 1 and tp_forward_allreduce(op):
                out_at[v] = ring_nodes(self, list(G), list(Fn[v]), pb.collective_bytes(v, qs[v]), p, 0, v)
            else:
                out_at[v] = list(Fn[v])
        own: dict[tuple[int, int], int] = {}
        for v in range(V):
            k = plan.op_stage[v]
            G = where[k]
            sp = plan.stages[k].sequence_parallel
            share = tp_output_share(pb.graph.ops[v], len(G), sp) if len(G) > 1 else 1.0
            nb = float(pb.out_bytes(v, qs[v])) * share
            if pb.training:   # the part kept for the backward (costs.memory.saved_elems), the rest
                _, _, extra, mask = self.saved
                kept = self.kept_elems[v] * bpe[qs[v]] * share
                more = (extra[v] * bpe[qs[v]] + mask[v] * MASK_BYTES_PER_ELEM) * share
                inner = 0.0
            else:   # stream: what no other op reads (a fused op's inner tensors) dies with the op
                kept, more = 0.0, 0.0
                inner = max(0.0, nb - float(pb.send_bytes[v, qs[v]]))
            for j, d in self.ranks(G):
                rel = tuple(releases[v][j]) or (Fn[v][j],)
                if inner > 0:
                    prog.buffers.append(Buffer(d, inner, Fn[v][j], False, (Fn[v][j],), True))
                if kept > 0 or more > 0:
                    prog.buffers.append(Buffer(d, kept + more, Fn[v][j], False, (Fn[v][j],), True))
                    own[(v, j)] = len(prog.buffers) - 1
                prog.buffers.append(Buffer(d, nb - inner - kept, Fn[v][j], False, rel, True))
                prog.outputs[(p, v, j)] = (Fn[v][j], rel)
        if pb.training:
            Bn = self.backward(p, where, Fn, qs, fs)
            self.bwd_nodes[p] = Bn
            for (v, j), bi in own.items():   # kept until the op's own backward has run
                prog.buffers[bi].frees = (Bn[v][j],)
            for w, j, bi in kept_in:          # a received tensor kept for its reader's backward
                prog.buffers[bi].frees = (Bn[w][j],)
            self.remat_buffers(p, where, qs, Bn)

    def remat_buffers(self, p: int, where, qs: list[int], Bn: list[list[int]]) -> None:
        """What recomputation makes again (costs.memory.remat_per_op_bytes), one buffer per
        layer of a stage and rank: from the start of the layer's first backward task to the
        end of its last."""
        pb, plan, prog = self.pb, self.plan, self.prog
        if not self.again.any():
            return
        for k, st in enumerate(plan.stages):
            key = (k, tuple(qs))
            if key not in self._remat:   # (first op, last op, bytes) per layer of the stage
                remat = remat_per_op_bytes(pb, qs, st.tensor_parallel, st.sequence_parallel, self.again)
                self._remat[key] = [(min(g), max(g), float(remat[g].sum()))
                                    for g in remat_groups(pb, plan.ops_in_stage(k)).values()]
            for lo, hi, nbytes in self._remat[key]:
                if nbytes <= 0:
                    continue
                for j, d in self.ranks(where[k]):
                    prog.buffers.append(Buffer(d, nbytes, Bn[hi][j], False, (Bn[lo][j],), True))

    def backward(self, p: int, where, Fn, qs: list[int], fs: FsdpPattern) -> list[list[int]]:
        pb, plan, prog = self.pb, self.plan, self.prog
        kinds = pb.device_kind
        bpe, elems = pb.bytes_per_elem, pb.edge_elems
        V = pb.n_ops
        Bn: list[list[int]] = [[] for _ in range(V)]
        grad_at: list[list[int]] = [[] for _ in range(V)]  # node after which v's input gradients exist
        for v in reversed(range(V)):
            k = plan.op_stage[v]
            G = where[k]
            tv = len(G)
            bpreds: list[list[int]] = [[Fn[v][j]] for j in range(len(Fn[v]))]
            gather = fs.before_backward(v, self.ranks(G))
            patch_buf: list[list[int]] = [[] for _ in range(tv)]
            grads: dict[tuple[int, int], list[tuple[int, int]]] = {}   # exposed: (stage, rank) -> (edge, grad node)
            for e in self.out_edges[v]:
                w = self.edges[e][1]
                kw = plan.op_stage[w]
                Gw = where[kw]
                for j, d in self.ranks(G):
                    jw = j % len(Gw)
                    dw = Gw[jw]
                    src = grad_at[w][jw]
                    nb = float(elems[e] * bpe[qs[v]] / tv)
                    if qs[v] != qs[w] and not pb.cast_fused[e]:   # a fused cast: no task
                        ct = tp_shard_time_s(pb.cast_time_s(e, qs[v], qs[w], int(kinds[dw])) * 0.5,
                                            pb.cast_fixed_s[kinds[dw]], len(Gw))
                        src = prog.add(dw, ct, K_CAST_B, p, w, [src], 1, e)
                    first = None
                    if kw != k and pb.exposed and elems[e] > 0:   # summed on stage kw, sent back once below
                        prog.buffers.append(Buffer(dw, nb, src, False, (), False))   # freed by the send
                        grads.setdefault((kw, j), []).append((e, src, len(prog.buffers) - 1))
                        continue
                    if kw != k:
                        path = [dw] + [where[b][j % len(where[b])] for b in range(kw - 1, k - 1, -1)]
                        last, first = self.chain(src, path, nb, p, 1, e, v)
                    prog.buffers.append(Buffer(dw, nb, src, False, (first,) if first is not None else (), False))
                    if first is None:
                        patch_buf[j].append(len(prog.buffers) - 1)
                        bpreds[j].append(src)
                    else:
                        prog.buffers.append(Buffer(d, nb, last, True, (), False))
                        patch_buf[j].append(len(prog.buffers) - 1)
                        bpreds[j].append(last)
            for (kw, j), got in grads.items():   # exposed: one gradient transfer per reading stage
                Gw = where[kw]
                dw, d = Gw[j % len(Gw)], G[j]
                last, send = self.exposed_xfer([x for _, x, _ in got], dw, d, float(pb.send_bytes[v, qs[v]]), p, 1,
                                               got[0][0], self.edges[got[0][0]][1], v)
                for _, _, bi in got:
                    prog.buffers[bi].frees = (send,)
                prog.buffers.append(Buffer(d, float(pb.send_bytes[v, qs[v]]), last, True, (), False))
                patch_buf[j].append(len(prog.buffers) - 1)
                bpreds[j].append(last)
            op = pb.graph.ops[v]
            tdiv = tv if tp_divides(op, plan.stages[k].sequence_parallel) else 1
            nb_in = float(sum(elems[e] * bpe[qs[self.edges[e][0]]] for e in self.in_edges[v]))
            pipelined = tv > 1 and tp_backward_allreduce(op) and nb_in > 0 and self.pipelined(k, op)
            heads = []
            for j, d in self.ranks(G):
                bt = tp_shard_time_s(pb.bwd_time_s[v, qs[v], kinds[d]], pb.cast_fixed_s[kinds[d]], tdiv)
                again = tp_shard_time_s(pb.fwd_time_s[v, qs[v], kinds[d]], pb.cast_fixed_s[kinds[d]], tdiv) \
                    if self.again[v] else 0.0   # recomputation: the forward runs again first
                preds = bpreds[j] + gather.get(d, [])
                if pipelined:   # the recomputed forward and the GEMMs' first chunk (costs.tp_overlap)
                    head, bt = gemm_split_s(bt, overlap_chunks(tv))
                    bt = self.slowed(G, bt, nb_in)
                    heads.append(prog.add(d, again + head, K_B, p, v, preds, 1))
                    preds = [heads[-1]]
                else:
                    bt += again
                b = prog.add(d, bt, K_B, p, v, preds, 1)
                Bn[v].append(b)
                for bi in patch_buf[j]:
                    prog.buffers[bi].frees = (b,)
            if pipelined:
                grad_at[v] = self.pipelined_ring(list(G), heads, list(Bn[v]), nb_in, p, 1, v)
            elif tv > 1 and tp_backward_allreduce(op) and nb_in > 0:
                grad_at[v] = ring_nodes(self, list(G), list(Bn[v]), nb_in, p, 1, v)
            else:
                grad_at[v] = list(Bn[v])
            fs.after_backward(v, self.ranks(G), Bn[v])
        return Bn

    # --- whole program ----------------------------------------------------------
    def build(self) -> Program:
        pb, plan, prog = self.pb, self.plan, self.prog
        for p in range(prog.C):
            self.pattern(p)
        prog.server_latency = [0.0] * self.D + self.lat
        prog.link_bw = list(self.bw)
        prog.concurrency = [int(pb.topology.kind_of(d).concurrency) for d in range(self.D)] + [1] * self.L
        stat = np.zeros(self.D)
        for k, st in enumerate(plan.stages):
            for i in range(st.replicas):   # each replica holds its ops at its own precisions
                precs = plan.replica_precisions(k, i)
                for v in plan.ops_in_stage(k):
                    q = pb.q_index(precs[v])
                    o = pb.tied_owner[v]
                    tied = pb.tied_bytes[v, q] if o >= 0 and plan.op_stage[o] != k else 0.0
                    per = ((pb.static_bytes[v, q] + tied) / st.tensor_parallel - zero_saved_bytes(pb, self.full, v, q)
                           - optimizer_saved_bytes(pb, self.full, v))
                    for d in st.replica_group(i):
                        stat[d] += per
        prog.static_bytes = stat
        if pb.training:
            self.allreduce()
        return prog


    def allreduce(self) -> None:
        """Data-parallel gradient reduction per stage, bytes = the stage's parameters at
        their precisions / tp (each op at the widest precision any replica computes it
        in, ``Plan.widest_precisions``), for each tensor-parallel rank over its replicas: a ring
        all-reduce (2(r-1) steps of bytes/r to the next replica over the real links), or
        with ZeRO-1 only its reduce-scatter half (r-1 steps; the parameters' all-gather
        comes after the optimizer, sim.iteration). ``plan.dp_allreduce`` "hierarchical":
        reduce-scatter inside each node, the ring across nodes on 1/g of the bytes, then
        all-gather inside (a flat ring when the replicas do not split evenly by node).
        Routed experts' bytes reduce over their expert-data-parallel groups instead
        (``costs.sharding.gradient_reductions``).
        It starts after each replica's last task, or with ``plan.overlap_grad_reduce``
        one bucket per op right after that op's last backward on the device."""
        pb, plan = self.pb, self.plan
        for k, st in enumerate(self.full.stages):   # the user's replicas, also when reduced
            r, tp = st.replicas, st.tensor_parallel
            if r < 2 or st.zero >= 3:   # ZeRO-3 reduce-scatters unit by unit (sim.fsdp_nodes)
                continue
            ops = [v for v in plan.ops_in_stage(k) if pb.graph.ops[v].param_elems > 0]
            buckets = [[v] for v in ops] if plan.overlap_grad_reduce else [ops]
            wide = self.full.widest_precisions(k, lambda x: pb.bytes_per_elem[pb.q_index(x)])
            for bucket in buckets:
                bpe = [pb.bytes_per_elem[pb.q_index(wide[v])] for v in bucket]
                nbytes = sum(pb.graph.ops[v].param_elems * b for v, b in zip(bucket, bpe)) / tp
                expert = sum(pb.graph.ops[v].expert_param_elems * b for v, b in zip(bucket, bpe)) / tp
                for members, part in gradient_reductions(st, nbytes, expert):
                    held = [i for i in members if not self.one_replica or i < self.sym.group]   # a prefix
                    for j in range(self.rank_group if self.one_rank else tp):
                        devs = [st.devices[i * tp + j] for i in members]
                        start = [self._anchor(devs[n], k, i, j, bucket[-1] if plan.overlap_grad_reduce else None)
                                 for n, i in enumerate(held)]
                        if start:
                            reduction_nodes(self, devs, start, part, k, st.zero)

    def _anchor(self, d: int, k: int, replica: int, rank: int, op: int | None) -> int:
        """A zero-time node on device ``d`` after which its gradients exist: after the
        device's last task, or (``op``) right after op's backward of the replica's last
        microbatch."""
        x = self._x_add(d, 0.0, 0.0, [], k)
        if op is not None:
            last = self._last_microbatch(k)[replica]
            self.prog.x_after[x] = (self.bwd_nodes[last % self.prog.C][op][rank], last)
        return x

    def _last_microbatch(self, k: int) -> dict[int, int]:
        """Stage k's replicas' last microbatches (each asked once per stage)."""
        if k not in self._last:
            st, out = self.plan.stages[k], {}
            for m in range(self.prog.M):
                out[st.replica_of(m)] = m
            self._last[k] = out
        return self._last[k]

    def _x_add(self, server: int, dur: float, nbytes: float, preds: list[int], stage: int) -> int:
        """A collective node; one on a device is appended to that device's order, so it
        starts after the device's last pipeline task."""
        prog = self.prog
        prog.x_server.append(server)
        prog.x_dur.append(dur)
        prog.x_nbytes.append(nbytes)
        prog.x_preds.append(preds)
        prog.x_stage.append(stage)
        return len(prog.x_server) - 1


def build_task_graph(problem: Problem, plan: Plan, ideal: bool = False, static_links: bool = False,
                     sym: Symmetry | None = None, merge: bool = False) -> Program:
    """The node types, buffers and collectives of ``plan`` on ``problem`` (no schedule yet);
    ``ideal``: links have no latency; ``sym``: simulate one copy (``sim.symmetry``);
    ``merge``: each ZeRO-3 ring chain on links only its device's chains use as one node
    (``sim.stream_runs``, exact)."""
    if not merge or static_links:   # links in static orders keep every node
        return _Builder(problem, plan, ideal, static_links, sym).build()
    first = _Builder(problem, plan, ideal, static_links, sym, True)   # every chain merged, then
    prog = first.build()                                              # the shared ones put back
    expand_runs(prog, first.fsdp_runs, exclusive_routes(prog, first.fsdp_runs))
    return prog
