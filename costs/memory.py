"""Memory an operator needs on its device, per precision.

Static bytes stay for the whole run: parameters at the operator's precision; in
training also their gradients (same precision) and Adam state kept in fp32 (master
weights, first and second moments: 12 bytes per parameter). Activation bytes are per
microbatch (the operator's outputs at its precision; for a fused/coarse operator every
intermediate it writes); a schedule keeps several microbatches in flight
(``inflight_microbatches``).

How many copies a stage holds (``activation_factors``): training stashes every output
for the backward pass, so each op holds ``n`` microbatches' activations. An inference
stream frees an output once its consumers on the stage have run; only tensors a later
stage reads stay buffered until sent, so an op holds its activations once plus ``n - 1``
more copies of its *sent* bytes when some consumer sits on a later stage. The sent
bytes (``send_elems``) are at most the output: for a fused operator only the tensors
that leave it.
"""
from __future__ import annotations

import math

import numpy as np

from distplan.core.precision import precision
from distplan.core.schedules import PLAN_SCHEDULES
from distplan.workloads.graph import graph_send_elems, send_elems  # noqa: F401  (re-exported)

OPTIMIZER_BYTES_PER_PARAM = 12


def static_bytes(param_elems: int, prec: str, training: bool) -> float:
    b = precision(prec).bytes_per_elem
    if training:
        return float(param_elems) * (2 * b + OPTIMIZER_BYTES_PER_PARAM)
    return float(param_elems) * b


def activation_bytes(out_elems: int, prec: str) -> float:
    return float(out_elems) * precision(prec).bytes_per_elem


def activation_factors(schedule: str, stage: int, n_stages: int, microbatches: int) -> tuple[int, int]:
    """(copies of every activation, extra copies of the sent bytes of an op with a consumer
    on a later stage) that stage ``stage`` holds; see the module docstring."""
    n = inflight_microbatches(schedule, stage, n_stages, microbatches)
    if schedule == "stream":
        return 1, n - 1
    return n, 0


def inflight_microbatches(schedule: str, stage: int, n_stages: int, microbatches: int) -> int:
    """Microbatches whose activations a stage may hold at once (an upper bound).

    stream (inference): 2 (double buffering); gpipe: all M; 1f1b: min(M, S - stage).
    """
    if schedule == "stream":
        return min(2, microbatches)
    if schedule == "1f1b":
        return min(microbatches, n_stages - stage)
    if schedule in PLAN_SCHEDULES:  # gpipe, explicit
        return microbatches
    raise ValueError(f"unknown schedule {schedule!r}")


def contiguous_sent_bytes(edges: np.ndarray, send: np.ndarray) -> np.ndarray:
    """(V+1, V+1) matrix: entry [i, j] (i <= j) is the sent bytes of ops i..j-1 (a contiguous
    run of the topological order) that some op at position >= j reads; ``edges`` (E, 2)
    (u, v) pairs, ``send[v]`` the op's sent bytes."""
    V = len(send)
    last = np.full(V, -1)
    for u, w in edges:
        last[u] = max(last[u], w)
    out = np.zeros((V + 1, V + 1))
    for j in range(V + 1):
        cs = np.concatenate([[0.0], np.cumsum(np.where(last[:j] >= j, send[:j], 0.0))])
        out[: j + 1, j] = cs[j] - cs
    return out


def contiguous_tied_bytes(tied_owner: np.ndarray, tied: np.ndarray) -> np.ndarray:
    """(V+1, V+1) matrix: entry [i, j] (i <= j) sums ``tied[v]`` over ops v in i..j-1 whose
    tied weights' owner ``tied_owner[v]`` (-1: none) lies outside i..j-1."""
    V = len(tied)
    out = np.zeros((V + 1, V + 1))
    i = np.arange(V + 1)[:, None]
    j = np.arange(V + 1)[None, :]
    for v, o in enumerate(tied_owner):
        if o >= 0 and tied[v] > 0:
            out += tied[v] * ((i <= v) & (v < j) & ~((i <= o) & (o < j)))
    return out
