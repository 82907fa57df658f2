"""fp8 training as Transformer Engine runs it (``te.Linear`` under ``fp8_autocast``):
which ops compute in fp8 and what the per-tensor scaling costs around each fp8 GEMM.

Ops: the linear layers (kind "matmul") run their forward, dgrad and wgrad GEMMs in fp8;
the attention core (TE's ``fp8_dpa`` is off by default), norms, embedding, LM head, the
optimizer, the tensors between ops (a GEMM writes bf16) and the gradients stay 16-bit,
and an MoE router stays wide. Cost, as memory-bound kernels at HBM bandwidth
(``cast_s``): current scaling ("FP8-CS") reads a quantized tensor for its amax, reads it
again and writes it in fp8 and transposed, ``CAST_BYTES_PER_ELEM`` = 6 in
``CAST_KERNELS`` = 2 kernels; the activation input in the forward, the output gradient in
the backward, the weight once per optimizer step (TE's fp8 weight cache,
``weight_cast_s``). Not charged: delayed scaling's amax history, the amax all-reduce over
a tensor-parallel group. Rules and measurements: docs/concepts/fidelity.md ("fp8
training: what is charged")."""
from __future__ import annotations

#: op kinds the recipe runs in fp8 (the linear layers); every other kind stays 16-bit
FP8_TRAINING_KINDS = frozenset({"matmul"})
#: linear layers that stay wide all the same: an MoE router (Megatron keeps it in fp32)
FP8_WIDE_NAMES = frozenset({"router"})
#: bytes moved per element a GEMM quantizes under current scaling (module docstring)
CAST_BYTES_PER_ELEM = 6.0
#: kernels per quantized tensor: the amax reduction and the fused cast-transpose
CAST_KERNELS = 2


def gemm_input_elems(op) -> float:
    """Elements of a linear op's activation input: what it touches, less its weight and
    output (``Operator.touched_elems`` counts inputs, weights and outputs once)."""
    return max(0.0, float(op.touched_elems) - float(op.param_elems) - float(op.out_elems))


def cast_s(elems: float, mem_bw_bytes_per_s: float, launch_overhead_s: float) -> float:
    """Seconds to quantize one tensor of ``elems`` bf16 elements to fp8 (with its transpose)."""
    if elems <= 0:
        return 0.0
    return elems * CAST_BYTES_PER_ELEM / mem_bw_bytes_per_s + CAST_KERNELS * launch_overhead_s


def fp8_cast_fwd_s(op, mem_bw_bytes_per_s: float, launch_overhead_s: float) -> float:
    """The forward's scaling cost of an fp8 linear op: its activation input quantized."""
    return cast_s(gemm_input_elems(op), mem_bw_bytes_per_s, launch_overhead_s)


def fp8_cast_bwd_s(op, mem_bw_bytes_per_s: float, launch_overhead_s: float) -> float:
    """The backward's: the output gradient quantized (dgrad and wgrad share it)."""
    return cast_s(float(op.out_elems), mem_bw_bytes_per_s, launch_overhead_s)


def weight_cast_s(param_elems: float, tensors: int, mem_bw_bytes_per_s: float, launch_overhead_s: float) -> float:
    """Seconds a device spends a step casting ``param_elems`` fp8 weights (over ``tensors``
    weight tensors) to fp8 and their transposes."""
    if param_elems <= 0:
        return 0.0
    return param_elems * CAST_BYTES_PER_ELEM / mem_bw_bytes_per_s + tensors * CAST_KERNELS * launch_overhead_s


def is_fp8_linear(op) -> bool:
    """Does the recipe (may) run ``op`` in fp8 and charge its scaling?"""
    return op.kind in FP8_TRAINING_KINDS and op.name.rsplit(".", 1)[-1] not in FP8_WIDE_NAMES
