"""Tensor-parallel communication overlap (``Stage.tp_comm_overlap``; Megatron-Core's
``--tp-comm-overlap``, Transformer Engine's userbuffers): a linear layer's tensor-parallel
collective split into chunks and pipelined with the layer's own GEMM, one rule that the
analytic iteration (``costs.iteration.op_rank_times``) and the simulator
(``sim.taskgraph``) both follow.

The layers it applies to (``overlaps``): the row- and column-parallel linears (QKV,
attention projection, FFN up and down; ops without a ``tp_role``: every matmul), not the
vocabulary-parallel embedding or head, which Megatron runs outside Transformer Engine.
Their collective is where distplan charges it without overlap: after a row-parallel
GEMM's forward, after a column-parallel GEMM's backward (with sequence parallelism it
stands for the all-gather and the reduce-scatter of the layer pair, timed as one ring
all-reduce; distplan pipelines that whole ring against this one GEMM, where Transformer
Engine splits it between the column-parallel GEMM, for the all-gather, and the
row-parallel one, for the reduce-scatter).

The pipeline of ``n = overlap_chunks(t)`` chunks (ASSUMED ``n = t``, the tensor-parallel
degree, as Transformer Engine's ring-exchange overlap splits its GEMM, one chunk a rank;
its "pipeline" reduce-scatter defaults to 4 splits): the GEMM's first chunk (``g / n``,
after a recomputed forward in the backward), then the rest of the GEMM beside the
collective of the first ``n - 1`` chunks' bytes, then the last chunk's collective::

    done = g/n + max(g (n-1)/n, c_{(n-1)/n}) + c_{1/n}

``c_x`` the ring all-reduce of ``x`` of the bytes (``costs.collectives.ring_allreduce_s``,
latency included, so the split pays its latency twice). Without latency this is
``max(g, c) + min(g, c) / n``: the collective is exposed only by ``max(0, c - g)`` plus
one chunk's share.

The collective's kernels take SMs from the GEMM beside it: Transformer Engine gives its
pipelined userbuffers collectives ``num_sm`` = 16 SMs by default
(``transformer_engine.pytorch.module.base.initialize_ub``); ASSUMED here: of an H100's
132, for every device kind, ``COLLECTIVE_SM_SHARE`` = 16 / 132, and the GEMM's rest runs
at ``1 - share`` of its speed while the first ``n - 1`` chunks' collective runs
(``slowed_gemm_s``: ``g (n-1)/n + share x min(c_{(n-1)/n}, g (n-1)/n / (1 - share))``,
the collective's time in closed form, in the simulator too, whose transfers may take
longer). First order: the GEMM's throughput taken as proportional to its SMs, which a
GEMM of many waves roughly follows; no measured slowdown is cited. Not charged: the
chunks' extra kernel launches, the userbuffers' memory.

Refused (``tp_overlap_violations``): tensor parallelism 1 (no collective to overlap) and
no sequence parallelism (Megatron-LM asserts it: "Tensor parallel communication/GEMM
overlap can happen only when sequence parallelism is enabled").
"""
from __future__ import annotations

from collections.abc import Callable

from distplan.core.plan import Plan


def overlaps(op) -> bool:
    """Is ``op`` a linear layer whose tensor-parallel collective the overlap pipelines
    with its GEMM (module docstring)?"""
    if op.tp_role is None:
        return op.kind == "matmul"
    return op.tp_role in ("row", "column")


def overlap_chunks(tensor_parallel: int) -> int:
    """Chunks a GEMM and its collective are split into (ASSUMED: the tensor-parallel degree)."""
    return max(int(tensor_parallel), 1)


def gemm_split_s(gemm_s: float, chunks: int) -> tuple[float, float]:
    """(the first chunk, the rest) of a GEMM of ``gemm_s`` seconds in ``chunks`` chunks."""
    head = gemm_s / chunks
    return head, gemm_s - head


def bytes_split(nbytes: float, chunks: int) -> tuple[float, float]:
    """(the first ``chunks - 1`` chunks', the last chunk's) bytes of a collective."""
    last = nbytes / chunks
    return nbytes - last, last


#: ASSUMED share of a device's SMs the pipelined collective takes from the GEMM beside it
#: (Transformer Engine's default num_sm = 16 of an H100's 132; module docstring)
COLLECTIVE_SM_SHARE = 16 / 132


def slowed_gemm_s(rest_s: float, beside_s: float, share: float = COLLECTIVE_SM_SHARE) -> float:
    """Seconds of a GEMM's rest of ``rest_s`` alone while a collective of ``beside_s``
    runs beside it on ``share`` of the SMs: at ``1 - share`` of its speed until the
    collective ends, then at full speed (module docstring)."""
    if rest_s <= 0 or share <= 0:
        return rest_s
    return rest_s + share * min(beside_s, rest_s / (1.0 - share))


def overlapped_s(gemm_s: float, nbytes: float, chunks: int, collective_s: Callable[[float], float]) -> float:
    """Seconds from the GEMM's start until its collective is done, pipelined (module
    docstring); ``collective_s(bytes)``: the collective's seconds on ``bytes``."""
    head, rest = gemm_split_s(gemm_s, chunks)
    first, last = bytes_split(nbytes, chunks)
    beside = collective_s(first)
    return head + max(slowed_gemm_s(rest, beside), beside) + collective_s(last)


def tp_overlap_violations(plan: Plan) -> list[str]:
    """What is wrong with the plan's tensor-parallel overlap, one line each (module docstring)."""
    out: list[str] = []
    for k, st in enumerate(plan.stages):
        if not st.tp_comm_overlap:
            continue
        if st.tensor_parallel < 2:
            out.append(f"stage {k}: tp_comm_overlap pipelines the tensor-parallel collectives with their GEMMs, but "
                       f"tensor_parallel {st.tensor_parallel} has none; drop it or use tensor_parallel >= 2")
        elif not st.sequence_parallel:
            out.append(f"stage {k}: tp_comm_overlap needs sequence_parallel (as Megatron-LM's --tp-comm-overlap: "
                       "the all-gathers and reduce-scatters are what it pipelines)")
    return out
