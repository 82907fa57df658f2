"""Store-and-forward transfer time over links and routes: the one formula every cost,
memory and replay module uses (``costs.collectives`` re-exports it)."""
from __future__ import annotations

import math
from collections.abc import Hashable, Iterable, Sequence
from typing import Any, Protocol

import numpy as np


class LinkTable(Protocol):
    """What a transfer reads of a problem (``costs.problem.Problem`` has it)."""

    link_bw_bytes_per_s: np.ndarray
    link_latency_s: np.ndarray
    topology: Any


def links_s(problem: LinkTable, links: Sequence[int], nbytes: float) -> float:
    """Store and forward of ``nbytes`` over ``links`` in turn: per link bytes/bw + latency."""
    return sum(nbytes / float(problem.link_bw_bytes_per_s[l]) + float(problem.link_latency_s[l]) for l in links)


def route_s(problem: LinkTable, a: int, b: int, nbytes: float) -> float:
    """Store and forward of ``nbytes`` from device a to b (0 on one device)."""
    return links_s(problem, problem.topology.route(a, b), nbytes)


def link_loads_s(problem: LinkTable, transfers: Iterable[tuple[Hashable, Sequence[int], float]]
                 ) -> dict[int, tuple[float, float, int]]:
    """Per link the load of ``transfers`` (who, links, bytes) that share it: (busy seconds
    of them all, the largest one who's busy seconds, how many whos cross it). A who
    (a lane, a rank, a direction) may send several tensors over a link; they count once."""
    bw = problem.link_bw_bytes_per_s
    per: dict[int, dict[Hashable, float]] = {}
    for who, links, nbytes in transfers:
        for l in links:
            mine = per.setdefault(l, {})
            mine[who] = mine.get(who, 0.0) + nbytes / float(bw[l])
    return {l: (math.fsum(m.values()), max(m.values()), len(m)) for l, m in per.items()}
