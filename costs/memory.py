"""Memory an operator needs on its device, per precision.

Static bytes stay for the whole run: parameters at the operator's precision; in
training also their gradients (same precision) and Adam state kept in fp32 (master
weights, first and second moments: 12 bytes per parameter). Activation bytes are per
microbatch (the operator's output at its precision); a schedule keeps several
microbatches in flight (``inflight_microbatches``).
"""
from __future__ import annotations

from distplan.precision import precision

OPTIMIZER_BYTES_PER_PARAM = 12


def static_bytes(param_elems: int, prec: str, training: bool) -> float:
    b = precision(prec).bytes_per_elem
    if training:
        return float(param_elems) * (2 * b + OPTIMIZER_BYTES_PER_PARAM)
    return float(param_elems) * b


def activation_bytes(out_elems: int, prec: str) -> float:
    return float(out_elems) * precision(prec).bytes_per_elem


def inflight_microbatches(schedule: str, stage: int, n_stages: int, microbatches: int) -> int:
    """Microbatches whose activations a stage may hold at once (an upper bound).

    stream (inference): 2 (double buffering); gpipe: all M; 1f1b: min(M, S - stage).
    """
    if schedule == "stream":
        return min(2, microbatches)
    if schedule == "gpipe":
        return microbatches
    if schedule in ("1f1b", "explicit"):
        return min(microbatches, n_stages - stage) if schedule == "1f1b" else microbatches
    raise ValueError(f"unknown schedule {schedule!r}")
