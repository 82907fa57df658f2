"""Exposed communication in the downset and topological-order DPs (costs.exposed).

A segment S = downset i - downset j (its stage's ops; j before it) receives, once per
source u in j with a reader in S, and sends, once per source u in S with a reader
outside i. ``comm_matrix`` is that load with each transfer at ``op_s[u]``, a time no
transfer of u undercuts (``op_comm_s``: the fastest device pair of the path). It
undercounts a source read on several later stages (sent once here) and routes slower
than the fastest pair, so the DP over it is a relaxation (a valid period bound), exact
for one reader stage per source on a uniform fully connected path; its plans are
re-scored exactly with costs.evaluate.
"""
from __future__ import annotations

import numpy as np

from distplan.costs.exposed import transfer_s
from distplan.costs.problem import Problem
from distplan.model.sent_sums import sent_matrix


def op_comm_s(problem: Problem, path: tuple[int, ...], send_bytes: np.ndarray) -> np.ndarray:
    """(V,) per op: the least time a transfer of its ``send_bytes`` takes between two
    distinct devices of ``path`` (0 on a one-device path)."""
    pairs = [(a, b) for a in path for b in path if a != b]
    out = np.zeros(problem.n_ops)
    if not pairs:
        return out
    for v, nb in enumerate(np.asarray(send_bytes, dtype=float).tolist()):
        out[v] = min(transfer_s(problem, a, b, nb) for a, b in pairs)
    return out


def comm_matrix(problem: Problem, mat: np.ndarray, op_s: np.ndarray) -> np.ndarray:
    """(N, N): entry [i, j] the exposed send and receive seconds of segment i - j
    (module docstring), for downsets i >= j (other entries are not read)."""
    N, V = mat.shape
    out = sent_matrix(problem, mat, op_s)   # sends: once per source read outside i
    edges = problem.sending_edges()
    if not len(edges):
        return out
    readers: dict[int, set[int]] = {}
    for u, w in edges.tolist():
        readers.setdefault(u, set()).add(w)
    fm = mat.astype(float)
    one = [(u, next(iter(r))) for u, r in readers.items() if len(r) == 1]
    if one:   # u in j, its reader w in i and not in j: mat[i, w] - mat[j, w] (j <= i)
        us = np.array([u for u, _ in one])
        ws = np.array([w for _, w in one])
        uj = fm[:, us] * op_s[us][None, :]                     # (N, U): c_u [u in j]
        out += fm[:, ws] @ uj.T - (uj * fm[:, ws]).sum(axis=1)[None, :]
    for u, r in readers.items():
        if len(r) == 1 or op_s[u] == 0:
            continue
        cnt = fm[:, sorted(r)].sum(axis=1)                      # readers of u in each downset
        out += op_s[u] * (mat[None, :, u] & (cnt[:, None] > cnt[None, :]))
    return out
