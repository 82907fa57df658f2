"""Pipeline schedule names: the one list every layer (CLI, costs, simulator, model) reads.

- ``stream``: inference; microbatches flow through the stages back to back.
- ``gpipe``: training; every forward before any backward, per device.
- ``1f1b``: training; one forward, one backward in the steady state (PipeDream-Flush).
- ``interleaved``: training; Megatron-LM's interleaved 1F1B (virtual pipeline stages,
  Narayanan et al. 2021 section 2.2.2). The plan's stages are ``pp x vp`` model chunks in
  model order, chunk c on the devices of chunk ``c mod pp`` (``Plan.pipeline_ranks``,
  ``Plan.virtual_stages``); each device runs its chunks in :func:`interleaved_order`.
  Plan documents and what-ifs (``--vp``) only; the planners search ``1f1b``.
- ``explicit``: a plan that lists each device's task order itself (plan files only).
"""
from __future__ import annotations

import functools

INFERENCE_SCHEDULES: tuple[str, ...] = ("stream",)
TRAINING_SCHEDULES: tuple[str, ...] = ("gpipe", "1f1b")
#: the schedules a user can request for a problem
SCHEDULES: tuple[str, ...] = INFERENCE_SCHEDULES + TRAINING_SCHEDULES
#: every schedule a plan document may name
PLAN_SCHEDULES: tuple[str, ...] = SCHEDULES + ("interleaved", "explicit")
#: the schedules of training plans (those a user requests, and the interleaved one)
TRAINING_PLAN_SCHEDULES: tuple[str, ...] = TRAINING_SCHEDULES + ("interleaved",)


def default_schedule(training: bool) -> str:
    """``1f1b`` for training, ``stream`` for inference."""
    return "1f1b" if training else "stream"


def interleaved_warmup(pp: int, vp: int, rank: int, microbatches: int) -> int:
    """Forwards pipeline rank ``rank`` runs before its first backward under Megatron's
    interleaved schedule (``forward_backward_pipelining_with_interleaving``): ``(pp - rank
    - 1) x 2 + (vp - 1) x pp``, at most all ``microbatches x vp`` of them, and all of them
    when ``microbatches == pp``."""
    total = microbatches * vp
    if microbatches == pp:
        return total
    return min((pp - rank - 1) * 2 + (vp - 1) * pp, total)


@functools.lru_cache(maxsize=1024)
def interleaved_order(pp: int, vp: int, rank: int, microbatches: int) -> tuple[tuple[int, int, int], ...]:
    """The tasks of pipeline rank ``rank`` in Megatron-LM's interleaved 1F1B order, as
    ``(phase, j, microbatch)`` (phase 0 forward, 1 backward; ``j`` the rank's virtual
    chunk, model chunk ``j x pp + rank``; microbatches counted on the rank's replica).

    Virtual microbatch k (0 .. microbatches x vp - 1) is model chunk ``(k mod pp vp) //
    pp`` (for a backward ``vp - 1`` minus that) of microbatch ``(k // pp vp) x pp + k mod
    pp``: groups of pp microbatches go through chunk 0, then chunk 1, ... The rank runs
    ``interleaved_warmup`` forwards, then one forward and one backward in turn, then the
    remaining backwards. ``microbatches`` must be a multiple of pp (Megatron's rule)."""
    if pp < 1 or vp < 1 or microbatches < 1 or microbatches % pp:
        raise ValueError(f"interleaved order needs microbatches ({microbatches}) a multiple of pp ({pp}), vp >= 1")
    total = microbatches * vp
    group = pp * vp

    def task(k: int, phase: int) -> tuple[int, int, int]:
        j = (k % group) // pp
        return phase, (vp - 1 - j if phase else j), (k // group) * pp + k % pp

    warm = interleaved_warmup(pp, vp, rank, microbatches)
    out = [task(k, 0) for k in range(warm)]
    for i in range(total - warm):
        out.append(task(warm + i, 0))
        out.append(task(i, 1))
    out += [task(k, 1) for k in range(total - warm, total)]
    return tuple(out)


@functools.lru_cache(maxsize=1024)
def interleaved_inflight(pp: int, vp: int, rank: int, microbatches: int) -> tuple[int, ...]:
    """Per virtual chunk j of pipeline rank ``rank``: the most microbatches whose forward
    has started and whose backward has not ended, over :func:`interleaved_order` (the
    device runs its tasks one at a time in that order, so this is exact)."""
    live = [0] * vp
    top = [0] * vp
    for phase, j, _ in interleaved_order(pp, vp, rank, microbatches):
        if phase == 0:
            live[j] += 1
            top[j] = max(top[j], live[j])
        else:
            live[j] -= 1
    return tuple(top)
