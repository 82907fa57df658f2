"""Numerical-sensitivity proxy per (operator, precision), in the spirit of QSync.

QSync scores a layer's precision by the variance it injects in the forward pass,
weighted by the layers after it, plus the backward variance weighted by the layers
before it. Without weights or data we use a proxy built from the same parts:

    s(v, q) = kind_factor(v) * (u(q)^2 - u(top)^2) / u(fp16)^2
              * (1 + after(v) / n)                      forward propagation
              * (1 + before(v) / n  if training else 1)  backward propagation

where u(q) is the unit round-off of q (docs/HARDWARE.md), top is the highest-fidelity
precision allowed, after/before count the operators downstream/upstream of v, and n
is the operator count. Normalised so fp16 instead of fp32 on a mid-depth matmul
scores about 1; the op's highest allowed precision scores exactly 0.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from distplan.core.precision import precision

#: Operators whose numerics are known to be fragile under low precision weigh more.
KIND_FACTOR = {"softmax": 2.0, "layernorm": 2.0, "head": 1.5, "embedding": 0.5, "reshape": 0.0}


def injected(prec: str, top: str) -> float:
    """The variance ``prec`` injects beyond ``top``'s, in units of fp16's."""
    u, u_top, u_ref = (precision(p).unit_roundoff for p in (prec, top, "fp16"))
    return max(0.0, u * u - u_top * u_top) / (u_ref * u_ref)


def sensitivity(kind: str, prec: str, top: str, before: int, after: int, n_ops: int, training: bool) -> float:
    weight = KIND_FACTOR.get(kind, 1.0) * (1.0 + after / n_ops)
    if training:
        weight *= 1.0 + before / n_ops
    return injected(prec, top) * weight


def sensitivities(kinds: Sequence[str], prec: str, top: str, before: Sequence[int], after: Sequence[int],
                  training: bool) -> np.ndarray:
    """``sensitivity`` of every op at once (the same operations in the same order, so
    the same numbers): ``kinds``, ``before``, ``after`` per op."""
    n = len(kinds)
    weight = np.array([KIND_FACTOR.get(k, 1.0) for k in kinds]) * (1.0 + np.asarray(after, dtype=np.int64) / n)
    if training:
        weight = weight * (1.0 + np.asarray(before, dtype=np.int64) / n)
    return injected(prec, top) * weight
