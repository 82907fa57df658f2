"""Exposed communication (``ProblemOptions.comm`` "exposed"): a transfer adds its time to
the load of both end devices, on top of their compute.

Rules, per microbatch: for every source op u and every later stage k holding a reader of
u through a tensor with bytes, one transfer of u's sent bytes (``Problem.send_bytes`` at
u's precision) goes directly from u's device to stage k's device on the topology's route
(no relay through the stages between). Two readers of u on one stage share it. It takes
``transfer_s`` (``costs.routes.links_s`` over the route: bytes / bandwidth + latency per
link; in training the gradient's route back as well, ``boundary_links``), which counts
on the sender's and on the receiver's device load; its bytes / bandwidth load every link
of those routes. Memory is charged as in the overlapped mode (costs.memory).
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from distplan.costs.collectives import boundary_links, boundary_load_s
from distplan.costs.problem import Problem
from distplan.costs.routes import links_s


def transfer_s(problem: Problem, a: int, b: int, nbytes: float) -> float:
    """Seconds a transfer of ``nbytes`` from device a to b occupies each end device (0 on one device)."""
    return links_s(problem, boundary_links(problem, a, b), nbytes) if a != b else 0.0


def transfers(problem: Problem, op_stage: Sequence[int]) -> list[tuple[int, int]]:
    """The distinct (source op u, receiving stage k > stage(u)) of a stage assignment."""
    out: set[tuple[int, int]] = set()
    for u, v in problem.sending_edges().tolist():
        if op_stage[v] > op_stage[u]:
            out.add((u, op_stage[v]))
    return sorted(out)


def add_exposed_loads(problem: Problem, op_stage: Sequence[int], where: Sequence[int], qs: Sequence[int],
                      dev: np.ndarray, link: np.ndarray, pairs: list[tuple[int, int]] | None = None) -> None:
    """Add one microbatch's transfers (stage k on device ``where[k]``, op v at precision
    index ``qs[v]``) to ``dev`` (seconds, both ends) and ``link`` (busy seconds)."""
    for u, k in transfers(problem, op_stage) if pairs is None else pairs:
        a, b = where[op_stage[u]], where[k]
        if a == b:
            continue
        nbytes = float(problem.send_bytes[u, qs[u]])
        t = transfer_s(problem, a, b, nbytes)
        dev[a] += t
        dev[b] += t
        for l, busy_s in boundary_load_s(problem, a, b, nbytes):
            link[l] += busy_s
