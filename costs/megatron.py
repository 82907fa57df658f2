"""The Megatron-style layout of a dp x tp x pp plan (Narayanan et al. 2021): stage k takes
the next dp x tp devices, as dp replicas of tp consecutive devices (tensor parallelism
innermost, so a group of up to 8 sits inside one 8-GPU node), and the zoo's layers split
into pp stages of equal layer counts (ops before the first layer go with it, ops after
the last with it). With ``vp`` > 1 (Megatron's interleaved schedule, virtual pipeline
stages): pp x vp chunks of equal layer counts, chunk c on the devices of stage c mod pp
(rank 0 holds layers of chunks 0, pp, 2pp, ...), schedule ``interleaved``.

``order`` names the device order, innermost first, as Megatron-LM's ``RankGenerator``
does: ``tp-dp-pp`` (Megatron-LM's default, above) or ``tp-pp-dp``, data parallelism
outermost as Llama 3 was trained ("[TP, CP, PP, DP]", Llama Team 2024, section 3.3.2):
replica i takes the next pp x tp devices, its stage k the tp from ``(i*pp + k)*tp``, so a
pipeline stays inside a few nodes and the gradient rings cross the network.
"""
from __future__ import annotations

from distplan.core.errors import DistplanError
from distplan.core.plan import Plan, Stage
from distplan.core.validate import is_int
from distplan.costs.fp8 import FP8_TRAINING_KINDS, FP8_WIDE_NAMES, is_fp8_linear  # noqa: F401 (re-exported)
from distplan.costs.problem import Problem
from distplan.workloads.graph import layer_index


def stage_of_ops(problem: Problem, pp: int) -> tuple[int, ...]:
    """Each op's pipeline stage: equal layer counts per stage (layers are the zoo's
    ``l<i>.`` prefixes; ops before the first layer go with it, ops after the last with
    it); without layer names, equal operator counts."""
    names = [op.name for op in problem.graph.ops]
    layer = [layer_index(n) for n in names]
    known = [x for x in layer if x is not None]
    if not known:
        V = len(names)
        if pp > V:
            raise DistplanError(f"--pp {pp} is more stages than the {V} operators of {problem.graph.name!r}")
        return tuple(v * pp // V for v in range(V))
    L = max(known) + 1
    if pp > L:
        raise DistplanError(f"--pp {pp} is more stages than the {L} layers of {problem.graph.name!r}")
    out, last = [], 0
    for x in layer:
        if x is not None:
            last = x * pp // L
        out.append(last)
    return tuple(out)


def fp8_training_precisions(problem: Problem, wide: str) -> tuple[str, ...]:
    """Per-op precisions of the fp8 training recipe (``costs.fp8``): fp8 on the linear
    layers the problem allows it on, every other op at ``wide``."""
    q8 = problem.q_index("fp8")
    return tuple("fp8" if is_fp8_linear(op) and problem.op_allowed[v, q8] else wide
                 for v, op in enumerate(problem.graph.ops))


#: device orders of megatron_plan, innermost first: Megatron-LM's default, then Llama 3's
ORDERS = ("tp-dp-pp", "tp-pp-dp")


def stage_devices(dp: int, tp: int, pp: int, k: int, order: str = "tp-dp-pp", cp: int = 1) -> tuple[int, ...]:
    """Pipeline stage k's devices, replica-major (replica i's rank j at ``i*tp + j``).
    With context parallelism ``dp`` counts dp x cp replicas, replica ``d*cp + c`` the
    context rank c of data rank d, next to tensor parallelism: Megatron's tp-cp-dp-pp,
    Llama 3's tp-cp-pp-dp (``costs.context_parallel``)."""
    if order == "tp-dp-pp":
        return tuple(range(k * dp * tp, (k + 1) * dp * tp))
    return tuple((i % cp + cp * (k + pp * (i // cp))) * tp + j for i in range(dp) for j in range(tp))


def check_degrees(dp: int, tp: int, pp: int, vp: int = 1) -> None:
    """dp, tp, pp and vp are positive whole numbers (before anything divides by them)."""
    for name, x in (("dp", dp), ("tp", tp), ("pp", pp), ("vp", vp)):
        if not is_int(x) or x < 1:   # a bool is not a degree (True was taken as 1)
            raise DistplanError(f"--{name} must be a positive whole number, got {x!r}")


def megatron_plan(problem: Problem, dp: int, tp: int, pp: int, precision: str, schedule: str | None = None,
                  recompute: str = "none", sequence_parallel: bool = False, zero: int = 0,
                  dp_allreduce: str = "ring", overlap_grad_reduce: bool = False, vp: int = 1,
                  order: str = "tp-dp-pp", cp: int = 1, tp_comm_overlap: bool = False) -> Plan:
    """The Megatron-style plan of ``problem`` (module docstring), with the training
    options of ``core.plan.Stage`` / ``Plan`` on every stage; ``vp`` > 1: pp x vp
    interleaved chunks (needs pp >= 2 and a training problem; the checker asks for
    microbatches per replica a multiple of pp); ``order``: one of ``ORDERS``; ``cp``: the
    context-parallel ranks among the ``dp`` replicas (``stage_devices``); ``tp_comm_overlap``:
    ``Stage.tp_comm_overlap`` on every stage (``costs.tp_overlap``)."""
    check_degrees(dp, tp, pp, vp)
    dp, tp, pp, vp = int(dp), int(tp), int(pp), int(vp)   # numpy ints overflowed pp x vp (vp 10**30)
    if order not in ORDERS:
        raise DistplanError(f"--order {order!r} unknown; use {ORDERS[0]} (Megatron-LM's default) or {ORDERS[1]} "
                            "(data parallelism outermost, as Llama 3)")
    if vp > 1:
        if pp < 2:
            raise DistplanError(f"--vp {vp} needs pipeline parallelism (--pp >= 2), got --pp {pp}")
        if not problem.training:
            raise DistplanError("--vp (the interleaved schedule) is for training")
        if schedule not in (None, "1f1b", "interleaved"):
            raise DistplanError(f"--vp {vp} is Megatron's interleaved 1F1B; it does not combine with schedule "
                                f"{schedule!r}")
    need = dp * tp * pp
    if need > problem.n_devices:
        raise DistplanError(f"dp {dp} x tp {tp} x pp {pp} = {need} devices, but {problem.topology.name!r} has "
                            f"{problem.n_devices}")
    if precision not in problem.precisions:
        raise DistplanError(f"precision {precision!r} is not among the problem's {', '.join(problem.precisions)}")
    if vp > 1:   # the chunks are checked against the layers before one stage is built (vp 10**30 hung)
        try:
            op_stage = stage_of_ops(problem, pp * vp)
        except DistplanError:
            raise DistplanError(f"--pp {pp} x --vp {vp} = {pp * vp} chunks is more than the layers of "
                                f"{problem.graph.name!r}") from None
        schedule = "interleaved"
    else:
        op_stage = stage_of_ops(problem, pp)
    stages = tuple(Stage(stage_devices(dp, tp, pp, c % pp, order, cp), tp, recompute, sequence_parallel, zero,
                         tp_comm_overlap=tp_comm_overlap) for c in range(pp * vp))
    return Plan(op_stage, (precision,) * problem.n_ops, stages, problem.microbatches,
                schedule or problem.schedule, dp_allreduce=dp_allreduce, overlap_grad_reduce=overlap_grad_reduce)
