"""Live bytes per device over a run, from node start/finish times, and their peak.

Static bytes (weights, and in training gradients and optimiser state) are resident from
the start. A buffer (see ``sim.taskgraph.Buffer``) is allocated when its producing node
starts (or, for a received tensor, when it arrives) and freed when the last node that
consumes it has finished (a link hop: when its serialisation ends). At equal times frees
come before allocations.
"""
from __future__ import annotations

import numpy as np

from distplan.sim.taskgraph import Program


def peak_memory(prog: Program, units: int, T: int, beg: np.ndarray, end: np.ndarray, fin: np.ndarray,
                micro: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(peak of all bytes, peak of static + own activations) per device."""
    D = prog.D
    static = np.asarray(prog.static_bytes, dtype=float)
    bufs = prog.buffers
    if not bufs or units == 0:
        return static.copy(), static.copy()
    nb = len(bufs)
    dev = np.array([b.device for b in bufs], dtype=np.int64)
    size = np.array([b.nbytes for b in bufs], dtype=float)
    alloc = np.array([b.alloc for b in bufs], dtype=np.int64)
    arrival = np.array([b.at_arrival for b in bufs], dtype=bool)
    own = np.array([b.own for b in bufs], dtype=bool)
    fmax = max(1, max(len(b.frees) for b in bufs))
    frees = np.full((nb, fmax), -1, dtype=np.int64)
    for i, b in enumerate(bufs):
        fr = b.frees or (b.alloc,)
        frees[i, :len(fr)] = fr
    frees = np.where(frees < 0, alloc[:, None], frees)
    base = (np.arange(units, dtype=np.int64) * T)[:, None]
    a_ids = base + alloc[None, :]
    valid = micro[a_ids] < prog.M
    t_alloc = np.where(arrival[None, :], fin[a_ids], beg[a_ids])
    t_free = end[base[:, :, None] + frees[None, :, :]].max(axis=2)
    t_free = np.maximum(t_free, t_alloc)
    out = []
    for mask in (np.ones(nb, bool), own):
        sel = valid & mask[None, :]
        n = int(sel.sum())
        if n == 0:
            out.append(static.copy())
            continue
        d = np.broadcast_to(dev, sel.shape)[sel]
        s = np.broadcast_to(size, sel.shape)[sel]
        times = np.concatenate((t_alloc[sel], t_free[sel]))
        delta = np.concatenate((s, -s))
        devs = np.concatenate((d, d))
        order = np.lexsort((delta, times, devs))
        devs, delta = devs[order], delta[order]
        cs = np.cumsum(delta)
        peak = np.zeros(D)
        starts = np.searchsorted(devs, np.arange(D))
        stops = np.searchsorted(devs, np.arange(D), side="right")
        for k in range(D):
            a, b = starts[k], stops[k]
            if b > a:
                before = cs[a - 1] if a > 0 else 0.0
                peak[k] = max(0.0, float((cs[a:b] - before).max()))
        out.append(static + peak)
    return out[0], out[1]
