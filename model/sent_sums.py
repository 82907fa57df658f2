"""Per pair of downsets, the bytes their segment's ops send to later stages: one matrix
product over the downset membership (model.downsets, model.segments, model.exposed_dp
read it)."""
from __future__ import annotations

import numpy as np

from distplan.costs.problem import Problem


def sent_matrix(problem: Problem, mat: np.ndarray, send: np.ndarray) -> np.ndarray:
    """(N, N): entry [i, j] sums ``send[v]`` over the ops v of segment i - j that a tensor
    with bytes leaves for an op outside downset i (a later stage)."""
    N, V = mat.shape
    edges = problem.sending_edges()
    if not len(edges):
        return np.zeros((N, N))
    u, w = edges[:, 0], edges[:, 1]
    onehot = np.zeros((len(u), V))
    onehot[np.arange(len(u)), u] = 1.0
    held = ((mat[:, u] & ~mat[:, w]).astype(float) @ onehot) > 0      # (N, V): v in i, read outside i
    hs = held * send[None, :]
    return hs.sum(axis=1)[:, None] - hs @ mat.astype(float).T
