"""The simulator's ZeRO-3 (FSDP) nodes of one microbatch pattern (``costs.sharding``).

Per stage, replica and rank, each gather unit's parameters are all-gathered before its
forward and again before its backward, its gradients reduce-scattered after its
backward: r-1 ring steps of bytes/r each, carried from the ring predecessor's device to
this one over the real links (a ring in lockstep: the device waits for its incoming
chunks). The transfers of one pass form one chain per device (one FSDP stream): the
first gather starts when the device reaches the pass (a zero-time marker in its order),
unit i+1's gather when unit i starts (prefetch, a marker after unit i's gather), and in
the backward unit i's reduce-scatter after its backward and the prefetch of unit i-1; a
zero-time marker after the pass waits for its last reduce-scatter. Buffers: a gathered
unit from its gather's start to its last task's end, a unit's full gradients from the
start of its backward to the end of its reduce-scatter (``sharding.gather_buffer_bytes``).
"""
from __future__ import annotations

from distplan.costs.sharding import fsdp_rings, fsdp_units, unit_param_bytes


class FsdpPattern:
    """ZeRO-3 nodes of pattern ``p`` (``b``: the task-graph builder, ``where``: each stage's
    devices for the pattern; markers are zero-time nodes of ``marker_kind``). ``before_forward``/``after_forward`` and
    ``before_backward``/``after_backward`` are called around each op's tasks."""

    def __init__(self, b, p: int, where, buffer: type, marker_kind: int) -> None:
        self.Buffer, self.K = buffer, marker_kind   # sim.taskgraph's Buffer and node kind
        self.b, self.p = b, p
        self.info: dict[int, tuple] = {}   # stage -> (units, unit of op, first op, last op, bytes, rings)
        self.ag: dict[tuple[int, int, int], int] = {}      # (stage, unit, device) -> last gather node
        self.buf: dict[tuple[int, int, int], int] = {}     # (stage, unit, device) -> gathered buffer
        self.gbuf: dict[tuple[int, int, int], int] = {}    # (stage, unit, device) -> gradient buffer
        self.tasks: dict[tuple[int, int, int], list[int]] = {}   # (stage, unit, device) -> its tasks
        self.tail: dict[tuple[int, int], int] = {}          # (stage, device) -> the stream's last node
        pb, qs = b.pb, b.qs_of[p]
        if not pb.training:
            return
        for k, st in enumerate(b.full.stages):
            if st.zero < 3 or st.replicas < 2:
                continue
            ops = b.plan.ops_in_stage(k)
            units = fsdp_units(pb, ops)
            if not units:
                continue
            unit_of = {v: i for i, u in enumerate(units) for v in u}
            nbytes = [unit_param_bytes(pb, u, qs, st.tensor_parallel, set(ops)) for u in units]
            tp = st.tensor_parallel
            rings: dict[tuple[int, int], list[tuple[int, int, float]]] = {}   # (unit, device) -> (pred, n, bytes)
            parts = [fsdp_rings(st, pb, u, qs, set(ops)) for u in units]
            for _, d in b.ranks(where[k]):
                i, j = divmod(st.devices.index(d), tp)
                for x, part in enumerate(parts):
                    rings[x, d] = [(st.devices[g[(g.index(i) - 1) % len(g)] * tp + j], len(g), nb)
                                   for g, nb in part if i in g]
            self.info[k] = (units, unit_of, min(ops), max(ops), nbytes, rings)

    def _ring(self, k: int, i: int, d: int, preds: list[int], phase: int, op: int) -> tuple[int, int]:
        """Unit i's rings into device d (``sharding.fsdp_rings``), one after the other: n-1
        steps of bytes/n each from its ring predecessor: (first, last) node."""
        rings = self.info[k][5]
        first = last = None
        for pred, n, nbytes in rings[i, d]:
            if n > 1 and self.b.merge:   # the chain as one node (sim.stream_runs)
                last = self.b.chain_run(preds if last is None else [last], pred, d, nbytes / n, n - 1, self.p,
                                        phase, op)
                first = last if first is None else first
                continue
            for _ in range(n - 1):
                last, f = self.b.chain(preds if last is None else [last], [pred, d], nbytes / n, self.p, phase, -1, op)
                first = f if first is None else first
        if last is None:   # nothing to move (experts alone, each group one replica)
            first = last = self._marker(d, op, preds, phase)
        return first, last

    def _gather(self, k: int, i: int, d: int, preds: list[int], phase: int) -> None:
        units, _, _, _, nbytes, _ = self.info[k]
        first, last = self._ring(k, i, d, preds, phase, units[i][0])
        self.ag[k, i, d] = last
        self.tail[k, d] = last
        self.b.prog.buffers.append(self.Buffer(d, nbytes[i], first, False, (), False))
        self.buf[k, i, d] = len(self.b.prog.buffers) - 1

    def _marker(self, d: int, v: int, preds: list[int], phase: int) -> int:
        return self.b.prog.add(d, 0.0, self.K, self.p, v, preds, phase)

    def before_forward(self, v: int, ranks) -> dict[int, list[int]]:
        """Nodes before op v's forward tasks; per device, the gather they wait for."""
        k = self.b.plan.op_stage[v]
        if k not in self.info:
            return {}
        units, unit_of, lo, _, _, _ = self.info[k]
        out = {}
        for _, d in ranks:
            if v == lo:
                self._gather(k, 0, d, [self._marker(d, v, [], 0)], 0)
            i = unit_of.get(v)
            if i is None:
                continue
            if v == units[i][0]:
                start = self._marker(d, v, [self.ag[k, i, d]], 0)
                if i + 1 < len(units):
                    self._gather(k, i + 1, d, [start], 0)
            out[d] = [self.ag[k, i, d]]
        return out

    def after_forward(self, v: int, ranks, nodes: list[int]) -> None:
        """Op v's forward tasks (per simulated rank) exist: free its unit's gather after them."""
        self._after(v, ranks, nodes, lambda u: u[-1], self.buf)

    def _after(self, v: int, ranks, nodes: list[int], last_of, bufs) -> None:
        k = self.b.plan.op_stage[v]
        if k not in self.info:
            return
        units, unit_of, _, _, _, _ = self.info[k]
        i = unit_of.get(v)
        if i is None:
            return
        for (_, d), t in zip(ranks, nodes):
            self.tasks.setdefault((k, i, d), []).append(t)
            if v == last_of(units[i]):
                self.b.prog.buffers[bufs[k, i, d]].frees = tuple(self.tasks.pop((k, i, d)))

    def before_backward(self, v: int, ranks) -> dict[int, list[int]]:
        """Nodes before op v's backward tasks; per device, the gather they wait for."""
        k = self.b.plan.op_stage[v]
        if k not in self.info:
            return {}
        units, unit_of, _, hi, nbytes, _ = self.info[k]
        out = {}
        n = len(units)
        for _, d in ranks:
            if v == hi:
                self._gather(k, n - 1, d, [self._marker(d, v, [], 1)], 1)
            i = unit_of.get(v)
            if i is None:
                continue
            if v == units[i][-1]:
                start = self._marker(d, v, [self.ag[k, i, d]], 1)
                self.b.prog.buffers.append(self.Buffer(d, nbytes[i], start, False, (), False))
                self.gbuf[k, i, d] = len(self.b.prog.buffers) - 1
                if i > 0:
                    self._gather(k, i - 1, d, [start, self.tail[k, d]], 1)
            out[d] = [self.ag[k, i, d]]
        return out

    def after_backward(self, v: int, ranks, nodes: list[int]) -> None:
        """Op v's backward tasks exist: free its unit's gather, reduce-scatter its gradients
        after the unit's last one, and close the pass after the stage's first op."""
        k = self.b.plan.op_stage[v]
        if k not in self.info:
            return
        units, unit_of, lo, _, nbytes, _ = self.info[k]
        i = unit_of.get(v)
        if i is not None and v == units[i][0]:
            for (_, d), t in zip(ranks, nodes):
                tasks = self.tasks.get((k, i, d), []) + [t]
                _, last = self._ring(k, i, d, tasks + [self.tail[k, d]], 1, v)
                self.tail[k, d] = last
                self.b.prog.buffers[self.gbuf[k, i, d]].frees = (last,)
        self._after(v, ranks, nodes, lambda u: u[0], self.buf)
        if v == lo:
            for _, d in ranks:
                self._marker(d, v, [self.tail[k, d]], 1)
