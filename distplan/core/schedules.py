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


def _interleaved_deps(pp: int, vp: int, rank: int, task: tuple[int, int, int]) -> tuple[int, tuple[int, int, int]] | None:
    """The task on another rank that ``task`` of ``rank`` waits for (its input or its
    gradient), as ``(rank, task)``, or None (the first chunk's forward, the loss)."""
    phase, j, x = task
    if phase == 0:
        if rank > 0:
            return rank - 1, (0, j, x)
        return (pp - 1, (0, j - 1, x)) if j > 0 else None
    if rank < pp - 1:
        return rank + 1, (1, j, x)
    return (0, (1, j + 1, x)) if j < vp - 1 else None


@functools.lru_cache(maxsize=256)
def interleaved_early(pp: int, vp: int, rank: int, microbatches: int) -> tuple[tuple[tuple[int, ...], tuple[int, ...]], ...]:
    """Per task of :func:`interleaved_order` on ``rank``: per chunk j, how many inputs and
    how many gradients may have arrived for tasks the rank has not started yet, while that
    task runs. The other ranks run their own orders; a rank may have finished at most the
    prefix of its order whose tasks' inputs and gradients (``_interleaved_deps``) come from
    finished tasks (this rank's: those before the running one). Data dependencies only,
    no timing: an upper bound on what the simulator can hold."""
    if pp == 1:
        n = len(interleaved_order(1, vp, 0, microbatches))
        return ((tuple([0] * vp), tuple([0] * vp)),) * n
    orders = [interleaved_order(pp, vp, r, microbatches) for r in range(pp)]
    where = [{t: i for i, t in enumerate(o)} for o in orders]
    dep = [[_interleaved_deps(pp, vp, r, t) for t in o] for r, o in enumerate(orders)]
    done = [0] * pp                     # finished prefix of each rank's order
    prev, nxt = (rank - 1) % pp, (rank + 1) % pp
    got_in, got_grad = [0] * vp, [0] * vp    # arrivals per chunk of this rank
    used_in, used_grad = [0] * vp, [0] * vp  # this rank's forwards / backwards started per chunk
    out = []
    for i, (phase, j, _) in enumerate(orders[rank]):
        done[rank] = i
        moved = True
        while moved:   # advance every other rank as far as its dependencies allow
            moved = False
            for s in range(pp):
                if s == rank:
                    continue
                while done[s] < len(orders[s]):
                    d = dep[s][done[s]]
                    if d is not None and where[d[0]][d[1]] >= done[d[0]]:
                        break
                    ph, js, _ = orders[s][done[s]]
                    if s == prev and ph == 0 and (rank > 0 or js + 1 < vp):
                        got_in[js if rank > 0 else js + 1] += 1
                    if s == nxt and ph == 1 and (rank < pp - 1 or js > 0):
                        got_grad[js if rank < pp - 1 else js - 1] += 1
                    done[s] += 1
                    moved = True
        (used_in if phase == 0 else used_grad)[j] += 1
        out.append((tuple(max(0, g - u) for g, u in zip(got_in, used_in)),
                    tuple(max(0, g - u) for g, u in zip(got_grad, used_grad))))
    return tuple(out)
